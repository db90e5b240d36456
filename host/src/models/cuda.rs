//! What the host's own CUDA ops share: their kernels compiled from source by NVRTC once per
//! process, the contiguous elements of candle's device storage, launch shapes, and column sums.

use std::sync::OnceLock;

use candle_core::cuda::cudarc::driver::{CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, WrapErr};

/// The reductions every kernel source may use (`host/kernels/reduce.cuh`), put before it.
const REDUCE_HEADER: &str = include_str!("../../kernels/reduce.cuh");

/// The PTX of `source` after [`REDUCE_HEADER`], compiled at the first call for `cell` (`what`
/// names it in errors).
pub(crate) fn ptx(
    cell: &'static OnceLock<Result<String, String>>,
    what: &str,
    source: &str,
) -> candle_core::Result<&'static str> {
    cell.get_or_init(|| {
        candle_core::cuda::cudarc::nvrtc::compile_ptx(format!("{REDUCE_HEADER}{source}"))
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

/// One thread per element, 256 to a block (the kernels loop when `n` needs more than 65,535
/// blocks).
pub(crate) fn per_element(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 65_535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One warp per row, 8 rows to a block.
pub(crate) fn warp_per_row(rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.div_ceil(8).max(1) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// `v` as a kernel's `unsigned int`, or an error naming `what`.
pub(crate) fn kernel_u32(v: usize, what: &str) -> candle_core::Result<u32> {
    u32::try_from(v).map_err(|_| candle_core::Error::Msg(format!("{what}: size {v} exceeds 2³² − 1")))
}

/// `out[j] = Σ_r x[r, j]` for a contiguous `rows × cols` matrix `x`, summed in a fixed order
/// (`host/kernels/column_sum.cu`): chunks of [`COLUMN_SUM_CHUNK`] rows, then the chunks.
pub(crate) fn column_sum(
    dev: &CudaDevice,
    x: &CudaView<'_, f32>,
    rows: usize,
    cols: usize,
    out: &mut CudaViewMut<'_, f32>,
) -> candle_core::Result<()> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    const SOURCE: &str = include_str!("../../kernels/column_sum.cu");
    let ptx = ptx(&PTX, "column sum", SOURCE)?;
    let chunks = rows.div_ceil(COLUMN_SUM_CHUNK).max(1);
    let (rows, cols_arg) = (kernel_u32(rows, "column sum")?, kernel_u32(cols, "column sum")?);
    let (chunks_arg, chunk) = (kernel_u32(chunks, "column sum")?, COLUMN_SUM_CHUNK as u32);
    // SAFETY: the first kernel writes every one of the chunks × cols partial sums.
    let mut partial = unsafe { dev.alloc::<f32>(chunks * cols)? };
    let first = dev.get_or_load_custom_func("homeadam_column_sum_partial_f32", "homeadam_column_sum", ptx)?;
    let config = LaunchConfig {
        grid_dim: (cols_arg.div_ceil(32), chunks_arg, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = first.builder();
    builder
        .arg(x)
        .arg(&mut partial)
        .arg(&rows)
        .arg(&cols_arg)
        .arg(&chunk);
    // SAFETY: x holds rows × cols values and partial chunks × cols, as the kernel reads them.
    unsafe { builder.launch(config) }.w()?;
    let second = dev.get_or_load_custom_func("homeadam_column_sum_finish_f32", "homeadam_column_sum", ptx)?;
    let mut builder = second.builder();
    builder.arg(&partial).arg(out).arg(&chunks_arg).arg(&cols_arg);
    // SAFETY: partial holds chunks × cols values and out cols.
    unsafe { builder.launch(per_element(cols)) }.w()?;
    Ok(())
}

/// The rows each block of the column sums' first pass adds.
const COLUMN_SUM_CHUNK: usize = 64;
