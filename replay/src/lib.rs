//! Golden-vector replay, shared by `homeadam replay`, the golden tests and the backends' tests:
//! the JSON config ([`ReplayConfig`], whose hyper-parameter keys [`HyperParams`] the host's
//! presets share), the safetensors input and output ([`ReplayInput`], [`output_bytes`]) and
//! the replay loop ([`replay`]), which steps the core's optimizer.
//!
//! ```
//! use homeadam_replay::{replay, ReplayConfig, ReplayInput, ReplayOutput, output_bytes};
//!
//! # fn main() -> anyhow::Result<()> {
//! let config = ReplayConfig::parse(r#"{"rule": "homeadamw", "lr": 0.01, "tau": 1e-4}"#)?;
//! // θ₀ = [1, 2] and two gradient rows, as `homeadam replay` reads them.
//! let file = ReplayOutput {
//!     tensors: vec![
//!         ("param.w".into(), vec![2], vec![1.0, 2.0]),
//!         ("grad.w".into(), vec![2, 2], vec![0.1, -0.2, 0.3, 0.4]),
//!     ],
//!     reports: Vec::new(),
//! };
//! let input = ReplayInput::parse(&output_bytes(&file)?)?;
//! let output = replay(&config, &input, |_| {})?;
//! assert_eq!(output.reports.last().map(|r| r.step), Some(2));
//! assert_eq!(output.tensors[0].0, "param.w");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod config;
mod hyper;
mod io;
mod run;

pub use config::ReplayConfig;
pub use hyper::{Calibration, HyperParams, Tau};
pub use io::{output_bytes, read_f32_tensors, InputTensor, NamedTensor, ReplayInput, ReplayOutput};
pub use run::{replay, telemetry_line};
