//! A two-convolution network for the 8×8 digits: a second offline task whose architecture
//! (shared convolution weights, a max-pool) differs from the MLP's, so that an optimizer ranking
//! seen on one can be checked on the other.
//!
//! Architecture: `Conv3×3(1 → c1, pad 1) → ReLU → Conv3×3(c1 → c2, pad 1) → ReLU →
//! MaxPool2×2 → flatten → Linear(c2 · 4 · 4 → classes)`, returning logits. Initialisation is
//! PyTorch's `nn.Conv2d` / `nn.Linear` default (weights and biases uniform in `±1/√fan_in`).
//! The convolutions and the pool are the ones VGG and ResNet use (cuDNN on CUDA, candle on the
//! CPU). Variables: `conv1.{weight,bias}`, `conv2.{weight,bias}`, `fc.{weight,bias}`.

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor, Var};

use super::layers::{expect_f32, Conv2d, ConvSpec, Init, Linear, ParamBuilder, Params};
use super::max_pool::max_pool2d;
use super::Model;

/// The CNN's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CnnConfig {
    /// Input side (8 for the digits); images are `side × side`, one channel.
    pub side: usize,
    /// Channels of the first convolution.
    pub conv1: usize,
    /// Channels of the second convolution.
    pub conv2: usize,
    /// Output classes.
    pub classes: usize,
}

impl CnnConfig {
    /// 8×8 digits: 1 → 16 → 32 channels, pooled to 32 · 4 · 4 = 512 features, → 10 (about 9.9k
    /// parameters, as many as the digits MLP).
    pub fn digits() -> Self {
        CnnConfig {
            side: 8,
            conv1: 16,
            conv2: 32,
            classes: 10,
        }
    }

    /// Features entering the linear layer: the second convolution's map after the 2×2 pool.
    fn pooled_features(self) -> usize {
        self.conv2 * (self.side / 2) * (self.side / 2)
    }
}

/// The digits CNN. Input `[batch, 1, side, side]` f32; output logits `[batch, classes]`.
pub struct Cnn {
    config: CnnConfig,
    conv1: Conv2d,
    conv2: Conv2d,
    fc: Linear,
    params: Params,
}

impl Cnn {
    /// Builds the network with every initial value drawn from `seed`.
    pub fn new(config: CnnConfig, seed: u64, device: &Device) -> Result<Self> {
        ensure!(
            config.side >= 2 && config.conv1 > 0 && config.conv2 > 0 && config.classes > 0,
            "CNN sizes must be positive and the side at least 2 (one 2×2 pool): {config:?}"
        );
        let mut p = ParamBuilder::new(seed, device);
        let conv = |p: &mut ParamBuilder, name: &str, inp: usize, out: usize| {
            let spec = ConvSpec {
                inp,
                out,
                kernel: 3,
                stride: 1,
                padding: 1,
            };
            let init = Init::torch_default(inp * 9);
            Conv2d::new(p, name, spec, init, Some(init))
        };
        let conv1 = conv(&mut p, "conv1", 1, config.conv1)?;
        let conv2 = conv(&mut p, "conv2", config.conv1, config.conv2)?;
        let fc = Linear::torch(&mut p, "fc", config.pooled_features(), config.classes)?;
        Ok(Cnn {
            config,
            conv1,
            conv2,
            fc,
            params: p.finish(),
        })
    }

    /// The sizes it was built with.
    pub fn config(&self) -> CnnConfig {
        self.config
    }
}

impl Model for Cnn {
    fn forward(&self, x: &Tensor, _train: bool) -> Result<Tensor> {
        let dims = expect_f32(x, 4, "CNN")?;
        let side = self.config.side;
        ensure!(
            dims[1..] == [1, side, side],
            "CNN: expected [batch, 1, {side}, {side}], got {dims:?}"
        );
        let h = self.conv1.forward_relu(x)?;
        let h = self.conv2.forward_relu(&h)?;
        let h = max_pool2d(&h, 2, 2, 0)?.flatten_from(1)?;
        self.fc.forward(&h)
    }

    fn vars(&self) -> Vec<(String, Var)> {
        self.params.vars.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testutil::*;

    fn tiny(seed: u64) -> Cnn {
        Cnn::new(CnnConfig::digits(), seed, &Device::Cpu).unwrap()
    }

    #[test]
    fn shapes_and_names() {
        let m = tiny(0);
        let y = m.forward(&input(&[5, 1, 8, 8], 1), false).unwrap();
        assert_eq!(y.dims(), &[5, 10]);
        let names: Vec<String> = m.vars().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "conv1.weight",
                "conv1.bias",
                "conv2.weight",
                "conv2.bias",
                "fc.weight",
                "fc.bias"
            ]
        );
        assert_eq!(m.param_count(), 16 * 9 + 16 + 32 * 16 * 9 + 32 + 512 * 10 + 10);
        assert!(m.forward(&input(&[5, 64], 1), false).is_err());
        assert!(m.forward(&input(&[5, 3, 8, 8], 1), false).is_err());
        assert!(m.forward(&input(&[5, 1, 9, 8], 1), false).is_err());
        assert!(m.forward(&input(&[0, 1, 8, 8], 1), false).is_err());
        assert!(m.forward(&labels(&[5, 1, 8, 8], 3, 1), false).is_err());
        let degenerate = CnnConfig {
            side: 1,
            ..CnnConfig::digits()
        };
        assert!(Cnn::new(degenerate, 0, &Device::Cpu).is_err());
    }

    #[test]
    fn gradients_training_seeding_checkpoints() {
        let x = input(&[16, 1, 8, 8], 2);
        let t = labels(&[16], 10, 3);
        every_var_gets_a_gradient(&tiny(0), &x, &t);
        sgd_lowers_the_loss(&tiny(0), &x, &t, 0.1, 5, false);
        seeding_is_deterministic(|s| Box::new(tiny(s)));
        save_load_round_trip(&tiny(4), &tiny(5), &x);
    }

    /// The analytic gradient of the first convolution's weights matches a central difference of
    /// the loss, to within the rounding of an f32 loss.
    #[test]
    fn a_convolution_gradient_matches_a_finite_difference() {
        let m = tiny(6);
        let x = input(&[4, 1, 8, 8], 7);
        let t = labels(&[4], 10, 8);
        let (_, w) = m.vars().into_iter().find(|(n, _)| n == "conv1.weight").unwrap();
        let grads = loss(&m, &x, &t, false).backward().unwrap();
        let analytic: Vec<f32> = grads.get(&w).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let base: Vec<f32> = w.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
        let h = 1e-3f32;
        let at = |values: &[f32]| {
            w.set(&Tensor::from_slice(values, w.dims(), &Device::Cpu).unwrap())
                .unwrap();
            loss(&m, &x, &t, false).to_scalar::<f32>().unwrap()
        };
        for i in [0, 4, 13, 100] {
            let mut plus = base.clone();
            plus[i] += h;
            let mut minus = base.clone();
            minus[i] -= h;
            let numeric = (at(&plus) - at(&minus)) / (2.0 * h);
            assert!(
                (numeric - analytic[i]).abs() <= 2e-3 + 0.05 * analytic[i].abs(),
                "conv1.weight[{i}]: analytic {} numeric {numeric}",
                analytic[i]
            );
        }
    }
}
