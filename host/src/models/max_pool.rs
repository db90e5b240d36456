//! Max pooling with any square window, stride and padding (NCHW, f32), as PyTorch's
//! `max_pool2d`: `y[n,c,i,j] = max over the window at (i·s − p, j·s − p) of the positions inside
//! the input` (padding never wins), the first maximum in row-major order taken, a NaN winning.
//! Candle's pooling has a backward pass only for a window equal to its stride (torchvision's
//! ResNet stem pools 3×3 with stride 2 and padding 1), and that pass scales the gradient by
//! 1/k² (it multiplies by the share of maxima in the window instead of dividing by their
//! count): VGG16's five 2×2 pools would shrink its first layers' gradients 1,024-fold.
//!
//! The backward pass gives each output's gradient to its window's winner. Each input element
//! sums the gradients of the outputs it wins in increasing output order — on the CPU by
//! visiting the outputs in order, on CUDA by a gather per element (no atomics) — so both
//! devices give the same bits.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, Shape, Tensor};
use rayon::prelude::*;

use super::cpu::values;
use super::op::{Arg, DeviceOp, Op};

/// A pooling window: size `k`, stride `s`, padding `p`, over an input `[n, c, h, w]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pool {
    k: usize,
    s: usize,
    p: usize,
    dims: [usize; 4],
}

impl Pool {
    /// Output height and width: `⌊(h + 2p − k)/s⌋ + 1`.
    fn out(&self) -> (usize, usize) {
        let side = |n: usize| (n + 2 * self.p - self.k) / self.s + 1;
        (side(self.dims[2]), side(self.dims[3]))
    }

    /// The flat index (within the plane) of the winner of output `(i, j)` in `plane`.
    fn winner(&self, plane: &[f32], i: usize, j: usize) -> usize {
        let (h, w) = (self.dims[2], self.dims[3]);
        // The window's rows and columns inside the input (`k − p ≥ 1`: the padding is at most
        // half the window).
        let rows = (i * self.s).saturating_sub(self.p)..(i * self.s + self.k - self.p).min(h);
        let cols = (j * self.s).saturating_sub(self.p)..(j * self.s + self.k - self.p).min(w);
        let mut best = rows.start * w + cols.start;
        let mut value = plane[best];
        for y in rows {
            for (x, &v) in plane[y * w..][cols.clone()].iter().enumerate() {
                if v.is_nan() {
                    return y * w + cols.start + x;
                }
                if v > value {
                    (best, value) = (y * w + cols.start + x, v);
                }
            }
        }
        best
    }
}

/// `max_pool2d(x, kernel, stride, padding)` on `x`'s device (see the module).
pub fn max_pool2d(x: &Tensor, kernel: usize, stride: usize, padding: usize) -> Result<Tensor> {
    let dims: [usize; 4] = x
        .dims()
        .try_into()
        .map_err(|_| anyhow::anyhow!("max_pool2d: input {:?} is not [n, c, h, w]", x.dims()))?;
    ensure!(
        kernel >= 1
            && stride >= 1
            && 2 * padding <= kernel
            && dims[2] + 2 * padding >= kernel
            && dims[3] + 2 * padding >= kernel,
        "max_pool2d: a {kernel}×{kernel} window, stride {stride}, padding {padding} does not fit {dims:?} \
         (the padding at most half the window)"
    );
    let pool = Pool {
        k: kernel,
        s: stride,
        p: padding,
        dims,
    };
    Ok(x.contiguous()?.apply_op1(Op(Forward(pool)))?)
}

/// `x → y`.
#[derive(Clone, Copy)]
struct Forward(Pool);

/// `(x, ∂L/∂y) → ∂L/∂x`.
#[derive(Clone, Copy)]
struct Backward(Pool);

