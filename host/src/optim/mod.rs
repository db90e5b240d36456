//! Optimizers for candle: every rule of `homeadam-core` (SGD(M), Adam(W), AdaBelief, SWATS,
//! MIAdam, Adam(W)-srf, HomeAdam(W) with a global, per-layer or element-wise switch) behind
//! [`candle_nn::Optimizer`], updating `Var`s on the CPU in place.
//!
//! HomeAdamW (the paper's Alg. 2), with m̂_t = m_t / (1 − β1^t), v̂_t = v_t / (1 − β2^t) and
//! ρ_t = min v̂_t over the whole model:
//!
//! ```text
//! θ_t = θ_{t−1} − η (m̂_t / (v̂_t + ε) + λ θ_{t−1})   if ρ_t ≥ τ   (srf step)
//! θ_t = θ_{t−1} − η (m̂_t + λ θ_{t−1})               otherwise    (home: SGDM)
//! ```
//!
//! Swapping `candle_nn::AdamW` for HomeAdamW is one line:
//!
//! ```
//! use candle_core::{DType, Device, Module, Tensor};
//! use candle_nn::{linear, Optimizer, VarBuilder, VarMap};
//! use homeadam_core::{Config, Rule, Switch};
//! use homeadam_host::optim::{OptimConfig, VarOptimizer};
//!
//! # fn main() -> candle_core::Result<()> {
//! // y = 3x − 1 on 8 points.
//! let x = Tensor::arange(0f32, 8.0, &Device::Cpu)?.affine(0.125, 0.0)?.reshape((8, 1))?;
//! let y = x.affine(3.0, -1.0)?;
//! let mut varmap = VarMap::new();
//! let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
//! let model = linear(1, 1, vb.pp("fc"))?;
//! // A fixed start (candle's initialisation is random and cannot be seeded on the CPU).
//! varmap.set_one("fc.weight", Tensor::new(&[[0.5f32]], &Device::Cpu)?)?;
//! varmap.set_one("fc.bias", Tensor::new(&[0.0f32], &Device::Cpu)?)?;
//!
//! let mut config = Config::new(Rule::HomeAdamW(Switch::Global));
//! config.lr = 0.1;
//! // was: let mut opt = candle_nn::AdamW::new(varmap.all_vars(), candle_nn::ParamsAdamW::default())?;
//! let mut opt = VarOptimizer::new(varmap.all_vars(), OptimConfig::new(config))?;
//!
//! let loss = |m: &candle_nn::Linear| m.forward(&x)?.sub(&y)?.sqr()?.mean_all()?.to_scalar::<f32>();
//! let before = loss(&model)?;
//! for _ in 0..20 {
//!     let l = model.forward(&x)?.sub(&y)?.sqr()?.mean_all()?;
//!     opt.backward_step(&l)?;
//! }
//! assert!(loss(&model)? < before);
//! # Ok(())
//! # }
//! ```
//!
//! [`VarOptimizer::from_varmap`] sorts the variables by name (a `VarMap` iterates in a random
//! order per process), which checkpoints ([`VarOptimizer::save_state`]) need, and lets the
//! names pick the variables exempt from weight decay ([`is_no_decay`]).

mod adapter;
mod clip;
mod groups;
mod nest;
mod preset;
mod schedule;
mod state;
#[cfg(test)]
mod tests;

pub use adapter::{OptimConfig, StepOutcome, VarOptimizer};
pub use clip::{clip_grad_norm, global_grad_norm};
pub use groups::is_no_decay;
pub use preset::{OptimizerPreset, Preset, ALL_OPTIMIZERS};
pub use schedule::Schedule;
