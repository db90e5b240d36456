//! The optimizer state as bytes: one versioned little-endian format with a CRC-32, shared by
//! host checkpoints and MCU flash.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "HOMEADAM"
//!      8     2  format version (2; 3 with a calibrated τ)
//!     10     1  rule code (Rule::code: fixed numbers, never positions in a list)
//!     11     1  state dtype (0 f32, 1 f16, 2 bf16, 3 q8)
//!     12     1  state slots per element
//!     13     1  phase (0 first, 1 second: SWATS's adaptive and SGD phases)
//!     14     2  reserved, 0
//!     16     8  step t
//!     24     8  second phase's rate η' (f64 bits; 0 before the switch: SWATS's SGD rate)
//!     32     4  tensor count
//! per tensor:
//!              8  element count d
//!              4  the phase switch's running value (f32 bits: SWATS's Λ)
//!       slots·d·w  state slots, each element little-endian (w = 2 or 4 bytes); q8: slots·⌈d/256⌉
//!                  blocks of 260 bytes (the f32 scale, then 256 codes; crate::q8)
//! version 3 only (a calibrated τ, `Config::tau_calibration`):
//!              4  the calibrated τ (f32 bits; 0 before the first calibration)
//!          128·4  the calibration window's histogram, counts as u32
//! end          4  CRC-32 (IEEE) of every byte before it
//! ```
//! Loading checks the checksum and every field before it writes anything. Version 1
//! (homeadam-core 0.1) numbered rules by their position in a list; it is refused by name.

use crate::calibration::{Histogram, BUCKETS};
use crate::crc32::Crc32;
use crate::error::{CheckpointError, Error};
use crate::format::{MAGIC, VERSION, VERSION_CALIBRATED};
use crate::optimizer::Optimizer;
use crate::rules::Rule;
use crate::state::StateStorage;
use crate::storage::Dtype;
use crate::tensor::TensorAux;

const CALIBRATION: usize = 4 + 4 * BUCKETS;
const HEADER: usize = 36;
const TENSOR_HEADER: usize = 12;

/// Where saved bytes go: a buffer, a file, flash pages.
pub trait ByteSink {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointError>;
}

/// A [`ByteSink`] over a fixed buffer.
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// Writes into `buf` from its start.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink { buf, len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl ByteSink for SliceSink<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        let end = self
            .len
            .checked_add(bytes.len())
            .ok_or(CheckpointError::BufferTooSmall)?;
        let dst = self
            .buf
            .get_mut(self.len..end)
            .ok_or(CheckpointError::BufferTooSmall)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
}

/// The saved part of one tensor, lent for saving: its state slots and per-tensor scalars.
#[derive(Clone, Copy)]
pub struct TensorState<'a, S> {
    /// Number of parameters of the tensor (the state may be empty: plain SGD keeps none).
    pub numel: usize,
    /// The state slots, as in [`crate::Tensor::state`].
    pub state: &'a [S],
    /// The per-tensor scalars.
    pub aux: &'a TensorAux,
}

/// The saved part of one tensor, lent for loading.
pub struct TensorStateMut<'a, S> {
    /// Number of parameters of the tensor.
    pub numel: usize,
    /// The state slots, as in [`crate::Tensor::state`], overwritten.
    pub state: &'a mut [S],
    /// The per-tensor scalars, overwritten.
    pub aux: &'a mut TensorAux,
}

struct Checksummed<'a, W: ByteSink> {
    sink: &'a mut W,
    crc: Crc32,
}

impl<W: ByteSink> Checksummed<'_, W> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.crc.update(bytes);
        self.sink.write(bytes)
    }
}

impl Optimizer {
    /// Bytes [`Optimizer::save_state`] writes for tensors of these sizes and state type `dtype`.
    pub fn state_bytes(&self, numels: impl IntoIterator<Item = usize>, dtype: Dtype) -> usize {
        let slots = self.config().state_slots();
        HEADER
            + self.calibration_bytes()
            + 4
            + numels
                .into_iter()
                .map(|d| TENSOR_HEADER + slots * dtype.slot_bytes(d))
                .sum::<usize>()
    }

