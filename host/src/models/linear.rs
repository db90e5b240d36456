//! The affine map `y = x Wᵀ + b` over the last dimension of `x` (any leading dimensions): one
//! op for f32 with a bias (candle's matmul and broadcast add without one or for another dtype,
//! the tests' f64 references).
//!
//! Composed from candle's ops, a linear layer is four autograd nodes (two reshapes, the matmul
//! with `Wᵀ`, the bias add), each of whose gradients candle accumulates into a zero-filled
//! buffer, and the bias gradient is a strided reduction over the rows. The op's forward pass
//! writes `b` into every row, then one matrix product adds `x Wᵀ` (cuBLAS's SGEMM with FP32
//! math on CUDA, the `gemm` crate on the CPU, `models::cpu::rows::affine`); backward,
//! `∂L/∂x = ∂L/∂y W` and `∂L/∂W = (∂L/∂y)ᵀ x` by candle's matmul and `∂L/∂b = Σ_r ∂L/∂y_r` by a
//! fixed-order column sum, so that a seed repeats its bits.

use anyhow::{bail, ensure, Result};
use candle_core::{CpuStorage, DType, Shape, Tensor};

use super::cpu::{rows, values};
use super::op::{Arg, DeviceOp, Op};
use super::param_grads::param_grad;

/// `x Wᵀ + b` for `x` `[.., in]`, `w` `[out, in]` and `b` `[out]`; the result is `[.., out]`.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let dims = x.dims();
    let Some((&inp, lead)) = dims.split_last() else {
        bail!("linear: scalar input");
    };
    let (out, w_in) = w.dims2()?;
    ensure!(
        inp == w_in,
        "linear: input has {inp} features, layer expects {w_in}"
    );
    if let Some(b) = b {
        ensure!(b.dims() == [out], "linear: bias {:?} for {out} outputs", b.dims());
        if x.dtype() == DType::F32 {
            let (w, b) = (w.contiguous()?, b.contiguous()?);
            return Ok(x.contiguous()?.apply_op3(&w, &b, Op(Affine))?);
        }
    }
    // One 2-D matmul over all leading positions: cheaper than a broadcast batched matmul.
    let y = x.reshape(((), inp))?.matmul(&w.t()?)?;
    let y = match b {
        Some(b) => y.broadcast_add(b)?,
        None => y,
    };
    let mut out_dims = lead.to_vec();
    out_dims.push(out);
    Ok(y.reshape(out_dims)?)
}

/// `(x, W, b) → x Wᵀ + b`.
struct Affine;

/// `g → Σ_r g_r` for a `[rows, cols]` tensor.
struct ColumnSum;

