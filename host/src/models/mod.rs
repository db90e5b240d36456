//! The networks the experiments train, on candle (f32): a digits MLP and CNN, VGG16 (plain or batch-norm)
//! (CIFAR-10), ResNet34 (Tiny-ImageNet) and a Transformer-encoder language model (WikiText).
//!
//! Every initial value is drawn from the project's [`Rng`] (candle's CPU device
//! cannot be seeded), so the same seed gives bit-identical parameters. Variable names follow
//! PyTorch's (`layer1.0.conv1.weight`, `layers.3.norm2.bias`, …) so that parameter groups can be
//! formed by name: every bias ends in `bias`, every normalisation parameter's name contains `bn`
//! or `norm`. BatchNorm running statistics are *buffers*: they are not in [`Model::vars`] (no
//! optimizer touches them) but are in [`Model::save_state`]. Dropout masks come from an `Rng` the
//! model holds, whose state [`Model::rng`] / [`Model::set_rng`] expose for checkpoints.

use std::collections::HashMap;

use anyhow::{bail, ensure, Result};
use candle_core::{Device, Tensor, Var};

use crate::rng::Rng;

pub mod channel_bias;
pub mod cnn;
pub mod conv2d;
mod conv_geometry;
mod cpu;
pub mod cross_entropy;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(feature = "cuda")]
mod cudnn;
pub mod dropout;
pub mod embedding;
pub mod heads;
pub mod host_time;
pub mod layer_norm;
mod layers;
pub mod linear;
pub mod max_pool;
pub mod mlp;
mod op;
pub mod param_grads;
pub mod relu;
pub mod resnet;
pub mod softmax;
pub mod transformer;
pub mod vgg;

pub use cnn::{Cnn, CnnConfig};
pub use mlp::{Mlp, MlpConfig};
pub use resnet::{ResNet, ResNetConfig, ResNetStem};
pub use transformer::{TransformerConfig, TransformerLm};
pub use vgg::{Vgg, VggConfig, VggVariant};

/// One saved variable: its name, shape and values (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct SavedVar {
    /// The variable's name, as in [`Model::vars`] / [`Model::buffers`].
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major; `shape`'s product long.
    pub values: Vec<f32>,
}

/// A network the runner can train, evaluate and checkpoint.
pub trait Model {
    /// The forward pass. `train` selects training behaviour: batch statistics (and running
    /// statistics updates) in BatchNorm, and dropout masks drawn from the model's generator.
    /// Input and output shapes are given by each model; a wrong shape or dtype is an error.
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor>;

    /// The trainable parameters, in a fixed order, with their names.
    fn vars(&self) -> Vec<(String, Var)>;

    /// Non-trainable state saved with the parameters (BatchNorm running statistics); empty by
    /// default.
    fn buffers(&self) -> Vec<(String, Var)> {
        Vec::new()
    }

    /// The state of the generator that draws dropout masks; `None` for models without dropout.
    fn rng(&self) -> Option<Rng> {
        None
    }

    /// Restores the dropout generator (from a checkpoint); does nothing for models without
    /// dropout.
    fn set_rng(&self, _rng: Rng) {}

    /// The device the parameters live on (the CPU for a model without any).
    fn device(&self) -> Device {
        self.vars()
            .first()
            .map_or(Device::Cpu, |(_, v)| v.device().clone())
    }

    /// The number of trainable scalars.
    fn param_count(&self) -> usize {
        self.vars().iter().map(|(_, v)| v.elem_count()).sum()
    }

    /// Copies out every parameter, then every buffer, in order.
    fn save_state(&self) -> Result<Vec<SavedVar>> {
        self.vars()
            .into_iter()
            .chain(self.buffers())
            .map(|(name, v)| {
                Ok(SavedVar {
                    name,
                    shape: v.dims().to_vec(),
                    values: v.as_tensor().flatten_all()?.to_vec1::<f32>()?,
                })
            })
            .collect()
    }

