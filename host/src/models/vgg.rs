//! VGG16 for 32×32 images (CIFAR-10), in two variants ([`VggVariant`]):
//!
//! - **plain**: Simonyan & Zisserman's VGG16 (configuration D), without batch normalisation:
//!   thirteen `Conv3×3(pad 1, bias) → ReLU` layers, then its three fully-connected layers adapted
//!   to a 32×32 input, whose five pools leave a 1×1×512 map (the common CIFAR adaptation, e.g.
//!   chengyangfu/pytorch-vgg-cifar10): `Dropout(0.5) → Linear(512 → 512) → ReLU → Dropout(0.5)
//!   → Linear(512 → 512) → ReLU → Linear(512 → classes)`. Without batch norm a 16-layer stack
//!   at PyTorch's default init (uniform in `±1/√fan_in`, which shrinks each layer's activations
//!   by about √3) barely passes a signal through, so the convolutions are initialised as that
//!   adaptation does, Kaiming-normal: weight `N(0, 2 / (9 · out_channels))`, bias 0 (He et al.,
//!   2015); the linear layers keep PyTorch's default.
//! - **bn**: the batch-norm variant (e.g. kuangliu/pytorch-cifar): each convolution followed by
//!   `BatchNorm → ReLU`, and one `Linear(512 → classes)`; PyTorch's module defaults throughout
//!   (conv and linear weights and biases uniform in `±1/√fan_in`, BatchNorm weight 1 and bias
//!   0, running mean 0 and variance 1).
//!
//! Both share the configuration
//! `[64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M]`, where `M` is
//! a 2×2/stride-2 max-pool. The channel counts (and the plain head's width) can be scaled by a
//! width multiplier (tests and CPU runs use a tiny network).
//!
//! Variables: `features.{i}.conv.{weight,bias}` for conv layer `i` = 0‥12; the bn variant adds
//! `features.{i}.bn.{weight,bias}` (buffers `features.{i}.bn.running_{mean,var}`) and ends in
//! `classifier.{weight,bias}`; the plain variant ends in `classifier.fc{1,2,3}.{weight,bias}`.
//! The plain variant's dropout masks come from the model's own [`Rng`].

use std::sync::{Mutex, MutexGuard};

use anyhow::{anyhow, ensure, Result};
use candle_core::{Device, Tensor, Var};
use serde::Deserialize;

use super::dropout::dropout;
use super::layers::{expect_f32, scaled, BatchNorm2d, Conv2d, ConvSpec, Init, Linear, ParamBuilder, Params};
use super::relu::relu;
use super::Model;
use crate::rng::Rng;

/// VGG16's layer list: channel counts, with `0` standing for a 2×2 max-pool.
const VGG16: [usize; 18] = [
    64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0,
];

/// Width of the plain variant's hidden fully-connected layers (before the width multiplier).
const HEAD_WIDTH: usize = 512;

/// Dropout probability before each hidden fully-connected layer of the plain variant (VGG's).
const HEAD_DROPOUT: f32 = 0.5;

/// Which VGG16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum VggVariant {
    /// Simonyan & Zisserman's VGG16: no batch norm, three fully-connected layers.
    Plain,
    /// Batch norm after every convolution, one fully-connected layer.
    Bn,
}

impl VggVariant {
    /// The name on the command line and in the presets.
    pub fn name(self) -> &'static str {
        match self {
            VggVariant::Plain => "plain",
            VggVariant::Bn => "bn",
        }
    }
}

/// VGG's options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VggConfig {
    /// Output classes (10 for CIFAR-10).
    pub classes: usize,
    /// Channel multiplier: each layer has `max(1, round(c · width))` channels (1.0 is VGG16).
    pub width: f64,
    /// Plain or batch-norm.
    pub variant: VggVariant,
}

impl VggConfig {
    /// VGG16 for CIFAR-10: full width, 10 classes.
    pub fn cifar10(variant: VggVariant) -> Self {
        VggConfig {
            classes: 10,
            width: 1.0,
            variant,
        }
    }
}

enum Layer {
    Conv(Conv2d, Option<BatchNorm2d>),
    Pool,
}

