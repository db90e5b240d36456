//! The committed golden file is what the host core's reference gives today, and the fast path
//! reproduces it on the host too (the firmware checks it on the device).

use homeadam_core::{Config, SliceSink};
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
        assert_eq!(named, case.config);
    }
}
