//! [`Error`]: what the CUDA backend refuses or fails at.

use cudarc::driver::DriverError;

use crate::nvrtc::CompileError;

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The core refused (config, group, gradient scale, f16 second moment, checkpoint).
    Core(homeadam_core::Error),
    /// A CUDA driver call failed.
    Driver(DriverError),
    /// NVRTC failed.
    Compile(CompileError),
    /// Not supported on this backend yet.
    Unsupported(&'static str),
    /// A list of per-tensor values (e.g. gradient pointers) does not have one per tensor.
    TensorCount {
        /// Registered tensors.
        expected: usize,
        /// Values given.
        actual: usize,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Core(e) => write!(f, "{e}"),
            Error::Driver(e) => write!(f, "CUDA driver: {e:?}"),
            Error::Compile(e) => write!(f, "{e}"),
            Error::Unsupported(what) => write!(f, "not supported on CUDA: {what}"),
            Error::TensorCount { expected, actual } => {
                write!(
                    f,
                    "{actual} values for {expected} tensors: expected one per tensor"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<homeadam_core::Error> for Error {
    fn from(e: homeadam_core::Error) -> Self {
        Error::Core(e)
    }
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

impl From<CompileError> for Error {
    fn from(e: CompileError) -> Self {
        Error::Compile(e)
    }
}
