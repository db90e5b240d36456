//! cuDNN for the models' layers on CUDA ([`conv`], [`batch_norm`]): one handle per CUDA
//! stream and thread (cuDNN's handles are not to be shared between threads), holding what the
//! layers have planned and one workspace that grows to the largest need.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Arc;

use candle_core::{CudaStorage, Layout};
use cudarc::cudnn::sys;
use cudarc::driver::{CudaSlice, CudaStream, CudaView};

use crate::models::conv_geometry::Geometry;

pub(crate) mod batch_norm;
pub(crate) mod conv;

type CandleResult<T> = candle_core::Result<T>;

/// The scaling factors cuDNN's calls take by pointer: α = 1 (the result as computed), β = 0
/// (nothing of the output's old value).
const ONE: f32 = 1.0;
const ZERO: f32 = 0.0;

fn scalar(v: &f32) -> *const std::ffi::c_void {
    v as *const f32 as *const std::ffi::c_void
}

fn check(status: sys::cudnnStatus_t, what: &str) -> CandleResult<()> {
    match status {
        sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        other => candle_core::bail!("cuDNN: {what}: {other:?}"),
    }
}

/// A size as cuDNN's `int`.
fn int(n: usize) -> CandleResult<c_int> {
    c_int::try_from(n).map_err(|_| candle_core::Error::Msg(format!("cuDNN: size {n} exceeds an int")))
}

/// The f32 elements of a contiguous argument.
fn view<'a>(s: &'a CudaStorage, l: &Layout) -> CandleResult<CudaView<'a, f32>> {
    crate::models::cuda::contiguous(s, l, "cuDNN")
}

/// cuDNN bound to one CUDA stream, with the plans and descriptors it has made, its workspace
/// and the scratch of a transposed filter (both grow to the largest need).
struct Handle {
    raw: sys::cudnnHandle_t,
    /// Held so that the stream outlives the handle bound to it.
    stream: Arc<CudaStream>,
    plans: HashMap<Geometry, conv::Plan>,
    /// Batch norm's descriptors by input dims.
    batch_norms: HashMap<[usize; 4], batch_norm::Descriptors>,
    workspace: Option<CudaSlice<u8>>,
    transposed_filter: Option<CudaSlice<f32>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.plans.clear();
        self.batch_norms.clear();
        // SAFETY: `raw` was created by `Handle::new` and is destroyed only here, after the
        // plans' and batch norms' descriptors.
        unsafe {
            sys::cudnnDestroy(self.raw);
        }
    }
}

impl Handle {
    fn new(stream: Arc<CudaStream>) -> CandleResult<Handle> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a new handle, bound next to the live stream.
        unsafe {
            check(sys::cudnnCreate(&mut raw), "create handle")?;
            let handle = Handle {
                raw,
                stream,
                plans: HashMap::new(),
                batch_norms: HashMap::new(),
                workspace: None,
                transposed_filter: None,
            };
            check(
                sys::cudnnSetStream(raw, handle.stream.cu_stream() as sys::cudaStream_t),
                "set stream",
            )?;
            Ok(handle)
        }
    }
}

thread_local! {
    static HANDLES: RefCell<HashMap<usize, Handle>> = RefCell::new(HashMap::new());
}

/// Runs `f` with this thread's handle for `stream`, made at the first call.
fn with_handle<R>(
    stream: &Arc<CudaStream>,
    f: impl FnOnce(&mut Handle) -> CandleResult<R>,
) -> CandleResult<R> {
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        let handle = match handles.entry(Arc::as_ptr(stream) as usize) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Handle::new(stream.clone())?),
        };
        f(handle)
    })
}
