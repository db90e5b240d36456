//! Batch normalisation's training pass on CUDA through cuDNN (spatial mode: one mean and
//! variance per channel over batch, height and width), in place of the dozen elementwise
//! kernels and reductions of candle's ops: `y = γ (x − μ_B)/√(σ²_B + ε) + β` forward, and
//! `∂L/∂x`, `∂L/∂γ`, `∂L/∂β` in one backward call that reads the forward's saved `μ_B` and
//! `1/√(σ²_B + ε)`.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use candle_core::op::BackpropOp;
use candle_core::{CpuStorage, CudaStorage, CustomOp3, InplaceOp2, Layout, Shape, Storage, Tensor, Var};
use cudarc::cudnn::sys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use super::{check, int, scalar, view, with_handle, CandleResult, ONE, ZERO};
use crate::models::param_grads::param_grad;

/// What the forward pass leaves: the batch's mean and unbiased variance for the running
/// statistics (taken by [`train`]), and the mean and inverse deviation the backward pass reads.
struct Stats {
    batch: Option<(CudaSlice<f32>, CudaSlice<f32>)>,
    saved_mean: CudaSlice<f32>,
    saved_inv_std: CudaSlice<f32>,
}

type Stash = Arc<Mutex<Option<Stats>>>;

/// `(y, μ_B, unbiased σ²_B)` of batch normalisation over `x` (`[n, c, h, w]`, f32) with scale
/// `weight` and shift `bias` (`[c]`); `y` has a backward pass to all three.
pub(crate) fn train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    eps: f64,
) -> anyhow::Result<(Tensor, Tensor, Tensor)> {
    let stash: Stash = Arc::new(Mutex::new(None));
    let op = Forward {
        eps,
        stash: stash.clone(),
    };
    let y = x
        .contiguous()?
        .apply_op3(&weight.contiguous()?, &bias.contiguous()?, op)?;
    let (mean, var) = stash
        .lock()
        .map_err(|_| anyhow::anyhow!("batch norm: a poisoned lock"))?
        .as_mut()
        .and_then(|s| s.batch.take())
        .ok_or_else(|| anyhow::anyhow!("batch norm: the forward pass left no statistics"))?;
    let candle_core::Device::Cuda(dev) = x.device() else {
        anyhow::bail!("batch norm through cuDNN: {:?} is not a CUDA device", x.device());
    };
    let channels = weight.elem_count();
    let tensor = |slice| {
        Tensor::from_storage(
            Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone())),
            channels,
            BackpropOp::none(),
            false,
        )
    };
    Ok((y, tensor(mean), tensor(var)))
}

/// `r ← (1 − momentum) r + momentum · s` for a running statistic `r` and the batch's `s`, in
/// place, in one kernel (candle's ops take four and two allocations per statistic).
pub(crate) fn running_average(r: &Var, s: &Tensor, momentum: f64) -> anyhow::Result<()> {
    r.inplace_op2(
        s,
        &RunningAverage {
            momentum: momentum as f32,
        },
    )?;
    Ok(())
}

/// The in-place update of [`running_average`] (`host/kernels/batch_norm.cu`).
struct RunningAverage {
    momentum: f32,
}

impl InplaceOp2 for RunningAverage {
    fn name(&self) -> &'static str {
        "homeadam-running-average"
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("the running average runs on CUDA tensors only (the CPU uses candle's ops)")
    }

    fn cuda_fwd(
        &self,
        r: &mut CudaStorage,
        r_layout: &Layout,
        s: &CudaStorage,
        s_layout: &Layout,
    ) -> CandleResult<()> {
        use candle_core::cuda::cudarc::driver::PushKernelArg;
        use candle_core::cuda_backend::WrapErr;
        use std::sync::OnceLock;

        use crate::models::cuda::{kernel_u32, per_element, ptx};

        let _span = crate::models::host_time::span(self.name());

        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        let ptx = ptx(
            &PTX,
            "running average",
            include_str!("../../../kernels/batch_norm.cu"),
        )?;
        let n = r_layout.shape().elem_count();
        if s_layout.shape().elem_count() != n {
            candle_core::bail!(
                "running average: {n} statistics, {} batch values",
                s_layout.shape().elem_count()
            );
        }
        let dev = r.device.clone();
        let Some((start, end)) = r_layout.contiguous_offsets() else {
            candle_core::bail!("running average: the statistic is not contiguous");
        };
        let s = view(s, s_layout)?;
        let mut r = r.as_cuda_slice_mut::<f32>()?.slice_mut(start..end);
        let func = dev.get_or_load_custom_func("homeadam_running_average_f32", "homeadam_batch_norm", ptx)?;
        let n_arg = kernel_u32(n, "running average")?;
        let mut builder = func.builder();
        builder.arg(&mut r).arg(&s).arg(&n_arg).arg(&self.momentum);
        // SAFETY: r and s hold n values each.
        unsafe { builder.launch(per_element(n)) }.w()?;
        Ok(())
    }
}

