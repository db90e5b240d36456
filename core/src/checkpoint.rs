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
use crate::state::StateStorage;
use crate::storage::Dtype;
use crate::tensor::TensorAux;

use layout::{COUNT, DTYPE, HEADER, PHASE, PHASE_LR, RULE, SLOTS, STEP, TENSOR_HEADER};

const CALIBRATION: usize = 4 + 4 * BUCKETS;

/// Where the fields of the format (docs/DESIGN.md §10) start, in bytes: what a tool
/// that reads or mutates saved bytes reads them at.
pub mod layout {
    /// The format version (u16).
    pub const VERSION: usize = 8;
    /// The rule code.
    pub const RULE: usize = 10;
    /// The state dtype.
    pub const DTYPE: usize = 11;
    /// State slots per element.
    pub const SLOTS: usize = 12;
    /// The phase.
    pub const PHASE: usize = 13;
    /// The step t (u64).
    pub const STEP: usize = 16;
    /// The second phase's rate η' (f64 bits).
    pub const PHASE_LR: usize = 24;
    /// The tensor count (u32).
    pub const COUNT: usize = 32;
    /// The header's length: where the first tensor starts.
    pub const HEADER: usize = 36;
    /// A tensor's header: its element count (u64) and the phase switch's running value (f32).
    pub const TENSOR_HEADER: usize = 12;
}

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

/// The model-wide fields of the header that the optimizer sets.
pub(crate) struct Header<'a> {
    /// [`crate::Rule::code`].
    pub rule: u8,
    /// State slots per element.
    pub slots: usize,
    /// Steps taken.
    pub step: u64,
    /// The second phase's rate η', once switched.
    pub phase_lr: Option<f64>,
    /// The calibrated τ (`None` before the first calibration) and the calibration window, for
    /// a config with a calibrated τ (version 3).
    pub calibration: Option<(Option<f32>, &'a Histogram)>,
}

/// Bytes [`write`] writes for tensors of these sizes, `slots` state slots of type `dtype`, and
/// the calibration fields when `calibrated`.
pub(crate) fn state_bytes(
    slots: usize,
    calibrated: bool,
    numels: impl IntoIterator<Item = usize>,
    dtype: Dtype,
) -> usize {
    HEADER
        + if calibrated { CALIBRATION } else { 0 }
        + 4
        + numels
            .into_iter()
            .map(|d| TENSOR_HEADER + slots * dtype.slot_bytes(d))
            .sum::<usize>()
}

/// Writes `header` and every tensor's state to `sink`, then the checksum.
pub(crate) fn write<S: StateStorage, W: ByteSink>(
    header: &Header<'_>,
    tensors: &[TensorState<'_, S>],
    sink: &mut W,
) -> Result<(), Error> {
    let slots = header.slots;
    let mut out = Checksummed {
        sink,
        crc: Crc32::default(),
    };
    let mut bytes = [0u8; HEADER];
    bytes[..8].copy_from_slice(MAGIC);
    let version = match header.calibration {
        None => VERSION,
        Some(_) => VERSION_CALIBRATED,
    };
    bytes[layout::VERSION..RULE].copy_from_slice(&version.to_le_bytes());
    bytes[RULE] = header.rule;
    bytes[DTYPE] = S::DTYPE.code();
    bytes[SLOTS] = slots as u8;
    bytes[PHASE] = header.phase_lr.is_some() as u8;
    bytes[STEP..PHASE_LR].copy_from_slice(&header.step.to_le_bytes());
    bytes[PHASE_LR..COUNT].copy_from_slice(&header.phase_lr.unwrap_or(0.0).to_bits().to_le_bytes());
    bytes[COUNT..HEADER].copy_from_slice(&(tensors.len() as u32).to_le_bytes());
    out.put(&bytes)?;
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
    if let Some((tau, window)) = &header.calibration {
        out.put(&tau.map_or(0, f32::to_bits).to_le_bytes())?;
        for c in window.counts() {
            out.put(&c.to_le_bytes())?;
        }
    }
    let crc = out.crc.finish();
    out.sink.write(&crc.to_le_bytes())?;
    Ok(())
}

/// Saved bytes whose structure [`parse`] checked: the magic, the version, the stored sizes,
/// the length and the checksum. What a config accepts of them its caller checks, in the
/// order of the header's fields, then [`Parsed::values`].
pub(crate) struct Parsed<'b> {
    bytes: &'b [u8],
    /// The rule code.
    pub rule: u8,
    /// The state's type.
    pub dtype: Dtype,
    /// State slots per element.
    pub slots: usize,
    /// The tensor count.
    pub count: u32,
    /// Where the calibration fields start (version 3).
    calibration_at: Option<usize>,
}

/// The values [`Parsed::values`] read after the sizes: the optimizer's model-wide state.
pub(crate) struct Values {
    pub step: u64,
    pub phase_lr: Option<f64>,
    pub tau: Option<f32>,
    pub window: Histogram,
}

