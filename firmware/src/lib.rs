//! The pieces the firmware binaries share: the embedded digits data, the classifier, the exit
//! path and the panic handler.
#![no_std]
#![deny(missing_docs)]

pub mod data;
pub mod model;

use cortex_m_semihosting::debug::{self, EXIT_FAILURE, EXIT_SUCCESS};
use defmt_semihosting as _;

/// Ends the QEMU run (or a semihosting debug session) with the status of `ok`.
pub fn exit(ok: bool) -> ! {
    debug::exit(if ok { EXIT_SUCCESS } else { EXIT_FAILURE });
    loop {
        cortex_m::asm::bkpt();
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
const STACK_TOP: usize = 0x2002_0000;

extern "C" {
    static mut __sheap: u32;
}

fn free_ram() -> (*mut u32, usize) {
    let start = core::ptr::addr_of_mut!(__sheap);
    // Leaves 256 bytes below the current stack pointer for this function's callers' callees.
    let end = cortex_m::register::msp::read() as usize - 256;
    (start, (end - start as usize) / 4)
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

/// Bytes of stack used so far (the deepest overwritten word since [`paint_stack`]).
pub fn stack_peak() -> usize {
    let (start, words) = free_ram();
    // SAFETY: reads of the same unused RAM.
    let untouched = (0..words)
        .take_while(|&k| unsafe { start.add(k).read_volatile() } == PAINT)
        .count();
    STACK_TOP - (start as usize + 4 * untouched)
}