    fn calibration_bytes(&self) -> usize {
        if self.config().tau_calibration.is_some() {
            CALIBRATION
        } else {
            0
        }
    }

    /// Writes the step counter, the rule's phase, a calibrated τ and every tensor's state to
    /// `sink`.
    pub fn save_state<S: StateStorage, W: ByteSink>(
        &self,
        tensors: &[TensorState<'_, S>],
        sink: &mut W,
    ) -> Result<(), Error> {
        let slots = self.config().state_slots();
        let mut out = Checksummed {
            sink,
            crc: Crc32::default(),
        };
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(MAGIC);
        let version = match self.calibration_bytes() {
            0 => VERSION,
            _ => VERSION_CALIBRATED,
        };
        header[8..10].copy_from_slice(&version.to_le_bytes());
        header[10] = self.config().rule.code();
        header[11] = S::DTYPE.code();
        header[12] = slots as u8;
        header[13] = self.swats_sgd_lr().is_some() as u8;
        header[16..24].copy_from_slice(&self.step_count().to_le_bytes());
        header[24..32].copy_from_slice(&self.swats_sgd_lr().unwrap_or(0.0).to_bits().to_le_bytes());
        header[32..36].copy_from_slice(&(tensors.len() as u32).to_le_bytes());
        out.put(&header)?;
        for (k, t) in tensors.iter().enumerate() {
            if Some(t.state.len()) != slots.checked_mul(S::slot_len(t.numel)) {
                return Err(Error::StateLength {
                    tensor: k,
                    slots,
                    numel: t.numel,
                    per_slot: S::slot_len(t.numel),
                    actual: t.state.len(),
                });
            }
            out.put(&(t.numel as u64).to_le_bytes())?;
            out.put(&t.aux.swats_lambda.to_bits().to_le_bytes())?;
            let mut item = [0u8; crate::q8::BLOCK_BYTES];
            for x in t.state.iter() {
                x.write_item(&mut item[..S::ITEM_BYTES]);
                out.put(&item[..S::ITEM_BYTES])?;
            }
        }
        if self.calibration_bytes() != 0 {
            let tau = self.calibrated_tau().map_or(0, f32::to_bits);
            out.put(&tau.to_le_bytes())?;
            for c in self.calibration_window().counts() {
                out.put(&c.to_le_bytes())?;
            }
        }
        let crc = out.crc.finish();
        out.sink.write(&crc.to_le_bytes())?;
        Ok(())
    }

    /// Reads state saved by [`Optimizer::save_state`] into `tensors`. On any error (corrupt
    /// bytes, another rule, other sizes) nothing is changed.
    pub fn load_state<S: StateStorage>(
        &mut self,
        bytes: &[u8],
        tensors: &mut [TensorStateMut<'_, S>],
    ) -> Result<(), Error> {
        let (step, phase_lr, calibration_at) = self.check_state(bytes, tensors)?;
        let width = S::ITEM_BYTES;
        let mut at = HEADER;
        for t in tensors.iter_mut() {
            t.aux.swats_lambda = f32::from_bits(read_u32(bytes, at + 8));
            at += TENSOR_HEADER;
            for x in t.state.iter_mut() {
                *x = S::read_item(&bytes[at..at + width]);
                at += width;
            }
        }
        let (mut tau, mut window) = (None, Histogram::new());
        if let Some(at) = calibration_at {
            tau = Some(f32::from_bits(read_u32(bytes, at))).filter(|&t| t != 0.0);
            for (b, chunk) in bytes[at + 4..at + CALIBRATION].chunks_exact(4).enumerate() {
                window.add_to(b, read_u32(chunk, 0));
            }
        }
        self.restore(step, phase_lr, tau, window);
        Ok(())
    }

    fn check_state<S: StateStorage>(
        &self,
        bytes: &[u8],
        tensors: &[TensorStateMut<'_, S>],
    ) -> Result<(u64, Option<f64>, Option<usize>), Error> {
        use CheckpointError::*;
        if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
            return Err(BadMagic.into());
        }
        if bytes.len() < HEADER + 4 {
            return Err(Truncated.into());
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        let calibration = match version {
            VERSION => 0,
            VERSION_CALIBRATED => CALIBRATION,
            _ => return Err(UnsupportedVersion(version).into()),
        };
        let slots = self.config().state_slots();
        let count = read_u32(bytes, 32);
        let stored_dtype = Dtype::from_code(bytes[11]).ok_or(Corrupt)?;
        let stored_slots = bytes[12] as usize;
        // Walk the stored sizes first so a truncated file is told apart from a corrupt one.
        let mut at = HEADER;
        for _ in 0..count {
            let numel = read_u64(bytes, at).ok_or(Truncated)?;
            let body = usize::try_from(numel)
                .ok()
                .and_then(|n| stored_dtype.checked_slot_bytes(n))
                .and_then(|b| b.checked_mul(stored_slots))
                .and_then(|b| b.checked_add(TENSOR_HEADER))
                .ok_or(Corrupt)?;
            at = at.checked_add(body).ok_or(Corrupt)?;
            if at > bytes.len() {
                return Err(Truncated.into());
            }
        }
        let calibration_at = at;
        at += calibration;
        let end = at + 4;
        if end > bytes.len() {
            return Err(Truncated.into());
        }
        if end < bytes.len() {
            return Err(TrailingBytes.into());
        }
        let mut crc = Crc32::default();
        crc.update(&bytes[..at]);
        if crc.finish() != read_u32(bytes, at) {
            return Err(ChecksumMismatch.into());
        }
        let rule = Rule::from_code(bytes[10]).ok_or(Corrupt)?;
        if rule != self.config().rule || bytes[12] as usize != slots {
            return Err(RuleMismatch.into());
        }
        if stored_dtype != S::DTYPE {
            return Err(DtypeMismatch.into());
        }
        if calibration != self.calibration_bytes() {
            return Err(CalibrationMismatch.into());
        }
        if count as usize != tensors.len() {
            return Err(TensorCountMismatch {
                stored: count,
                given: tensors.len() as u32,
            }
            .into());
        }
        let mut at = HEADER;
        for (k, t) in tensors.iter().enumerate() {
            let numel = read_u64(bytes, at).ok_or(Truncated)? as usize;
            if numel != t.numel || Some(t.state.len()) != slots.checked_mul(S::slot_len(numel)) {
                return Err(TensorSizeMismatch { tensor: k as u32 }.into());
            }
            at += TENSOR_HEADER + slots * S::DTYPE.slot_bytes(numel);
        }
        let step = read_u64(bytes, 16).ok_or(Truncated)?;
        let lr_bits = read_u64(bytes, 24).ok_or(Truncated)?;
        // Only a rule with a phase switch has a second phase; its rate is what the test
        // produced (> 0). Anything else could not have been saved, so loading it could not save
        // it back.
        let lr = f64::from_bits(lr_bits);
        let switches = rule.spec().phase_switch().is_some();
        let phase_lr = match bytes[13] {
            0 if lr_bits == 0 => None,
            1 if switches && lr > 0.0 && lr.is_finite() => Some(lr),
            _ => return Err(Corrupt.into()),
        };
        if bytes[14] != 0 || bytes[15] != 0 {
            return Err(Corrupt.into());
        }
        let tau = f32::from_bits(read_u32(bytes, calibration_at));
        if calibration != 0
            && !(tau == 0.0 || (tau.is_normal() && tau.to_bits() & 0x807f_ffff == 0 && tau <= 1.0))
        {
            // A calibrated τ is a power of two in [2^-126, 1] (0 before the first calibration).
            return Err(Corrupt.into());
        }
        Ok((step, phase_lr, (calibration != 0).then_some(calibration_at)))
    }
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let slice = bytes.get(at..at + 8)?;
    let mut b = [0u8; 8];
    b.copy_from_slice(slice);
    Some(u64::from_le_bytes(b))
}
