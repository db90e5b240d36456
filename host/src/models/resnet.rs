//! ResNet34 for 64×64 images (Tiny-ImageNet, 200 classes).
//!
//! Architecture: torchvision's `resnet34` — a stem, then four stages of basic blocks
//! (`[3, 4, 6, 3]` blocks of 64, 128, 256, 512 channels; the first block of stages 2–4 has
//! stride 2 and a `Conv1×1(stride 2) → BatchNorm` shortcut), global average pooling (the mean
//! over H and W) and `Linear(512 → classes)`. A basic block is
//! `Conv3×3 → BN → ReLU → Conv3×3 → BN`, plus the shortcut, then ReLU. Convolutions have no
//! bias (BatchNorm follows each). Channel counts can be scaled by a width multiplier.
//!
//! Two stems are offered:
//! - [`ResNetStem::ImageNet`] (default, torchvision's): `Conv7×7(stride 2, pad 3) → BN → ReLU →
//!   MaxPool 3×3(stride 2, pad 1)` ([`super::max_pool`]: candle's pooling has no backward pass
//!   for a window other than its stride). On 64×64 input the feature maps are 32×32 after the
//!   conv and 16×16 after the pool.
//! - [`ResNetStem::Small`]: `Conv3×3(stride 1, pad 1) → BN → ReLU`, no pool — the usual choice
//!   for small images; stage 1 then runs at 64×64, about 16× the compute of the other stem.
//!
//! Initialisation follows torchvision: conv weights normal with standard deviation
//! `√(2 / (out_channels · k²))` (Kaiming, fan-out, ReLU), BatchNorm weight 1 and bias 0, and the
//! classifier PyTorch's `nn.Linear` default (uniform in `±1/√fan_in`).
//!
//! Variables: `conv1.weight`, `bn1.{weight,bias}`, `layer{s}.{b}.conv{1,2}.weight`,
//! `layer{s}.{b}.bn{1,2}.{weight,bias}`, `layer{s}.0.downsample.conv.weight`,
//! `layer{s}.0.downsample.bn.{weight,bias}`, `fc.{weight,bias}`; buffers
//! `*.running_{mean,var}` for every BatchNorm.

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor, Var};

use super::layers::{expect_f32, scaled, BatchNorm2d, Conv2d, ConvSpec, Init, Linear, ParamBuilder, Params};
use super::relu::relu_of_sum;
use super::Model;

/// ResNet34's stage depths.
const BLOCKS: [usize; 4] = [3, 4, 6, 3];
/// ResNet34's stage widths.
const CHANNELS: [usize; 4] = [64, 128, 256, 512];

/// The stem before the residual stages (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResNetStem {
    /// `Conv7×7/2 → BN → ReLU → MaxPool 3×3/2 (padding 1)`: torchvision's stem.
    ImageNet,
    /// `Conv3×3/1 → BN → ReLU`, no pool.
    Small,
}

/// ResNet's options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ResNetConfig {
    /// Output classes (200 for Tiny-ImageNet).
    pub classes: usize,
    /// Channel multiplier: each layer has `max(1, round(c · width))` channels (1.0 is ResNet34).
    pub width: f64,
    /// The stem.
    pub stem: ResNetStem,
}

impl ResNetConfig {
    /// ResNet34 for Tiny-ImageNet: full width, 200 classes, the torchvision-like stem.
    pub fn tiny_imagenet() -> Self {
        ResNetConfig {
            classes: 200,
            width: 1.0,
            stem: ResNetStem::ImageNet,
        }
    }
}

/// Kaiming-normal (fan-out, ReLU) conv weights without bias, as torchvision initialises them.
fn conv(p: &mut ParamBuilder, name: &str, spec: ConvSpec) -> Result<Conv2d> {
    let fan_out = spec.out * spec.kernel * spec.kernel;
    let std = (2.0 / fan_out as f32).sqrt();
    Conv2d::new(p, name, spec, Init::Normal(std), None)
}

