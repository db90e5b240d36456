//! homeadam-cuda: every homeadam-core rule as CUDA kernels, compiled at run time by NVRTC and
//! bit-identical to [`homeadam_core::Optimizer::step`], parameter groups included.
//!
//! - [`kernels`]: the CUDA C sources (`kernels/`), the metadata they share with Rust, the
//!   kernel names.
//! - [`nvrtc`]: their compilation.
//! - [`CudaOptimizer`]: the model-wide step over a device tensor table (one launch per pass).
#![deny(missing_docs)]

mod device;
mod error;
pub mod kernels;
pub mod nvrtc;
mod optimizer;

pub use error::Error;
pub use optimizer::{Compile, CudaOptimizer, DeviceTensor, Dtypes};