impl DeviceOp<3> for Affine {
    fn name(&self) -> &'static str {
        "homeadam-linear"
    }

    fn cpu(
        &self,
        [(x, x_layout), (w, w_layout), (b, b_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(x, x_layout, self.name())?;
        let (w, b) = (
            values(w, w_layout, self.name())?,
            values(b, b_layout, self.name())?,
        );
        let (out, inp) = w_layout.shape().dims2()?;
        if x_layout.dims().last() != Some(&inp) || b.len() != out {
            candle_core::bail!(
                "linear: input {:?}, weight {:?}, bias {:?}",
                x_layout.dims(),
                w_layout.dims(),
                b_layout.dims()
            );
        }
        let mut dims = x_layout.dims().to_vec();
        *dims.last_mut().expect("rank ≥ 1") = out;
        Ok((CpuStorage::F32(rows::affine(x, w, b)), Shape::from_dims(&dims)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (w, w_layout), (b, b_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::forward((x, x_layout), (w, w_layout), (b, b_layout))
    }

    fn gradients(
        &self,
        [x, w, b]: [&Tensor; 3],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 3]> {
        let (out, inp) = w.dims2()?;
        let g = grad.contiguous()?.reshape(((), out))?;
        let dx = g.matmul(&w.detach())?.reshape(x.dims())?;
        let dw = g.t()?.matmul(&x.detach().reshape(((), inp))?)?;
        let db = g.apply_op1_no_bwd(&Op(ColumnSum))?;
        Ok([Some(dx), param_grad(w, dw)?, param_grad(b, db)?])
    }
}

impl DeviceOp<1> for ColumnSum {
    fn name(&self) -> &'static str {
        "homeadam-column-sum"
    }

    fn cpu(&self, [(g, layout)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, cols) = layout.shape().dims2()?;
        let sums = rows::column_sums(values(g, layout, self.name())?, cols);
        Ok((CpuStorage::F32(sums), Shape::from(cols)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(g, layout)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let (rows, cols) = layout.shape().dims2()?;
        let dev = g.device.clone();
        let g = crate::models::cuda::contiguous::<f32>(g, layout, "column sum")?;
        // SAFETY: the column sum writes every element.
        let mut out = unsafe { dev.alloc::<f32>(cols)? };
        crate::models::cuda::column_sum(&dev, &g, rows, cols, &mut out.as_view_mut())?;
        Ok((
            candle_core::CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from(cols),
        ))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! The bias into every row (`host/kernels/linear.cu`), then cuBLAS's SGEMM with β = 1.

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::cublas::{sys::cublasOperation_t, Gemm, GemmConfig};
    use candle_core::cuda::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, kernel_u32, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/linear.cu");

    pub(super) fn forward(
        (x, x_layout): (&CudaStorage, &Layout),
        (w, w_layout): (&CudaStorage, &Layout),
        (b, b_layout): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "linear", SOURCE)?;
        let (out, inp) = w_layout.shape().dims2()?;
        let rows = x_layout.shape().elem_count() / inp;
        let dev = x.device.clone();
        let (x, w, b) = (
            contiguous::<f32>(x, x_layout, "linear")?,
            contiguous::<f32>(w, w_layout, "linear")?,
            contiguous::<f32>(b, b_layout, "linear")?,
        );
        let gemm_int = |v: usize| {
            i32::try_from(v)
                .map_err(|_| candle_core::Error::Msg(format!("linear: size {v} exceeds cuBLAS's int")))
        };
        let (m, n, k) = (gemm_int(out)?, gemm_int(rows)?, gemm_int(inp)?);
        // SAFETY: the bias kernel writes every element before the GEMM reads them (β = 1).
        let mut y = unsafe { dev.alloc::<f32>(rows * out)? };
        let func = dev.get_or_load_custom_func("homeadam_bias_rows_f32", "homeadam_linear", ptx)?;
        let (n_arg, cols_arg) = (kernel_u32(rows * out, "linear")?, kernel_u32(out, "linear")?);
        let mut builder = func.builder();
        builder.arg(&b).arg(&mut y).arg(&n_arg).arg(&cols_arg);
        // SAFETY: b holds `out` values and y rows × out.
        unsafe { builder.launch(per_element(rows * out)) }.w()?;
        // Row-major y [rows, out] is column-major yᵀ = W xᵀ: W's rows (length `in`) are the
        // columns of the column-major [in, out] matrix, hence op(A) = Aᵀ.
        let config = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_T,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m,
            n,
            k,
            alpha: 1.0f32,
            lda: k,
            ldb: k,
            beta: 1.0f32,
            ldc: m,
        };
        // SAFETY: w holds out × in values, x rows × in and y rows × out, as the leading
        // dimensions above describe; the handle runs on the device's stream.
        unsafe { dev.cublas_handle().gemm(config, &w, &x, &mut y) }.w()?;
        let mut dims = x_layout.dims().to_vec();
        *dims.last_mut().expect("an input of rank ≥ 1") = out;
        Ok((CudaStorage::wrap_cuda_slice(y, dev), Shape::from(dims)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn leading_dimensions_are_kept_and_bad_shapes_are_errors() {
        let dev = Device::Cpu;
        let x = Tensor::ones((2, 3, 4), candle_core::DType::F32, &dev).unwrap();
        let w = Var::ones((5, 4), candle_core::DType::F32, &dev).unwrap();
        let b = Tensor::ones(5, candle_core::DType::F32, &dev).unwrap();
        let y = linear(&x, w.as_tensor(), Some(&b)).unwrap();
        assert_eq!(y.dims(), [2, 3, 5]);
        assert_eq!(y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), vec![5.0; 30]);
        let bad = Tensor::ones(4, candle_core::DType::F32, &dev).unwrap();
        assert!(linear(&x, w.as_tensor(), Some(&bad)).is_err());
        assert!(linear(&x.t().unwrap(), w.as_tensor(), None).is_err());
    }
}
