//! The experiment runner: training loops, checkpoints and the experiments of the paper.

pub mod checkpoint;
