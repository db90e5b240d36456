//! The STM32F405's flash as a `NorFlash` for the state store (its 128 KiB sectors, 5 to 11),
//! whose erase and programming wait for the flash from RAM: a fetch from the flash stalls while
//! it erases or programs, and the USART's interrupt (`usart.rs`) must still run then.
//!
//! 32-bit parallelism: the board runs at 2.7 V to 3.6 V, where the reference manual allows it.

use embedded_storage::nor_flash::{ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash};
use stm32f4::stm32f405 as pac;

/// Where the flash is mapped.
const BASE: u32 = 0x0800_0000;
/// The flash's bytes (STM32F405xG).
const SIZE: u32 = 1024 * 1024;
/// Where the 128 KiB sectors begin (sector 5), and their size.
const LARGE_FROM: u32 = 0x2_0000;
const SECTOR: u32 = 128 * 1024;
/// The first 128 KiB sector's number.
const LARGE_FIRST: u32 = 5;

/// FLASH_CR bits: program, sector erase, the sector number's shift, 32-bit parallelism, start,
/// lock.
const PG: u32 = 1 << 0;
const SER: u32 = 1 << 1;
const SNB_SHIFT: u32 = 3;
const PSIZE_X32: u32 = 0b10 << 8;
const STRT: u32 = 1 << 16;
const LOCK: u32 = 1 << 31;
/// FLASH_SR: busy, and the error flags (operation, write protection, alignment, parallelism,
/// sequence).
const BSY: u32 = 1 << 16;
const ERRORS: u32 = (1 << 1) | (0b1111 << 4);
/// FLASH_ACR: data cache enable and reset.
const DCEN: u32 = 1 << 10;
const DCRST: u32 = 1 << 12;
/// FLASH_KEYR's unlock sequence.
const KEYS: [u32; 2] = [0x4567_0123, 0xCDEF_89AB];

/// The flash's 128 KiB sectors, locked between operations.
pub struct Flash(pac::FLASH);

/// A failed flash operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashError(NorFlashErrorKind);

impl NorFlashError for FlashError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

impl Flash {
    /// The flash, locked.
    pub fn new(flash: pac::FLASH) -> Self {
        Flash(flash)
    }

    /// Runs `op` on the unlocked flash with its error flags cleared, then locks it again.
    fn unlocked(&mut self, op: impl FnOnce(&pac::FLASH) -> u32) -> Result<(), FlashError> {
        let f = &self.0;
        for key in KEYS {
            f.keyr().write(|w| unsafe { w.bits(key) });
        }
        f.sr().write(|w| unsafe { w.bits(ERRORS) });
        let sr = op(f);
        f.cr().write(|w| unsafe { w.bits(LOCK) });
        match sr & ERRORS {
            0 => Ok(()),
            _ => Err(FlashError(NorFlashErrorKind::Other)),
        }
    }

    /// `Ok` if `from..from + len` is inside the large sectors and aligned to `align`.
    fn check(from: u32, len: usize, align: u32) -> Result<(), FlashError> {
        let end = from.checked_add(len as u32).filter(|&e| e <= SIZE);
        match end {
            None => Err(FlashError(NorFlashErrorKind::OutOfBounds)),
            Some(_) if from < LARGE_FROM => Err(FlashError(NorFlashErrorKind::OutOfBounds)),
            Some(e) if !from.is_multiple_of(align) || !e.is_multiple_of(align) => {
                Err(FlashError(NorFlashErrorKind::NotAligned))
            }
            Some(_) => Ok(()),
        }
    }
}

/// Waits until the flash is idle; returns its status. Inlined into the RAM functions below.
#[inline(always)]
fn wait_idle(sr: *const u32) -> u32 {
    loop {
        // SAFETY: FLASH_SR, a device register.
        let s = unsafe { sr.read_volatile() };
        if s & BSY == 0 {
            return s;
        }
    }
}

/// Erases sector `snb` and waits for it, from RAM (`.data`, copied there at reset).
#[inline(never)]
#[link_section = ".data.flash_erase"]
fn erase_in_ram(cr: *mut u32, sr: *const u32, snb: u32) -> u32 {
    let command = PSIZE_X32 | SER | (snb << SNB_SHIFT);
    // SAFETY: FLASH_CR, unlocked by the caller.
    unsafe {
        cr.write_volatile(command);
        cr.write_volatile(command | STRT);
    }
    let s = wait_idle(sr);
    // SAFETY: as above.
    unsafe { cr.write_volatile(0) };
    s
}

/// Programs `word` at `at` and waits for it, from RAM (`.data`, copied there at reset).
#[inline(never)]
#[link_section = ".data.flash_program"]
fn program_in_ram(cr: *mut u32, sr: *const u32, at: *mut u32, word: u32) -> u32 {
    // SAFETY: FLASH_CR, unlocked by the caller; `at` is an erased, aligned flash word.
    unsafe {
        cr.write_volatile(PSIZE_X32 | PG);
        at.write_volatile(word);
    }
    let s = wait_idle(sr);
    // SAFETY: as above.
    unsafe { cr.write_volatile(0) };
    s
}

impl ErrorType for Flash {
    type Error = FlashError;
}

impl ReadNorFlash for Flash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FlashError> {
        Self::check(offset, bytes.len(), 1)?;
        let from = (BASE + offset) as *const u8;
        for (k, b) in bytes.iter_mut().enumerate() {
            // SAFETY: inside the flash (checked), which is mapped and readable.
            *b = unsafe { from.add(k).read_volatile() };
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        SIZE as usize
    }
}

impl NorFlash for Flash {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = SECTOR as usize;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), FlashError> {
        Self::check(from, to.saturating_sub(from) as usize, SECTOR)?;
        for start in (from..to).step_by(SECTOR as usize) {
            let snb = LARGE_FIRST + (start - LARGE_FROM) / SECTOR;
            self.unlocked(|f| erase_in_ram(f.cr().as_ptr(), f.sr().as_ptr(), snb))?;
        }
        // The data cache may hold the erased bytes' old values.
        let acr = self.0.acr().read().bits();
        self.0.acr().write(|w| unsafe { w.bits((acr & !DCEN) | DCRST) });
        self.0.acr().write(|w| unsafe { w.bits(acr & !DCRST) });
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FlashError> {
        Self::check(offset, bytes.len(), Self::WRITE_SIZE as u32)?;
        let at = (BASE + offset) as *mut u32;
        self.unlocked(|f| {
            let mut sr = 0;
            for (k, w) in bytes.chunks_exact(4).enumerate() {
                let word = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                // SAFETY: inside the flash's large sectors (checked), word-aligned.
                let target = unsafe { at.add(k) };
                sr |= program_in_ram(f.cr().as_ptr(), f.sr().as_ptr(), target, word);
            }
            sr
        })
    }
}
