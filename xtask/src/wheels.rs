//! The pinned CUDA wheels from PyPI: the NVRTC of the CUDA tests ([`crate::cuda`]) and the
//! toolkit of `cargo xtask build-cuda` ([`crate::build_cuda`]); the CI cache's key hashes them
//! ([`crate::cache`]).

/// The NVRTC wheel (CUDA 12.9, as cudarc's `cuda-12090` feature).
pub(crate) const NVRTC_WHEEL: &str = "nvidia-cuda-nvrtc-cu12==12.9.86";

/// The wheels nvcc needs: the compiler, NVVM, its headers, the runtime (headers and libcudart)
/// and CCCL (headers of candle's kernels).
pub(crate) const NVCC_WHEELS: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
];
