//! What the host's own CUDA ops share: their kernels compiled from source by NVRTC once per
//! process, and the contiguous elements of candle's device storage.

use std::sync::OnceLock;

/// The PTX of `source`, compiled at the first call for `cell` (`what` names it in errors).
pub(crate) fn ptx(
    cell: &'static OnceLock<Result<String, String>>,
    what: &str,
    source: impl FnOnce() -> String,
) -> candle_core::Result<&'static str> {
    cell.get_or_init(|| {
        candle_core::cuda::cudarc::nvrtc::compile_ptx(source())
            .map(|ptx| ptx.to_src())
            .map_err(|e| format!("{what} kernel: NVRTC: {e}"))
    })
    .as_deref()
    .map_err(|e| candle_core::Error::Msg(e.clone()))
}

/// The elements of a contiguous argument `s` with layout `l` (`what` names the op in errors).
pub(crate) fn contiguous<'a, T: candle_core::cuda_backend::CudaDType>(
    s: &'a candle_core::CudaStorage,
    l: &candle_core::Layout,
    what: &str,
) -> candle_core::Result<candle_core::cuda::cudarc::driver::CudaView<'a, T>> {
    let Some((start, end)) = l.contiguous_offsets() else {
        candle_core::bail!("{what}: an argument is not contiguous");
    };
    Ok(s.as_cuda_slice::<T>()?.slice(start..end))
}
