//! The `homeadam` command's library: the experiment runner (datasets, models, training,
//! figures and checkpoints), the paper's presets, the hyper-parameter sweep and the `homeadam
//! replay` command. The optimizer it trains with is the `homeadam-candle` crate's
//! `VarOptimizer`.
#![deny(missing_docs)]

pub mod cuda_libraries;
pub mod data;
pub mod device;
pub mod models;
pub mod preset;
pub mod progress;
pub mod replay;
pub mod report;
pub mod rng;
pub mod send_samples;
pub mod sweep;
pub mod train;
