#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

pub mod backend;
mod bits;
pub mod calibration;
mod checkpoint;
mod config;
mod crc32;
mod dispatch;
#[cfg(feature = "std")]
mod erased;
mod error;
mod exact;
mod external;
mod format;
mod kernel;
mod knobs;
mod lines;
mod math;
mod optimizer;
#[cfg(feature = "std")]
mod parallel;
pub mod q8;
mod reduce;
mod rounding;
pub mod rules;
mod scalars;
mod shard;
mod simd;
mod state;
mod step;
mod storage;
mod tensor;

pub use calibration::TauCalibration;
pub use checkpoint::{ByteSink, SliceSink, TensorState, TensorStateMut};
pub use config::{Config, FiniteCheck, Knob, LARGEST_KNOB};
pub use error::{CheckpointError, Error};
pub use exact::ExactSum;
pub use optimizer::Optimizer;
pub use q8::Q8Block;
pub use reduce::RhoOver;
pub use rounding::Rounding;
pub use rules::{Rule, Switch, ALL_RULES};
pub use shard::ShardCheck;
pub use simd::Simd;
pub use state::StateStorage;
pub use step::{Step, Updates};
pub use storage::{Dtype, Storage};
pub use tensor::{Group, StepReport, Tensor, TensorAux};

/// The storage types, re-exported from `half`.
pub use half::{bf16, f16};
