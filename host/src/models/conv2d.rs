//! 2-D convolution `y = x ⋆ w` (NCHW, one group, no dilation): one candle op whose backward
//! pass computes the input gradient (`∂L/∂x = ∂L/∂y ⋆ᵀ w`) and the filter gradient
//! (`∂L/∂w = x ⋆ ∂L/∂y`) with two more, in place of candle's transposed-convolution kernel and
//! im2col product.
//!
//! Tensors of another dtype than f32 (the f64 references of the tests) take candle's
//! convolution. On the CPU the passes are matrix products over unfolded images (`models::cpu::conv`), the
//! same bits for any thread count. On CUDA they are cuDNN's forward, backward-data and
//! backward-filter calls: FMA only (no TF32, as PyTorch with TF32 off), deterministic
//! algorithms only, so that a seed gives the same bits run after run; each is cuDNN's first
//! heuristic choice among those (as PyTorch's default), chosen once per geometry and kept with
//! its descriptors, and one workspace per CUDA stream grows to the largest need.

use anyhow::Result;
use candle_core::{CpuStorage, DType, Shape, Tensor};

pub use super::conv_geometry::Geometry;
use super::conv_geometry::{Conv, Pass};
use super::op::{Arg, DeviceOp, Op};
use super::param_grads::param_grad;

/// `x ⋆ w` with `stride` and `padding` on both axes, on `x`'s device (see the module).
pub fn conv2d(x: &Tensor, w: &Tensor, stride: usize, padding: usize) -> Result<Tensor> {
    let geometry = Geometry::new(x.dims(), w.dims(), stride, padding)?;
    if x.dtype() != DType::F32 {
        return Ok(x.conv2d(w, padding, stride, 1, 1)?);
    }
    let op = Conv {
        geometry,
        pass: Pass::Forward,
    };
    Ok(x.contiguous()?.apply_op2(&w.contiguous()?, Op(op))?)
}

