//! A candle MLP trained with HomeAdamW-ew and with AdamW through `homeadam-candle`, following
//! its README: three interleaved spirals (300 points in the plane), a 2-64-3 MLP, full-batch
//! cross-entropy. Exits with an error unless both optimizers cut the loss by at least half.

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{linear, ops, Linear, Optimizer, VarBuilder, VarMap};
use homeadam_candle::core::{Config, Rule, Switch};
use homeadam_candle::{OptimConfig, VarOptimizer};

const POINTS_PER_CLASS: usize = 100;
const CLASSES: usize = 3;
const HIDDEN: usize = 64;
const STEPS: usize = 300;

/// A deterministic generator (splitmix64), so every run sees the same data and start.
struct Rng(u64);

impl Rng {
    fn uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Class c's points lie on a spiral arm turned by 2πc/3, with noise.
fn spirals(rng: &mut Rng, device: &Device) -> Result<(Tensor, Tensor)> {
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    for class in 0..CLASSES {
        for i in 0..POINTS_PER_CLASS {
            let r = i as f32 / POINTS_PER_CLASS as f32;
            let angle = 4.0 * r + class as f32 * 2.0944 + 0.2 * (rng.uniform() - 0.5);
            xs.extend([r * angle.cos(), r * angle.sin()]);
            ys.push(class as u32);
        }
    }
    let n = ys.len();
    Ok((
        Tensor::from_vec(xs, (n, 2), device)?,
        Tensor::from_vec(ys, n, device)?,
    ))
}

struct Mlp {
    hidden: Linear,
    out: Linear,
}

impl Mlp {
    /// Builds the layers, then sets every weight from `rng` (uniform in ±1/√fan-in), since
    /// candle's own initialisation cannot be seeded on the CPU.
    fn new(varmap: &mut VarMap, rng: &mut Rng, device: &Device) -> Result<Self> {
        let vb = VarBuilder::from_varmap(varmap, DType::F32, device);
        let mlp = Mlp {
            hidden: linear(2, HIDDEN, vb.pp("hidden"))?,
            out: linear(HIDDEN, CLASSES, vb.pp("out"))?,
        };
        for (name, shape, fan_in) in [
            ("hidden.weight", (HIDDEN, 2), 2),
            ("hidden.bias", (1, HIDDEN), 2),
            ("out.weight", (CLASSES, HIDDEN), HIDDEN),
            ("out.bias", (1, CLASSES), HIDDEN),
        ] {
            let bound = 1.0 / (fan_in as f32).sqrt();
            let values: Vec<f32> = (0..shape.0 * shape.1)
                .map(|_| (2.0 * rng.uniform() - 1.0) * bound)
                .collect();
            let mut t = Tensor::from_vec(values, shape, device)?;
            if name.ends_with("bias") {
                t = t.flatten_all()?;
            }
            varmap.set_one(name, t)?;
        }
        Ok(mlp)
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.out.forward(&self.hidden.forward(x)?.relu()?)
    }
}

/// Trains a fresh MLP with `config`; returns the loss before and after, and the accuracy.
fn train(name: &str, config: Config) -> Result<(f32, f32, f32)> {
    let device = Device::Cpu;
    let mut rng = Rng(42);
    let (x, y) = spirals(&mut rng, &device)?;
    let mut varmap = VarMap::new();
    let model = Mlp::new(&mut varmap, &mut rng, &device)?;
    // The decay mask (biases not decayed): the protocol EXPERIMENTS.md records.
    let config = OptimConfig {
        decay_all: false,
        ..OptimConfig::new(config)
    };
    let mut opt = VarOptimizer::from_varmap(&varmap, config)?;
    let loss = |m: &Mlp| {
        ops::log_softmax(&m.forward(&x)?, D::Minus1)?
            .gather(&y.unsqueeze(1)?, 1)?
            .mean_all()?
            .neg()
    };
    let before = loss(&model)?.to_scalar::<f32>()?;
    for step in 1..=STEPS {
        opt.backward_step(&loss(&model)?)?;
        if step % 100 == 0 {
            let last = opt.last_report().expect("a step was taken");
            println!(
                "{name:>12} step {step:>3}: loss {:.4}, home share {:.3}",
                loss(&model)?.to_scalar::<f32>()?,
                last.home_share()
            );
        }
    }
    let after = loss(&model)?.to_scalar::<f32>()?;
    let predicted = model.forward(&x)?.argmax(D::Minus1)?;
    let correct = predicted
        .eq(&y)?
        .to_dtype(DType::F32)?
        .sum_all()?
        .to_scalar::<f32>()?;
    Ok((before, after, correct / y.dims1()? as f32))
}

/// The two optimizers of the example, as its README teaches to set them.
fn configs() -> [(&'static str, Config); 2] {
    // HomeAdamW, element-wise (Alg. 3). It divides by v̂, not √v̂: ε = 1e-3 bounds a step by
    // η / (2√ε) ≈ 0.16 (Adam's ε = 1e-8 would allow η · 5000). τ = 1e-8 sends the elements
    // whose gradients have faded (v̂ < τ) home to SGDM: about 14 % of them here.
    let mut homeadamw = Config::new(Rule::HomeAdamW(Switch::Element));
    homeadamw.lr = 1e-2;
    homeadamw.eps = 1e-3;
    homeadamw.tau = 1e-8;
    let mut adamw = Config::new(Rule::AdamW);
    adamw.lr = 1e-2;
    [("homeadamw-ew", homeadamw), ("adamw", adamw)]
}

fn main() -> Result<()> {
    let mut failed = Vec::new();
    for (name, config) in configs() {
        let (before, after, accuracy) = train(name, config)?;
        println!(
            "{name:>12}: loss {before:.4} -> {after:.4}, training accuracy {:.1} %",
            100.0 * accuracy
        );
        if !(after.is_finite() && after < 0.5 * before) {
            failed.push(name);
        }
    }
    if !failed.is_empty() {
        candle_core::bail!("the loss did not fall by half with {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `cargo run` checks, as a test so that CI's test run trains the example too.
    #[test]
    fn both_optimizers_halve_the_loss_and_fit_the_spirals() {
        for (name, config) in configs() {
            let (before, after, accuracy) = train(name, config).unwrap();
            assert!(
                after.is_finite() && after < 0.5 * before,
                "{name}: {before} -> {after}"
            );
            assert!(accuracy > 0.9, "{name}: accuracy {accuracy}");
        }
    }
}
