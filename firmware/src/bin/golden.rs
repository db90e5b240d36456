//! On-target test: the device's fast path against the host core's reference, bit for bit, on
//! the golden vectors of `homeadam_mcu::golden`; and the core's square root (the FPU's
//! `vsqrt.f32` on hard-float Arm, libm's `sqrtf` elsewhere) against libm's software `sqrtf`.
//! Prints `N passed, N failed`.
#![no_std]
#![no_main]

use homeadam_core::backend::{mix64, sqrt};
use homeadam_firmware::{board::NAME, data::GOLDEN, entry, exit};
use homeadam_mcu::golden::{check, CASES};

/// Inputs of the square-root check: random bit patterns (denormals, infinities and NaNs
/// included) plus the edge cases.
const SQRT_INPUTS: u32 = 200_000;

/// Inputs where the core's `sqrt` and `libm::sqrtf` differ (NaN matches NaN).
fn sqrt_mismatches() -> u32 {
    let edges = [
        0.0f32,
        -0.0,
        1.0,
        f32::MIN_POSITIVE,
        1e-45,
        f32::MAX,
        f32::INFINITY,
        -1.0,
    ];
    let random = (0..SQRT_INPUTS).map(|k| f32::from_bits(mix64(k as u64) as u32));
    edges
        .into_iter()
        .chain(random)
        .filter(|&x| {
            let (a, b) = (sqrt(x), libm::sqrtf(x));
            a.to_bits() != b.to_bits() && !(a.is_nan() && b.is_nan())
        })
        .count() as u32
}

#[entry]
fn main() -> ! {
    defmt::info!("golden test on {}", NAME);
    let (mut passed, mut failed) = (0u32, 0u32);
    for (k, case) in CASES.iter().enumerate() {
        let name = case.config.name();
        let state = if case.bf16_state { "bf16" } else { "f32" };
        match check(GOLDEN, k) {
            Ok(Some(0)) => {
                passed += 1;
                defmt::info!("case {} {} state {}: ok", k, name, state);
            }
            Ok(Some(wrong)) => {
                failed += 1;
                defmt::error!("case {} {} state {}: {} words differ", k, name, state, wrong);
            }
            Ok(None) => {
                failed += 1;
                defmt::error!("case {}: golden file does not match the case list", k);
            }
            Err(e) => {
                failed += 1;
                defmt::error!("case {} {}: {}", k, name, e);
            }
        }
    }
    match sqrt_mismatches() {
        0 => {
            passed += 1;
            defmt::info!(
                "sqrt: the core's sqrt equals libm sqrtf on {} inputs",
                SQRT_INPUTS + 8
            );
        }
        n => {
            failed += 1;
            defmt::error!("sqrt: {} inputs differ from libm sqrtf", n);
        }
    }
    defmt::println!("{} passed, {} failed", passed, failed);
    exit(failed == 0)
}