impl DeviceOp<2> for Conv {
    fn name(&self) -> &'static str {
        Conv::name(self)
    }

    fn cpu(
        &self,
        [(a, a_layout), (b, b_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        super::cpu::conv::run(self, (a, a_layout), (b, b_layout))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(a, a_layout), (b, b_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        super::cudnn::conv::run(self, (a, a_layout), (b, b_layout))
    }

    fn gradients(
        &self,
        [x, w]: [&Tensor; 2],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 2]> {
        let grad = grad.contiguous()?;
        let with = |geometry, pass| Conv { geometry, pass };
        let dx = match self.geometry.input_gradient_as_forward() {
            _ if !x.track_op() => None,
            Some(_) if !x.device().is_cuda() => {
                Some(grad.apply_op2_no_bwd(w, &Op(with(self.geometry, Pass::Data)))?)
            }
            Some(g) => Some(grad.apply_op2_no_bwd(w, &Op(with(g, Pass::Forward)))?),
            None => Some(grad.apply_op2_no_bwd(w, &Op(with(self.geometry, Pass::Data)))?),
        };
        let dw = match w.track_op() {
            true => param_grad(
                w,
                x.apply_op2_no_bwd(&grad, &Op(with(self.geometry, Pass::Filter)))?,
            )?,
            false => None,
        };
        Ok([dx, dw])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn output_sizes_follow_the_convolution_arithmetic() {
        let g = Geometry::new(&[8, 3, 32, 32], &[64, 3, 3, 3], 1, 1).unwrap();
        assert_eq!(g.output(), [8, 64, 32, 32]);
        let g = Geometry::new(&[2, 3, 64, 64], &[64, 3, 7, 7], 2, 3).unwrap();
        assert_eq!(g.output(), [2, 64, 32, 32]);
        let g = Geometry::new(&[2, 64, 15, 15], &[128, 64, 1, 1], 2, 0).unwrap();
        assert_eq!(g.output(), [2, 128, 8, 8]);
        let g = Geometry::new(&[1, 1, 2, 5], &[1, 1, 2, 3], 3, 0).unwrap();
        assert_eq!(g.output(), [1, 1, 1, 1]);
    }

    #[test]
    fn output_sizes_equal_candles_on_the_cpu() {
        for (x, w, stride, padding) in [
            ([2, 3, 9, 7], [4, 3, 3, 3], 1, 1),
            ([1, 2, 10, 10], [3, 2, 3, 3], 2, 1),
            ([1, 2, 11, 6], [3, 2, 7, 5], 3, 2),
        ] {
            let g = Geometry::new(&x, &w, stride, padding).unwrap();
            let xt = Tensor::zeros(&x, candle_core::DType::F32, &Device::Cpu).unwrap();
            let wt = Tensor::zeros(&w, candle_core::DType::F32, &Device::Cpu).unwrap();
            let y = conv2d(&xt, &wt, stride, padding).unwrap();
            assert_eq!(y.dims(), g.output(), "{g:?}");
        }
    }

    /// `w` rotated by 180° in its two spatial dims.
    fn rotated(w: &Tensor) -> Tensor {
        let k = w.dim(2).unwrap();
        let reversed = Tensor::from_vec((0..k as u32).rev().collect::<Vec<_>>(), k, &Device::Cpu).unwrap();
        w.index_select(&reversed, 2)
            .unwrap()
            .index_select(&reversed, 3)
            .unwrap()
    }

    #[test]
    fn the_input_gradient_as_a_forward_pass_equals_candles_gradient() {
        let mut rng = crate::rng::Rng::new(5);
        for (x_dims, k, padding) in [
            ([2, 3, 8, 7], 3, 1),
            ([1, 4, 9, 9], 5, 2),
            ([2, 2, 6, 6], 3, 0),
            ([1, 3, 5, 5], 1, 0),
        ] {
            let w_dims = [5, x_dims[1], k, k];
            let g = Geometry::new(&x_dims, &w_dims, 1, padding).unwrap();
            let flipped = g.input_gradient_as_forward().expect("stride 1, square kernel");
            assert_eq!(flipped.output(), g.input, "{g:?}");
            let draw = |dims: &[usize], rng: &mut crate::rng::Rng| {
                let n = dims.iter().product();
                Tensor::from_vec(
                    (0..n).map(|_| rng.normal()).collect::<Vec<f32>>(),
                    dims,
                    &Device::Cpu,
                )
                .unwrap()
            };
            let x = candle_core::Var::from_tensor(&draw(&x_dims, &mut rng)).unwrap();
            let w = draw(&w_dims, &mut rng);
            let dy = draw(&g.output(), &mut rng);
            let y = conv2d(x.as_tensor(), &w, 1, padding).unwrap();
            let expected = y.mul(&dy).unwrap().sum_all().unwrap().backward().unwrap();
            let expected = expected.get(&x).unwrap();
            let wt = rotated(&w.transpose(0, 1).unwrap().contiguous().unwrap());
            let ours = conv2d(&dy, &wt, 1, flipped.padding).unwrap();
            let d = (ours - expected)
                .unwrap()
                .abs()
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(d < 1e-4, "{g:?}: {d}");
        }
        let strided = Geometry::new(&[1, 3, 8, 8], &[4, 3, 3, 3], 2, 1).unwrap();
        assert_eq!(strided.input_gradient_as_forward(), None);
        let oblong = Geometry::new(&[1, 3, 8, 8], &[4, 3, 3, 1], 1, 0).unwrap();
        assert_eq!(oblong.input_gradient_as_forward(), None);
    }

    #[test]
    fn mismatched_shapes_are_errors_that_name_them() {
        type Case = (&'static [usize], &'static [usize], usize, usize, &'static str);
        let cases: [Case; 5] = [
            (
                &[1, 3, 8, 8],
                &[4, 2, 3, 3],
                1,
                1,
                "3 channels, the filter expects 2",
            ),
            (&[3, 8, 8], &[4, 3, 3, 3], 1, 1, "rank 4"),
            (&[1, 3, 8, 8], &[4, 3, 3], 1, 1, "rank 4"),
            (&[1, 3, 8, 8], &[4, 3, 3, 3], 0, 1, "stride 0"),
            (
                &[1, 3, 2, 8],
                &[4, 3, 5, 3],
                1,
                1,
                "5-wide kernel does not fit an input of 2",
            ),
        ];
        for (x, w, stride, padding, expected) in cases {
            let err = Geometry::new(x, w, stride, padding).unwrap_err().to_string();
            assert!(err.contains(expected), "{x:?} {w:?}: {err}");
        }
    }

    #[test]
    fn the_flipped_pass_is_cudas_only() {
        let g = Geometry::new(&[1, 1, 3, 3], &[1, 1, 3, 3], 1, 1).unwrap();
        let x = Tensor::zeros((1, 1, 3, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
        let op = Conv {
            geometry: g.input_gradient_as_forward().unwrap(),
            pass: Pass::Forward,
        };
        let err = x.apply_op2(&x, Op(op)).unwrap_err().to_string();
        assert!(err.contains("CUDA's input gradient"), "{err}");
    }
}
