//! Every recorded golden case, replayed through `homeadam replay`'s library (the core's fast
//! path; the fast path equals the scalar reference bit for bit, see the core's property tests).

use homeadam_host::replay::replay;
use homeadam_tests::all_cases;

#[test]
fn every_golden_case_reproduces_its_peer() {
    let cases = all_cases().unwrap();
    assert!(cases.len() >= 40, "only {} golden cases found", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let output = replay(&case.config, &case.input, |_| {}).unwrap();
        match case.check(&output) {
            Ok(worst) => println!(
                "{:<34} rel error {worst:.2e} (tolerance {:.0e})",
                case.name, case.rel
            ),
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
