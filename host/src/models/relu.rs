//! `max(x, 0)`: candle's ReLU on the CPU, one op on CUDA whose backward pass is one kernel
//! (candle's is five: zeros, a comparison, a conversion, a product and the add into the
//! gradient). Both pass the gradient where `x ≥ 0`, as candle's CPU backward pass does.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

/// `max(x, 0)` elementwise.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    if x.device().is_cuda() {
        return Ok(x.contiguous()?.apply_op1(Forward)?);
    }
    Ok(x.relu()?)
}

/// `x → max(x, 0)`.
struct Forward;

/// `(x, ∂L/∂y) → ∂L/∂y [x ≥ 0]`.
struct Backward;

impl CustomOp1 for Forward {
    fn name(&self) -> &'static str {
        "homeadam-relu"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        super::cuda_only("the fused ReLU")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = crate::models::host_time::span(self.name());
        cuda::run((x, layout), None)
    }

    fn bwd(&self, x: &Tensor, _: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(x.apply_op2_no_bwd(&grad.contiguous()?, &Backward)?))
    }
}

impl CustomOp2 for Backward {
    fn name(&self) -> &'static str {
        "homeadam-relu-backward"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        super::cuda_only("the fused ReLU")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_layout: &Layout,
        grad: &candle_core::CudaStorage,
        grad_layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = crate::models::host_time::span(self.name());
        cuda::run((x, x_layout), Some((grad, grad_layout)))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One thread per element (`host/kernels/relu.cu`).

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/relu.cu");

    /// The forward pass over `x`, or with `grad` the backward pass.
    pub(super) fn run(
        (x, x_layout): (&CudaStorage, &Layout),
        grad: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "relu", SOURCE)?;
        let shape = x_layout.shape().clone();
        let n = shape.elem_count();
        let dev = x.device.clone();
        let x = contiguous::<f32>(x, x_layout, "relu")?;
        let grad = match grad {
            Some((g, l)) => Some(contiguous::<f32>(g, l, "relu")?),
            None => None,
        };
        let name = match grad {
            None => "homeadam_relu_f32",
            Some(_) => "homeadam_relu_backward_f32",
        };
        let func = dev.get_or_load_custom_func(name, "homeadam_relu", ptx)?;
        // SAFETY: the kernel writes every element.
        let mut out = unsafe { dev.alloc::<f32>(n)? };
        let n_arg = n as u64;
        let mut builder = func.builder();
        builder.arg(&x);
        if let Some(g) = &grad {
            builder.arg(g);
        }
        builder.arg(&mut out).arg(&n_arg);
        // SAFETY: every tensor holds n values.
        unsafe { builder.launch(per_element(n)) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
    }
}
