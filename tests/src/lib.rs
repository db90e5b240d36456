//! Golden vectors: inputs and outputs recorded from real peers by `golden/generate.py`
//! (PyTorch, adabelief-pytorch, pytorch-optimizer, and float64 NumPy for the paper's rules and
//! MIAdam). This is the one loader of the cases: every backend replays [`all_cases`] and
//! [`GoldenCase::check`] applies the recorded [`Tolerance`].
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use homeadam_core::StepReport;
use homeadam_replay::{read_f32_tensors, NamedTensor, ReplayConfig, ReplayInput, ReplayOutput};
use serde::Deserialize;

/// The folder holding one sub-folder per case.
pub fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cases")
}

/// Every recorded case, sorted by name.
pub fn all_cases() -> Result<Vec<GoldenCase>> {
    let dir = cases_dir();
    let mut dirs: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    dirs.sort();
    dirs.iter().map(|d| GoldenCase::load(d)).collect()
}

/// The recorded telemetry of one gradient row.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Telemetry {
    /// The step counter after the row: t for a step taken, unchanged (t − 1) for a skipped row.
    pub step: u64,
    /// ρ_t = min v̂_t, or null.
    pub rho: Option<f64>,
    /// ρ_t over the elements with v_t > 0 (recorded by the cases with `rho_over: "active"`).
    #[serde(default)]
    pub rho_active: Option<f64>,
    /// The τ the row compared with (recorded by the cases with a calibrated τ).
    #[serde(default)]
    pub tau: Option<f64>,
    /// Elements that took the home branch.
    pub home_elements: u64,
    /// Whether the row was skipped.
    pub skipped: bool,
}

/// How close a replay must come, element by element: with s = max_j |e_j| over the tensor,
/// |a_j − e_j| ≤ rel · |e_j| + floor · s (see `golden/README.md` for the values and why).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tolerance {
    /// Relative to the element: the storage's rounding, in its ulps.
    pub rel: f64,
    /// Relative to the tensor's largest value: the error of terms of the tensor's scale, which
    /// dominates near zero (θ crossing zero, a moment that cancels).
    pub floor: f64,
}

impl Tolerance {
    /// The fraction of the tolerance the worst element of `actual` uses (≤ 1 passes; a
    /// length or NaN mismatch is infinite).
    pub fn used(&self, actual: &[f32], expected: &[f32]) -> f64 {
        let nan = actual.iter().zip(expected).any(|(a, e)| a.is_nan() != e.is_nan());
        if actual.len() != expected.len() || nan {
            return f64::INFINITY;
        }
        let scale = expected.iter().fold(0.0f64, |m, &e| m.max(f64::from(e).abs()));
        let bound = |e: f64| (self.rel * e.abs() + self.floor * scale).max(f64::MIN_POSITIVE);
        actual
            .iter()
            .zip(expected)
            .filter(|(a, e)| !(a.is_nan() && e.is_nan()))
            .map(|(&a, &e)| (f64::from(a) - f64::from(e)).abs() / bound(f64::from(e)))
            .fold(0.0, f64::max)
    }
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
    /// Expected `(name, shape, values)` of every output tensor.
    pub expected: Vec<NamedTensor>,
    /// Expected telemetry per gradient row.
    pub telemetry: Vec<Telemetry>,
    /// Who produced the expected values.
    pub peer: String,
    /// The element-wise tolerance.
    pub tolerance: Tolerance,
}

/// How closely a replay matched a case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Agreement {
    /// The largest [`Tolerance::used`] over the tensors.
    pub used: f64,
    /// The largest |a − e| / |e| over every element with e ≠ 0.
    pub max_rel: f64,
}

