//! Instructions per parameter per step, under QEMU `-icount shift=0` (one instruction per
//! virtual nanosecond), counted by the board's instruction clock ([`homeadam_firmware::clock`])
//! and calibrated against a loop of a known instruction count.
#![no_std]
#![no_main]

use homeadam_core::q8::BLOCK;
use homeadam_core::rules::only::{self, RuleSet};
use homeadam_core::{bf16, Config, FiniteCheck, Q8Block, StateStorage};
use homeadam_firmware::board::{COST_PARAMS as N, NAME};
use homeadam_firmware::{clock, entry, exit};
use homeadam_mcu::Trainer;

/// Steps measured per rule.
const STEPS: u64 = 4;

/// State capacity of two slots: elements (`f32`, `bf16`) and q8 blocks.
const ELEMENTS: usize = 2 * N;
const BLOCKS: usize = 2 * N.div_ceil(BLOCK);

/// Measures the config named `name` (its defaults) with state `S` (`CAP` items), built for its
/// rule set `F` as a single-rule firmware is; each step is timed alone so that no interval
/// reaches the clock's wrap. The first step is not timed: the global rule takes its exact first
/// pass there (it has no bound on ρ yet), as it does once after every load, not at every step
/// of a run.
fn measure<S: StateStorage, const CAP: usize, F: RuleSet>(name: &str, finite_check: FiniteCheck, scale: f32) {
    let Some(mut config) = Config::named(name) else {
        exit(false)
    };
    config.finite_check = finite_check;
    let mut trainer = Trainer::<S, N, CAP, F>::new(config, [0.5; N]).unwrap_or_else(|_| exit(false));
    let grad: [f32; N] = core::array::from_fn(|j| (j % 17) as f32 * 1e-3 - 8e-3);
    let mut ticks = 0u64;
    // One call site: a second inlined step would grow this frame past a 16 KiB board's stack.
    for k in 0..=STEPS {
        let start = clock::ticks();
        trainer.step(&grad, 1.0).unwrap_or_else(|_| exit(false));
        if k > 0 {
            ticks += u64::from(clock::since(start));
        }
    }
    let per = ticks as f32 / scale / (STEPS as f32 * N as f32);
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
    clock::start();
    let scale = clock::ticks_per_instruction();
    defmt::println!(
        "{}: {} parameters; {} clock ticks per instruction",
        NAME,
        N,
        scale
    );
    measure::<f32, ELEMENTS, only::HomeAdamWElement>("homeadamw-ew", FiniteCheck::SkipStep, scale);
    measure::<f32, ELEMENTS, only::HomeAdamWElement>("homeadamw-ew", FiniteCheck::Trust, scale);
    measure::<bf16, ELEMENTS, only::HomeAdamWElement>("homeadamw-ew", FiniteCheck::SkipStep, scale);
    measure::<Q8Block, BLOCKS, only::HomeAdamWElement>("homeadamw-ew", FiniteCheck::SkipStep, scale);
    measure::<f32, ELEMENTS, only::HomeAdamW>("homeadamw", FiniteCheck::SkipStep, scale);
    measure::<f32, ELEMENTS, only::AdamW>("adamw", FiniteCheck::SkipStep, scale);
    measure::<f32, ELEMENTS, only::AdamW>("adamw", FiniteCheck::Trust, scale);
    measure::<bf16, ELEMENTS, only::AdamW>("adamw", FiniteCheck::SkipStep, scale);
    measure::<Q8Block, BLOCKS, only::AdamW>("adamw", FiniteCheck::SkipStep, scale);
    measure::<f32, ELEMENTS, only::Sgd>("sgdm", FiniteCheck::SkipStep, scale);
    measure::<f32, ELEMENTS, only::Lion>("lion", FiniteCheck::SkipStep, scale);
    measure::<Q8Block, BLOCKS, only::Lion>("lion", FiniteCheck::SkipStep, scale);
    exit(true)
}
