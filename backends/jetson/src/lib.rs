//! homeadam-jetson: the Jetson path on top of [`homeadam_cuda`].
//!
//! - Xavier (sm_72, JetPack 5, CUDA 11.4) has no native bf16: f16 parameters and gradients
//!   with f32 state are the preferred low precision ([`preferred_dtypes`]); Orin (sm_87) runs
//!   bf16 too.
//! - The optimizer state lives in page-locked host memory mapped into the device's address
//!   space ([`MappedBuffer`]: `cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)` +
//!   `cuMemHostGetDevicePointer`). The GPU updates it in place; the CPU reads and writes it
//!   for checkpoints without a copy (Jetson's CPU and GPU share the same DRAM).
#![deny(missing_docs)]

mod mapped;
mod optimizer;

pub use mapped::MappedBuffer;
pub use optimizer::{preferred_dtypes, JetsonOptimizer, JetsonTensor, ARCHS};