fn spec(inp: usize, out: usize, kernel: usize, stride: usize) -> ConvSpec {
    ConvSpec {
        inp,
        out,
        kernel,
        stride,
        padding: kernel / 2,
    }
}

struct BasicBlock {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    conv2: Conv2d,
    bn2: BatchNorm2d,
    downsample: Option<(Conv2d, BatchNorm2d)>,
}

impl BasicBlock {
    fn new(p: &mut ParamBuilder, name: &str, inp: usize, out: usize, stride: usize) -> Result<Self> {
        let conv1 = conv(p, &format!("{name}.conv1"), spec(inp, out, 3, stride))?;
        let bn1 = BatchNorm2d::new(p, &format!("{name}.bn1"), out)?;
        let conv2 = conv(p, &format!("{name}.conv2"), spec(out, out, 3, 1))?;
        let bn2 = BatchNorm2d::new(p, &format!("{name}.bn2"), out)?;
        let downsample = if stride != 1 || inp != out {
            let c = conv(p, &format!("{name}.downsample.conv"), spec(inp, out, 1, stride))?;
            let bn = BatchNorm2d::new(p, &format!("{name}.downsample.bn"), out)?;
            Some((c, bn))
        } else {
            None
        };
        Ok(BasicBlock {
            conv1,
            bn1,
            conv2,
            bn2,
            downsample,
        })
    }

    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let h = self.bn1.forward_relu(&self.conv1.forward(x)?, train)?;
        let h = self.bn2.forward(&self.conv2.forward(&h)?, train)?;
        let shortcut = match &self.downsample {
            Some((c, bn)) => bn.forward(&c.forward(x)?, train)?,
            None => x.clone(),
        };
        relu_of_sum(&h, &shortcut)
    }
}

/// ResNet34. Input `[batch, 3, H, W]` f32 (64×64 for Tiny-ImageNet; any H, W ≥ 1 work thanks to
/// the padded stride-2 layers and the global average pool); output logits `[batch, classes]`.
pub struct ResNet {
    config: ResNetConfig,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    blocks: Vec<BasicBlock>,
    fc: Linear,
    params: Params,
}

impl ResNet {
    /// Builds the network with every initial value drawn from `seed`.
    pub fn new(config: ResNetConfig, seed: u64, device: &Device) -> Result<Self> {
        ensure!(
            config.classes > 0 && config.width.is_finite() && config.width > 0.0,
            "ResNet: classes must be positive and width a positive number: {config:?}"
        );
        let mut p = ParamBuilder::new(seed, device);
        let stem_out = scaled(CHANNELS[0], config.width);
        let stem = match config.stem {
            ResNetStem::ImageNet => spec(3, stem_out, 7, 2),
            ResNetStem::Small => spec(3, stem_out, 3, 1),
        };
        let conv1 = conv(&mut p, "conv1", stem)?;
        let bn1 = BatchNorm2d::new(&mut p, "bn1", stem_out)?;
        let mut blocks = Vec::with_capacity(BLOCKS.iter().sum());
        let mut inp = stem_out;
        for (stage, (&depth, &c)) in BLOCKS.iter().zip(&CHANNELS).enumerate() {
            let out = scaled(c, config.width);
            for b in 0..depth {
                let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                let name = format!("layer{}.{b}", stage + 1);
                blocks.push(BasicBlock::new(&mut p, &name, inp, out, stride)?);
                inp = out;
            }
        }
        let fc = Linear::torch(&mut p, "fc", inp, config.classes)?;
        Ok(ResNet {
            config,
            conv1,
            bn1,
            blocks,
            fc,
            params: p.finish(),
        })
    }

    /// The options it was built with.
    pub fn config(&self) -> ResNetConfig {
        self.config
    }
}

