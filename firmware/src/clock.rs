//! An instruction clock for the `cost` program, under QEMU `-icount shift=0` (one instruction
//! per virtual nanosecond). Arm: SysTick on the core clock (QEMU does not model DWT's cycle
//! counter), a 24-bit down-counter; RISC-V: the `minstret` counter.

/// Bits of [`ticks`] that count before it wraps.
#[cfg(target_arch = "arm")]
const MASK: u32 = 0x00FF_FFFF;
/// Bits of [`ticks`] that count before it wraps.
#[cfg(target_arch = "riscv32")]
const MASK: u32 = u32::MAX;

/// Starts the counter (Arm: SysTick free-running from its largest reload).
pub fn start() {
    #[cfg(target_arch = "arm")]
    {
        use cortex_m::peripheral::syst::SystClkSource;
        let Some(mut core) = cortex_m::Peripherals::take() else {
            crate::exit(false)
        };
        core.SYST.set_clock_source(SystClkSource::Core);
        core.SYST.set_reload(MASK);
        core.SYST.clear_current();
        core.SYST.enable_counter();
    }
}

/// The counter now, counting up modulo `MASK + 1`.
pub fn ticks() -> u32 {
    #[cfg(target_arch = "arm")]
    {
        MASK - cortex_m::peripheral::SYST::get_current()
    }
    #[cfg(target_arch = "riscv32")]
    {
        riscv::register::minstret::read() as u32
    }
}

/// Ticks from `start` to now, for an interval shorter than the wrap (on Arm 2^24 ticks: about
/// 100 million instructions at netduinoplus2's 168 MHz, the fastest clock here).
pub fn since(start: u32) -> u32 {
    ticks().wrapping_sub(start) & MASK
}

/// Ticks per instruction: times a two-instruction countdown loop run one million times.
pub fn ticks_per_instruction() -> f32 {
    let start = ticks();
    // SAFETY: a register-only countdown loop.
    unsafe {
        #[cfg(target_arch = "arm")]
        core::arch::asm!("1:", "subs {0}, #1", "bne 1b", inout(reg) 1_000_000u32 => _);
        #[cfg(target_arch = "riscv32")]
        core::arch::asm!("1:", "addi {0}, {0}, -1", "bnez {0}, 1b", inout(reg) 1_000_000u32 => _);
    }
    since(start) as f32 / 2e6
}