impl GoldenCase {
    /// Reads a case folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let read =
            |file: &str| std::fs::read(dir.join(file)).with_context(|| format!("{name}: cannot read {file}"));
        let config = ReplayConfig::parse(&String::from_utf8_lossy(&read("config.json")?))
            .with_context(|| format!("{name}: config.json"))?;
        let input = ReplayInput::parse(&read("input.safetensors")?)
            .with_context(|| format!("{name}: input.safetensors"))?;
        let expected = read_f32_tensors(&read("expected.safetensors")?)
            .with_context(|| format!("{name}: expected.safetensors"))?;
        let meta: Expected = serde_json::from_slice(&read("expected.json")?)
            .with_context(|| format!("{name}: expected.json"))?;
        Ok(GoldenCase {
            name,
            dir: dir.to_path_buf(),
            config,
            input,
            expected,
            telemetry: meta.telemetry,
            peer: meta.peer,
            tolerance: meta.tolerance,
        })
    }

    /// Compares a replay's output with the recorded one; the error lists every mismatch.
    pub fn check(&self, output: &ReplayOutput) -> Result<Agreement> {
        let mut problems = Vec::new();
        let mut agreement = Agreement {
            used: 0.0,
            max_rel: 0.0,
        };
        for (name, _, expected) in &self.expected {
            let Some((_, _, actual)) = output.tensors.iter().find(|t| &t.0 == name) else {
                problems.push(format!("missing output tensor {name}"));
                continue;
            };
            let used = self.tolerance.used(actual, expected);
            agreement.used = agreement.used.max(used);
            agreement.max_rel = actual
                .iter()
                .zip(expected)
                .filter(|(_, &e)| e != 0.0)
                .map(|(&a, &e)| ((f64::from(a) - f64::from(e)) / f64::from(e)).abs())
                .fold(agreement.max_rel, f64::max);
            if used > 1.0 {
                problems.push(format!("{name}: {used:.2} × the tolerance {:?}", self.tolerance));
            }
        }
        problems.extend(self.telemetry_problems(&output.reports));
        if !problems.is_empty() {
            bail!(
                "{} (peer: {}):\n  {}",
                self.name,
                self.peer,
                problems.join("\n  ")
            );
        }
        Ok(agreement)
    }

    /// Every report that differs from the recorded telemetry (ρ within `tolerance.rel`).
    fn telemetry_problems(&self, reports: &[StepReport]) -> Vec<String> {
        let mut problems = Vec::new();
        if reports.len() != self.telemetry.len() {
            problems.push(format!(
                "{} steps replayed, {} recorded",
                reports.len(),
                self.telemetry.len()
            ));
        }
        let within = |a: Option<f32>, e: Option<f64>| match (a, e) {
            (None, None) => true,
            (Some(a), Some(e)) => (f64::from(a) - e).abs() <= self.tolerance.rel * e.abs(),
            _ => false,
        };
        for (r, t) in reports.iter().zip(&self.telemetry) {
            let rho_active_ok = t.rho_active.is_none() || within(r.rho_active, t.rho_active);
            // A calibrated τ is a power of two: exact.
            let tau_ok = t.tau.is_none() || r.tau.map(f64::from) == t.tau;
            let same = r.step == t.step && r.skipped == t.skipped && r.home_elements == t.home_elements;
            if !(same && within(r.rho, t.rho) && rho_active_ok && tau_ok) {
                problems.push(format!("telemetry differs: got {r:?}, recorded {t:?}"));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_relative_to_the_tensors_scale() {
        let tol = Tolerance {
            rel: 1e-2,
            floor: 1e-3,
        };
        // bound for e = 100: 1 + 0.1; for e = 0: 0.1
        assert!((tol.used(&[101.0, 0.05], &[100.0, 0.0]) - 1.0 / 1.1).abs() < 1e-6);
        assert!((tol.used(&[100.0, 0.2], &[100.0, 0.0]) - 2.0).abs() < 1e-6);
        assert_eq!(tol.used(&[f32::NAN], &[f32::NAN]), 0.0);
        assert_eq!(tol.used(&[f32::NAN], &[1.0]), f64::INFINITY);
        assert_eq!(tol.used(&[1.0], &[1.0, 2.0]), f64::INFINITY);
        assert_eq!(tol.used(&[0.0], &[0.0]), 0.0);
    }
}
