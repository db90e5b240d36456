//! What the application code needs to know of the board: its RAM budget. The memory layout
//! itself is `memory/<board>.x` (chosen by build.rs from the board feature).

/// The optimizer state's storage type: q8 blocks with `q8-state` (on any board), else bf16 on
/// 16 KiB boards (half of f32) and f32 elsewhere.
#[cfg(feature = "q8-state")]
pub type State = homeadam_core::Q8Block;
/// The optimizer state's storage type: q8 blocks with `q8-state` (on any board), else bf16 on
/// 16 KiB boards (half of f32) and f32 elsewhere.
#[cfg(all(feature = "small-ram", not(feature = "q8-state")))]
pub type State = homeadam_core::bf16;
/// The optimizer state's storage type: q8 blocks with `q8-state` (on any board), else bf16 on
/// 16 KiB boards (half of f32) and f32 elsewhere.
#[cfg(not(any(feature = "small-ram", feature = "q8-state")))]
pub type State = f32;

/// [`State`] items holding one state slot of `numel` parameters, as a constant for array
/// capacities: `State::slot_len(numel)` ([`homeadam_core::StateStorage::slot_len`]).
pub const fn slot_items(numel: usize) -> usize {
    if cfg!(feature = "q8-state") {
        numel.div_ceil(homeadam_core::q8::BLOCK)
    } else {
        numel
    }
}

/// Whether the fine-tuning app also runs the power-cut resume check: it holds two trainers and
/// a 16 KiB flash image in RAM at once, which only the larger boards have room for.
pub const RESUME_CHECK: bool = !cfg!(feature = "small-ram");

/// Parameters of the model the `cost` program measures: big enough to amortise the per-step
/// overhead, small enough that the trainer (θ, f32 state) and its gradient fit the RAM.
pub const COST_PARAMS: usize = if cfg!(feature = "small-ram") { 512 } else { 4096 };

/// The board's name, for the logs.
pub const NAME: &str = if cfg!(feature = "netduinoplus2") {
    "netduinoplus2 (STM32F405, Cortex-M4F)"
} else if cfg!(feature = "mps2-an500") {
    "mps2-an500 (Cortex-M7, double-precision FPU)"
} else if cfg!(feature = "mps2-an505") {
    "mps2-an505 (Cortex-M33)"
} else if cfg!(feature = "microbit") {
    "microbit (nRF51822, Cortex-M0, soft float)"
} else if cfg!(feature = "stm32f405") {
    "STM32F405 board (Cortex-M4F)"
} else {
    "sifive_e (RV32IMAC, soft float)"
};
