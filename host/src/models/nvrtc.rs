//! The host's own CUDA kernels, compiled from source by NVRTC once per process.

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
