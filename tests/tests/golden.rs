//! Every recorded golden case, replayed through `homeadam replay`'s library (the core's fast
//! path; the fast path equals the scalar reference bit for bit, see the core's property tests).

use std::collections::BTreeMap;

use homeadam_core::{Dtype, Rounding};
use homeadam_replay::{replay, ReplayConfig};
use homeadam_tests::{all_cases, Agreement, GoldenCase};

/// `peer / storage`, the rows of the summary: e.g. `torch / f32`, `numpy / bf16 param`.
fn kind(case: &GoldenCase) -> String {
    let peer = case.peer.split([' ', '.', '_']).next().unwrap_or_default();
    let c = &case.config;
    let storage = match (c.param_dtype, c.state_dtype, c.optimizer.rounding) {
        (Dtype::F32, Dtype::F32, _) => "f32".to_string(),
        (p, _, Rounding::Stochastic) => format!("{} param, stochastic", p.name()),
        (p, Dtype::F32, _) => format!("{} param", p.name()),
        (Dtype::F32, s, _) => format!("{} state", s.name()),
        (p, s, _) => format!("{} param, {} state", p.name(), s.name()),
    };
    format!("{peer} / {storage}")
}

#[test]
fn every_golden_case_reproduces_its_peer() {
    let cases = all_cases().unwrap();
    assert_eq!(cases.len(), 64, "golden cases found");
    let mut failures = Vec::new();
    let mut worst: BTreeMap<String, Agreement> = BTreeMap::new();
    for case in &cases {
        let output = replay(&case.config, &case.input, |_| {}).unwrap();
        match case.check(&output) {
            Ok(a) => {
                println!(
                    "{:<30} {:.3} of the tolerance, max element rel error {:.2e} (rel {})",
                    case.name, a.used, a.max_rel, case.tolerance.rel
                );
                let w = worst.entry(kind(case)).or_insert(a);
                w.used = w.used.max(a.used);
                w.max_rel = w.max_rel.max(a.max_rel);
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    for (kind, a) in &worst {
        println!(
            "worst of {kind:<34} {:.3} of the tolerance, max element rel error {:.2e}",
            a.used, a.max_rel
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The tolerances discriminate: replaying a low-precision case without its storage rounding
/// (all f32; for stochastic rounding, round to nearest) misses by more than 1.5 × the tolerance.
#[test]
fn ignoring_the_storage_rounding_fails_every_low_precision_case() {
    let mut checked = 0;
    for case in all_cases().unwrap() {
        let c = &case.config;
        let plain = if c.optimizer.rounding == Rounding::Stochastic {
            let mut optimizer = c.optimizer;
            optimizer.rounding = Rounding::Nearest;
            ReplayConfig { optimizer, ..*c }
        } else if [c.param_dtype, c.grad_dtype, c.state_dtype] != [Dtype::F32; 3] {
            ReplayConfig {
                param_dtype: Dtype::F32,
                grad_dtype: Dtype::F32,
                state_dtype: Dtype::F32,
                ..*c
            }
        } else {
            continue;
        };
        let output = replay(&plain, &case.input, |_| {}).unwrap();
        let used = case
            .expected
            .iter()
            .map(|(name, _, e)| {
                let a = &output.tensors.iter().find(|t| &t.0 == name).unwrap().2;
                case.tolerance.used(a, e)
            })
            .fold(0.0, f64::max);
        println!(
            "{:<30} without its rounding: {used:.1} × the tolerance",
            case.name
        );
        assert!(used > 1.5, "{}: {used}", case.name);
        checked += 1;
    }
    assert_eq!(checked, 31, "low-precision cases");
}
