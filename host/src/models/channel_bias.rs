//! A convolution's bias, `y = x + b` with `b` (`[C]`) added to every value of channel `c` of
//! `x` (`[N, C, H, W]`), alone or followed by a ReLU, as one op for f32 (candle's composition
//! for another dtype, the f64 references of the tests).
//!
//! Composed of candle's ops, the bias is a reshape, a broadcast and an add, whose backward pass
//! reduces the gradient over the batch, height and width one axis at a time and adds each
//! result into a zero-filled buffer. Here the forward pass is one pass over the values, and the
//! backward pass passes `∂L/∂y` on as `∂L/∂x` (with the ReLU, where `x + b ≥ 0`, one pass) and
//! sums `∂L/∂b_c = Σ_{n,h,w} ∂L/∂x` per channel in a fixed order: on the CPU each image's plane
//! and then the images (`models::cpu::elementwise::channel_sums`), on CUDA over chunks of
//! images and then the chunks (`host/kernels/channel_bias.cu`). With the ReLU fused, the sum
//! `x + b` is no node of candle's graph, so its gradient is not added into a zero-filled buffer
//! either.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Layout, Shape, Tensor};

use super::cpu::elementwise::{channel_sums, per_channel};
use super::cpu::values;
use super::op::{Arg, DeviceOp, Op};
use super::param_grads::param_grad;

/// `x + b` over the channels of an NCHW tensor.
pub fn channel_bias(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    with_bias(x, b, false)
}

/// `max(x + b, 0)` over the channels of an NCHW tensor: [`channel_bias`] and then
/// [`super::relu::relu`], one op on CUDA.
pub fn channel_bias_relu(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    with_bias(x, b, true)
}

fn with_bias(x: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    let (_, c, _, _) = x.dims4()?;
    ensure!(
        b.dims() == [c],
        "channel bias: {:?} for an input of {c} channels",
        b.dims()
    );
    if x.dtype() != DType::F32 {
        let y = x.broadcast_add(&b.reshape((1, c, 1, 1))?)?;
        return Ok(if relu { y.relu()? } else { y });
    }
    Ok(x.contiguous()?
        .apply_op2(&b.contiguous()?, Op(Forward { relu }))?)
}

/// The values per channel and image of an NCHW layout.
fn plane(layout: &Layout) -> candle_core::Result<usize> {
    let (_, _, h, w) = layout.shape().dims4()?;
    Ok(h * w)
}

/// `(x, b) → x + b`, or `max(x + b, 0)` with `relu`.
struct Forward {
    relu: bool,
}

/// `(x, b, ∂L/∂y) → ∂L/∂y [x + b ≥ 0]`.
struct ReluBackward;

/// `∂L/∂s → [Σ_{n,h,w} ∂L/∂s_c]_c`.
struct ChannelSum;

