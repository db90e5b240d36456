//! Building blocks shared by the models: a parameter builder that draws every initial value from
//! the project's [`Rng`], and the layers (linear, convolution, batch norm, layer norm).
//!
//! The layers are the host's ops, one op each with a CPU and a CUDA half ([`super::linear`],
//! [`super::conv2d`], [`super::channel_bias`], [`super::layer_norm`]; batch norm's training pass
//! in `super::cpu::batch_norm` and cuDNN's), and candle primitives that all have a backward
//! pass: candle's fused `layer_norm` and `softmax_last_dim` do not, and its `Dropout` draws from
//! the unseedable device generator.

use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor, Var};

use crate::rng::Rng;

/// How a parameter's initial values are drawn.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Init {
    /// Uniform in `[-bound, bound)`.
    Uniform(f32),
    /// Normal with mean 0 and this standard deviation.
    Normal(f32),
    /// Every element equal to this value.
    Const(f32),
}

impl Init {
    /// PyTorch's default for `nn.Linear` / `nn.Conv2d` weights and biases:
    /// `kaiming_uniform_(a = √5)` gives the bound `1/√fan_in`, and the bias uses the same bound.
    pub(crate) fn torch_default(fan_in: usize) -> Init {
        Init::Uniform(1.0 / (fan_in.max(1) as f32).sqrt())
    }
}

/// The named parameters (trainable) and buffers (BatchNorm running statistics) of a model.
#[derive(Clone, Debug, Default)]
pub(crate) struct Params {
    pub(crate) vars: Vec<(String, Var)>,
    pub(crate) buffers: Vec<(String, Var)>,
}

/// Creates named variables in a fixed order, each from its own fork of the seed's generator.
///
/// Forking per variable index (rather than drawing sequentially from one stream) makes a
/// variable's values depend only on the seed and its position, which keeps initialisation easy
/// to reason about when comparing runs.
pub(crate) struct ParamBuilder {
    rng: Rng,
    device: Device,
    params: Params,
}

impl ParamBuilder {
    pub(crate) fn new(seed: u64, device: &Device) -> Self {
        ParamBuilder {
            rng: Rng::new(seed),
            device: device.clone(),
            params: Params::default(),
        }
    }

    fn create(&mut self, name: String, shape: &[usize], init: Init) -> Result<Var> {
        let taken = |list: &[(String, Var)]| list.iter().any(|(n, _)| *n == name);
        ensure!(
            !taken(&self.params.vars) && !taken(&self.params.buffers),
            "duplicate variable name {name}"
        );
        let index = (self.params.vars.len() + self.params.buffers.len()) as u64;
        let mut rng = self.rng.fork(index);
        let n: usize = shape.iter().product();
        let values: Vec<f32> = match init {
            Init::Uniform(bound) => (0..n).map(|_| (2.0 * rng.next_f32() - 1.0) * bound).collect(),
            Init::Normal(std) => (0..n).map(|_| rng.normal() * std).collect(),
            Init::Const(c) => vec![c; n],
        };
        Ok(Var::from_vec(values, shape, &self.device)?)
    }

    /// A trainable parameter.
    pub(crate) fn var(&mut self, name: String, shape: &[usize], init: Init) -> Result<Var> {
        let v = self.create(name.clone(), shape, init)?;
        self.params.vars.push((name, v.clone()));
        Ok(v)
    }

    /// A non-trainable buffer (never returned by `Model::vars`, but saved in checkpoints).
    pub(crate) fn buffer(&mut self, name: String, shape: &[usize], value: f32) -> Result<Var> {
        let v = self.create(name.clone(), shape, Init::Const(value))?;
        self.params.buffers.push((name, v.clone()));
        Ok(v)
    }

    pub(crate) fn finish(self) -> Params {
        self.params
    }
}

/// Scales a channel count by the width multiplier, keeping at least one channel.
pub(crate) fn scaled(channels: usize, width: f64) -> usize {
    ((channels as f64 * width).round() as usize).max(1)
}