    /// Restores what [`Model::save_state`] returned. Every parameter and buffer must be present
    /// exactly once with its shape, and nothing else; all of this is checked before any variable
    /// is written, so a failed load leaves the model unchanged.
    fn load_state(&self, state: &[SavedVar]) -> Result<()> {
        let targets: Vec<(String, Var)> = self.vars().into_iter().chain(self.buffers()).collect();
        let mut by_name: HashMap<&str, &SavedVar> = HashMap::with_capacity(state.len());
        for s in state {
            ensure!(
                by_name.insert(s.name.as_str(), s).is_none(),
                "checkpoint: variable {} appears twice",
                s.name
            );
        }
        for (name, var) in &targets {
            let Some(s) = by_name.get(name.as_str()) else {
                bail!("checkpoint: variable {name} is missing");
            };
            ensure!(
                s.shape == var.dims(),
                "checkpoint: variable {name} has shape {:?}, the model expects {:?}",
                s.shape,
                var.dims()
            );
            ensure!(
                s.values.len() == var.elem_count(),
                "checkpoint: variable {name} has {} values for shape {:?}",
                s.values.len(),
                s.shape
            );
        }
        if state.len() != targets.len() {
            let known: Vec<&str> = targets.iter().map(|(n, _)| n.as_str()).collect();
            let extra: Vec<&str> = state
                .iter()
                .map(|s| s.name.as_str())
                .filter(|n| !known.contains(n))
                .collect();
            bail!("checkpoint: variables unknown to the model: {extra:?}");
        }
        for (name, var) in &targets {
            let s = by_name[name.as_str()];
            var.set(&Tensor::from_slice(&s.values, var.dims(), var.device())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Checks every model's tests share.

    use super::*;
    use candle_nn::{loss::cross_entropy, Optimizer, SGD};

    /// Cross-entropy of the model's logits (any leading shape) against `targets`.
    pub(crate) fn loss(m: &dyn Model, x: &Tensor, targets: &Tensor, train: bool) -> Tensor {
        let logits = m.forward(x, train).unwrap();
        let classes = *logits.dims().last().unwrap();
        cross_entropy(
            &logits.reshape(((), classes)).unwrap(),
            &targets.flatten_all().unwrap(),
        )
        .unwrap()
    }

    /// One backward pass reaches every parameter with a finite, not-all-zero gradient, and no
    /// buffer.
    pub(crate) fn every_var_gets_a_gradient(m: &dyn Model, x: &Tensor, targets: &Tensor) {
        let grads = loss(m, x, targets, true).backward().unwrap();
        for (name, v) in m.vars() {
            let g = grads.get(&v).unwrap_or_else(|| panic!("{name} got no gradient"));
            let g: Vec<f32> = g.flatten_all().unwrap().to_vec1().unwrap();
            assert!(g.iter().all(|x| x.is_finite()), "{name}: non-finite gradient");
            assert!(g.iter().any(|&x| x != 0.0), "{name}: all-zero gradient");
        }
        for (name, v) in m.buffers() {
            assert!(grads.get(&v).is_none(), "buffer {name} got a gradient");
        }
    }

    /// A few plain SGD steps on one fixed batch lower its loss (measured in `measure_train`
    /// mode, so that BatchNorm models compare batch-statistics losses).
    pub(crate) fn sgd_lowers_the_loss(
        m: &dyn Model,
        x: &Tensor,
        targets: &Tensor,
        lr: f64,
        steps: usize,
        measure_train: bool,
    ) {
        let before = loss(m, x, targets, measure_train).to_scalar::<f32>().unwrap();
        let vars = m.vars().into_iter().map(|(_, v)| v).collect();
        let mut opt = SGD::new(vars, lr).unwrap();
        for _ in 0..steps {
            opt.backward_step(&loss(m, x, targets, true)).unwrap();
        }
        let after = loss(m, x, targets, measure_train).to_scalar::<f32>().unwrap();
        assert!(after < before, "loss {before} -> {after}");
    }

    /// Same seed: bit-identical state; other seed: every randomly initialised variable differs.
    pub(crate) fn seeding_is_deterministic(build: impl Fn(u64) -> Box<dyn Model>) {
        let bits = |m: &dyn Model| -> Vec<(String, Vec<u32>)> {
            m.save_state()
                .unwrap()
                .into_iter()
                .map(|s| (s.name, s.values.iter().map(|v| v.to_bits()).collect()))
                .collect()
        };
        let a = bits(build(1).as_ref());
        assert_eq!(a, bits(build(1).as_ref()));
        let b = bits(build(2).as_ref());
        let mut differing = 0;
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            let constant = x.iter().all(|&v| v == x[0]);
            assert!(constant || x != y, "{name} is the same under another seed");
            differing += usize::from(x != y);
        }
        assert!(differing > 0);
    }

    /// Saving, loading into a model with another seed, and running both gives the same output;
    /// mismatched checkpoints are refused without changing the model.
    pub(crate) fn save_load_round_trip(a: &dyn Model, b: &dyn Model, x: &Tensor) {
        let state = a.save_state().unwrap();
        let before = b.save_state().unwrap();

        let mut wrong_shape = state.clone();
        wrong_shape[0].shape.push(1);
        let err = b.load_state(&wrong_shape).unwrap_err().to_string();
        assert!(err.contains("shape"), "{err}");
        let err = b.load_state(&state[1..]).unwrap_err().to_string();
        assert!(err.contains("missing"), "{err}");
        let mut renamed = state.clone();
        renamed.push(SavedVar {
            name: "nonsense".into(),
            ..state[0].clone()
        });
        let err = b.load_state(&renamed).unwrap_err().to_string();
        assert!(err.contains("nonsense"), "{err}");
        assert_eq!(b.save_state().unwrap(), before, "a failed load changed the model");

        b.load_state(&state).unwrap();
        assert_eq!(b.save_state().unwrap(), state);
        let ya: Vec<f32> = a
            .forward(x, false)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let yb: Vec<f32> = b
            .forward(x, false)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(ya, yb);
    }

    /// Deterministic pseudo-random f32 input of the given shape.
    pub(crate) fn input(shape: &[usize], seed: u64) -> Tensor {
        let mut r = Rng::new(seed);
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|_| r.normal()).collect::<Vec<f32>>(),
            shape,
            &candle_core::Device::Cpu,
        )
        .unwrap()
    }

    /// Deterministic class labels in `0..classes`.
    pub(crate) fn labels(shape: &[usize], classes: usize, seed: u64) -> Tensor {
        let mut r = Rng::new(seed);
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|_| r.below(classes) as u32).collect::<Vec<u32>>(),
            shape,
            &candle_core::Device::Cpu,
        )
        .unwrap()
    }
}
