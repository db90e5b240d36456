//! What a run leaves behind: metric CSVs, paper-style figures and the summary table.
//!
//! A run directory holds one folder per optimizer:
//!
//! ```text
//! RUN_DIR/
//!   <optimizer>/metrics.csv     one row per finished epoch      (metrics::MetricsWriter)
//!   <optimizer>/iterations.csv  one row every N steps           (metrics::IterationWriter)
//!   <optimizer>/stability.csv   the stability experiment        (stability::StabilityWriter)
//!   figures/*.png               figures::draw_figures(RUN_DIR)
//! ```
//!
//! A run of several seeds (`--seeds N`) puts each seed's `metrics.csv` and `iterations.csv` in
//! `<optimizer>/seed-<s>/`; figures and table then show the mean over the seeds and its spread.
//!
//! Writers append one row per call straight to the file, so a killed run keeps its finished
//! epochs; `resume` cuts the rows after the resumed epoch so a resumed run has no duplicates.
//! [`run::load_run`] reads a run directory back, [`figures::draw_figures`] draws it and
//! [`table::SummaryTable`] summarises it.

pub(crate) mod canvas;
pub mod csv;
pub mod figures;
pub(crate) mod legend;
pub mod metrics;
pub mod run;
pub mod stability;
pub(crate) mod style;
pub mod table;

pub use figures::{draw_figures, draw_run_figures};
pub use metrics::{
    read_iterations, read_metrics, EpochRecord, IterationColumns, IterationRecord, IterationWriter,
    MetricsColumns, MetricsWriter, Task,
};
pub use run::{load_run, optimizer_file, OptimizerRun, Run, SeedRun};
pub use stability::{read_stability, StabilityRecord, StabilityWriter};
pub use table::SummaryTable;

#[cfg(test)]
mod tests;
