//! The fuzz targets of homeadam, one per untrusted input, as plain functions of the input's
//! bytes: each returns on any input the code under test handles (Ok or an error), and panics on
//! a bug. The libFuzzer binaries of `fuzz/` call them (`cargo xtask fuzz`, coverage-guided); the
//! tests of this crate run them on stable (`cargo xtask test`) on every seed ([`seeds()`]), every
//! crash input kept in `fuzz/regressions/<target>/`, and a fixed pass of blind mutants of those.
//!
//! - [`checkpoint()`]: bytes → `Optimizer::load_state` (saving what loaded gives the same bytes);
//! - [`step()`]: any config and slices → `Optimizer::step`, equal to `step_reference`;
//! - [`replay_config()`], [`replay_safetensors()`]: the two files of `homeadam replay`.

#![deny(missing_docs)]

pub mod checkpoint;
pub mod replay_config;
pub mod replay_safetensors;
mod seeds;
pub mod step;

pub use checkpoint::checkpoint;
pub use replay_config::replay_config;
pub use replay_safetensors::replay_safetensors;
pub use seeds::seeds;
pub use step::step;

/// A target: runs one input, and panics on a bug.
pub type Target = fn(&[u8]);

/// Every target, by its name (its libFuzzer binary's, and its folder's under the seeds and
/// `fuzz/regressions/`), in the order `cargo xtask fuzz` runs them.
pub const TARGETS: [(&str, Target); 4] = [
    ("checkpoint", checkpoint),
    ("step", step),
    ("replay_config", replay_config),
    ("replay_safetensors", replay_safetensors),
];
