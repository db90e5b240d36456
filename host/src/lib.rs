//! The `homeadam` command's library: golden-vector replay (and, later, the experiment runner).
#![deny(missing_docs)]

pub mod replay;
pub mod replay_config;