/// The descriptors of one call: `x` (and `y`, `∂L/∂y`, `∂L/∂x`, all of its shape) and the
/// per-channel parameters.
struct Descriptors {
    x: sys::cudnnTensorDescriptor_t,
    channel: sys::cudnnTensorDescriptor_t,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or a descriptor created by `Descriptors::new`.
        unsafe {
            if !self.x.is_null() {
                sys::cudnnDestroyTensorDescriptor(self.x);
            }
            if !self.channel.is_null() {
                sys::cudnnDestroyTensorDescriptor(self.channel);
            }
        }
    }
}

const MODE: sys::cudnnBatchNormMode_t = sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL;

impl Descriptors {
    fn new(dims: &[usize]) -> CandleResult<Descriptors> {
        let &[n, c, h, w] = dims else {
            candle_core::bail!("batch norm: input {dims:?} is not [n, c, h, w]");
        };
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            channel: std::ptr::null_mut(),
        };
        // SAFETY: each descriptor is created before it is set or derived from.
        unsafe {
            check(sys::cudnnCreateTensorDescriptor(&mut d.x), "create x")?;
            check(
                sys::cudnnSetTensor4dDescriptor(
                    d.x,
                    sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
                    int(n)?,
                    int(c)?,
                    int(h)?,
                    int(w)?,
                ),
                "x",
            )?;
            check(sys::cudnnCreateTensorDescriptor(&mut d.channel), "create channel")?;
            check(
                sys::cudnnDeriveBNTensorDescriptor(d.channel, d.x, MODE),
                "derive channel",
            )?;
        }
        Ok(d)
    }
}

/// `(x, γ, β) → y`, leaving its statistics in the stash.
struct Forward {
    eps: f64,
    stash: Stash,
}

/// `(x, ∂L/∂y, γ) → [∂L/∂x | ∂L/∂γ | ∂L/∂β]` (flat), from the forward's stash.
struct Backward {
    eps: f64,
    stash: Stash,
}

impl CustomOp3 for Forward {
    fn name(&self) -> &'static str {
        "homeadam-cudnn-batch-norm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        crate::models::cuda_only("cuDNN's batch norm")
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        x_layout: &Layout,
        w: &CudaStorage,
        w_layout: &Layout,
        b: &CudaStorage,
        b_layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let _span = crate::models::host_time::span(self.name());
        let dev = x.device.clone();
        let stream = dev.cuda_stream();
        let shape = x_layout.shape().clone();
        let channels = w_layout.shape().elem_count();
        let d = Descriptors::new(shape.dims())?;
        let (x, w, b) = (view(x, x_layout)?, view(w, w_layout)?, view(b, b_layout)?);
        // SAFETY: cuDNN writes every element of y and of the saved statistics.
        let (mut y, mut saved_mean, mut saved_inv_std) = unsafe {
            (
                dev.alloc::<f32>(shape.elem_count())?,
                dev.alloc::<f32>(channels)?,
                dev.alloc::<f32>(channels)?,
            )
        };
        // Running statistics with an averaging factor of 1 are the batch's own (zeroed first:
        // cuDNN reads them, weighted by 0).
        let mut mean = dev.alloc_zeros::<f32>(channels)?;
        let mut var = dev.alloc_zeros::<f32>(channels)?;
        with_handle(&stream, |handle| {
            let (px, _px) = x.device_ptr(&stream);
            let (pw, _pw) = w.device_ptr(&stream);
            let (pb, _pb) = b.device_ptr(&stream);
            let (py, _py) = y.device_ptr_mut(&stream);
            let (pm, _pm) = mean.device_ptr_mut(&stream);
            let (pv, _pv) = var.device_ptr_mut(&stream);
            let (psm, _psm) = saved_mean.device_ptr_mut(&stream);
            let (psi, _psi) = saved_inv_std.device_ptr_mut(&stream);
            // SAFETY: the descriptors describe the contiguous f32 buffers passed with them,
            // all on the handle's stream.
            unsafe {
                check(
                    sys::cudnnBatchNormalizationForwardTraining(
                        handle.raw,
                        MODE,
                        scalar(&ONE),
                        scalar(&ZERO),
                        d.x,
                        px as *const c_void,
                        d.x,
                        py as *mut c_void,
                        d.channel,
                        pw as *const c_void,
                        pb as *const c_void,
                        1.0,
                        pm as *mut c_void,
                        pv as *mut c_void,
                        self.eps,
                        psm as *mut c_void,
                        psi as *mut c_void,
                    ),
                    "batch norm forward",
                )
            }
        })?;
        let stats = Stats {
            batch: Some((mean, var)),
            saved_mean,
            saved_inv_std,
        };
        *self
            .stash
            .lock()
            .map_err(|_| candle_core::Error::Msg("batch norm: a poisoned lock".into()))? = Some(stats);
        Ok((CudaStorage::wrap_cuda_slice(y, dev), shape))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let backward = Backward {
            eps: self.eps,
            stash: self.stash.clone(),
        };
        let all = x.apply_op3_no_bwd(&grad.contiguous()?, w, &backward)?;
        let (n, c) = (x.elem_count(), w.elem_count());
        let dx = all.narrow(0, 0, n)?.reshape(x.shape())?;
        Ok((
            Some(dx),
            param_grad(w, all.narrow(0, n, c)?)?,
            param_grad(b, all.narrow(0, n + c, c)?)?,
        ))
    }
}

