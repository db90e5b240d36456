//! A convolution's bias, `y = x + b` with `b` (`[C]`) added to every value of channel `c` of
//! `x` (`[N, C, H, W]`): candle's broadcast add on the CPU, one op on CUDA.
//!
//! Composed, the bias is a reshape, a broadcast and an add, whose backward pass reduces the
//! gradient over the batch, height and width one axis at a time and adds each result into a
//! zero-filled buffer. On CUDA the forward pass is one kernel, and the backward pass passes
//! `∂L/∂y` on as `∂L/∂x` and sums `∂L/∂b_c = Σ_{n,h,w} ∂L/∂y` per channel in a fixed order, over
//! chunks of images and then the chunks (`host/kernels/channel_bias.cu`).

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::param_grads::param_grad;

/// `x + b` over the channels of an NCHW tensor.
pub fn channel_bias(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (_, c, _, _) = x.dims4()?;
    ensure!(
        b.dims() == [c],
        "channel bias: {:?} for an input of {c} channels",
        b.dims()
    );
    if x.device().is_cuda() {
        return Ok(x.contiguous()?.apply_op2(b, Forward)?);
    }
    Ok(x.broadcast_add(&b.reshape((1, c, 1, 1))?)?)
}

/// `(x, b) → x + b`.
struct Forward;

/// `∂L/∂y → [Σ_{n,h,w} ∂L/∂y_c]_c`.
struct ChannelSum;

impl CustomOp2 for Forward {
    fn name(&self) -> &'static str {
        "homeadam-channel-bias"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        super::cuda_only("the fused channel bias")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        x: &candle_core::CudaStorage,
        x_layout: &Layout,
        b: &candle_core::CudaStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = crate::models::host_time::span(self.name());
        cuda::run((x, x_layout), Some((b, b_layout)))
    }

    fn bwd(
        &self,
        _: &Tensor,
        b: &Tensor,
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let db = grad.apply_op1_no_bwd(&ChannelSum)?;
        Ok((Some(grad), param_grad(b, db)?))
    }
}

impl CustomOp1 for ChannelSum {
    fn name(&self) -> &'static str {
        "homeadam-channel-sum"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        super::cuda_only("the fused channel bias")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        g: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = crate::models::host_time::span(self.name());
        cuda::run((g, layout), None)
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! One thread per value forward; backward, one block per channel and chunk of images.

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, kernel_u32, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/channel_bias.cu");

    /// With the bias, `x + b`; without, the per-channel sums of `x`.
    pub(super) fn run(
        (x, x_layout): (&CudaStorage, &Layout),
        bias: Option<(&CudaStorage, &Layout)>,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(&PTX, "channel bias", SOURCE)?;
        let (batch, channels, h, w) = x_layout.shape().dims4()?;
        let n = x_layout.shape().elem_count();
        let dev = x.device.clone();
        let x = contiguous::<f32>(x, x_layout, "channel bias")?;
        // The kernels index in 32 bits.
        let n_arg = kernel_u32(n, "channel bias")?;
        let (batch_arg, channels_arg, plane) = (
            kernel_u32(batch, "channel bias")?,
            kernel_u32(channels, "channel bias")?,
            kernel_u32(h * w, "channel bias")?,
        );
        match bias {
            Some((b, b_layout)) => {
                let b = contiguous::<f32>(b, b_layout, "channel bias")?;
                let func =
                    dev.get_or_load_custom_func("homeadam_channel_bias_f32", "homeadam_channel_bias", ptx)?;
                // SAFETY: the kernel writes every element.
                let mut y = unsafe { dev.alloc::<f32>(n)? };
                let mut builder = func.builder();
                builder
                    .arg(&x)
                    .arg(&b)
                    .arg(&mut y)
                    .arg(&n_arg)
                    .arg(&channels_arg)
                    .arg(&plane);
                // SAFETY: x and y hold n values, b one per channel.
                unsafe { builder.launch(per_element(n)) }.w()?;
                Ok((CudaStorage::wrap_cuda_slice(y, dev), x_layout.shape().clone()))
            }
            None => {
                // Chunks of images holding at least SUM_BLOCK values of a channel, so that a
                // block has work enough and the grid blocks enough.
                let chunk = SUM_BLOCK.div_ceil(h * w).clamp(1, batch);
                let chunks = batch.div_ceil(chunk);
                // SAFETY: block (c, k) writes partial[k · channels + c], for every c and k.
                let mut partial = unsafe { dev.alloc::<f32>(chunks * channels)? };
                let first = dev.get_or_load_custom_func(
                    "homeadam_channel_sum_partial_f32",
                    "homeadam_channel_bias",
                    ptx,
                )?;
                let config = LaunchConfig {
                    grid_dim: (channels_arg, kernel_u32(chunks, "channel bias")?, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let chunk_arg = chunk as u32;
                let mut builder = first.builder();
                builder
                    .arg(&x)
                    .arg(&mut partial)
                    .arg(&batch_arg)
                    .arg(&channels_arg)
                    .arg(&plane)
                    .arg(&chunk_arg);
                // SAFETY: x holds batch × channels × plane values, partial chunks × channels.
                unsafe { builder.launch(config) }.w()?;
                let second = dev.get_or_load_custom_func(
                    "homeadam_channel_sum_finish_f32",
                    "homeadam_channel_bias",
                    ptx,
                )?;
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
        }
    }

    /// The values of one channel a block of the bias gradient's first pass sums, at least.
    const SUM_BLOCK: usize = 16_384;
}
