//! The CUDA libraries a `homeadam` built by `cargo xtask build-cuda` opens at run time, not
//! at start: a machine without them runs every CPU command, and `--device cuda` there is an
//! error naming what is missing (`homeadam_host::device`). xtask builds the lazy bindings of the same
//! table (it includes this file).

/// One shared library, opened by its soname when the first CUDA call needs it.
pub struct CudaLibrary {
    /// The name the loader looks for.
    pub soname: &'static str,
    /// The name the link asks for (`-l{link}`).
    pub link: &'static str,
    /// What provides it, for the error that says how to install it.
    pub provides: &'static str,
    /// The PyPI package that ships it (the driver is not on PyPI).
    pub wheel: Option<&'static str>,
}

/// The driver, the CUDA 13 libraries of candle's cudarc and cuDNN 9 (the host's convolutions).
pub const CUDA_LIBRARIES: [CudaLibrary; 6] = [
    CudaLibrary {
        soname: "libcuda.so.1",
        link: "cuda",
        provides: "the NVIDIA driver",
        wheel: None,
    },
    CudaLibrary {
        soname: "libcublas.so.13",
        link: "cublas",
        provides: "CUDA 13's cuBLAS",
        wheel: Some("nvidia-cublas"),
    },
    CudaLibrary {
        soname: "libcublasLt.so.13",
        link: "cublasLt",
        provides: "CUDA 13's cuBLAS",
        wheel: Some("nvidia-cublas"),
    },
    CudaLibrary {
        soname: "libcurand.so.10",
        link: "curand",
        provides: "CUDA 13's cuRAND",
        wheel: Some("nvidia-curand"),
    },
    CudaLibrary {
        soname: "libnvrtc.so.13",
        link: "nvrtc",
        provides: "CUDA 13's NVRTC",
        wheel: Some("nvidia-cuda-nvrtc"),
    },
    CudaLibrary {
        soname: "libcudnn.so.9",
        link: "cudnn",
        provides: "cuDNN 9",
        wheel: Some("nvidia-cudnn-cu13"),
    },
];