/// Checks that `x` is f32 with the given rank, and returns its dims.
pub(crate) fn expect_f32<'a>(x: &'a Tensor, rank: usize, what: &str) -> Result<&'a [usize]> {
    ensure!(
        x.dtype() == DType::F32,
        "{what}: expected f32 input, got {:?}",
        x.dtype()
    );
    ensure!(
        x.rank() == rank,
        "{what}: expected a rank-{rank} input, got shape {:?}",
        x.dims()
    );
    ensure!(x.dim(0)? > 0, "{what}: empty batch");
    Ok(x.dims())
}

/// `y = x Wᵀ + b` over the last dimension (any leading dimensions).
pub(crate) struct Linear {
    weight: Var,
    bias: Option<Var>,
}

impl Linear {
    /// Weight `[out, inp]` and (optionally) bias `[out]`, named `{name}.weight` / `{name}.bias`.
    pub(crate) fn new(
        p: &mut ParamBuilder,
        name: &str,
        inp: usize,
        out: usize,
        weight: Init,
        bias: Option<Init>,
    ) -> Result<Self> {
        let weight = p.var(format!("{name}.weight"), &[out, inp], weight)?;
        let bias = match bias {
            Some(init) => Some(p.var(format!("{name}.bias"), &[out], init)?),
            None => None,
        };
        Ok(Linear { weight, bias })
    }

    /// PyTorch's `nn.Linear` default initialisation, with a bias.
    pub(crate) fn torch(p: &mut ParamBuilder, name: &str, inp: usize, out: usize) -> Result<Self> {
        let init = Init::torch_default(inp);
        Linear::new(p, name, inp, out, init, Some(init))
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        super::linear::linear(
            x,
            self.weight.as_tensor(),
            self.bias.as_ref().map(|b| b.as_tensor()),
        )
    }
}

/// A square-kernel 2-D convolution (NCHW), optionally with a bias.
pub(crate) struct Conv2d {
    weight: Var,
    bias: Option<Var>,
    stride: usize,
    padding: usize,
}

/// The shape of a [`Conv2d`]: channels, kernel size, stride and padding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvSpec {
    pub(crate) inp: usize,
    pub(crate) out: usize,
    pub(crate) kernel: usize,
    pub(crate) stride: usize,
    pub(crate) padding: usize,
}

