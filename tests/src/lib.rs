//! Golden vectors: inputs and outputs recorded from real peers by `golden/generate.py`
//! (PyTorch, adabelief-pytorch, pytorch-optimizer, and float64 NumPy for the paper's rules and
//! MIAdam). Every backend replays them; [`GoldenCase::check`] applies the recorded tolerance.
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use homeadam_host::replay::{read_f32_tensors, ReplayInput, ReplayOutput};
use homeadam_host::replay_config::ReplayConfig;
use serde::Deserialize;

/// The folder holding one sub-folder per case.
pub fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cases")
}

/// Every recorded case, sorted by name.
pub fn all_cases() -> Result<Vec<GoldenCase>> {
    let mut dirs: Vec<_> = std::fs::read_dir(cases_dir())?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    dirs.sort();
    dirs.iter().map(|d| GoldenCase::load(d)).collect()
}

/// The recorded telemetry of one step.
#[derive(Clone, Debug, Deserialize)]
pub struct Telemetry {
    /// t.
    pub step: u64,
    /// ρ_t, or null.
    pub rho: Option<f64>,
    /// Elements that took the home branch.
    pub home_elements: u64,
    /// Whether the step was skipped.
    pub skipped: bool,
}

#[derive(Debug, Deserialize)]
struct Tolerance {
    rel: f64,
}

#[derive(Debug, Deserialize)]
struct Expected {
    peer: String,
    tolerance: Tolerance,
    telemetry: Vec<Telemetry>,
}

/// One recorded case: config, input, expected tensors and telemetry.
pub struct GoldenCase {
    /// The folder name.
    pub name: String,
    /// Where the case lives.
    pub dir: PathBuf,
    /// The replay config.
    pub config: ReplayConfig,
    /// The replay input.
    pub input: ReplayInput,
    /// Expected `(name, values)`.
    pub expected: Vec<(String, Vec<f32>)>,
    /// Expected telemetry per step.
    pub telemetry: Vec<Telemetry>,
    /// Who produced the expected values.
    pub peer: String,
    /// Per tensor: max |actual − expected| ≤ rel · max(max |expected|, 1e-30).
    pub rel: f64,
}

impl GoldenCase {
    /// Reads a case folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let config = ReplayConfig::parse(&std::fs::read_to_string(dir.join("config.json"))?)
            .with_context(|| format!("{name}: config"))?;
        let input = ReplayInput::parse(&std::fs::read(dir.join("input.safetensors"))?)?;
        let bytes = std::fs::read(dir.join("expected.safetensors"))?;
        let st = read_f32_tensors(&bytes)?
            .into_iter()
            .map(|(n, _, v)| (n, v))
            .collect();
        let meta: Expected = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json"))?)?;
        Ok(GoldenCase {
            name,
            dir: dir.to_path_buf(),
            config,
            input,
            expected: st,
            telemetry: meta.telemetry,
            peer: meta.peer,
            rel: meta.tolerance.rel,
        })
    }

    /// Compares a replay's output with the recorded one; the error lists every mismatch. On
    /// success, returns the worst tensor's max |actual − expected| / max |expected|.
    pub fn check(&self, output: &ReplayOutput) -> Result<f64> {
        let mut problems = Vec::new();
        let mut worst = 0.0f64;
        for (name, expected) in &self.expected {
            let Some((_, _, actual)) = output.tensors.iter().find(|t| &t.0 == name) else {
                problems.push(format!("missing output tensor {name}"));
                continue;
            };
            let scale = expected
                .iter()
                .fold(0.0f64, |m, &x| m.max((x as f64).abs()))
                .max(1e-30);
            let err = actual
                .iter()
                .zip(expected)
                .fold(0.0f64, |m, (&a, &e)| m.max(((a as f64) - (e as f64)).abs()));
            let nan = actual.iter().zip(expected).any(|(a, e)| a.is_nan() != e.is_nan());
            worst = worst.max(err / scale);
            if actual.len() != expected.len() || nan || err > self.rel * scale {
                problems.push(format!(
                    "{name}: max error {:.3e} of scale {scale:.3e} (rel {:.1e})",
                    err, self.rel
                ));
            }
        }
        if output.reports.len() != self.telemetry.len() {
            problems.push(format!(
                "{} steps replayed, {} recorded",
                output.reports.len(),
                self.telemetry.len()
            ));
        }
        for (r, t) in output.reports.iter().zip(&self.telemetry) {
            let rho_ok = match (r.rho, t.rho) {
                (None, None) => true,
                (Some(a), Some(e)) => ((a as f64) - e).abs() <= self.rel * e.abs().max(1e-30),
                _ => false,
            };
            if r.skipped != t.skipped
                || r.home_elements != t.home_elements
                || !rho_ok
                || (!r.skipped && r.step != t.step)
            {
                problems.push(format!("telemetry differs: got {r:?}, recorded {t:?}"));
            }
        }
        if !problems.is_empty() {
            bail!(
                "{} (peer: {}):\n  {}",
                self.name,
                self.peer,
                problems.join("\n  ")
            );
        }
        Ok(worst)
    }
}
