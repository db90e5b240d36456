//! The libFuzzer binary of the target `homeadam_fuzz_targets::step`, documented there.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| homeadam_fuzz_targets::step(data));
