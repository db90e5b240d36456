//! `max(x, 0)` and `max(a + b, 0)`, one op each whose backward pass is one pass over memory
//! (candle's ReLU backward pass is five: zeros, a comparison, a conversion, a product and the
//! add into the gradient). Both pass the gradient where the ReLU's input is ≥ 0, as candle's
//! CPU backward pass does. Another dtype than f32 (the f64 references of the tests) takes
//! candle's ops.
//!
//! The ReLU of a sum is a residual block's output. Fused, the sum is no node of candle's graph,
//! so candle's backward pass has one gradient fewer to add into a zero-filled buffer.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Shape, Tensor};

use super::cpu::elementwise::{map2, map3};
use super::cpu::{same_shape_values, values};
use super::op::{Arg, DeviceOp, Op};

/// `max(x, 0)` elementwise.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    if x.dtype() != DType::F32 {
        return Ok(x.relu()?);
    }
    Ok(x.contiguous()?.apply_op1(Op(Forward))?)
}

/// `max(a + b, 0)` elementwise, for `a` and `b` of one shape.
pub fn relu_of_sum(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    ensure!(
        a.shape() == b.shape(),
        "relu of a sum: shapes {:?} and {:?} differ",
        a.dims(),
        b.dims()
    );
    if a.dtype() != DType::F32 {
        return Ok((a + b)?.relu()?);
    }
    Ok(a.contiguous()?.apply_op2(&b.contiguous()?, Op(SumForward))?)
}

/// `x → max(x, 0)`.
struct Forward;

/// `(x, ∂L/∂y) → ∂L/∂y [x ≥ 0]`.
struct Backward;

/// `(a, b) → max(a + b, 0)`.
struct SumForward;

/// `(a, b, ∂L/∂y) → ∂L/∂y [a + b ≥ 0]`, the gradient of both `a` and `b`.
struct SumBackward;

impl DeviceOp<1> for Forward {
    fn name(&self) -> &'static str {
        "homeadam-relu"
    }

    fn cpu(&self, [(x, layout)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(x, layout, self.name())?;
        Ok((
            CpuStorage::F32(map2(x, x, |x, _| x.max(0.0))),
            layout.shape().clone(),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, layout)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(cuda::FORWARD, &[(x, layout)])
    }

    fn gradients(
        &self,
        [x]: [&Tensor; 1],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 1]> {
        Ok([Some(x.apply_op2_no_bwd(&grad.contiguous()?, &Op(Backward))?)])
    }
}

impl DeviceOp<2> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-relu-backward"
    }

    fn cpu(
        &self,
        [(x, x_layout), (dy, dy_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let [x, dy] = same_shape_values(self.name(), [(x, x_layout), (dy, dy_layout)])?;
        let dx = map2(x, dy, |x, dy| if x >= 0.0 { dy } else { 0.0 });
        Ok((CpuStorage::F32(dx), x_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (grad, grad_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(cuda::BACKWARD, &[(x, x_layout), (grad, grad_layout)])
    }
}

impl DeviceOp<2> for SumForward {
    fn name(&self) -> &'static str {
        "homeadam-relu-of-sum"
    }

    fn cpu(
        &self,
        [(a, a_layout), (b, b_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let [a, b] = same_shape_values(self.name(), [(a, a_layout), (b, b_layout)])?;
        Ok((
            CpuStorage::F32(map2(a, b, |a, b| (a + b).max(0.0))),
            a_layout.shape().clone(),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(a, a_layout), (b, b_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run("homeadam_relu_of_sum_f32", &[(a, a_layout), (b, b_layout)])
    }

    fn gradients(
        &self,
        [a, b]: [&Tensor; 2],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 2]> {
        let d = a.apply_op3_no_bwd(b, &grad.contiguous()?, &Op(SumBackward))?;
        Ok([Some(d.clone()), Some(d)])
    }
}

impl DeviceOp<3> for SumBackward {
    fn name(&self) -> &'static str {
        "homeadam-relu-of-sum-backward"
    }

    fn cpu(
        &self,
        [(a, a_layout), (b, b_layout), (dy, dy_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let [a, b, dy] = same_shape_values(self.name(), [(a, a_layout), (b, b_layout), (dy, dy_layout)])?;
        let d = map3(a, b, dy, |a, b, dy| if a + b >= 0.0 { dy } else { 0.0 });
        Ok((CpuStorage::F32(d), a_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(a, a_layout), (b, b_layout), (grad, grad_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(
            "homeadam_relu_of_sum_backward_f32",
            &[(a, a_layout), (b, b_layout), (grad, grad_layout)],
        )
    }
}

#[cfg(feature = "cuda")]
pub(crate) mod cuda {
    //! One thread per element (`host/kernels/relu.cu`).

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{CudaSlice, CudaView, PushKernelArg};
    use candle_core::cuda_backend::{CudaDevice, WrapErr};
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/relu.cu");

    /// The kernel of `max(x, 0)`, for [`launch`] over `[x]`.
    pub(crate) const FORWARD: &str = "homeadam_relu_f32";

    /// The kernel of `∂L/∂y [x ≥ 0]`, for [`launch`] over `[x, ∂L/∂y]`.
    pub(crate) const BACKWARD: &str = "homeadam_relu_backward_f32";

    /// The kernel `name` over `inputs`, all of one shape, into a new tensor of that shape.
    pub(super) fn run(
        name: &str,
        inputs: &[(&CudaStorage, &Layout)],
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let shape = inputs[0].1.shape().clone();
        if let Some((_, l)) = inputs.iter().find(|(_, l)| l.shape() != &shape) {
            candle_core::bail!("relu: shapes {:?} and {:?} differ", shape.dims(), l.dims());
        }
        let dev = inputs[0].0.device.clone();
        let views = inputs
            .iter()
            .map(|(s, l)| contiguous::<f32>(s, l, "relu"))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let out = launch(&dev, name, &views)?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
    }

    /// The kernel `name` over `inputs`, of one length, into a new buffer of that length: its
    /// arguments are the inputs, the output and the length.
    pub(crate) fn launch(
        dev: &CudaDevice,
        name: &str,
        inputs: &[CudaView<'_, f32>],
    ) -> candle_core::Result<CudaSlice<f32>> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "relu", SOURCE)?;
        let n = inputs[0].len();
        if inputs.iter().any(|v| v.len() != n) {
            candle_core::bail!("relu: inputs of different lengths");
        }
        let func = dev.get_or_load_custom_func(name, "homeadam_relu", ptx)?;
        // SAFETY: the kernel writes every element.
        let mut out = unsafe { dev.alloc::<f32>(n)? };
        let n_arg = n as u64;
        let mut builder = func.builder();
        for v in inputs {
            builder.arg(v);
        }
        builder.arg(&mut out).arg(&n_arg);
        // SAFETY: every buffer holds n values.
        unsafe { builder.launch(per_element(n)) }.w()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_relu_of_a_sum_is_candles_composition_and_refuses_two_shapes() {
        let a = Tensor::new(&[-2f32, -1.0, 0.5, 3.0], &Device::Cpu).unwrap();
        let b = Tensor::new(&[1f32, 1.0, -1.0, -1.0], &Device::Cpu).unwrap();
        let y: Vec<f32> = relu_of_sum(&a, &b).unwrap().to_vec1().unwrap();
        assert_eq!(y, [0.0, 0.0, 0.0, 2.0]);
        let err = relu_of_sum(&a, &b.reshape((2, 2)).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("[4] and [2, 2] differ"), "{err}");
    }
}
