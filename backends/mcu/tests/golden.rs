//! The committed golden file is what the host core's reference gives today, and the fast path
//! reproduces it on the host too (the firmware checks it on the device).

use homeadam_core::{Config, Rule, SliceSink};
use homeadam_mcu::golden::{self, check, CASES};

const FILE: &[u8] = include_bytes!("../../../firmware/generated/golden.bin");

#[test]
fn committed_golden_file_is_current() {
    let mut buf = vec![0u8; golden::file_len()];
    golden::write(&mut SliceSink::new(&mut buf)).unwrap();
    assert!(
        buf == FILE,
        "regenerate: cargo run -p homeadam-mcu --example golden -- firmware/generated/golden.bin"
    );
}

#[test]
fn fast_path_matches_on_the_host() {
    for k in 0..CASES.len() {
        assert_eq!(check(FILE, k), Ok(Some(0)), "case {k}");
    }
    assert_eq!(check(&FILE[..20], 0), Ok(None));
}

#[test]
fn cases_are_named_configs_with_a_larger_step() {
    for case in &CASES {
        let mut named = Config::named(case.config.name()).unwrap();
        named.lr = 1e-2;
        if case.config.rule == Rule::Lion {
            // Lion's cases set λ, so that its decoupled decay acts.
            named.weight_decay = 0.1;
        }
        if case.dead {
            // The options beyond the paper, each set.
            let c = case.config;
            assert!(c.tau_calibration.is_some() && c.home_lr_scale != 1.0);
            (named.rho_over, named.tau_calibration, named.home_lr_scale) =
                (c.rho_over, c.tau_calibration, c.home_lr_scale);
        }
        assert_eq!(named, case.config);
    }
}

#[test]
fn the_cases_beyond_the_paper_take_both_branches_with_a_calibrated_tau() {
    use homeadam_core::bf16;
    use homeadam_mcu::Trainer;
    for case in CASES.iter().filter(|c| c.dead) {
        let mut trainer =
            Trainer::<bf16, { golden::N }, { 2 * golden::N }>::new(case.config, golden::initial_params())
                .unwrap();
        let (mut home, mut srf, mut taus) = (0, 0, Vec::new());
        for t in 1..=golden::STEPS {
            let r = trainer
                .step(&golden::grad(t, case.nan_step == Some(t), true), 2.0)
                .unwrap();
            if !r.skipped {
                home += r.home_elements;
                srf += golden::N as u64 - r.home_elements;
                taus.push(r.tau.unwrap());
            }
        }
        taus.dedup();
        assert!(home > 0 && srf > 0, "{case:?}: {home} home, {srf} srf");
        assert!(
            taus.len() > 1,
            "{case:?}: τ never recalibrated to another value: {taus:?}"
        );
    }
}
