//! How often global HomeAdamW needs its exact first pass ([`Optimizer::exact_first_passes`])
//! while softmax regression trains on the shipped digits (the firmware's fine-tuning split,
//! 65-byte records of 64 pixels 0..=16 and a label), for a few τ and both `rho_over` modes.
//! Pixels scaled as x = p / 16 leave the weights of the always-blank pixels without a
//! gradient (v = 0, so ρ = 0 with `rho_over: all`); x = (p + 1) / 17 leaves none:
//!
//! ```sh
//! cargo run --release -p homeadam-core --example decision_bound -- firmware/generated/finetune.bin
//! ```
//!
//! W (10 × 64) and b are two tensors; minibatches of 32, 20 epochs.

use homeadam_core::{Config, Optimizer, RhoOver, Rule, Switch, Tensor, TensorAux};

const FEATURES: usize = 64;
const CLASSES: usize = 10;
const RECORD: usize = FEATURES + 1;
const BATCH: usize = 32;
const EPOCHS: usize = 20;

/// Adds the gradient of the mean cross-entropy of `batch` samples for one sample to `gw`, `gb`.
fn accumulate(x: &[f32], w: &[f32], b: &[f32], label: u8, batch: usize, gw: &mut [f32], gb: &mut [f32]) {
    let z: Vec<f32> = (0..CLASSES)
        .map(|c| {
            let row = &w[c * FEATURES..(c + 1) * FEATURES];
            row.iter().zip(x).map(|(w, x)| w * x).sum::<f32>() + b[c]
        })
        .collect();
    let top = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f32> = z.iter().map(|z| (z - top).exp()).collect();
    let sum: f32 = e.iter().sum();
    for c in 0..CLASSES {
        let d = (e[c] / sum - (c == label as usize) as u8 as f32) / batch as f32;
        for (g, x) in gw[c * FEATURES..(c + 1) * FEATURES].iter_mut().zip(x) {
            *g += d * x;
        }
        gb[c] += d;
    }
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "firmware/generated/finetune.bin".into());
    let data = std::fs::read(&path).expect("the digits records");
    let records: Vec<&[u8]> = data.chunks_exact(RECORD).collect();
    println!(
        "{} samples from {path}; {BATCH} per step, {EPOCHS} epochs",
        records.len()
    );
    println!("| x | rho_over | τ | steps | exact first passes | share | home steps |");
    println!("|---|---|---|---:|---:|---:|---:|");
    let runs = [
        (false, RhoOver::All),
        (true, RhoOver::All),
        (false, RhoOver::Active),
    ];
    for (offset, rho_over) in runs {
        let (shift, scale) = if offset { (1.0, 17.0) } else { (0.0, 16.0) };
        let samples: Vec<(Vec<f32>, u8)> = records
            .iter()
            .map(|r| {
                let x = r[..FEATURES]
                    .iter()
                    .map(|&p| (p as f32 + shift) / scale)
                    .collect();
                (x, r[FEATURES])
            })
            .collect();
        for tau in [1e-12, 1e-8, 1e-6, 1e-4] {
            let mut config = Config::new(Rule::HomeAdamW(Switch::Global));
            config.lr = 1e-2;
            config.tau = tau;
            config.rho_over = rho_over;
            let mut opt = Optimizer::new(config).unwrap();
            let mut w: Vec<f32> = (0..CLASSES * FEATURES)
                .map(|i| (i as f32 * 0.61).sin() * 0.01)
                .collect();
            let mut b = vec![0.0f32; CLASSES];
            let mut sw = vec![0.0f32; opt.state_len(w.len())];
            let mut sb = vec![0.0f32; opt.state_len(b.len())];
            let (mut aw, mut ab) = (TensorAux::default(), TensorAux::default());
            let mut home_steps = 0;
            for _ in 0..EPOCHS {
                for batch in samples.chunks(BATCH) {
                    let mut gw = vec![0.0f32; w.len()];
                    let mut gb = vec![0.0f32; b.len()];
                    for (x, label) in batch {
                        accumulate(x, &w, &b, *label, batch.len(), &mut gw, &mut gb);
                    }
                    let mut model = [
                        Tensor::new(&mut w, &gw, &mut sw, &mut aw),
                        Tensor::new(&mut b, &gb, &mut sb, &mut ab),
                    ];
                    let report = opt.step(&mut model, 1.0).unwrap();
                    home_steps += (report.home_elements > 0) as u64;
                }
            }
            let (exact, steps) = (opt.exact_first_passes(), opt.step_count());
            let share = exact as f64 / steps as f64;
            println!(
                "| {} | {rho_over:?} | {tau:e} | {steps} | {exact} | {:.1} % | {home_steps} |",
                if offset { "(p + 1) / 17" } else { "p / 16" },
                100.0 * share
            );
        }
    }
}
