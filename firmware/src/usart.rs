//! USART2 of the STM32F405 received by interrupt: the handler moves each byte into a lock-free
//! single-producer single-consumer queue (`heapless::spsc`), which the main loop drains between
//! steps through [`Receiver`], an `embedded_io::Read`. The same code on the real board (PA3)
//! and in QEMU `netduinoplus2` (the machine's second `-serial`).
//!
//! # The queue's size
//!
//! The longest stretch in which the main loop reads nothing is a save to flash followed by the
//! held-out evaluation and a step ([`STALL_US`]): the erase of a 128 KiB sector (at most 2 s at
//! 32-bit parallelism, STM32F405 datasheet), the programming of the saved trainer (at most
//! 100 µs per 32-bit word, at most `size_of::<Model>()` bytes), and [`COMPUTE_US`] for the
//! evaluation and the step. At [`BAUD`] with 10 bits a byte (start, 8 data, stop) the line
//! delivers [`STALL_BYTES`] in that time; [`CAPACITY`] is the next power of two.
//!
//! The handler, the vector table it is reached through and the queue are in RAM, so the flash's
//! erase and programming (which stall every fetch from flash) do not stop the receiving; the
//! flash driver waits for the flash from RAM too (`flash.rs`). A byte the queue has no room for
//! is counted ([`Counts::overflows`]), as is a byte the hardware lost or damaged
//! ([`Counts::errors`]: overrun, framing, noise, parity).

use core::convert::Infallible;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use heapless::spsc::{Consumer, Producer, Queue};
use stm32f4::stm32f405 as pac;

use crate::finetune::Model;

/// The line rate (`homeadam send-samples` sets the host's side to it).
pub const BAUD: u32 = 115_200;
/// Bytes a second on the line: 10 bits a byte.
pub const BYTES_PER_S: u32 = BAUD / 10;
/// Longest erase of a 128 KiB sector at 32-bit parallelism (STM32F405 datasheet).
const ERASE_US: u32 = 2_000_000;
/// Longest programming of one 32-bit word (STM32F405 datasheet).
const PROGRAM_WORD_US: u32 = 100;
/// Bound on the held-out evaluation and one step at 48 MHz: five times their instruction count
/// at one instruction a cycle (BENCHMARKS.md, "Firmware: the board's UART receiver").
pub const COMPUTE_US: u32 = 250_000;
/// The longest the main loop leaves the queue alone: a save, the evaluation and a step.
pub const STALL_US: u32 = ERASE_US + PROGRAM_WORD_US * (size_of::<Model>() as u32).div_ceil(4) + COMPUTE_US;
/// Bytes the line delivers in [`STALL_US`].
pub const STALL_BYTES: usize = (STALL_US as u64 * BYTES_PER_S as u64).div_ceil(1_000_000) as usize;
/// The queue's slots (it holds one fewer): [`STALL_BYTES`] rounded up to a power of two.
pub const CAPACITY: usize = STALL_BYTES.next_power_of_two();

/// Words of the vector table: the core's 16 entries, then the chip's interrupts.
const VECTORS: usize = 16 + pac::__INTERRUPTS.len();

/// The vector table's copy in RAM, aligned as VTOR requires (the table's size rounded up to a
/// power of two).
#[repr(C, align(512))]
struct VectorTable([u32; VECTORS]);

static mut RAM_VECTORS: VectorTable = VectorTable([0; VECTORS]);
static mut QUEUE: Queue<u8, CAPACITY> = Queue::new();
static mut PRODUCER: Option<Producer<'static, u8, CAPACITY>> = None;
static STARTED: AtomicBool = AtomicBool::new(false);
static OVERFLOWS: AtomicU32 = AtomicU32::new(0);
static ERRORS: AtomicU32 = AtomicU32::new(0);

/// Bytes lost on the way in, since the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Received while the queue was full.
    pub overflows: u32,
    /// Lost or damaged by the hardware: overrun (the handler came too late), framing, noise,
    /// parity.
    pub errors: u32,
}

impl defmt::Format for Counts {
    fn format(&self, f: defmt::Formatter) {
        defmt::write!(
            f,
            "queue overflows {}, UART errors {}",
            self.overflows,
            self.errors
        )
    }
}

/// The counts so far.
pub fn counts() -> Counts {
    Counts {
        overflows: OVERFLOWS.load(Ordering::Relaxed),
        errors: ERRORS.load(Ordering::Relaxed),
    }
}

