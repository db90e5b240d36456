//! The `homeadam` command's library: golden-vector replay and the experiment runner.
#![deny(missing_docs)]

pub mod data;
pub mod models;
pub mod optim;
pub mod progress;
pub mod replay;
pub mod replay_config;
pub mod report;
pub mod rng;
pub mod train;
