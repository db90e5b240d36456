//! The microcontroller path of homeadam: no_std, no allocation.
//!
//! - [`Trainer`]: parameters and optimizer state of a model of known size in fixed-capacity
//!   arrays, stepped by the core's [`homeadam_core::Optimizer`] (any rule; the firmware uses
//!   HomeAdamW-ew, HomeAdamW, AdamW and SGDM). Its last type parameter is the set of rules it
//!   links ([`homeadam_core::rules::only`], default all): a firmware that trains one rule names
//!   it (`Trainer<f32, N, CAP, only::HomeAdamWElement>`) and links only that rule's kernel.
//! - [`FlashStore`]: weights + optimizer state + step in two `embedded-storage` [`NorFlash`]
//!   slots with a CRC and a sequence number, written so a reset or power cut mid-write never
//!   loses the last good state.
//! - [`SampleReader`]: training samples from any `embedded-io` [`Read`] (a UART, a USB CDC
//!   link, a sensor driver's buffer).
//! - [`frame`]: the same samples framed with a CRC for a lossy link (a UART): the host's sender
//!   encodes, the device's [`FrameReader`] skips and counts bad frames.
//! - [`RamFlash`]: a NOR flash in RAM with power-cut injection, for tests and emulators.
//! - [`golden`]: golden vectors from the host core, checked bit for bit on the device.
//!
//! [`NorFlash`]: embedded_storage::nor_flash::NorFlash
//! [`Read`]: embedded_io::Read
#![no_std]
#![deny(missing_docs)]

mod flash;
#[cfg(feature = "defmt")]
mod fmt;
pub mod frame;
pub mod golden;
mod ramflash;
mod samples;
mod trainer;

pub use flash::{FlashError, FlashStore, SLOT_HEADER};
pub use frame::FrameReader;
pub use ramflash::{RamFlash, RamFlashError};
pub use samples::{ReadError, Sample, SampleReader};
pub use trainer::{Trainer, TrainerError};
