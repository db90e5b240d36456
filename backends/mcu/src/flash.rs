//! Weights + optimizer state + step in two NOR-flash slots.
//!
//! ```text
//! slot (a multiple of the erase size):
//!   offset  size  field
//!        0     4  magic "HAS1"
//!        4     4  sequence number (the newest valid slot wins)
//!        8     4  payload length
//!       12     4  CRC-32 (IEEE) of the payload
//!       16    16  0xFF (keeps the payload 32-byte aligned)
//!       32   len  payload: Trainer::save bytes (weights, then the core's state format)
//! ```
//! A save erases the *inactive* slot, writes the payload, and only then the header: the header
//! is the commit marker. A reset or power cut at any point leaves either the new slot complete
//! or the old one untouched, and a torn header or payload fails its magic, length or CRC.

use embedded_storage::nor_flash::{NorFlash, NorFlashError, NorFlashErrorKind};
use homeadam_core::backend::Crc32;
use homeadam_core::rules::only::RuleSet;
use homeadam_core::{ByteSink, CheckpointError, StateStorage};

use crate::trainer::{Trainer, TrainerError};

/// Bytes before the payload in a slot; also the write granule this module uses, so the
/// flash's `READ_SIZE` and `WRITE_SIZE` must divide it.
pub const SLOT_HEADER: u32 = 32;
const MAGIC: u32 = u32::from_le_bytes(*b"HAS1");
const CHUNK: usize = SLOT_HEADER as usize;

/// Why a save or load failed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FlashError {
    /// The flash driver failed.
    Flash(NorFlashErrorKind),
    /// The slots do not fit the flash, or are not aligned to its erase / write sizes.
    Layout,
    /// The saved bytes do not fit a slot.
    TooLarge {
        /// Bytes a slot would need.
        needed: u32,
    },
    /// The scratch buffer given to [`FlashStore::load`] is too small.
    Scratch {
        /// Bytes it needs.
        needed: usize,
    },
    /// The newest valid slot was refused by the trainer (another rule, model size or dtype).
    Trainer(TrainerError),
}

fn flash_err<E: NorFlashError>(e: E) -> FlashError {
    FlashError::Flash(e.kind())
}

/// Two slots of `slot_size` bytes from `base` in a [`NorFlash`].
pub struct FlashStore<F> {
    flash: F,
    base: u32,
    slot_size: u32,
}

#[derive(Clone, Copy)]
struct Header {
    seq: u32,
    len: u32,
    crc: u32,
}

impl<F: NorFlash> FlashStore<F> {
    /// Checks the geometry: both slots inside the flash, erase-aligned, and the flash's read and
    /// write sizes dividing [`SLOT_HEADER`].
    pub fn new(flash: F, base: u32, slot_size: u32) -> Result<Self, FlashError> {
        let erase = F::ERASE_SIZE as u32;
        let fits = base
            .checked_add(slot_size.saturating_mul(2))
            .is_some_and(|end| end as usize <= flash.capacity());
        let aligned = base.is_multiple_of(erase)
            && slot_size.is_multiple_of(erase)
            && slot_size > SLOT_HEADER
            && CHUNK.is_multiple_of(F::WRITE_SIZE)
            && CHUNK.is_multiple_of(F::READ_SIZE);
        if !(fits && aligned) {
            return Err(FlashError::Layout);
        }
        Ok(FlashStore {
            flash,
            base,
            slot_size,
        })
    }

    /// Gives the flash back.
    pub fn release(self) -> F {
        self.flash
    }

    fn slot(&self, k: usize) -> u32 {
        self.base + k as u32 * self.slot_size
    }

    /// The header of slot `k` if its magic, length and payload CRC hold.
    fn valid(&mut self, k: usize) -> Result<Option<Header>, FlashError> {
        let at = self.slot(k);
        let mut raw = [0u8; CHUNK];
        self.flash.read(at, &mut raw).map_err(flash_err)?;
        let word = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        let header = Header {
            seq: word(4),
            len: word(8),
            crc: word(12),
        };
        if word(0) != MAGIC || header.len > self.slot_size - SLOT_HEADER {
            return Ok(None);
        }
        let mut crc = Crc32::default();
        let mut done = 0;
        while done < header.len {
            let take = (header.len - done).min(SLOT_HEADER) as usize;
            self.flash
                .read(at + SLOT_HEADER + done, &mut raw)
                .map_err(flash_err)?;
            crc.update(&raw[..take]);
            done += take as u32;
        }
        Ok((crc.finish() == header.crc).then_some(header))
    }