impl DeviceOp<1> for Forward {
    fn name(&self) -> &'static str {
        "homeadam-max-pool2d"
    }

    fn cpu(&self, [(s, l)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let pool = self.0;
        let x = values(s, l, "max_pool2d")?;
        let [n, c, h, w] = pool.dims;
        let (oh, ow) = pool.out();
        let mut y = vec![0.0; n * c * oh * ow];
        y.par_chunks_mut(oh * ow)
            .zip(x.par_chunks(h * w))
            .for_each(|(out, plane)| {
                for (at, y) in out.iter_mut().enumerate() {
                    *y = plane[pool.winner(plane, at / ow, at % ow)];
                }
            });
        Ok((CpuStorage::F32(y), Shape::from((n, c, oh, ow))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(s, l)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(&self.0, (s, l), None)
    }

    fn gradients(
        &self,
        [x]: [&Tensor; 1],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 1]> {
        Ok([Some(
            x.apply_op2_no_bwd(&grad.contiguous()?, &Op(Backward(self.0)))?,
        )])
    }
}

impl DeviceOp<2> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-max-pool2d-backward"
    }

    fn cpu(
        &self,
        [(xs, xl), (gs, gl)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let pool = self.0;
        let (x, g) = (values(xs, xl, "max_pool2d")?, values(gs, gl, "max_pool2d")?);
        let [n, c, h, w] = pool.dims;
        let (oh, ow) = pool.out();
        let mut dx = vec![0.0f32; x.len()];
        dx.par_chunks_mut(h * w)
            .zip(x.par_chunks(h * w).zip(g.par_chunks(oh * ow)))
            .for_each(|(dplane, (plane, grads))| {
                // Each winner found once, its gradients added in increasing output order: the
                // order in which CUDA's per-element gather adds them.
                for i in 0..oh {
                    for j in 0..ow {
                        dplane[pool.winner(plane, i, j)] += grads[i * ow + j];
                    }
                }
            });
        Ok((CpuStorage::F32(dx), Shape::from((n, c, h, w))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(xs, xl), (gs, gl)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::run(&self.0, (xs, xl), Some((gs, gl)))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! The CPU's loops as kernels, one thread per output (forward) or per input element
    //! (backward).

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use super::Pool;
    use crate::models::cuda::{contiguous, per_element};

    const SOURCE: &str = include_str!("../../kernels/max_pool.cu");

    /// The kernels' view of a [`Pool`] (`struct Pool` above).
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct KernelPool {
        k: i32,
        s: i32,
        p: i32,
        h: i32,
        w: i32,
        oh: i32,
        ow: i32,
    }

    // SAFETY: a plain struct of i32 with C layout, as the kernels declare it.
    unsafe impl candle_core::cuda::cudarc::driver::DeviceRepr for KernelPool {}

    pub(super) fn run(
        pool: &Pool,
        (x, xl): (&CudaStorage, &Layout),
        grad: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = crate::models::cuda::ptx(&PTX, "max-pool", SOURCE)?;
        let [n, c, h, w] = pool.dims;
        let (oh, ow) = pool.out();
        let int = |v: usize| {
            i32::try_from(v)
                .map_err(|_| candle_core::Error::Msg(format!("max_pool2d: size {v} exceeds an int")))
        };
        let q = KernelPool {
            k: int(pool.k)?,
            s: int(pool.s)?,
            p: int(pool.p)?,
            h: int(h)?,
            w: int(w)?,
            oh: int(oh)?,
            ow: int(ow)?,
        };
        let dev = x.device.clone();
        let x = contiguous::<f32>(x, xl, "max_pool2d")?;
        let planes = (n * c) as u64;
        let (name, len, shape) = match grad {
            None => (
                "homeadam_max_pool_f32",
                n * c * oh * ow,
                Shape::from((n, c, oh, ow)),
            ),
            Some(_) => (
                "homeadam_max_pool_backward_f32",
                n * c * h * w,
                Shape::from((n, c, h, w)),
            ),
        };
        let func = dev.get_or_load_custom_func(name, "homeadam_max_pool", ptx)?;
        // SAFETY: the kernel writes every element.
        let out = unsafe { dev.alloc::<f32>(len)? };
        let config = per_element(len);
        let g = match grad {
            Some((g, gl)) => Some(contiguous::<f32>(g, gl, "max_pool2d")?),
            None => None,
        };
        let mut builder = func.builder();
        builder.arg(&x);
        if let Some(g) = &g {
            builder.arg(g);
        }
        builder.arg(&out).arg(&planes).arg(&q);
        // SAFETY: the arguments match the kernel's signature and sizes.
        unsafe { builder.launch(config) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Candle's 2×2 pool forward; its backward pass scales every gradient by 1/k² (it
    /// multiplies by the share of maxima in the window where it should divide by their count),
    /// so the gradient here is the winner's, found by a direct search.
    #[test]
    fn two_by_two_windows_equal_candles_pool_and_give_the_winner_the_gradient() {
        let mut rng = crate::rng::Rng::new(4);
        let values: Vec<f32> = (0..2 * 3 * 6 * 8).map(|_| rng.normal()).collect();
        let weights: Vec<f32> = (0..2 * 3 * 3 * 4).map(|i| i as f32 * 0.1 - 1.0).collect();
        let x = Var::from_vec(values.clone(), (2, 3, 6, 8), &Device::Cpu).unwrap();
        let y = max_pool2d(x.as_tensor(), 2, 2, 0).unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(flat(&y), flat(&x.as_tensor().max_pool2d(2).unwrap()));
        let w = Tensor::from_vec(weights.clone(), (2, 3, 3, 4), &Device::Cpu).unwrap();
        let grad = flat(
            y.mul(&w)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap()
                .get(&x)
                .unwrap(),
        );
        let mut expected = vec![0.0f32; values.len()];
        for plane in 0..6 {
            for (i, j) in (0..3).flat_map(|i| (0..4).map(move |j| (i, j))) {
                let at = |dy: usize, dx: usize| plane * 48 + (2 * i + dy) * 8 + 2 * j + dx;
                let winner = [(0, 0), (0, 1), (1, 0), (1, 1)]
                    .map(|(dy, dx)| at(dy, dx))
                    .into_iter()
                    .reduce(|a, b| if values[b] > values[a] { b } else { a })
                    .unwrap();
                expected[winner] += weights[plane * 12 + i * 4 + j];
            }
        }
        assert_eq!(grad, expected);
    }

    #[test]
    fn three_by_three_stride_two_padding_one_pools_as_pytorch() {
        // A 1×1×4×4 input; torchvision's stem pool gives a 2×2 output whose windows overlap.
        let x = Var::from_vec(
            vec![
                1.0f32, 5.0, 2.0, 0.0, 3.0, 4.0, 9.0, 1.0, 7.0, 2.0, 6.0, 8.0, 0.0, 7.0, 1.0, 3.0,
            ],
            (1, 1, 4, 4),
            &Device::Cpu,
        )
        .unwrap();
        let y = max_pool2d(x.as_tensor(), 3, 2, 1).unwrap();
        assert_eq!(
            y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            [5.0, 9.0, 7.0, 9.0]
        );
        let g = y.sum_all().unwrap().backward().unwrap();
        // 9.0 wins two windows; 7.0 (row 2) is the first of the two 7s in its window.
        assert_eq!(
            g.get(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
            [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
        );
    }

    #[test]
    fn a_nan_wins_its_windows_and_bad_windows_are_errors() {
        let x = Tensor::from_vec(vec![1.0, f32::NAN, 3.0, 4.0], (1, 1, 2, 2), &Device::Cpu).unwrap();
        let y = max_pool2d(&x, 2, 2, 0)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!(y[0].is_nan());
        for (k, s, p) in [(0, 1, 0), (3, 0, 1), (3, 2, 2), (9, 1, 0)] {
            let err = max_pool2d(&x, k, s, p).unwrap_err().to_string();
            assert!(err.contains("does not fit"), "{k} {s} {p}: {err}");
        }
        let err = max_pool2d(
            &Tensor::zeros(4, candle_core::DType::F32, &Device::Cpu).unwrap(),
            2,
            2,
            0,
        )
        .unwrap_err();
        assert!(err.to_string().contains("not [n, c, h, w]"), "{err}");
    }
}