impl DeviceOp<2> for Forward {
    fn name(&self) -> &'static str {
        if self.relu {
            "homeadam-channel-bias-relu"
        } else {
            "homeadam-channel-bias"
        }
    }

    fn cpu(
        &self,
        [(x, x_layout), (b, b_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (xs, b) = (
            values(x, x_layout, self.name())?,
            values(b, b_layout, self.name())?,
        );
        let y = match self.relu {
            true => per_channel(xs, b, xs, plane(x_layout)?, |x, b, _| (x + b).max(0.0)),
            false => per_channel(xs, b, xs, plane(x_layout)?, |x, b, _| x + b),
        };
        Ok((CpuStorage::F32(y), x_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (b, b_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let kernel = if self.relu {
            "homeadam_channel_bias_relu_f32"
        } else {
            "homeadam_channel_bias_f32"
        };
        cuda::per_value(kernel, (x, x_layout), (b, b_layout), None)
    }

    fn gradients(
        &self,
        [x, b]: [&Tensor; 2],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 2]> {
        let grad = grad.contiguous()?;
        let dx = if self.relu {
            x.apply_op3_no_bwd(b, &grad, &Op(ReluBackward))?
        } else {
            grad
        };
        let db = dx.apply_op1_no_bwd(&Op(ChannelSum))?;
        Ok([Some(dx), param_grad(b, db)?])
    }
}

impl DeviceOp<3> for ReluBackward {
    fn name(&self) -> &'static str {
        "homeadam-channel-bias-relu-backward"
    }

    fn cpu(
        &self,
        [(x, x_layout), (b, b_layout), (dy, dy_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if dy_layout.shape() != x_layout.shape() {
            candle_core::bail!(
                "channel bias: a gradient {:?} for {:?}",
                dy_layout.dims(),
                x_layout.dims()
            );
        }
        let (x, b) = (
            values(x, x_layout, self.name())?,
            values(b, b_layout, self.name())?,
        );
        let dy = values(dy, dy_layout, self.name())?;
        let dx = per_channel(
            x,
            b,
            dy,
            plane(x_layout)?,
            |x, b, dy| if x + b >= 0.0 { dy } else { 0.0 },
        );
        Ok((CpuStorage::F32(dx), x_layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(x, x_layout), (b, b_layout), (grad, grad_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::per_value(
            "homeadam_channel_bias_relu_backward_f32",
            (x, x_layout),
            (b, b_layout),
            Some((grad, grad_layout)),
        )
    }
}

impl DeviceOp<1> for ChannelSum {
    fn name(&self) -> &'static str {
        "homeadam-channel-sum"
    }

    fn cpu(&self, [(g, layout)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, channels, _, _) = layout.shape().dims4()?;
        let sums = channel_sums(values(g, layout, self.name())?, channels, plane(layout)?);
        Ok((CpuStorage::F32(sums), Shape::from(channels)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(g, layout)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::channel_sums(g, layout)
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One thread per value for the bias and the ReLU's gradient; the bias gradient, one block
    //! per channel and chunk of images.

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, kernel_u32, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/channel_bias.cu");

    fn compiled() -> candle_core::Result<&'static str> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        ptx(&PTX, "channel bias", SOURCE)
    }

    /// The kernel `name` over the values of `x` (NCHW) with the bias `b` (and `grad`, of `x`'s
    /// shape), into a new tensor of `x`'s shape: its arguments are `x`, `b`, `grad`, the output,
    /// the number of values, the channels and the values per channel and image.
    pub(super) fn per_value(
        name: &str,
        (x, x_layout): (&CudaStorage, &Layout),
        (b, b_layout): (&CudaStorage, &Layout),
        grad: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let ptx = compiled()?;
        let shape = x_layout.shape().clone();
        let (_, channels, h, w) = shape.dims4()?;
        let n = shape.elem_count();
        let dev = x.device.clone();
        let x = contiguous::<f32>(x, x_layout, "channel bias")?;
        let b = contiguous::<f32>(b, b_layout, "channel bias")?;
        let grad = match grad {
            Some((_, l)) if l.shape() != &shape => {
                candle_core::bail!("channel bias: a gradient {:?} for {:?}", l.dims(), shape.dims())
            }
            Some((g, l)) => Some(contiguous::<f32>(g, l, "channel bias")?),
            None => None,
        };
        // The kernels index in 32 bits.
        let n_arg = kernel_u32(n, "channel bias")?;
        let channels_arg = kernel_u32(channels, "channel bias")?;
        let plane = kernel_u32(h * w, "channel bias")?;
        let func = dev.get_or_load_custom_func(name, "homeadam_channel_bias", ptx)?;
        // SAFETY: the kernel writes every element.
        let mut y = unsafe { dev.alloc::<f32>(n)? };
        let mut builder = func.builder();
        builder.arg(&x).arg(&b);
        if let Some(g) = &grad {
            builder.arg(g);
        }
        builder.arg(&mut y).arg(&n_arg).arg(&channels_arg).arg(&plane);
        // SAFETY: x, grad and y hold n values, b one per channel.
        unsafe { builder.launch(per_element(n)) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(y, dev), shape))
    }

    /// The per-channel sums of `g` (NCHW).
    pub(super) fn channel_sums(
        g: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let ptx = compiled()?;
        let (batch, channels, h, w) = layout.shape().dims4()?;
        let dev = g.device.clone();
        let g = contiguous::<f32>(g, layout, "channel bias")?;
        let (batch_arg, channels_arg, plane) = (
            kernel_u32(batch, "channel bias")?,
            kernel_u32(channels, "channel bias")?,
            kernel_u32(h * w, "channel bias")?,
        );
        // The kernels index in 32 bits.
        kernel_u32(layout.shape().elem_count(), "channel bias")?;
        // Chunks of images holding at least SUM_BLOCK values of a channel, so that a block has
        // work enough and the grid blocks enough.
        let chunk = SUM_BLOCK.div_ceil(h * w).clamp(1, batch);
        let chunks = batch.div_ceil(chunk);
        // SAFETY: block (c, k) writes partial[k · channels + c], for every c and k.
        let mut partial = unsafe { dev.alloc::<f32>(chunks * channels)? };
        let first =
            dev.get_or_load_custom_func("homeadam_channel_sum_partial_f32", "homeadam_channel_bias", ptx)?;
        let config = LaunchConfig {
            grid_dim: (channels_arg, kernel_u32(chunks, "channel bias")?, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let chunk_arg = chunk as u32;
        let mut builder = first.builder();
        builder
            .arg(&g)
            .arg(&mut partial)
            .arg(&batch_arg)
            .arg(&channels_arg)
            .arg(&plane)
            .arg(&chunk_arg);
        // SAFETY: g holds batch × channels × plane values, partial chunks × channels.
        unsafe { builder.launch(config) }.w()?;
        let second =
            dev.get_or_load_custom_func("homeadam_channel_sum_finish_f32", "homeadam_channel_bias", ptx)?;
        // SAFETY: the kernel writes every channel's sum.
        let mut out = unsafe { dev.alloc::<f32>(channels)? };
        let chunks_arg = chunks as u32;
        let mut builder = second.builder();
        builder
            .arg(&partial)
            .arg(&mut out)
            .arg(&chunks_arg)
            .arg(&channels_arg);
        // SAFETY: partial holds chunks × channels values, out one per channel.
        unsafe { builder.launch(per_element(channels)) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from(channels)))
    }

    /// The values of one channel a block of the bias gradient's first pass sums, at least.
    const SUM_BLOCK: usize = 16_384;
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn the_bias_and_its_relu_add_per_channel_and_refuse_a_wrong_bias() {
        let x = Tensor::new(&[1f32, -2.0, 3.0, -4.0], &Device::Cpu)
            .unwrap()
            .reshape((1, 2, 2, 1))
            .unwrap();
        let b = Tensor::new(&[1f32, 2.0], &Device::Cpu).unwrap();
        let plain: Vec<f32> = channel_bias(&x, &b)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(plain, [2.0, -1.0, 5.0, -2.0]);
        let relu: Vec<f32> = channel_bias_relu(&x, &b)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(relu, [2.0, 0.0, 5.0, 0.0]);
        let err = channel_bias_relu(&x, &Tensor::new(&[1f32], &Device::Cpu).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("[1] for an input of 2 channels"), "{err}");
    }
}
