//! VGG16 with batch normalisation for 32×32 images (CIFAR-10).
//!
//! Architecture (the common CIFAR variant, e.g. kuangliu/pytorch-cifar): thirteen
//! `Conv3×3(pad 1, bias) → BatchNorm → ReLU` layers in the configuration
//! `[64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M]`, where `M` is
//! a 2×2/stride-2 max-pool, so that a 32×32 input ends at 1×1×512; then one
//! `Linear(512 → classes)`. The channel counts can be scaled by a width multiplier (tests and
//! CPU runs use a tiny network).
//!
//! Initialisation: PyTorch's module defaults (that repository sets none of its own): conv and
//! linear weights and biases uniform in `±1/√fan_in`, BatchNorm weight 1 and bias 0, running
//! mean 0 and variance 1.
//!
//! Variables: `features.{i}.conv.{weight,bias}`, `features.{i}.bn.{weight,bias}` (buffers
//! `features.{i}.bn.running_{mean,var}`) for conv layer `i` = 0‥12, and
//! `classifier.{weight,bias}`.

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor, Var};

use super::layers::{expect_f32, scaled, BatchNorm2d, Conv2d, ConvSpec, Init, Linear, ParamBuilder, Params};
use super::Model;

/// VGG16's layer list: channel counts, with `0` standing for a 2×2 max-pool.
const VGG16: [usize; 18] = [
    64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
];

/// VGG's options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VggConfig {
    /// Output classes (10 for CIFAR-10).
    pub classes: usize,
    /// Channel multiplier: each layer has `max(1, round(c · width))` channels (1.0 is VGG16).
    pub width: f64,
}

impl VggConfig {
    /// VGG16-BN for CIFAR-10: full width, 10 classes.
    pub fn cifar10() -> Self {
        VggConfig {
            classes: 10,
            width: 1.0,
        }
    }
}

enum Layer {
    Conv(Conv2d, BatchNorm2d),
    Pool,
}

/// Batch-norm VGG16. Input `[batch, 3, 32, 32]` f32; output logits `[batch, classes]`.
pub struct Vgg {
    config: VggConfig,
    features: Vec<Layer>,
    classifier: Linear,
    params: Params,
}

impl Vgg {
    /// Builds the network with every initial value drawn from `seed`.
    pub fn new(config: VggConfig, seed: u64, device: &Device) -> Result<Self> {
        ensure!(
            config.classes > 0 && config.width.is_finite() && config.width > 0.0,
            "VGG: classes must be positive and width a positive number: {config:?}"
        );
        let mut p = ParamBuilder::new(seed, device);
        let mut features = Vec::with_capacity(VGG16.len());
        let mut inp = 3;
        let mut conv_index = 0;
        for &c in &VGG16 {
            if c == 0 {
                features.push(Layer::Pool);
                continue;
            }
            let out = scaled(c, config.width);
            let name = format!("features.{conv_index}");
            let init = Init::torch_default(inp * 9);
            let spec = ConvSpec {
                inp,
                out,
                kernel: 3,
                stride: 1,
                padding: 1,
            };
            let conv = Conv2d::new(&mut p, &format!("{name}.conv"), spec, init, Some(init))?;
            let bn = BatchNorm2d::new(&mut p, &format!("{name}.bn"), out)?;
            features.push(Layer::Conv(conv, bn));
            inp = out;
            conv_index += 1;
        }
        let classifier = Linear::torch(&mut p, "classifier", inp, config.classes)?;
        Ok(Vgg {
            config,
            features,
            classifier,
            params: p.finish(),
        })
    }

    /// The options it was built with.
    pub fn config(&self) -> VggConfig {
        self.config
    }
}

impl Model for Vgg {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let dims = expect_f32(x, 4, "VGG")?;
        // Five 2×2 pools bring 32×32 to 1×1, which the 512-input classifier relies on.
        ensure!(
            dims[1..] == [3, 32, 32],
            "VGG: expected [batch, 3, 32, 32], got {dims:?}"
        );
        let mut h = x.clone();
        for layer in &self.features {
            h = match layer {
                Layer::Conv(conv, bn) => bn.forward(&conv.forward(&h)?, train)?.relu()?,
                Layer::Pool => h.max_pool2d(2)?,
            };
        }
        self.classifier.forward(&h.flatten_from(1)?)
    }

    fn vars(&self) -> Vec<(String, Var)> {
        self.params.vars.clone()
    }

    fn buffers(&self) -> Vec<(String, Var)> {
        self.params.buffers.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testutil::*;

    fn tiny(seed: u64) -> Vgg {
        let config = VggConfig {
            classes: 10,
            width: 1.0 / 16.0,
        };
        Vgg::new(config, seed, &Device::Cpu).unwrap()
    }

    #[test]
    fn shapes_names_and_bad_input() {
        let m = tiny(0);
        let y = m.forward(&input(&[2, 3, 32, 32], 1), true).unwrap();
        assert_eq!(y.dims(), &[2, 10]);
        assert_eq!(
            m.forward(&input(&[3, 3, 32, 32], 1), false).unwrap().dims(),
            &[3, 10]
        );
        // 13 convs × (weight, bias) + 13 BNs × (weight, bias) + classifier.
        assert_eq!(m.vars().len(), 13 * 4 + 2);
        assert_eq!(m.buffers().len(), 13 * 2);
        assert!(m
            .vars()
            .iter()
            .all(|(n, _)| n.ends_with("weight") || n.ends_with("bias")));
        assert_eq!(m.vars()[2].0, "features.0.bn.weight");
        assert!(m.forward(&input(&[2, 3, 16, 16], 1), false).is_err());
        assert!(m.forward(&input(&[2, 1, 32, 32], 1), false).is_err());
        let bad = VggConfig {
            width: f64::NAN,
            ..VggConfig::cifar10()
        };
        assert!(Vgg::new(bad, 0, &Device::Cpu).is_err());
    }

    #[test]
    fn full_width_parameter_count_matches_pytorch() {
        // kuangliu/pytorch-cifar VGG('VGG16'): 14,728,266 parameters.
        let m = Vgg::new(VggConfig::cifar10(), 0, &Device::Cpu).unwrap();
        assert_eq!(m.param_count(), 14_728_266);
    }

    #[test]
    fn running_statistics_update_only_in_training() {
        let m = tiny(0);
        let x = input(&[4, 3, 32, 32], 7);
        let stats = |m: &Vgg| m.save_state().unwrap()[m.vars().len()..].to_vec();
        let initial = stats(&m);
        m.forward(&x, false).unwrap();
        assert_eq!(stats(&m), initial);
        m.forward(&x, true).unwrap();
        assert_ne!(stats(&m), initial);
    }

    #[test]
    fn gradients_training_seeding_checkpoints() {
        let x = input(&[4, 3, 32, 32], 2);
        let t = labels(&[4], 10, 3);
        every_var_gets_a_gradient(&tiny(0), &x, &t);
        sgd_lowers_the_loss(&tiny(0), &x, &t, 0.05, 4, true);
        seeding_is_deterministic(|s| Box::new(tiny(s)));
        let a = tiny(4);
        a.forward(&x, true).unwrap(); // non-trivial running statistics to carry over
        save_load_round_trip(&a, &tiny(5), &x);
    }
}
