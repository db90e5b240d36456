//! Training samples from a byte stream: a UART, a USB link, a sensor driver's buffer.

use embedded_io::{Read, ReadExactError};

/// One labelled sample: `F` feature bytes and a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample<const F: usize> {
    /// The features (for the digits: 64 pixels, 0..=16).
    pub features: [u8; F],
    /// The class, below the reader's class count.
    pub label: u8,
}

/// Why a sample could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError<E> {
    /// The stream ended (cleanly between samples, or inside one).
    EndOfStream,
    /// A label at or above the class count: the stream is out of step or corrupt.
    BadLabel(u8),
    /// The underlying reader failed.
    Io(E),
}

/// Reads frames of `F` feature bytes followed by one label byte from any [`Read`].
pub struct SampleReader<R, const F: usize> {
    reader: R,
    classes: u8,
}

impl<R: Read, const F: usize> SampleReader<R, F> {
    /// A reader of samples whose labels are below `classes`.
    pub fn new(reader: R, classes: u8) -> Self {
        SampleReader { reader, classes }
    }

    /// Reads the next sample, however the reader splits it into reads.
    pub fn read_sample(&mut self) -> Result<Sample<F>, ReadError<R::Error>> {
        let mut features = [0u8; F];
        let mut label = [0u8; 1];
        self.reader
            .read_exact(&mut features)
            .and_then(|()| self.reader.read_exact(&mut label))
            .map_err(|e| match e {
                ReadExactError::UnexpectedEof => ReadError::EndOfStream,
                ReadExactError::Other(e) => ReadError::Io(e),
            })?;
        if label[0] >= self.classes {
            return Err(ReadError::BadLabel(label[0]));
        }
        Ok(Sample {
            features,
            label: label[0],
        })
    }

    /// Gives the reader back.
    pub fn release(self) -> R {
        self.reader
    }
}
