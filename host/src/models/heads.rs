//! Attention's heads: the `[b, h, t, e]` heads of one part of a packed `[b, t, parts · h · e]`
//! tensor (the input projection's `q`, `k` and `v` side by side), and back: one op each way,
//! each the other's backward pass (candle's narrow, reshape, transpose and copy for another
//! dtype than f32, the tests' f64 references).
//!
//! Composed, a split is four autograd nodes whose backward steps each add into a zero-filled
//! gradient (the narrow's also concatenates zeros on either side), and a merge three. Here each
//! direction is one pass: on CUDA one kernel (`host/kernels/heads.cu`), on the CPU a copy per
//! row of `e` values; the merge is a split's inverse with one part, and the backward pass of a
//! split writes its part and zeros in the others.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Shape, Tensor};
use rayon::prelude::*;

use super::cpu::values;
use super::op::{Arg, DeviceOp, Op};

/// Rows of `e` values one parallel task copies.
const ROWS_PER_TASK: usize = 256;

/// Part `which` of `packed` (`[b, t, parts · heads · e]`) as `[b, heads, t, e]`, contiguous.
pub fn to_heads(packed: &Tensor, parts: usize, which: usize, heads: usize) -> Result<Tensor> {
    let (b, t, width) = packed.dims3()?;
    ensure!(
        parts > 0 && which < parts && heads > 0 && width.is_multiple_of(parts * heads),
        "attention heads: part {which} of {parts} in {heads} heads from a width of {width}"
    );
    let e = width / parts / heads;
    if packed.dtype() == DType::F32 {
        let op = Heads {
            direction: Direction::ToHeads,
            dims: [b, t, heads, e],
            parts,
            which,
        };
        return Ok(packed.contiguous()?.apply_op1(Op(op))?);
    }
    let d = heads * e;
    Ok(packed
        .narrow(2, which * d, d)?
        .reshape((b, t, heads, e))?
        .transpose(1, 2)?
        .contiguous()?)
}

/// `[b, heads, t, e]` heads merged into `[b, t, heads · e]`, contiguous.
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, heads, t, e) = x.dims4()?;
    if x.dtype() == DType::F32 {
        let op = Heads {
            direction: Direction::FromHeads,
            dims: [b, t, heads, e],
            parts: 1,
            which: 0,
        };
        return Ok(x.contiguous()?.apply_op1(Op(op))?);
    }
    Ok(x.transpose(1, 2)?.reshape((b, t, heads * e))?)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Packed → one part's heads.
    ToHeads,
    /// One part's heads → packed (zeros in the other parts).
    FromHeads,
}

/// The op of one direction over sizes `[b, t, heads, e]`.
#[derive(Clone, Copy, Debug)]
struct Heads {
    direction: Direction,
    dims: [usize; 4],
    parts: usize,
    which: usize,
}

impl Heads {
    fn inverse(self) -> Heads {
        let direction = match self.direction {
            Direction::ToHeads => Direction::FromHeads,
            Direction::FromHeads => Direction::ToHeads,
        };
        Heads { direction, ..self }
    }

    /// The index of the element that output element `o` copies (`None`: a zero), as the
    /// kernels compute it.
    fn source(&self, o: usize) -> Option<usize> {
        let [_, t, h, e] = self.dims;
        let part = h * e;
        let width = self.parts * part;
        match self.direction {
            Direction::ToHeads => {
                let (k, s, j, i) = (o % e, o / e % t, o / e / t % h, o / e / t / h);
                Some((i * t + s) * width + (self.which * h + j) * e + k)
            }
            Direction::FromHeads => {
                let (c, s, i) = (o % width, o / width % t, o / width / t);
                (c / part == self.which).then(|| ((i * h + c % part / e) * t + s) * e + c % e)
            }
        }
    }

    /// The shape this op writes.
    fn output(&self) -> Shape {
        let [b, t, h, e] = self.dims;
        match self.direction {
            Direction::ToHeads => Shape::from((b, h, t, e)),
            Direction::FromHeads => Shape::from((b, t, self.parts * h * e)),
        }
    }
}

