//! Softmax cross-entropy `L = (1/R) Σ_r (log Σ_j e^{x_rj} − x_{r,t_r})` of logits `x`
//! (`[R, C]`) against class ids `t` (`[R]`, u32), as one op for f32 logits (candle's
//! `cross_entropy` for another dtype, the tests' f64 references).
//!
//! Composed from candle's ops, the loss makes about fifteen passes over the logits forward and
//! backward, each writing a tensor of their size (the Transformer's are 37 M values per step).
//! The op computes each row's `log Σ e^{x − max} + max − x_t`, and its backward pass writes
//! `∂L/∂x_rj = g_r (e^{x_rj − max}/Σ − [j = t_r])` in one pass, recomputing the row's maximum
//! and sum (nothing stored): on the CPU a task per row (`models::cpu::rows`), on CUDA one
//! kernel per pass. A class id outside `[0, C)` gives a NaN loss on the device (reading it back
//! would stall the stream) and an error on the CPU.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Layout, Shape, Tensor};

use super::cpu::{ids, rows, values};
use super::op::{Arg, DeviceOp, Op};

/// The mean cross-entropy of `logits` (`[R, C]`, f32) against `target` (`[R]`, u32).
pub fn cross_entropy(logits: &Tensor, target: &Tensor) -> Result<Tensor> {
    ensure!(
        logits.rank() == 2 && logits.dim(0)? > 0 && target.dims() == [logits.dim(0)?],
        "cross-entropy: logits {:?} and targets {:?} are not [rows, classes] and [rows] with rows > 0",
        logits.dims(),
        target.dims()
    );
    if logits.dtype() == DType::F32 && target.dtype() == DType::U32 {
        let rows = logits
            .contiguous()?
            .apply_op2(&target.contiguous()?, Op(PerRow))?;
        return Ok(rows.mean_all()?);
    }
    Ok(candle_nn::loss::cross_entropy(logits, target)?)
}

/// The logits' values, the class ids and the classes of the CPU's arguments: an error for a
/// class id outside `[0, C)`.
fn logits_and_targets<'a>(
    (x, x_layout): (&'a CpuStorage, &Layout),
    (t, t_layout): (&'a CpuStorage, &Layout),
) -> candle_core::Result<(&'a [f32], &'a [u32], usize)> {
    let x = values(x, x_layout, "cross-entropy")?;
    let (_, classes) = x_layout.shape().dims2()?;
    Ok((x, ids(t, t_layout, classes, "cross-entropy: class id")?, classes))
}

/// `(x, t) → [log Σ_j e^{x_rj} − x_{r,t_r}]_r`.
struct PerRow;

/// `(x, t, g) → ∂(Σ_r g_r L_r)/∂x`.
struct RowGradient;

impl DeviceOp<2> for PerRow {
    fn name(&self) -> &'static str {
        "homeadam-cross-entropy"
    }

    fn cpu(
        &self,
        [(x, x_layout), (t, t_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, t, classes) = logits_and_targets((x, x_layout), (t, t_layout))?;
        let losses = rows::cross_entropy(x, t, classes);
        Ok((CpuStorage::F32(losses), Shape::from(t.len())))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (t, t_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(cuda::Pass::Forward, (x, x_layout), (t, t_layout), None)
    }

    fn gradients(
        &self,
        [x, t]: [&Tensor; 2],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 2]> {
        let dx = x.apply_op3_no_bwd(t, &grad.contiguous()?, &Op(RowGradient))?;
        Ok([Some(dx), None])
    }
}

impl DeviceOp<3> for RowGradient {
    fn name(&self) -> &'static str {
        "homeadam-cross-entropy-backward"
    }

    fn cpu(
        &self,
        [(x, x_layout), (t, t_layout), (g, g_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, t, classes) = logits_and_targets((x, x_layout), (t, t_layout))?;
        let g = values(g, g_layout, self.name())?;
        if g.len() != t.len() {
            candle_core::bail!("cross-entropy: {} row gradients for {} rows", g.len(), t.len());
        }
        let dx = rows::cross_entropy_backward(x, t, g, classes);
        Ok((CpuStorage::F32(dx), x_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (t, t_layout), (g, g_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(
            cuda::Pass::Backward,
            (x, x_layout),
            (t, t_layout),
            Some((g, g_layout)),
        )
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One block of 256 threads per row: each thread takes a strided share of the row, then
    //! a fixed tree (warp shuffles, then the block's warps) combines the shares, so the bits
    //! repeat run after run.

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::contiguous;

    const SOURCE: &str = include_str!("../../kernels/cross_entropy.cu");

    /// Which kernel a call runs.
    #[derive(Clone, Copy)]
    pub(super) enum Pass {
        Forward,
        Backward,
    }

    const THREADS: u32 = 256;

    pub(super) fn run(
        pass: Pass,
        (x, x_layout): (&CudaStorage, &Layout),
        (t, t_layout): (&CudaStorage, &Layout),
        g: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = crate::models::cuda::ptx(&PTX, "cross-entropy", SOURCE)?;
        let dev = x.device.clone();
        let (rows, cols) = x_layout.shape().dims2()?;
        let cols_arg = u32::try_from(cols)
            .map_err(|_| candle_core::Error::Msg(format!("cross-entropy: {cols} classes")))?;
        let x = contiguous::<f32>(x, x_layout, "cross-entropy")?;
        let t = contiguous::<u32>(t, t_layout, "cross-entropy")?;
        let name = match pass {
            Pass::Forward => "homeadam_cross_entropy_f32",
            Pass::Backward => "homeadam_cross_entropy_backward_f32",
        };
        let func = dev.get_or_load_custom_func(name, "homeadam_cross_entropy", ptx)?;
        let (len, shape) = match pass {
            Pass::Forward => (rows, Shape::from(rows)),
            Pass::Backward => (rows * cols, x_layout.shape().clone()),
        };
        // SAFETY: the kernel writes every element (one per row, or every logit's gradient).
        let out = unsafe { dev.alloc::<f32>(len)? };
        let config = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = func.builder();
        builder.arg(&x).arg(&t);
        let g = match g {
            Some((g, g_layout)) => Some(contiguous::<f32>(g, g_layout, "cross-entropy")?),
            None => None,
        };
        if let Some(g) = &g {
            builder.arg(g);
        }
        builder.arg(&out).arg(&cols_arg);
        // SAFETY: the arguments match the kernel's signature: x holds rows × cols values, t
        // and g one per row, out `len`.
        unsafe { builder.launch(config) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
    }
}
