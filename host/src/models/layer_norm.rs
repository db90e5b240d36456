//! Layer normalisation over the last dimension, `y = (x − μ) / √(σ² + ε) · γ + β` with the row's
//! mean `μ` and biased variance `σ²`, one op for f32 (`candle_nn::ops::layer_norm_slow` for
//! another dtype, the tests' f64 references; candle's fused `layer_norm` has no backward pass).
//!
//! Composed from candle's ops, a layer norm is nine autograd nodes, each backward step an
//! elementwise pass plus an add into a zero-filled gradient. The op computes the forward pass
//! per row (on the CPU a task per block of rows, `models::cpu::rows`; on CUDA one warp per row,
//! `host/kernels/layer_norm.cu`); the backward pass recomputes `μ` and `σ`,
//! writes `∂L/∂x = (g − mean(g) − x̂ mean(g x̂)) / √(σ² + ε)` with `g = ∂L/∂y γ` and
//! `x̂ = (x − μ)/√(σ² + ε)`, and sums `∂L/∂γ = Σ_r ∂L/∂y_r x̂_r` and `∂L/∂β = Σ_r ∂L/∂y_r` over
//! the rows in a fixed order.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Shape, Tensor};

use super::cpu::{rows, values};
use super::op::{Arg, DeviceOp, Op};
use super::param_grads::unpack_normalisation;

/// Layer norm of `x` (`[.., d]`) with weight `gamma` and bias `beta` (`[d]`).
pub fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.dims().last().copied().unwrap_or(0);
    ensure!(
        d > 0 && gamma.dims() == [d] && beta.dims() == [d],
        "layer norm: input {:?} with weight {:?} and bias {:?}",
        x.dims(),
        gamma.dims(),
        beta.dims()
    );
    if x.dtype() == DType::F32 {
        let (gamma, beta) = (gamma.contiguous()?, beta.contiguous()?);
        return Ok(x.contiguous()?.apply_op3(&gamma, &beta, Op(Forward { eps }))?);
    }
    Ok(candle_nn::ops::layer_norm_slow(x, gamma, beta, eps)?)
}

/// `(x, γ, β) → y`.
struct Forward {
    eps: f32,
}

/// `(x, γ, ∂L/∂y) → [∂L/∂x, ∂L/∂γ, ∂L/∂β]`, packed in one vector.
struct Backward {
    eps: f32,
}

