#![doc = include_str!("../README.md")]
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

mod checkpoint;
mod config;
mod crc32;
mod error;
mod kernel;
pub mod math;
mod optimizer;
pub mod rounding;
mod rules;
mod scalars;
mod storage;
mod tensor;

pub use checkpoint::{ByteSink, SliceSink, TensorState};
pub use config::{Config, FiniteCheck, Rule, Switch, ALL_RULES};
pub use crc32::Crc32;
pub use error::{CheckpointError, Error};
pub use optimizer::Optimizer;
pub use rounding::Rounding;
pub use rules::homeadam::{goes_home, home_first_pass};
pub use scalars::{powi_by_squaring, StepScalars};
pub use storage::{Dtype, Storage};
pub use tensor::{StepReport, Tensor, TensorAux};

/// The storage types, re-exported from `half`.
pub use half::{bf16, f16};