impl CustomOp3 for Backward {
    fn name(&self) -> &'static str {
        "homeadam-cudnn-batch-norm-backward"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        crate::models::cuda_only("cuDNN's batch norm")
    }

    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        x_layout: &Layout,
        dy: &CudaStorage,
        dy_layout: &Layout,
        w: &CudaStorage,
        w_layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let _span = crate::models::host_time::span(self.name());
        let dev = x.device.clone();
        let stream = dev.cuda_stream();
        let n = x_layout.shape().elem_count();
        let c = w_layout.shape().elem_count();
        let d = Descriptors::new(x_layout.shape().dims())?;
        let (x, dy, w) = (view(x, x_layout)?, view(dy, dy_layout)?, view(w, w_layout)?);
        // SAFETY: cuDNN writes every element: ∂L/∂x, then ∂L/∂γ and ∂L/∂β (β = 0 for both).
        let mut all = unsafe { dev.alloc::<f32>(n + 2 * c)? };
        let guard = self
            .stash
            .lock()
            .map_err(|_| candle_core::Error::Msg("batch norm: a poisoned lock".into()))?;
        let Some(stats) = guard.as_ref() else {
            candle_core::bail!("batch norm backward: no forward pass before it");
        };
        with_handle(&stream, |handle| {
            let (px, _px) = x.device_ptr(&stream);
            let (pdy, _pdy) = dy.device_ptr(&stream);
            let (pw, _pw) = w.device_ptr(&stream);
            let (psm, _psm) = stats.saved_mean.device_ptr(&stream);
            let (psi, _psi) = stats.saved_inv_std.device_ptr(&stream);
            let (pall, _pall) = all.device_ptr_mut(&stream);
            let f32_bytes = std::mem::size_of::<f32>() as u64;
            let (pdx, pdw, pdb) = (
                pall,
                pall + n as u64 * f32_bytes,
                pall + (n + c) as u64 * f32_bytes,
            );
            // SAFETY: the descriptors describe the contiguous f32 buffers passed with them;
            // `all` holds n + 2c values; the saved statistics are the forward's over this x.
            unsafe {
                check(
                    sys::cudnnBatchNormalizationBackward(
                        handle.raw,
                        MODE,
                        scalar(&ONE),
                        scalar(&ZERO),
                        scalar(&ONE),
                        scalar(&ZERO),
                        d.x,
                        px as *const c_void,
                        d.x,
                        pdy as *const c_void,
                        d.x,
                        pdx as *mut c_void,
                        d.channel,
                        pw as *const c_void,
                        pdw as *mut c_void,
                        pdb as *mut c_void,
                        self.eps,
                        psm as *const c_void,
                        psi as *const c_void,
                    ),
                    "batch norm backward",
                )
            }
        })?;
        Ok((CudaStorage::wrap_cuda_slice(all, dev), Shape::from(n + 2 * c)))
    }
}