impl Conv2d {
    /// Weight `[out, inp, k, k]` named `{name}.weight`; bias `[out]` named `{name}.bias`.
    pub(crate) fn new(
        p: &mut ParamBuilder,
        name: &str,
        spec: ConvSpec,
        weight: Init,
        bias: Option<Init>,
    ) -> Result<Self> {
        let k = spec.kernel;
        let weight = p.var(format!("{name}.weight"), &[spec.out, spec.inp, k, k], weight)?;
        let bias = match bias {
            Some(init) => Some(p.var(format!("{name}.bias"), &[spec.out], init)?),
            None => None,
        };
        Ok(Conv2d {
            weight,
            bias,
            stride: spec.stride,
            padding: spec.padding,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.convolve(x, false)
    }

    /// `relu(self.forward(x))`, the bias and the ReLU one op on CUDA.
    pub(crate) fn forward_relu(&self, x: &Tensor) -> Result<Tensor> {
        self.convolve(x, true)
    }

    fn convolve(&self, x: &Tensor, relu: bool) -> Result<Tensor> {
        use super::channel_bias::{channel_bias, channel_bias_relu};
        let y = super::conv2d::conv2d(x, self.weight.as_tensor(), self.stride, self.padding)?;
        match (&self.bias, relu) {
            (Some(b), false) => channel_bias(&y, b.as_tensor()),
            (Some(b), true) => channel_bias_relu(&y, b.as_tensor()),
            (None, false) => Ok(y),
            (None, true) => super::relu::relu(&y),
        }
    }
}

/// 2-D batch normalisation (PyTorch `nn.BatchNorm2d`: eps 1e-5, momentum 0.1, affine).
///
/// Training mode normalises with the batch statistics (biased variance) and updates the running
/// statistics with the unbiased variance, as PyTorch does, in one op (`models::cpu::batch_norm`,
/// cuDNN's on CUDA); evaluation mode uses the running statistics. The running statistics are
/// buffers, updated in place from detached values, so they never enter the autograd graph.
pub(crate) struct BatchNorm2d {
    weight: Var,
    bias: Var,
    running_mean: Var,
    running_var: Var,
}

const BN_EPS: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;

impl BatchNorm2d {
    /// `{name}.weight` = 1, `{name}.bias` = 0, `{name}.running_mean` = 0, `{name}.running_var` = 1.
    pub(crate) fn new(p: &mut ParamBuilder, name: &str, channels: usize) -> Result<Self> {
        Ok(BatchNorm2d {
            weight: p.var(format!("{name}.weight"), &[channels], Init::Const(1.0))?,
            bias: p.var(format!("{name}.bias"), &[channels], Init::Const(0.0))?,
            running_mean: p.buffer(format!("{name}.running_mean"), &[channels], 0.0)?,
            running_var: p.buffer(format!("{name}.running_var"), &[channels], 1.0)?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.normalise(x, train, false)
    }

    /// `relu(self.forward(x, train))`, one op when training on CUDA.
    pub(crate) fn forward_relu(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.normalise(x, train, true)
    }

    fn normalise(&self, x: &Tensor, train: bool, relu: bool) -> Result<Tensor> {
        let (n, c, h, w) = x.dims4()?;
        let channels = self.weight.dim(0)?;
        ensure!(
            c == channels,
            "batch norm: input has {c} channels, layer expects {channels}"
        );
        let count = n * h * w;
        // PyTorch refuses this too: one value per channel has no variance.
        ensure!(
            !train || count > 1,
            "batch norm: training needs more than one value per channel (input {:?})",
            x.dims()
        );
        let (weight, bias) = (self.weight.as_tensor(), self.bias.as_tensor());
        if train {
            let running = (&self.running_mean, &self.running_var);
            let constants = (BN_EPS, BN_MOMENTUM);
            #[cfg(feature = "cuda")]
            if x.device().is_cuda() {
                return super::cudnn::batch_norm::train(x, weight, bias, running, constants, relu);
            }
            return super::cpu::batch_norm::train(x, weight, bias, running, constants, relu);
        }
        let shape = (1, c, 1, 1);
        let mean = self.running_mean.as_detached_tensor().reshape(shape)?;
        let var = self.running_var.as_detached_tensor().reshape(shape)?;
        let normed = x.broadcast_sub(&mean)?.broadcast_div(&(var + BN_EPS)?.sqrt()?)?;
        let y = normed
            .broadcast_mul(&weight.reshape(shape)?)?
            .broadcast_add(&bias.reshape(shape)?)?;
        if relu {
            return super::relu::relu(&y);
        }
        Ok(y)
    }
}

/// Layer normalisation over the last dimension (PyTorch `nn.LayerNorm`, eps 1e-5), through
/// [`super::layer_norm`].
pub(crate) struct LayerNorm {
    weight: Var,
    bias: Var,
}

impl LayerNorm {
    /// `{name}.weight` = 1 and `{name}.bias` = 0.
    pub(crate) fn new(p: &mut ParamBuilder, name: &str, dim: usize) -> Result<Self> {
        Ok(LayerNorm {
            weight: p.var(format!("{name}.weight"), &[dim], Init::Const(1.0))?,
            bias: p.var(format!("{name}.bias"), &[dim], Init::Const(0.0))?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        super::layer_norm::layer_norm(x, self.weight.as_tensor(), self.bias.as_tensor(), 1e-5)
    }
}
