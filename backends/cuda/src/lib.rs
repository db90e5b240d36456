//! homeadam-cuda: every homeadam-core rule as CUDA kernels, compiled at run time by NVRTC and
//! bit-identical to [`homeadam_core::Optimizer::step_reference`].
//!
//! - [`kernels`]: the CUDA C sources (`kernels/*.cu`, `kernels/homeadam_math.h`) and NVRTC.
//! - [`CudaOptimizer`]: the model-wide step over a device tensor table (one launch per pass).
#![deny(missing_docs)]

mod device;
pub mod kernels;
mod optimizer;

pub use optimizer::{CudaOptimizer, DeviceTensor, Dtypes, Error};
