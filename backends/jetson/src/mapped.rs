//! Page-locked host memory mapped into the device's address space.

use std::ffi::c_void;

use cudarc::driver::{result, sys, CudaContext, DriverError};
use homeadam_core::StateStorage;

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

    /// The buffer's whole elements as `S`, for the CPU to read.
    ///
    /// # Safety
    ///
    /// No device work may write these bytes (through [`MappedBuffer::device_ptr`]) while the
    /// slice lives: every such launch or copy has completed (e.g. its stream was synchronized)
    /// and none is queued until the slice is dropped.
    pub unsafe fn as_slice<S: StateStorage>(&self) -> &[S] {
        // SAFETY: page-aligned, in bounds, initialised (zeroed at allocation), any bit pattern
        // is a valid S; the device does not write meanwhile (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.host as *const S, self.bytes / std::mem::size_of::<S>()) }
    }

    /// The buffer's whole elements as `S`, for the CPU to read and write.
    ///
    /// # Safety
    ///
    /// No device work may read or write these bytes (through [`MappedBuffer::device_ptr`])
    /// while the slice lives: every such launch or copy has completed (e.g. its stream was
    /// synchronized) and none is queued until the slice is dropped.
    pub unsafe fn as_mut_slice<S: StateStorage>(&mut self) -> &mut [S] {
        // SAFETY: as `as_slice`, and `&mut self` makes the CPU's access exclusive; the device
        // does not touch the bytes meanwhile (the caller's contract).
        unsafe { std::slice::from_raw_parts_mut(self.host as *mut S, self.bytes / std::mem::size_of::<S>()) }
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host and freed only here.
        let _ = unsafe { result::free_host(self.host) };
    }
}
