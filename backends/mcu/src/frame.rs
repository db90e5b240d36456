//! Samples over a byte link that can drop, corrupt or cut bytes (a UART): each sample is one
//! frame with a checksum, and a bad frame costs only itself.
//!
//! ```text
//! frame = COBS(record ‖ CRC-32(record)) ‖ 0x00
//! record = F feature bytes ‖ label          (the 65-byte records of the digits for F = 64)
//! CRC-32 = IEEE, little-endian (homeadam_core::backend::Crc32, as the flash slots)
//! ```
//!
//! COBS (consistent overhead byte stuffing) removes every 0x00 from the frame body, so 0x00
//! only ends frames: after any damage the reader is back in step at the next 0x00. A frame whose
//! body does not decode, has the wrong length, fails its CRC or holds a label at or above the
//! class count is counted ([`FrameReader::bad_frames`]) and skipped, never returned. The sender
//! and the device share [`encode`] and [`FrameReader`].

use embedded_io::Read;
use homeadam_core::backend::Crc32;

use crate::samples::{ReadError, Sample};

/// The byte that ends a frame (and never occurs inside one).
pub const DELIMITER: u8 = 0;
/// Bytes of the CRC after the record.
const CRC: usize = 4;
/// The longest COBS block: a code byte 0xFF is followed by 254 data bytes and no implied zero.
const BLOCK: usize = 254;

/// Bytes of the frame of a sample of `features` feature bytes at most, delimiter included:
/// COBS adds one code byte, and one more per 254 bytes without a zero (so below 253 features,
/// every frame has exactly this length).
pub const fn frame_len(features: usize) -> usize {
    let body = features + 1 + CRC;
    body + body / BLOCK + 1 + 1
}

/// Writes the frame of `sample` to the start of `out` and returns its length, or `None` when
/// `out` is shorter than [`frame_len`]`(F)`.
pub fn encode<const F: usize>(sample: &Sample<F>, out: &mut [u8]) -> Option<usize> {
    let out = out.get_mut(..frame_len(F))?;
    let mut crc = Crc32::default();
    crc.update(&sample.features);
    crc.update(&[sample.label]);
    let crc = crc.finish().to_le_bytes();
    let body = sample.features.iter().chain([&sample.label]).chain(&crc);
    // `code_at` is where the current block's code byte goes, once the block's length is known.
    let (mut code_at, mut len) = (0, 1);
    for &b in body {
        if b != 0 {
            out[len] = b;
            len += 1;
        }
        if b == 0 || len - code_at == BLOCK + 1 {
            out[code_at] = (len - code_at) as u8;
            code_at = len;
            len += 1;
        }
    }
    out[code_at] = (len - code_at) as u8;
    out[len] = DELIMITER;
    Some(len + 1)
}

/// Reads framed samples of `F` feature bytes from any [`Read`], skipping bad frames.
pub struct FrameReader<R, const F: usize> {
    reader: R,
    classes: u8,
    bad: u32,
}

/// A frame's decoded bytes: the record and the CRC, and whether it overflowed them.
struct Body<const F: usize> {
    features: [u8; F],
    tail: [u8; 1 + CRC],
    len: usize,
}

impl<const F: usize> Body<F> {
    fn push(&mut self, b: u8) {
        match self.len {
            k if k < F => self.features[k] = b,
            k if k < F + 1 + CRC => self.tail[k - F] = b,
            _ => {}
        }
        self.len = self.len.saturating_add(1);
    }

    /// The sample, if the body is exactly a record and its CRC.
    fn sample(&self, classes: u8) -> Option<Sample<F>> {
        let [label, crc @ ..] = self.tail;
        let mut sum = Crc32::default();
        sum.update(&self.features);
        sum.update(&[label]);
        let ok = self.len == F + 1 + CRC && sum.finish() == u32::from_le_bytes(crc) && label < classes;
        ok.then_some(Sample {
            features: self.features,
            label,
        })
    }
}

impl<R: Read, const F: usize> FrameReader<R, F> {
    /// A reader of samples whose labels are below `classes`.
    pub fn new(reader: R, classes: u8) -> Self {
        FrameReader {
            reader,
            classes,
            bad: 0,
        }
    }

    /// Frames skipped so far: undecodable, wrong length, CRC mismatch, label out of range, or
    /// cut by the end of the stream.
    pub fn bad_frames(&self) -> u32 {
        self.bad
    }

    /// The next good sample, however the reader splits the stream into reads. A stream that
    /// ends inside a frame counts that frame as bad and ends with [`ReadError::EndOfStream`].
    pub fn read_sample(&mut self) -> Result<Sample<F>, ReadError<R::Error>> {
        loop {
            if let Some(sample) = self.read_frame()? {
                return Ok(sample);
            }
            self.bad += 1;
        }
    }

    /// One frame: `Some` if good, `None` if bad; empty frames (repeated delimiters) are skipped.
    fn read_frame(&mut self) -> Result<Option<Sample<F>>, ReadError<R::Error>> {
        let mut body = Body {
            features: [0; F],
            tail: [0; 1 + CRC],
            len: 0,
        };
        // Data bytes left in the current block, and whether a zero follows it (code < 0xFF).
        let (mut left, mut zero_after) = (0u8, false);
        let mut started = false;
        loop {
            let mut byte = [0u8];
            let b = match self.reader.read(&mut byte) {
                Ok(0) => {
                    self.bad += started as u32;
                    return Err(ReadError::EndOfStream);
                }
                Ok(_) => byte[0],
                Err(e) => return Err(ReadError::Io(e)),
            };
            if b == DELIMITER {
                if !started {
                    continue;
                }
                return Ok(if left == 0 {
                    body.sample(self.classes)
                } else {
                    None
                });
            }
            started = true;
            if left > 0 {
                body.push(b);
                left -= 1;
            } else {
                if zero_after {
                    body.push(0);
                }
                left = b - 1;
                zero_after = b < 0xFF;
            }
        }
    }

    /// Gives the reader back.
    pub fn release(self) -> R {
        self.reader
    }
}
