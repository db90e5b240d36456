//! `stability.csv`: the algorithmic-stability experiment's record of one optimizer.
//!
//! The experiment trains two copies of a model from the same initialisation and with the same
//! mini-batch order: one on the training set S, one on S^(i), S with one example replaced (the
//! paper's setting, Definition "Stability"). After every epoch it writes one row to
//! `RUN_DIR/<optimizer>/stability.csv` with the header
//! `epoch,param_distance,train_loss_gap,test_loss_gap,generalization_gap,travelled,train_loss`
//! (files written before the last two columns existed still read, with those values `None`).
//! One file per optimizer (not one file with an optimizer column) so that each optimizer's run
//! writes, resumes and truncates its own file exactly as `metrics.csv`; the figure
//! (`figures/stability.png`, [`crate::report::figures`]) gathers them, one line per optimizer.

use std::path::Path;

use anyhow::Result;

use super::csv::{parse_float, parse_int, parse_optional_at, read_rows, CsvRow, CsvWriter, Field};

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
    /// ‖θ_t(S) − θ_0‖₂: how far the model trained on S has moved from the initialisation, the
    /// scale that `param_distance` is relative to (optimizers whose steps differ 10× drift
    /// apart 10× more for the same sensitivity).
    pub travelled: Option<f64>,
    /// F_S(θ_t(S)): the training loss of the model trained on S, to compare optimizers at a
    /// matched training loss.
    pub train_loss: Option<f64>,
}

impl StabilityRecord {
    /// ‖θ_t(S) − θ_t(S⁽ⁱ⁾)‖ / ‖θ_t(S) − θ_0‖.
    pub fn relative_distance(&self) -> Option<f64> {
        self.travelled.map(|t| self.param_distance / t)
    }
}

/// The columns of a `stability.csv`: with `travelled,train_loss` (`true`) or the first layout.
pub type StabilityColumns = bool;

const BASE_HEADER: &str = "epoch,param_distance,train_loss_gap,test_loss_gap,generalization_gap";

impl CsvRow for StabilityRecord {
    type Kind = StabilityColumns;
    const KEY: &'static str = "epoch";

    fn header(extended: bool) -> String {
        match extended {
            true => format!("{BASE_HEADER},travelled,train_loss"),
            false => BASE_HEADER.to_string(),
        }
    }

    fn kind_of_header(header: &str) -> Option<bool> {
        [true, false].into_iter().find(|&k| header == Self::header(k))
    }

    fn key(&self) -> u64 {
        u64::from(self.epoch)
    }

    fn fields(&self, extended: bool) -> Vec<Field> {
        let mut fields = vec![
            Field::Int(self.key()),
            Field::Float(self.param_distance),
            Field::Float(self.train_loss_gap),
            Field::Float(self.test_loss_gap),
            Field::Float(self.generalization_gap),
        ];
        if extended {
            fields.extend([Field::Optional(self.travelled), Field::Optional(self.train_loss)]);
        }
        fields
    }

    fn parse(f: &[&str], _: bool) -> Result<Self, String> {
        let epoch = parse_int("epoch", f[0])?;
        Ok(StabilityRecord {
            epoch: u32::try_from(epoch).map_err(|_| format!("epoch {epoch} is too large"))?,
            param_distance: parse_float("param_distance", f[1])?,
            train_loss_gap: parse_float("train_loss_gap", f[2])?,
            test_loss_gap: parse_float("test_loss_gap", f[3])?,
            generalization_gap: parse_float("generalization_gap", f[4])?,
            travelled: parse_optional_at(f, 5, "travelled")?,
            train_loss: parse_optional_at(f, 6, "train_loss")?,
        })
    }

    fn validate(&self, _: bool) -> Result<(), String> {
        if self.param_distance < 0.0 {
            return Err(format!(
                "`param_distance` is {}, a norm cannot be negative",
                self.param_distance
            ));
        }
        Ok(())
    }
}

/// Writes `stability.csv`: `StabilityWriter::create(path, true)`, then `append` per epoch.
pub type StabilityWriter = CsvWriter<StabilityRecord>;

/// Reads a `stability.csv`. Errors name the line.
pub fn read_stability(path: &Path) -> Result<Vec<StabilityRecord>> {
    read_rows(path).map(|(_, rows)| rows)
}
