//! `defmt::Format` for the public types (feature `defmt`).

use defmt::{write, Format, Formatter};
use embedded_storage::nor_flash::NorFlashErrorKind;

use crate::{FlashError, ReadError, Sample, TrainerError};

impl Format for TrainerError {
    fn format(&self, f: Formatter<'_>) {
        match self {
            TrainerError::Core(e) => write!(f, "core: {}", e),
            TrainerError::Capacity { needed, capacity } => {
                write!(f, "state needs {} items, capacity {}", needed, capacity)
            }
        }
    }
}

impl Format for FlashError {
    fn format(&self, f: Formatter<'_>) {
        match self {
            FlashError::Flash(NorFlashErrorKind::NotAligned) => write!(f, "flash: not aligned"),
            FlashError::Flash(NorFlashErrorKind::OutOfBounds) => write!(f, "flash: out of bounds"),
            FlashError::Flash(_) => write!(f, "flash: driver error"),
            FlashError::Layout => write!(f, "slots do not fit the flash geometry"),
            FlashError::TooLarge { needed } => write!(f, "a slot needs {} bytes", needed),
            FlashError::Scratch { needed } => write!(f, "scratch needs {} bytes", needed),
            FlashError::Trainer(e) => write!(f, "{}", e),
        }
    }
}

impl<E> Format for ReadError<E> {
    fn format(&self, f: Formatter<'_>) {
        match self {
            ReadError::EndOfStream => write!(f, "end of stream"),
            ReadError::BadLabel(l) => write!(f, "bad label {}", l),
            ReadError::Io(_) => write!(f, "i/o error"),
        }
    }
}

impl<const F: usize> Format for Sample<F> {
    fn format(&self, f: Formatter<'_>) {
        write!(
            f,
            "Sample {{ label: {}, features: {} }}",
            self.label, self.features
        )
    }
}
