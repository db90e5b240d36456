//! Instructions per parameter per step, under QEMU `-icount shift=0` (one instruction per
//! virtual nanosecond): SysTick counts the virtual clock, calibrated against a loop of a known
//! instruction count. DWT is not modelled by QEMU.
#![no_std]
#![no_main]

use cortex_m::peripheral::{syst::SystClkSource, SYST};
use cortex_m_rt::entry;
use homeadam_core::{bf16, Config, FiniteCheck, Storage};
use homeadam_firmware::exit;
use homeadam_mcu::Trainer;

/// Parameters of the measured model (big enough to amortise the per-step overhead).
const N: usize = 4096;
/// Steps measured per rule.
const STEPS: u64 = 4;

/// Ticks elapsed since `start` (a measured interval stays far below the 2^24-tick wrap: about
/// 100 million instructions).
fn since(start: u32) -> u32 {
    start.wrapping_sub(SYST::get_current()) & 0x00FF_FFFF
}

/// SysTick ticks per instruction: a `subs`/`bne` loop of 2 × 1e6 instructions.
fn ticks_per_instruction() -> f32 {
    let start = SYST::get_current();
    // SAFETY: a register-only countdown loop.
    unsafe {
        core::arch::asm!("1:", "subs {0}, #1", "bne 1b", inout(reg) 1_000_000u32 => _);
    }
    since(start) as f32 / 2e6
}

/// Measures the config named `name` (its defaults) with state `S`.
fn measure<S: Storage>(name: &str, finite_check: FiniteCheck, scale: f32) {
    let Some(mut config) = Config::named(name) else {
        exit(false)
    };
    config.finite_check = finite_check;
    let mut trainer = Trainer::<S, N, { 2 * N }>::new(config, [0.5; N]).unwrap_or_else(|_| exit(false));
    let grad: [f32; N] = core::array::from_fn(|j| (j % 17) as f32 * 1e-3 - 8e-3);
    let start = SYST::get_current();
    for _ in 0..STEPS {
        trainer.step(&grad, 1.0).unwrap_or_else(|_| exit(false));
    }
    let per = since(start) as f32 / scale / (STEPS as f32 * N as f32);
    defmt::println!(
        "{} state {} ({}): {} instructions per parameter per step",
        name,
        S::DTYPE.name(),
        finite_check,
        per
    );
}

#[entry]
fn main() -> ! {
    let mut core = cortex_m::Peripherals::take().unwrap_or_else(|| exit(false));
    core.SYST.set_clock_source(SystClkSource::Core);
    core.SYST.set_reload(0x00FF_FFFF);
    core.SYST.clear_current();
    core.SYST.enable_counter();
    let scale = ticks_per_instruction();
    defmt::println!("calibration: {} SysTick ticks per instruction", scale);
    measure::<f32>("homeadamw-ew", FiniteCheck::SkipStep, scale);
    measure::<f32>("homeadamw-ew", FiniteCheck::Trust, scale);
    measure::<bf16>("homeadamw-ew", FiniteCheck::SkipStep, scale);
    measure::<f32>("homeadamw", FiniteCheck::SkipStep, scale);
    measure::<f32>("adamw", FiniteCheck::SkipStep, scale);
    measure::<f32>("adamw", FiniteCheck::Trust, scale);
    measure::<bf16>("adamw", FiniteCheck::SkipStep, scale);
    measure::<f32>("sgdm", FiniteCheck::SkipStep, scale);
    exit(true)
}