enum Head {
    /// The bn variant's single layer.
    Single(Linear),
    /// The plain variant's three layers.
    Three([Linear; 3]),
}

/// VGG16. Input `[batch, 3, 32, 32]` f32; output logits `[batch, classes]`.
pub struct Vgg {
    config: VggConfig,
    features: Vec<Layer>,
    head: Head,
    params: Params,
    // As in the Transformer: a Mutex keeps the model Sync, and forward holds it for the whole
    // pass so that masks are drawn in one fixed order.
    rng: Mutex<Rng>,
}

impl Vgg {
    /// Builds the network with every initial value drawn from `seed`; the dropout generator
    /// starts from a fork of the same seed.
    pub fn new(config: VggConfig, seed: u64, device: &Device) -> Result<Self> {
        ensure!(
            config.classes > 0 && config.width.is_finite() && config.width > 0.0,
            "VGG: classes must be positive and width a positive number: {config:?}"
        );
        let bn = config.variant == VggVariant::Bn;
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
            let (weight, bias) = if bn {
                let init = Init::torch_default(inp * 9);
                (init, init)
            } else {
                // Kaiming normal over fan_out = k² · out, as the plain adaptation initialises.
                let std = (2.0 / (9 * out) as f32).sqrt();
                (Init::Normal(std), Init::Const(0.0))
            };
            let spec = ConvSpec {
                inp,
                out,
                kernel: 3,
                stride: 1,
                padding: 1,
            };
            let conv = Conv2d::new(&mut p, &format!("{name}.conv"), spec, weight, Some(bias))?;
            let norm = if bn {
                Some(BatchNorm2d::new(&mut p, &format!("{name}.bn"), out)?)
            } else {
                None
            };
            features.push(Layer::Conv(conv, norm));
            inp = out;
            conv_index += 1;
        }
        let head = if bn {
            Head::Single(Linear::torch(&mut p, "classifier", inp, config.classes)?)
        } else {
            let hidden = scaled(HEAD_WIDTH, config.width);
            Head::Three([
                Linear::torch(&mut p, "classifier.fc1", inp, hidden)?,
                Linear::torch(&mut p, "classifier.fc2", hidden, hidden)?,
                Linear::torch(&mut p, "classifier.fc3", hidden, config.classes)?,
            ])
        };
        Ok(Vgg {
            config,
            features,
            head,
            params: p.finish(),
            // Stream u64::MAX is never a parameter index, so masks do not repeat any init draw.
            rng: Mutex::new(Rng::new(seed).fork(u64::MAX)),
        })
    }

    /// The options it was built with.
    pub fn config(&self) -> VggConfig {
        self.config
    }

    fn lock_rng(&self) -> Result<MutexGuard<'_, Rng>> {
        self.rng
            .lock()
            .map_err(|_| anyhow!("VGG: dropout generator poisoned by a panic"))
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
                Layer::Conv(conv, Some(bn)) => bn.forward_relu(&conv.forward(&h)?, train)?,
                Layer::Conv(conv, None) => conv.forward_relu(&h)?,
                Layer::Pool => super::max_pool::max_pool2d(&h, 2, 2, 0)?,
            };
        }
        let h = h.flatten_from(1)?;
        match &self.head {
            Head::Single(fc) => fc.forward(&h),
            Head::Three([fc1, fc2, fc3]) => {
                let mut rng = if train { Some(self.lock_rng()?) } else { None };
                let mut drop = |t: Tensor| match rng.as_mut() {
                    Some(r) => dropout(&t, HEAD_DROPOUT, r),
                    None => Ok(t),
                };
                let h = relu(&fc1.forward(&drop(h)?)?)?;
                let h = relu(&fc2.forward(&drop(h)?)?)?;
                fc3.forward(&h)
            }
        }
    }

    fn vars(&self) -> Vec<(String, Var)> {
        self.params.vars.clone()
    }

    fn buffers(&self) -> Vec<(String, Var)> {
        self.params.buffers.clone()
    }

    fn rng(&self) -> Option<Rng> {
        match self.head {
            // A poisoned lock still holds a valid state: read it rather than fail a checkpoint.
            Head::Three(_) => Some(*self.rng.lock().unwrap_or_else(|e| e.into_inner())),
            Head::Single(_) => None,
        }
    }

    fn set_rng(&self, rng: Rng) {
        *self.rng.lock().unwrap_or_else(|e| e.into_inner()) = rng;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testutil::*;

    fn tiny_of(variant: VggVariant, seed: u64) -> Vgg {
        let config = VggConfig {
            width: 1.0 / 16.0,
            ..VggConfig::cifar10(variant)
        };
        Vgg::new(config, seed, &Device::Cpu).unwrap()
    }

    fn tiny(seed: u64) -> Vgg {
        tiny_of(VggVariant::Bn, seed)
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
        assert!(m.rng().is_none(), "the bn variant has no dropout");
        assert!(m.forward(&input(&[2, 3, 16, 16], 1), false).is_err());
        assert!(m.forward(&input(&[2, 1, 32, 32], 1), false).is_err());
        let bad = VggConfig {
            width: f64::NAN,
            ..VggConfig::cifar10(VggVariant::Plain)
        };
        assert!(Vgg::new(bad, 0, &Device::Cpu).is_err());
    }

    #[test]
    fn full_width_parameter_counts_match_pytorch() {
        // kuangliu/pytorch-cifar VGG('VGG16'): 14,728,266 parameters.
        let m = Vgg::new(VggConfig::cifar10(VggVariant::Bn), 0, &Device::Cpu).unwrap();
        assert_eq!(m.param_count(), 14_728_266);
        // Without its 13 BNs (2 × 4,224) and with the 512-512-512-10 head instead of 512-10:
        // chengyangfu/pytorch-vgg-cifar10's vgg16, 15,245,130.
        let m = Vgg::new(VggConfig::cifar10(VggVariant::Plain), 0, &Device::Cpu).unwrap();
        assert_eq!(m.param_count(), 14_728_266 - 8_448 + 2 * (512 * 512 + 512));
    }

    #[test]
    fn plain_variant_shapes_init_dropout_and_gradients() {
        let m = tiny_of(VggVariant::Plain, 0);
        let x = input(&[4, 3, 32, 32], 2);
        assert_eq!(m.forward(&x, true).unwrap().dims(), &[4, 10]);
        assert!(m.buffers().is_empty());
        // 13 convs × (weight, bias) + 3 linears × (weight, bias).
        let names: Vec<String> = m.vars().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), 13 * 2 + 3 * 2);
        assert_eq!(names[26], "classifier.fc1.weight");
        assert_eq!(names[31], "classifier.fc3.bias");
        // Kaiming-normal convolutions (std √(2 / (9 · 4)) for the first, 4 channels) with
        // zero biases.
        let state = m.save_state().unwrap();
        let w = &state[0].values;
        let std = (w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32).sqrt();
        assert!((std / (2.0f32 / 36.0).sqrt() - 1.0).abs() < 0.3, "std {std}");
        assert!(state[1].values.iter().all(|&b| b == 0.0));
        // Dropout in training only, from the restorable generator.
        let eval = |m: &Vgg| {
            m.forward(&x, false)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        assert_eq!(eval(&m), eval(&m));
        let train = |m: &Vgg| {
            m.forward(&x, true)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let saved = m.rng().unwrap();
        let first = train(&m);
        assert_ne!(first, train(&m));
        m.set_rng(saved);
        assert_eq!(first, train(&m));
        let t = labels(&[4], 10, 3);
        every_var_gets_a_gradient(&tiny_of(VggVariant::Plain, 1), &x, &t);
        save_load_round_trip(&tiny_of(VggVariant::Plain, 4), &tiny_of(VggVariant::Plain, 5), &x);
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
        seeding_is_deterministic(|s| Box::new(tiny_of(VggVariant::Plain, s)));
        let a = tiny(4);
        a.forward(&x, true).unwrap(); // non-trivial running statistics to carry over
        save_load_round_trip(&a, &tiny(5), &x);
    }
}