impl DeviceOp<1> for Heads {
    fn name(&self) -> &'static str {
        "homeadam-attention-heads"
    }

    /// The kernels' index map a row of `e` values at a time: each row of the output is one
    /// contiguous row of the input, or zeros.
    fn cpu(&self, [(storage, layout)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(storage, layout, self.name())?;
        let shape = self.output();
        let e = self.dims[3];
        let mut out = vec![0.0; shape.elem_count()];
        if e > 0 {
            out.par_chunks_mut(e * ROWS_PER_TASK)
                .enumerate()
                .for_each(|(block, rows)| {
                    for (r, row) in rows.chunks_mut(e).enumerate() {
                        if let Some(i) = self.source((block * ROWS_PER_TASK + r) * e) {
                            row.copy_from_slice(&x[i..i + e]);
                        }
                    }
                });
        }
        Ok((CpuStorage::F32(out), shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, layout)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(self, x, layout)
    }

    fn gradients(
        &self,
        [_]: [&Tensor; 1],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 1]> {
        Ok([Some(grad.contiguous()?.apply_op1_no_bwd(&Op(self.inverse()))?)])
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One thread per written element (`host/kernels/heads.cu`).

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{DeviceRepr, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use super::{Direction, Heads};
    use crate::models::cuda::{contiguous, kernel_u32, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/heads.cu");

    /// The kernels' `struct Heads`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct KernelHeads {
        b: u32,
        t: u32,
        h: u32,
        e: u32,
        parts: u32,
        which: u32,
    }

    // SAFETY: a plain struct of u32 with C layout, as the kernels declare it.
    unsafe impl DeviceRepr for KernelHeads {}

    pub(super) fn run(
        op: &Heads,
        x: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "attention heads", SOURCE)?;
        let [b, t, h, e] = op.dims;
        let int = |v: usize| kernel_u32(v, "attention heads");
        let q = KernelHeads {
            b: int(b)?,
            t: int(t)?,
            h: int(h)?,
            e: int(e)?,
            parts: int(op.parts)?,
            which: int(op.which)?,
        };
        let shape = op.output();
        let n = shape.elem_count();
        // The kernels index in 32 bits: both tensors (of one size, or a third of it) must fit.
        kernel_u32(n.max(layout.shape().elem_count()), "attention heads")?;
        let dev = x.device.clone();
        let x = contiguous::<f32>(x, layout, "attention heads")?;
        let name = match op.direction {
            Direction::ToHeads => "homeadam_to_heads_f32",
            Direction::FromHeads => "homeadam_from_heads_f32",
        };
        let func = dev.get_or_load_custom_func(name, "homeadam_heads", ptx)?;
        // SAFETY: the kernel writes every element.
        let mut out = unsafe { dev.alloc::<f32>(n)? };
        let mut builder = func.builder();
        builder.arg(&x).arg(&mut out).arg(&q);
        // SAFETY: x holds the input's and out the output's elements, as `q` describes them.
        unsafe { builder.launch(per_element(n)) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1().unwrap()
    }

    /// The op's index math (the kernels') against candle's narrow, reshape and transpose, both
    /// directions and the backward pass.
    #[test]
    fn the_ops_equal_candles_composition() {
        let (b, t, h, e) = (2, 5, 3, 4);
        let packed: Vec<f32> = (0..b * t * 3 * h * e).map(|i| i as f32).collect();
        let x = Var::from_vec(packed, (b, t, 3 * h * e), &Device::Cpu).unwrap();
        // In f64 the functions compose candle's ops; every value copies exactly.
        let wide = Var::from_tensor(&x.as_tensor().to_dtype(DType::F64).unwrap()).unwrap();
        let narrow = |y: &Tensor| y.to_dtype(DType::F32).unwrap();
        for which in 0..3 {
            let fused = to_heads(x.as_tensor(), 3, which, h).unwrap();
            let composed = to_heads(wide.as_tensor(), 3, which, h).unwrap();
            assert_eq!(values(&fused), values(&narrow(&composed)), "part {which}");
            let weights = Tensor::arange(0f32, fused.elem_count() as f32, &Device::Cpu)
                .unwrap()
                .reshape(fused.dims())
                .unwrap();
            let gradient = |y: &Tensor, v: &Var| {
                let weights = weights.to_dtype(y.dtype()).unwrap();
                let grads = y.mul(&weights).unwrap().sum_all().unwrap().backward().unwrap();
                values(&narrow(grads.get(v).unwrap()))
            };
            assert_eq!(
                gradient(&fused, &x),
                gradient(&composed, &wide),
                "part {which}: the gradient"
            );
            assert_eq!(
                values(&merge_heads(&fused).unwrap()),
                values(&narrow(&merge_heads(&composed).unwrap())),
                "part {which}: merged"
            );
        }
    }

    #[test]
    fn a_width_the_heads_do_not_divide_is_an_error() {
        let x = Tensor::zeros((1, 2, 10), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(to_heads(&x, 3, 0, 2).is_err());
        assert!(to_heads(&x, 2, 2, 5).is_err());
    }
}
