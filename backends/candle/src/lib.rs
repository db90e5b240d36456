#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![deny(rustdoc::broken_intra_doc_links)]

mod adapter;
mod clip;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod device;
mod error;
mod groups;
mod inspect;
mod lend;
mod options;
mod params;
mod schedule;
mod state;
#[cfg(test)]
mod tests;

pub use adapter::{StepOutcome, VarOptimizer};
pub use clip::{clip_grad_norm, global_grad_norm};
pub use groups::{is_no_decay, GroupSettings};
pub use options::{OptimConfig, SkipPolicy};
pub use schedule::Schedule;
pub use state::Adopted;

/// The core crate, re-exported: [`homeadam_core::Config`], [`homeadam_core::Rule`] and the
/// other types a configuration names.
pub use homeadam_core as core;
