//! The pieces the firmware binaries share: the board's RAM budget, the embedded digits data, the
//! classifier and its fine-tuning, the instruction clock, the STM32F405's USART2 receiver and
//! flash driver, the entry point, the exit path and the panic handler.
//!
//! Logging is defmt: under QEMU over semihosting (`defmt-semihosting`, on Arm and RISC-V alike;
//! QEMU writes the frames to its stdout), on the real board over RTT (`defmt-rtt`, read by the
//! debug probe).
#![no_std]
#![deny(missing_docs)]

pub mod board;
pub mod clock;
pub mod data;
pub mod finetune;
#[cfg(feature = "stm32f405")]
pub mod flash;
pub mod model;
#[cfg(feature = "usart2")]
pub mod usart;

#[cfg(feature = "qemu")]
use defmt_semihosting as _;

#[cfg(feature = "stm32f405")]
use defmt_rtt as _;

// The chip's interrupt vectors, which every binary links (not only the UART app).
#[cfg(feature = "usart2")]
use stm32f4 as _;

/// The reset handler's entry attribute of the target's runtime crate.
#[cfg(target_arch = "arm")]
pub use cortex_m_rt::entry;
/// The reset handler's entry attribute of the target's runtime crate.
#[cfg(target_arch = "riscv32")]
pub use riscv_rt::entry;

/// Ends the QEMU run (or a semihosting debug session) with the status of `ok`.
#[cfg(feature = "qemu")]
pub fn exit(ok: bool) -> ! {
    semihosting::process::exit(if ok { 0 } else { 1 })
}

/// Ends the program on the real board: success sleeps, failure faults (`udf`), which the
/// debug probe reports with a backtrace. No semihosting: without a debugger attached, a
/// semihosting call would halt the core.
#[cfg(feature = "stm32f405")]
pub fn exit(ok: bool) -> ! {
    if !ok {
        cortex_m::asm::udf()
    }
    loop {
        cortex_m::asm::wfi();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    match info.location() {
        Some(l) => defmt::error!("panic at {}:{}", l.file(), l.line()),
        None => defmt::error!("panic"),
    }
    exit(false)
}

const PAINT: u32 = 0x5AFE_C0DE;

extern "C" {
    static mut __sheap: u32;
    static _stack_start: u32;
}

/// The top of the stack (the end of RAM), from the runtime's linker script.
fn stack_top() -> usize {
    core::ptr::addr_of!(_stack_start) as usize
}

/// The stack pointer (the address of a local would do only where the caller's frame holds
/// nothing below it, which inlining does not promise).
#[inline(always)]
fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads a register.
    unsafe {
        #[cfg(target_arch = "arm")]
        core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags));
        #[cfg(target_arch = "riscv32")]
        core::arch::asm!("mv {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags));
    }
    sp
}

#[inline(never)]
fn free_ram() -> (*mut u32, usize) {
    let start = core::ptr::addr_of_mut!(__sheap);
    // Leaves 256 bytes below the stack pointer for this function's callers' callees.
    let end = stack_pointer() - 256;
    (start, end.saturating_sub(start as usize) / 4)
}

/// Fills the RAM between the end of the statics and (just below) the stack pointer with a
/// pattern, for [`stack_peak`].
pub fn paint_stack() {
    let (start, words) = free_ram();
    for k in 0..words {
        // SAFETY: unused RAM between the statics and the live stack, written word by word.
        unsafe { start.add(k).write_volatile(PAINT) };
    }
}

/// Bytes of stack used so far (the deepest overwritten word since [`paint_stack`]), and bytes
/// never reached (0: the stack may have run into the statics).
pub fn stack_peak() -> (usize, usize) {
    let (start, words) = free_ram();
    // SAFETY: reads of the same unused RAM.
    let untouched = 4
        * (0..words)
            .take_while(|&k| unsafe { start.add(k).read_volatile() } == PAINT)
            .count();
    (stack_top() - (start as usize + untouched), untouched)
}

/// Bytes of RAM of the board (statics, then the stack).
pub fn ram_bytes() -> usize {
    extern "C" {
        static __sdata: u32;
    }
    stack_top() - core::ptr::addr_of!(__sdata) as usize
}
