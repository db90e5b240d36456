//! `stability.csv`: the algorithmic-stability experiment's record of one optimizer.
//!
//! The experiment trains two copies of a model from the same initialisation and with the same
//! mini-batch order: one on the training set S, one on S^(i), S with one example replaced (the
//! paper's setting, Definition "Stability"). After every epoch it writes one row to
//! `RUN_DIR/<optimizer>/stability.csv` with the header
//! `epoch,param_distance,train_loss_gap,test_loss_gap,generalization_gap`.
//! One file per optimizer (not one file with an optimizer column) so that each optimizer's run
//! writes, resumes and truncates its own file exactly as `metrics.csv`; the figure
//! (`figures/stability.png`, [`crate::report::figures`]) gathers them, one line per optimizer.

use std::path::Path;

use anyhow::Result;

use super::csv::{parse_float, parse_int, read_rows, CsvRow, CsvWriter, Field};

/// One epoch of the stability experiment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StabilityRecord {
    /// The epoch number (as in `metrics.csv`). Strictly increasing.
    pub epoch: u32,
    /// ‖θ_t(S) − θ_t(S^(i))‖₂ over every parameter of the model, after the epoch.
    pub param_distance: f64,
    /// |F_S(θ_t(S)) − F_S(θ_t(S^(i)))|: how far apart the two models' losses on S are.
    pub train_loss_gap: f64,
    /// |F_test(θ_t(S)) − F_test(θ_t(S^(i)))|: the same on the test set — the quantity uniform
    /// stability bounds.
    pub test_loss_gap: f64,
    /// F_test(θ_t(S)) − F_S(θ_t(S)): the empirical generalization error of the model trained on
    /// S (signed).
    pub generalization_gap: f64,
}

impl CsvRow for StabilityRecord {
    type Kind = ();
    const KEY: &'static str = "epoch";

    fn header((): ()) -> String {
        "epoch,param_distance,train_loss_gap,test_loss_gap,generalization_gap".to_string()
    }

    fn kind_of_header(header: &str) -> Option<()> {
        (header == Self::header(())).then_some(())
    }

    fn key(&self) -> u64 {
        u64::from(self.epoch)
    }

    fn fields(&self, (): ()) -> Vec<Field> {
        vec![
            Field::Int(self.key()),
            Field::Float(self.param_distance),
            Field::Float(self.train_loss_gap),
            Field::Float(self.test_loss_gap),
            Field::Float(self.generalization_gap),
        ]
    }

    fn parse(f: &[&str], (): ()) -> Result<Self, String> {
        let epoch = parse_int("epoch", f[0])?;
        Ok(StabilityRecord {
            epoch: u32::try_from(epoch).map_err(|_| format!("epoch {epoch} is too large"))?,
            param_distance: parse_float("param_distance", f[1])?,
            train_loss_gap: parse_float("train_loss_gap", f[2])?,
            test_loss_gap: parse_float("test_loss_gap", f[3])?,
            generalization_gap: parse_float("generalization_gap", f[4])?,
        })
    }

    fn validate(&self, (): ()) -> Result<(), String> {
        if self.param_distance < 0.0 {
            return Err(format!(
                "`param_distance` is {}, a norm cannot be negative",
                self.param_distance
            ));
        }
        Ok(())
    }
}

/// Writes `stability.csv`: `StabilityWriter::create(path, ())`,
/// `StabilityWriter::resume(path, (), last_epoch)`, then `append` per epoch.
pub type StabilityWriter = CsvWriter<StabilityRecord>;

/// Reads a `stability.csv`. Errors name the line.
pub fn read_stability(path: &Path) -> Result<Vec<StabilityRecord>> {
    read_rows(path).map(|((), rows)| rows)
}