/// The queue's reading end, for `homeadam_mcu::FrameReader`.
pub struct Receiver(Consumer<'static, u8, CAPACITY>);

/// Starts receiving on USART2 at [`BAUD`] from a peripheral clock of `pclk1` Hz (8N1, RX by
/// interrupt), then writes one `homeadam_mcu::frame::DELIMITER` on TX: a sender that waits for
/// it loses nothing to the start-up. `None` if it was started before.
pub fn start(usart: pac::USART2, pclk1: u32) -> Option<Receiver> {
    if STARTED.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: the first and only call (STARTED) splits the queue and hands the producer to the
    // handler before its interrupt is unmasked; the handler is its only user afterwards.
    let consumer = unsafe {
        let (producer, consumer) = (*core::ptr::addr_of_mut!(QUEUE)).split();
        *core::ptr::addr_of_mut!(PRODUCER) = Some(producer);
        consumer
    };
    // SAFETY: sets one enable bit of RCC, which nothing else writes concurrently.
    unsafe { (*pac::RCC::ptr()).apb1enr().modify(|_, w| w.usart2en().set_bit()) };
    // USARTDIV in 12.4 fixed point at 16× oversampling: the clock over the rate, rounded.
    let divider = u16::try_from((pclk1 + BAUD / 2) / BAUD).unwrap_or(u16::MAX);
    usart.brr().write(|w| unsafe { w.bits(divider) });
    usart.cr1().write(|w| {
        w.ue().set_bit();
        w.te().set_bit();
        w.re().set_bit();
        w.rxneie().set_bit()
    });
    vectors_to_ram();
    // SAFETY: the handler's state is in place (above).
    unsafe { cortex_m::peripheral::NVIC::unmask(pac::Interrupt::USART2) };
    while usart.sr().read().txe().bit_is_clear() {}
    usart
        .dr()
        .write(|w| w.dr().set(homeadam_mcu::frame::DELIMITER.into()));
    Some(Receiver(consumer))
}

/// Points VTOR at a copy of the vector table in RAM: an interrupt's vector is fetched from the
/// table, and a fetch from the flash waits out an erase.
fn vectors_to_ram() {
    extern "C" {
        static __vector_table: u32;
    }
    // SAFETY: the linker's table has VECTORS words (the core's and the PAC's); RAM_VECTORS is
    // written here only, before VTOR points at it, with interrupts of this module masked.
    unsafe {
        let table = core::ptr::addr_of!(__vector_table);
        let ram = core::ptr::addr_of_mut!(RAM_VECTORS);
        for k in 0..VECTORS {
            (*ram).0[k] = table.add(k).read_volatile();
        }
        (*cortex_m::peripheral::SCB::PTR).vtor.write(ram as u32);
    }
    cortex_m::asm::dsb();
    cortex_m::asm::isb();
}

/// USART2's interrupt, in RAM (`.data`, copied there at reset). Reading SR then DR clears the
/// received flag and the error flags together.
#[no_mangle]
#[link_section = ".data.usart2_interrupt"]
extern "C" fn USART2() {
    // SAFETY: the register block is USART2's; the producer is this handler's alone (start).
    let (sr, byte, producer) = unsafe {
        let usart = &*pac::USART2::ptr();
        let sr = usart.sr().read();
        let byte = usart.dr().read().bits() as u8;
        (sr, byte, (*core::ptr::addr_of_mut!(PRODUCER)).as_mut())
    };
    if sr.ore().bit() || sr.fe().bit() || sr.nf().bit() || sr.pe().bit() {
        ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    if sr.rxne().bit() && producer.is_none_or(|p| p.enqueue(byte).is_err()) {
        OVERFLOWS.fetch_add(1, Ordering::Relaxed);
    }
}

impl embedded_io::ErrorType for Receiver {
    type Error = Infallible;
}

impl embedded_io::Read for Receiver {
    /// Waits (asleep) for the first byte, then takes what else is queued.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let mut n = 0;
            for slot in buf.iter_mut() {
                let Some(b) = self.0.dequeue() else { break };
                *slot = b;
                n += 1;
            }
            if n > 0 {
                return Ok(n);
            }
            // With interrupts masked, a byte arriving between the check and the sleep still
            // wakes the core (it is pending), and the handler runs when they are unmasked.
            cortex_m::interrupt::free(|_| {
                if !self.0.ready() {
                    cortex_m::asm::wfi();
                }
            });
        }
    }
}
