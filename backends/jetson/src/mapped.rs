//! Page-locked host memory mapped into the device's address space.

use std::ffi::c_void;

use cudarc::driver::{result, sys, CudaContext, DriverError};
use homeadam_core::Storage;

/// A zeroed, page-locked, device-mapped host allocation: one pointer for the CPU, one for the
/// GPU, the same bytes.
pub struct MappedBuffer {
    host: *mut c_void,
    device: u64,
    bytes: usize,
}

// SAFETY: the allocation is owned by this value and freed once, in `drop`; access goes through
// `&self` / `&mut self`.
unsafe impl Send for MappedBuffer {}

impl MappedBuffer {
    /// Allocates `bytes` (at least 1) in `ctx`, zeroed.
    pub fn zeroed(ctx: &CudaContext, bytes: usize) -> Result<Self, DriverError> {
        ctx.bind_to_thread()?;
        let bytes = bytes.max(1);
        // SAFETY: the context is current; DEVICEMAP asks for a device mapping.
        let host = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }?;
        // SAFETY: `host` points to `bytes` writable bytes.
        unsafe { std::ptr::write_bytes(host as *mut u8, 0, bytes) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in the current context; flags must be 0.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) }.result();
        if let Err(e) = mapped {
            // SAFETY: `host` came from malloc_host and is not used again.
            unsafe { result::free_host(host) }?;
            return Err(e);
        }
        Ok(MappedBuffer { host, device, bytes })
    }

    /// The device pointer of the same bytes.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Always false: an allocation holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The first `len` elements as `S`, for the CPU. The GPU must not be writing them (sync
    /// its stream first).
    pub fn as_mut_slice<S: Storage>(&mut self, len: usize) -> &mut [S] {
        assert!(
            len * std::mem::size_of::<S>() <= self.bytes,
            "mapped buffer too small"
        );
        // SAFETY: page-aligned, in bounds, zero-initialised, and any bit pattern is a valid S.
        unsafe { std::slice::from_raw_parts_mut(self.host as *mut S, len) }
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host and freed only here.
        let _ = unsafe { result::free_host(self.host) };
    }
}
