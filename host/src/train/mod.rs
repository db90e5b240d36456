//! The experiment runner: training loops, checkpoints and the experiments of the paper.

pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod experiments;
pub mod grad_norm;
pub mod prefetch;
pub mod run;
pub mod runner;
pub mod scores;
pub mod stability;
mod staging;