impl Model for ResNet {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let dims = expect_f32(x, 4, "ResNet")?;
        ensure!(
            dims[1] == 3 && dims[2] >= 1 && dims[3] >= 1,
            "ResNet: expected [batch, 3, H, W] with H, W ≥ 1, got {dims:?}"
        );
        let mut h = self.bn1.forward_relu(&self.conv1.forward(x)?, train)?;
        if self.config.stem == ResNetStem::ImageNet {
            h = super::max_pool::max_pool2d(&h, 3, 2, 1)?;
        }
        for block in &self.blocks {
            h = block.forward(&h, train)?;
        }
        self.fc.forward(&h.mean((2, 3))?)
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

    fn tiny(seed: u64, stem: ResNetStem) -> ResNet {
        let config = ResNetConfig {
            classes: 7,
            width: 1.0 / 16.0,
            stem,
        };
        ResNet::new(config, seed, &Device::Cpu).unwrap()
    }

    #[test]
    fn shapes_names_and_bad_input() {
        for stem in [ResNetStem::ImageNet, ResNetStem::Small] {
            let m = tiny(0, stem);
            let y = m.forward(&input(&[2, 3, 64, 64], 1), true).unwrap();
            assert_eq!(y.dims(), &[2, 7]);
            assert_eq!(
                m.forward(&input(&[1, 3, 16, 16], 1), false).unwrap().dims(),
                &[1, 7]
            );
            // Stem conv + BN, 16 blocks × 2 × (conv + BN), 3 shortcuts × (conv + BN), fc.
            assert_eq!(m.vars().len(), 3 + 16 * 2 * 3 + 3 * 3 + 2);
            assert_eq!(m.buffers().len(), 2 * (1 + 16 * 2 + 3));
            assert!(m.vars().iter().any(|(n, _)| n == "layer4.0.downsample.bn.bias"));
            assert!(m.forward(&input(&[2, 3, 3, 3], 1), false).is_ok(), "any H, W ≥ 1");
            assert!(m.forward(&input(&[2, 4, 16, 16], 1), false).is_err());
            assert!(m.forward(&input(&[2, 3, 16], 1), false).is_err());
        }
        // Stage 4 of a 32×32 input is 1×1 here: one value per channel has no batch variance.
        let m = tiny(0, ResNetStem::ImageNet);
        let err = m.forward(&input(&[1, 3, 32, 32], 1), true).unwrap_err();
        assert!(err.to_string().contains("more than one value"), "{err}");
        assert!(m.forward(&input(&[1, 3, 32, 32], 1), false).is_ok());
    }

    #[test]
    fn full_width_parameter_count_matches_torchvision() {
        // torchvision resnet34(num_classes=200): 21,797,672 − 1000·513 + 200·513 with the 7×7
        // stem; the 3×3 stem has 3·64·(9 − 49) fewer weights.
        let m = ResNet::new(ResNetConfig::tiny_imagenet(), 0, &Device::Cpu).unwrap();
        let torchvision = 21_797_672 - 1000 * 513 + 200 * 513;
        assert_eq!(m.param_count(), torchvision);
        let small = ResNetConfig {
            stem: ResNetStem::Small,
            ..ResNetConfig::tiny_imagenet()
        };
        let m = ResNet::new(small, 0, &Device::Cpu).unwrap();
        assert_eq!(m.param_count(), torchvision - 3 * 64 * 40);
    }

    #[test]
    fn gradients_training_seeding_checkpoints() {
        let x = input(&[4, 3, 32, 32], 2);
        let t = labels(&[4], 7, 3);
        for stem in [ResNetStem::ImageNet, ResNetStem::Small] {
            every_var_gets_a_gradient(&tiny(0, stem), &x, &t);
        }
        sgd_lowers_the_loss(&tiny(0, ResNetStem::Small), &x, &t, 0.05, 4, true);
        seeding_is_deterministic(|s| Box::new(tiny(s, ResNetStem::ImageNet)));
        let a = tiny(4, ResNetStem::ImageNet);
        a.forward(&x, true).unwrap();
        save_load_round_trip(&a, &tiny(5, ResNetStem::ImageNet), &x);
    }
}