    /// The newest valid slot and its header.
    fn newest(&mut self) -> Result<Option<(usize, Header)>, FlashError> {
        let a = self.valid(0)?.map(|h| (0, h));
        let b = self.valid(1)?.map(|h| (1, h));
        Ok(match (a, b) {
            (Some(x), Some(y)) => Some(if y.1.seq > x.1.seq { y } else { x }),
            (x, y) => x.or(y),
        })
    }

    /// Saves `trainer` to the inactive slot and commits it; returns its sequence number.
    pub fn save<S: StateStorage, const N: usize, const CAP: usize, R: RuleSet>(
        &mut self,
        trainer: &Trainer<S, N, CAP, R>,
    ) -> Result<u32, FlashError> {
        let len = trainer.saved_len() as u32;
        if len > self.slot_size - SLOT_HEADER {
            return Err(FlashError::TooLarge {
                needed: len + SLOT_HEADER,
            });
        }
        let (slot, seq) = match self.newest()? {
            Some((k, h)) => (1 - k, h.seq.wrapping_add(1)),
            None => (0, 1),
        };
        let at = self.slot(slot);
        self.flash.erase(at, at + self.slot_size).map_err(flash_err)?;
        let mut sink = FlashSink {
            flash: &mut self.flash,
            at: at + SLOT_HEADER,
            end: at + self.slot_size,
            buf: [0xFF; CHUNK],
            fill: 0,
            crc: Crc32::default(),
            failed: None,
        };
        let saved = trainer.save(&mut sink);
        let flushed = sink.flush();
        if let Some(kind) = sink.failed {
            return Err(FlashError::Flash(kind));
        }
        saved.map_err(FlashError::Trainer)?;
        flushed.map_err(|_| FlashError::TooLarge { needed: len })?;
        let mut header = [0xFF; CHUNK];
        header[..4].copy_from_slice(&MAGIC.to_le_bytes());
        header[4..8].copy_from_slice(&seq.to_le_bytes());
        header[8..12].copy_from_slice(&len.to_le_bytes());
        header[12..16].copy_from_slice(&sink.crc.finish().to_le_bytes());
        self.flash.write(at, &header).map_err(flash_err)?;
        Ok(seq)
    }

    /// Loads the newest valid slot into `trainer`, reading it into `scratch` (at least
    /// [`Trainer::saved_len`] rounded up to [`SLOT_HEADER`]). Returns its sequence number, or
    /// `None` (trainer untouched) when neither slot holds a valid state.
    pub fn load<S: StateStorage, const N: usize, const CAP: usize, R: RuleSet>(
        &mut self,
        trainer: &mut Trainer<S, N, CAP, R>,
        scratch: &mut [u8],
    ) -> Result<Option<u32>, FlashError> {
        let Some((k, header)) = self.newest()? else {
            return Ok(None);
        };
        let len = header.len as usize;
        let padded = len.div_ceil(CHUNK) * CHUNK;
        let buf = scratch
            .get_mut(..padded)
            .ok_or(FlashError::Scratch { needed: padded })?;
        self.flash
            .read(self.slot(k) + SLOT_HEADER, buf)
            .map_err(flash_err)?;
        trainer.load(&buf[..len]).map_err(FlashError::Trainer)?;
        Ok(Some(header.seq))
    }
}

/// Streams bytes into flash in [`SLOT_HEADER`]-byte aligned writes, summing their CRC.
struct FlashSink<'a, F> {
    flash: &'a mut F,
    at: u32,
    end: u32,
    buf: [u8; CHUNK],
    fill: usize,
    crc: Crc32,
    failed: Option<NorFlashErrorKind>,
}

impl<F: NorFlash> FlashSink<'_, F> {
    fn flush(&mut self) -> Result<(), CheckpointError> {
        if self.fill == 0 {
            return Ok(());
        }
        if self.at + SLOT_HEADER > self.end {
            return Err(CheckpointError::BufferTooSmall);
        }
        self.buf[self.fill..].fill(0xFF);
        if let Err(e) = self.flash.write(self.at, &self.buf) {
            self.failed = Some(e.kind());
            return Err(CheckpointError::BufferTooSmall);
        }
        self.at += SLOT_HEADER;
        self.fill = 0;
        Ok(())
    }
}

impl<F: NorFlash> ByteSink for FlashSink<'_, F> {
    fn write(&mut self, mut bytes: &[u8]) -> Result<(), CheckpointError> {
        self.crc.update(bytes);
        while !bytes.is_empty() {
            let take = (CHUNK - self.fill).min(bytes.len());
            self.buf[self.fill..self.fill + take].copy_from_slice(&bytes[..take]);
            self.fill += take;
            bytes = &bytes[take..];
            if self.fill == CHUNK {
                self.flush()?;
            }
        }
        Ok(())
    }
}
