//! Where a CUDA tensor's elements start on its device, for the kernels' tensor table and for
//! telling storages apart.

use candle_core::cuda::cudarc::driver::DevicePtr;
use candle_core::cuda::CudaStorageSlice;
use candle_core::{Result, Storage as Stored, Tensor};

use crate::error::bail;

/// The device address of a contiguous CUDA tensor's first element.
pub(crate) fn device_address(t: &Tensor, what: &str) -> Result<u64> {
    let (storage, layout) = t.storage_and_layout();
    let Stored::Cuda(cuda) = &*storage else {
        bail!("homeadam: {what} is on {:?}, not on a CUDA device", t.device());
    };
    let Some((start, _)) = layout.contiguous_offsets() else {
        bail!("homeadam: {what} is not contiguous");
    };
    let stream = cuda.device.cuda_stream();
    // The guard of `device_ptr` orders candle's later work after this read; every launch
    // that uses the address goes to the same stream.
    let (base, size) = match &cuda.slice {
        CudaStorageSlice::F32(s) => (s.device_ptr(&stream).0, 4),
        CudaStorageSlice::BF16(s) => (s.device_ptr(&stream).0, 2),
        CudaStorageSlice::F16(s) => (s.device_ptr(&stream).0, 2),
        _ => bail!(
            "homeadam: {what} has dtype {:?}, expected f32, bf16 or f16",
            t.dtype()
        ),
    };
    Ok(base + (start * size) as u64)
}
