//! Attention's causal softmax, `softmax(s / c + M)` over the last dimension of `[.., t, t]`
//! scores `s`, where the mask `M` is 0 on and below the diagonal and `−∞` above it (query `i`
//! sees keys `j ≤ i`), as one op for f32 (candle's division, broadcast add and
//! `candle_nn::ops::softmax` for another dtype, the tests' f64 references).
//!
//! Composed, the three are seven autograd nodes. The op computes
//! `y_j = e^{z_j − max z} / Σ_{k ≤ i} e^{z_k − max z}` with `z = s / c` (zero above the diagonal,
//! as `e^{−∞}`), and the backward pass `∂L/∂s_j = y_j (∂L/∂y_j − Σ_k y_k ∂L/∂y_k) / c` from the
//! output: on the CPU a task per block of rows (`models::cpu::rows`), on CUDA one warp per
//! row (`host/kernels/softmax.cu`).

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Shape, Tensor, D};

use super::cpu::{rows, same_shape_values, values};
use super::op::{Arg, DeviceOp, Op};

/// The causal softmax of `scores` (`[.., t, t]`) divided by `divisor`; `mask` is the `[t, t]`
/// additive causal mask of the f64 reference (0 or `−∞`); the op computes it.
pub fn causal_softmax(scores: &Tensor, divisor: f64, mask: &Tensor) -> Result<Tensor> {
    let dims = scores.dims();
    ensure!(
        dims.len() >= 2
            && dims[dims.len() - 1] == dims[dims.len() - 2]
            && mask.dims() == &dims[dims.len() - 2..],
        "causal softmax: scores {dims:?} are not [.., t, t] or the mask {:?} not [t, t]",
        mask.dims()
    );
    if scores.dtype() == DType::F32 {
        let divisor = divisor as f32;
        return Ok(scores.contiguous()?.apply_op1(Op(Forward { divisor }))?);
    }
    Ok(candle_nn::ops::softmax(
        &(scores / divisor)?.broadcast_add(mask)?,
        D::Minus1,
    )?)
}

/// `s → y`.
struct Forward {
    divisor: f32,
}

/// `(y, ∂L/∂y) → ∂L/∂s`.
struct Backward {
    divisor: f32,
}

impl DeviceOp<1> for Forward {
    fn name(&self) -> &'static str {
        "homeadam-causal-softmax"
    }

    fn cpu(&self, [(s, layout)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let t = *layout.dims().last().expect("scores of rank ≥ 2");
        let y = rows::causal_softmax(values(s, layout, self.name())?, t, self.divisor);
        Ok((CpuStorage::F32(y), layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(s, layout)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(self.divisor, (s, layout), None)
    }

    fn gradients(
        &self,
        [_]: [&Tensor; 1],
        y: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 1]> {
        let backward = Backward {
            divisor: self.divisor,
        };
        Ok([Some(y.apply_op2_no_bwd(&grad.contiguous()?, &Op(backward))?)])
    }
}

impl DeviceOp<2> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-causal-softmax-backward"
    }

    fn cpu(
        &self,
        [(y, y_layout), (dy, dy_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let [y, dy] = same_shape_values(self.name(), [(y, y_layout), (dy, dy_layout)])?;
        let t = *y_layout.dims().last().expect("scores of rank ≥ 2");
        let ds = rows::causal_softmax_backward(y, dy, t, self.divisor);
        Ok((CpuStorage::F32(ds), y_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(y, y_layout), (grad, grad_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(self.divisor, (y, y_layout), Some((grad, grad_layout)))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One warp per row of scores (`host/kernels/softmax.cu`).

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, kernel_u32, ptx, warp_per_row};

    const SOURCE: &str = include_str!("../../kernels/softmax.cu");

    /// The forward pass over `first` = the scores, or with `grad` the backward pass over
    /// `first` = the forward pass's output.
    pub(super) fn run(
        divisor: f32,
        (first, first_layout): (&CudaStorage, &Layout),
        grad: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "causal softmax", SOURCE)?;
        let shape = first_layout.shape().clone();
        let n = shape.elem_count();
        let t = *shape.dims().last().expect("scores of rank ≥ 2");
        let rows = n / t;
        let dev = first.device.clone();
        let first = contiguous::<f32>(first, first_layout, "causal softmax")?;
        let grad = match grad {
            Some((g, l)) => Some(contiguous::<f32>(g, l, "causal softmax")?),
            None => None,
        };
        let name = match grad {
            None => "homeadam_causal_softmax_f32",
            Some(_) => "homeadam_causal_softmax_backward_f32",
        };
        let func = dev.get_or_load_custom_func(name, "homeadam_causal_softmax", ptx)?;
        // SAFETY: the kernel writes every element.
        let mut out = unsafe { dev.alloc::<f32>(n)? };
        let (rows_arg, t_arg) = (
            kernel_u32(rows, "causal softmax")?,
            kernel_u32(t, "causal softmax")?,
        );
        let mut builder = func.builder();
        builder.arg(&first);
        if let Some(g) = &grad {
            builder.arg(g);
        }
        builder.arg(&mut out).arg(&rows_arg).arg(&t_arg).arg(&divisor);
        // SAFETY: every tensor holds rows × t values, as the kernel reads and writes them.
        unsafe { builder.launch(warp_per_row(rows)) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
    }
}
