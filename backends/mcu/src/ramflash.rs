//! A NOR flash in RAM, for tests and emulators (QEMU models the STM32 flash as ROM: its program/erase controller is not
//! emulated), with NOR semantics: erase sets bytes to 0xFF, a write can only clear bits. A
//! write budget simulates a power cut: once spent, writes and erases stop half-way and fail.

use embedded_storage::nor_flash::{ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash};

/// A power cut (budget spent) or a misaligned / out-of-range access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamFlashError(NorFlashErrorKind);

impl NorFlashError for RamFlashError {
    fn kind(&self) -> NorFlashErrorKind {
        self.0
    }
}

/// `SIZE` bytes of emulated flash in 1 KiB sectors, 4-byte writes.
pub struct RamFlash<'a, const SIZE: usize> {
    mem: &'a mut [u8; SIZE],
    budget: Option<usize>,
}

impl<'a, const SIZE: usize> RamFlash<'a, SIZE> {
    /// Wraps memory that outlives "resets" (e.g. a `static`).
    pub fn new(mem: &'a mut [u8; SIZE]) -> Self {
        RamFlash { mem, budget: None }
    }

    /// Cuts the power after `bytes` more bytes are written or erased.
    pub fn cut_after(&mut self, bytes: usize) {
        self.budget = Some(bytes);
    }

    fn spend(&mut self, n: usize) -> Result<usize, RamFlashError> {
        match self.budget {
            None => Ok(n),
            Some(left) if left >= n => {
                self.budget = Some(left - n);
                Ok(n)
            }
            Some(left) => {
                self.budget = Some(0);
                Ok(left)
            }
        }
    }

    fn range(offset: u32, len: usize, align: usize) -> Result<core::ops::Range<usize>, RamFlashError> {
        let start = offset as usize;
        if !start.is_multiple_of(align) || !len.is_multiple_of(align) {
            return Err(RamFlashError(NorFlashErrorKind::NotAligned));
        }
        if start + len > SIZE {
            return Err(RamFlashError(NorFlashErrorKind::OutOfBounds));
        }
        Ok(start..start + len)
    }
}

impl<const SIZE: usize> ErrorType for RamFlash<'_, SIZE> {
    type Error = RamFlashError;
}

impl<const SIZE: usize> ReadNorFlash for RamFlash<'_, SIZE> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let r = Self::range(offset, bytes.len(), 1)?;
        bytes.copy_from_slice(&self.mem[r]);
        Ok(())
    }

    fn capacity(&self) -> usize {
        SIZE
    }
}

impl<const SIZE: usize> NorFlash for RamFlash<'_, SIZE> {
    const WRITE_SIZE: usize = 4;
    const ERASE_SIZE: usize = 1024;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let r = Self::range(from, to.saturating_sub(from) as usize, Self::ERASE_SIZE)?;
        let done = self.spend(r.len())?;
        self.mem[r.start..r.start + done].fill(0xFF);
        if done < r.len() {
            return Err(RamFlashError(NorFlashErrorKind::Other));
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        let r = Self::range(offset, bytes.len(), Self::WRITE_SIZE)?;
        let done = self.spend(r.len())?;
        for (m, b) in self.mem[r.start..r.start + done].iter_mut().zip(bytes) {
            *m &= *b;
        }
        if done < r.len() {
            return Err(RamFlashError(NorFlashErrorKind::Other));
        }
        Ok(())
    }
}