impl DeviceOp<3> for Forward {
    fn name(&self) -> &'static str {
        "homeadam-layer-norm"
    }

    fn cpu(
        &self,
        [(x, x_layout), (gamma, gamma_layout), (beta, beta_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(x, x_layout, self.name())?;
        let gamma = values(gamma, gamma_layout, self.name())?;
        let beta = values(beta, beta_layout, self.name())?;
        let y = rows::layer_norm(x, gamma, beta, self.eps);
        Ok((CpuStorage::F32(y), x_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (gamma, gamma_layout), (beta, beta_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(
            cuda::Pass::Forward,
            self.eps,
            (x, x_layout),
            (gamma, gamma_layout),
            (beta, beta_layout),
        )
    }

    fn gradients(
        &self,
        [x, gamma, beta]: [&Tensor; 3],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 3]> {
        let packed = x.apply_op3_no_bwd(gamma, &grad.contiguous()?, &Op(Backward { eps: self.eps }))?;
        unpack_normalisation(&packed, x, gamma, beta)
    }
}

impl DeviceOp<3> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-layer-norm-backward"
    }

    fn cpu(
        &self,
        [(x, x_layout), (gamma, gamma_layout), (dy, dy_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if dy_layout.shape() != x_layout.shape() {
            candle_core::bail!(
                "layer norm: a gradient {:?} for {:?}",
                dy_layout.dims(),
                x_layout.dims()
            );
        }
        let x = values(x, x_layout, self.name())?;
        let gamma = values(gamma, gamma_layout, self.name())?;
        let dy = values(dy, dy_layout, self.name())?;
        let packed = rows::layer_norm_backward(x, gamma, dy, self.eps);
        let n = packed.len();
        Ok((CpuStorage::F32(packed), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (gamma, gamma_layout), (grad, grad_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(
            cuda::Pass::Backward,
            self.eps,
            (x, x_layout),
            (gamma, gamma_layout),
            (grad, grad_layout),
        )
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One warp per row (`host/kernels/layer_norm.cu`); the parameters' gradients by
    //! [`column_sum`].

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{column_sum, contiguous, kernel_u32, ptx, warp_per_row};

    const SOURCE: &str = include_str!("../../kernels/layer_norm.cu");

    /// Which kernel a call runs; the third argument is `β` forward and `∂L/∂y` backward.
    #[derive(Clone, Copy)]
    pub(super) enum Pass {
        Forward,
        Backward,
    }

    pub(super) fn run(
        pass: Pass,
        eps: f32,
        (x, x_layout): (&CudaStorage, &Layout),
        (gamma, gamma_layout): (&CudaStorage, &Layout),
        (third, third_layout): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "layer norm", SOURCE)?;
        let d = gamma_layout.shape().elem_count();
        let n = x_layout.shape().elem_count();
        let rows = n / d;
        let dev = x.device.clone();
        let x = contiguous::<f32>(x, x_layout, "layer norm")?;
        let gamma = contiguous::<f32>(gamma, gamma_layout, "layer norm")?;
        let third = contiguous::<f32>(third, third_layout, "layer norm")?;
        let (rows_arg, d_arg) = (kernel_u32(rows, "layer norm")?, kernel_u32(d, "layer norm")?);
        match pass {
            Pass::Forward => {
                // SAFETY: the kernel writes every element.
                let mut y = unsafe { dev.alloc::<f32>(n)? };
                let func =
                    dev.get_or_load_custom_func("homeadam_layer_norm_f32", "homeadam_layer_norm", ptx)?;
                let mut builder = func.builder();
                builder
                    .arg(&x)
                    .arg(&gamma)
                    .arg(&third)
                    .arg(&mut y)
                    .arg(&rows_arg)
                    .arg(&d_arg)
                    .arg(&eps);
                // SAFETY: x and y hold rows × d values, γ and β d.
                unsafe { builder.launch(warp_per_row(rows)) }.w()?;
                Ok((CudaStorage::wrap_cuda_slice(y, dev), x_layout.shape().clone()))
            }
            Pass::Backward => {
                // SAFETY: the kernel writes ∂L/∂x (the first n) and the column sums the rest.
                let mut packed = unsafe { dev.alloc::<f32>(n + 2 * d)? };
                // SAFETY: the kernel writes every element.
                let mut dy_xhat = unsafe { dev.alloc::<f32>(n)? };
                let func = dev.get_or_load_custom_func(
                    "homeadam_layer_norm_backward_f32",
                    "homeadam_layer_norm",
                    ptx,
                )?;
                {
                    let mut dx = packed.slice_mut(0..n);
                    let mut builder = func.builder();
                    builder
                        .arg(&x)
                        .arg(&gamma)
                        .arg(&third)
                        .arg(&mut dx)
                        .arg(&mut dy_xhat)
                        .arg(&rows_arg)
                        .arg(&d_arg)
                        .arg(&eps);
                    // SAFETY: x, ∂L/∂y, ∂L/∂x and dy_xhat hold rows × d values, γ d.
                    unsafe { builder.launch(warp_per_row(rows)) }.w()?;
                }
                column_sum(&dev, &dy_xhat.as_view(), rows, d, &mut packed.slice_mut(n..n + d))?;
                column_sum(&dev, &third, rows, d, &mut packed.slice_mut(n + d..n + 2 * d))?;
                Ok((CudaStorage::wrap_cuda_slice(packed, dev), Shape::from(n + 2 * d)))
            }
        }
    }
}