/// Checks the structure of saved bytes: the magic, the version, that the stored sizes add up
/// to the length (a truncated file told apart from a corrupt one) and the checksum.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed<'_>, CheckpointError> {
    use CheckpointError::*;
    if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
        return Err(BadMagic);
    }
    if bytes.len() < HEADER + 4 {
        return Err(Truncated);
    }
    let version = u16::from_le_bytes([bytes[layout::VERSION], bytes[layout::VERSION + 1]]);
    let calibration = match version {
        VERSION => 0,
        VERSION_CALIBRATED => CALIBRATION,
        _ => return Err(UnsupportedVersion(version)),
    };
    let count = read_u32(bytes, COUNT);
    let dtype = Dtype::from_code(bytes[DTYPE]).ok_or(Corrupt)?;
    let slots = bytes[SLOTS] as usize;
    let mut at = HEADER;
    for _ in 0..count {
        let numel = read_u64(bytes, at).ok_or(Truncated)?;
        let body = usize::try_from(numel)
            .ok()
            .and_then(|n| dtype.checked_slot_bytes(n))
            .and_then(|b| b.checked_mul(slots))
            .and_then(|b| b.checked_add(TENSOR_HEADER))
            .ok_or(Corrupt)?;
        at = at.checked_add(body).ok_or(Corrupt)?;
        if at > bytes.len() {
            return Err(Truncated);
        }
    }
    let calibration_at = at;
    at += calibration;
    let end = at + 4;
    if end > bytes.len() {
        return Err(Truncated);
    }
    if end < bytes.len() {
        return Err(TrailingBytes);
    }
    let mut crc = Crc32::default();
    crc.update(&bytes[..at]);
    if crc.finish() != read_u32(bytes, at) {
        return Err(ChecksumMismatch);
    }
    Ok(Parsed {
        bytes,
        rule: bytes[RULE],
        dtype,
        slots,
        count,
        calibration_at: (calibration != 0).then_some(calibration_at),
    })
}

impl Parsed<'_> {
    /// Whether the bytes hold a calibrated τ (version 3).
    pub fn calibrated(&self) -> bool {
        self.calibration_at.is_some()
    }

    /// The stored tensors' element counts, in order.
    pub fn numels(&self) -> impl Iterator<Item = usize> + '_ {
        let mut at = HEADER;
        (0..self.count).map(move |_| {
            let numel = read_u64(self.bytes, at).unwrap_or(0) as usize;
            at += TENSOR_HEADER + self.slots * self.dtype.slot_bytes(numel);
            numel
        })
    }

    /// The step, the second phase's rate and the calibration, checked: a rate only in the
    /// second phase, of a rule that `switches`, and then what a switch test produced (> 0);
    /// the reserved bytes 0; a calibrated τ a power of two in [2^-126, 1] (0 before the first
    /// calibration). Anything else could not have been saved, so loading it could not save it
    /// back.
    pub fn values(&self, switches: bool) -> Result<Values, CheckpointError> {
        use CheckpointError::Corrupt;
        let bytes = self.bytes;
        let lr_bits = read_u64(bytes, PHASE_LR).ok_or(CheckpointError::Truncated)?;
        let lr = f64::from_bits(lr_bits);
        let phase_lr = match bytes[PHASE] {
            0 if lr_bits == 0 => None,
            1 if switches && lr > 0.0 && lr.is_finite() => Some(lr),
            _ => return Err(Corrupt),
        };
        if bytes[PHASE + 1..STEP] != [0, 0] {
            return Err(Corrupt);
        }
        let (mut tau, mut window) = (None, Histogram::new());
        if let Some(at) = self.calibration_at {
            let stored = f32::from_bits(read_u32(bytes, at));
            if !(stored == 0.0
                || (stored.is_normal() && stored.to_bits() & 0x807f_ffff == 0 && stored <= 1.0))
            {
                return Err(Corrupt);
            }
            tau = Some(stored).filter(|&t| t != 0.0);
            for (b, chunk) in bytes[at + 4..at + CALIBRATION].chunks_exact(4).enumerate() {
                window.add_to(b, read_u32(chunk, 0));
            }
        }
        Ok(Values {
            step: read_u64(bytes, STEP).ok_or(CheckpointError::Truncated)?,
            phase_lr,
            tau,
            window,
        })
    }

    /// Reads every tensor's state into `tensors`, whose sizes match the stored ones.
    pub fn read_into<S: StateStorage>(&self, tensors: &mut [TensorStateMut<'_, S>]) {
        let width = S::ITEM_BYTES;
        let mut at = HEADER;
        for t in tensors.iter_mut() {
            t.aux.swats_lambda = f32::from_bits(read_u32(self.bytes, at + 8));
            at += TENSOR_HEADER;
            for x in t.state.iter_mut() {
                *x = S::read_item(&self.bytes[at..at + width]);
                at += width;
            }
        }
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
