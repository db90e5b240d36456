//! Batch normalisation's training pass on CUDA through cuDNN (spatial mode: one mean and
//! variance per channel over batch, height and width), in place of the dozen elementwise
//! kernels and reductions of candle's ops: `y = γ (x − μ_B)/√(σ²_B + ε) + β` forward, which
//! also updates the running statistics in place (`r ← (1 − momentum) r + momentum · s`, with
//! the unbiased variance, as PyTorch's call of it), and `∂L/∂x`, `∂L/∂γ`, `∂L/∂β` in one
//! backward call that reads the forward's saved `μ_B` and `1/√(σ²_B + ε)`.
//!
//! With a ReLU after it, `max(y, 0)` is part of the op (one kernel more each way, the
//! gradient passing where `y ≥ 0`), so that `y` is no node of candle's graph and its gradient is
//! not added into a zero-filled buffer; the op keeps `y` for its backward pass, as candle's
//! graph would have kept it for the ReLU's.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use candle_core::{CudaStorage, Shape, Storage, Tensor, Var};
use cudarc::cudnn::sys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

use super::{check, int, scalar, view, with_handle, CandleResult, ONE, ZERO};
use crate::models::op::{Arg, DeviceOp, Op};
use crate::models::param_grads::unpack_normalisation;
use crate::models::relu::cuda as relu;

/// What the forward pass leaves for the backward pass: the batch's mean and inverse deviation,
/// and with a ReLU after it, `y` before the ReLU.
struct Stats {
    saved_mean: CudaSlice<f32>,
    saved_inv_std: CudaSlice<f32>,
    before_relu: Option<CudaSlice<f32>>,
}

type Stash = Arc<Mutex<Option<Stats>>>;

/// Batch normalisation over `x` (`[n, c, h, w]`, f32) with scale `weight` and shift `bias`
/// (`[c]`), with a backward pass to all three; `running` (mean, variance; `[c]` f32 on `x`'s
/// device) move towards the batch's statistics by `momentum`; with `relu`, followed by a ReLU.
pub(crate) fn train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running: (&Var, &Var),
    (eps, momentum): (f64, f64),
    relu: bool,
) -> anyhow::Result<Tensor> {
    let channels = weight.elem_count();
    for (what, r) in [("mean", running.0), ("variance", running.1)] {
        let fits = r.elem_count() == channels
            && r.dtype() == candle_core::DType::F32
            && r.device().same_device(x.device());
        anyhow::ensure!(
            fits,
            "batch norm: the running {what} ({:?} {:?} on {:?}) is not {channels} f32 values \
             on the input's device",
            r.dims(),
            r.dtype(),
            r.device()
        );
    }
    let op = Forward {
        eps,
        momentum,
        relu,
        running: (running.0.clone(), running.1.clone()),
        stash: Arc::new(Mutex::new(None)),
    };
    Ok(x.contiguous()?
        .apply_op3(&weight.contiguous()?, &bias.contiguous()?, Op(op))?)
}

/// The device address of the contiguous f32 values of `var`, for cuDNN to update in place.
fn address_of(var: &Var, stream: &Arc<cudarc::driver::CudaStream>) -> CandleResult<u64> {
    let (storage, layout) = var.storage_and_layout();
    let Storage::Cuda(cuda) = &*storage else {
        candle_core::bail!("batch norm: a running statistic is not on a CUDA device");
    };
    let values = view(cuda, layout)?;
    let (address, _guard) = values.device_ptr(stream);
    Ok(address)
}

/// The descriptors of one input shape: `x` (and `y`, `∂L/∂y`, `∂L/∂x`, all of its shape) and
/// the per-channel parameters; made at the shape's first call and kept with the handle.
pub(super) struct Descriptors {
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
    /// The handle's descriptors for input `dims`, made at their first use.
    fn of<'h>(
        made: &'h mut HashMap<[usize; 4], Descriptors>,
        dims: &[usize],
    ) -> CandleResult<&'h Descriptors> {
        let Ok(dims) = <[usize; 4]>::try_from(dims) else {
            candle_core::bail!("batch norm: input {dims:?} is not [n, c, h, w]");
        };
        Ok(match made.entry(dims) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Descriptors::new(dims)?),
        })
    }

    fn new([n, c, h, w]: [usize; 4]) -> CandleResult<Descriptors> {
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

/// `(x, γ, β) → y` (or `max(y, 0)` with `relu`), updating the running statistics and leaving
/// the batch's in the stash.
struct Forward {
    eps: f64,
    momentum: f64,
    relu: bool,
    running: (Var, Var),
    stash: Stash,
}

/// `(x, ∂L/∂y, γ) → [∂L/∂x | ∂L/∂γ | ∂L/∂β]` (flat), from the forward's stash (`∂L/∂y` taken
/// through the ReLU's gradient first if the forward pass had one).
struct Backward {
    eps: f64,
    stash: Stash,
}

impl DeviceOp<3> for Forward {
    fn name(&self) -> &'static str {
        if self.relu {
            "homeadam-cudnn-batch-norm-relu"
        } else {
            "homeadam-cudnn-batch-norm"
        }
    }

    fn cuda(
        &self,
        [(x, x_layout), (w, w_layout), (b, b_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = x.device.clone();
        let stream = dev.cuda_stream();
        let shape = x_layout.shape().clone();
        let channels = w_layout.shape().elem_count();
        let (x, w, b) = (view(x, x_layout)?, view(w, w_layout)?, view(b, b_layout)?);
        // SAFETY: cuDNN writes every element of y and of the saved statistics.
        let (mut y, mut saved_mean, mut saved_inv_std) = unsafe {
            (
                dev.alloc::<f32>(shape.elem_count())?,
                dev.alloc::<f32>(channels)?,
                dev.alloc::<f32>(channels)?,
            )
        };
        // The running statistics are buffers outside the graph, written by this call alone,
        // on this stream.
        let running_mean = address_of(&self.running.0, &stream)?;
        let running_var = address_of(&self.running.1, &stream)?;
        with_handle(&stream, |handle| {
            let d = Descriptors::of(&mut handle.batch_norms, shape.dims())?;
            let (px, _px) = x.device_ptr(&stream);
            let (pw, _pw) = w.device_ptr(&stream);
            let (pb, _pb) = b.device_ptr(&stream);
            let (py, _py) = y.device_ptr_mut(&stream);
            let (psm, _psm) = saved_mean.device_ptr_mut(&stream);
            let (psi, _psi) = saved_inv_std.device_ptr_mut(&stream);
            // SAFETY: the descriptors describe the contiguous f32 buffers passed with them,
            // all on the handle's stream (the running statistics checked by `train`).
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
                        self.momentum,
                        running_mean as *mut c_void,
                        running_var as *mut c_void,
                        self.eps,
                        psm as *mut c_void,
                        psi as *mut c_void,
                    ),
                    "batch norm forward",
                )
            }
        })?;
        let (y, before_relu) = if self.relu {
            let after = relu::launch(&dev, relu::FORWARD, &[y.as_view()])?;
            (after, Some(y))
        } else {
            (y, None)
        };
        let stats = Stats {
            saved_mean,
            saved_inv_std,
            before_relu,
        };
        *self
            .stash
            .lock()
            .map_err(|_| candle_core::Error::Msg("batch norm: a poisoned lock".into()))? = Some(stats);
        Ok((CudaStorage::wrap_cuda_slice(y, dev), shape))
    }

    fn gradients(
        &self,
        [x, w, b]: [&Tensor; 3],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 3]> {
        let backward = Backward {
            eps: self.eps,
            stash: self.stash.clone(),
        };
        let packed = x.apply_op3_no_bwd(&grad.contiguous()?, w, &Op(backward))?;
        unpack_normalisation(&packed, x, w, b)
    }
}

impl DeviceOp<3> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-cudnn-batch-norm-backward"
    }

    fn cuda(
        &self,
        [(x, x_layout), (dy, dy_layout), (w, w_layout)]: [Arg<'_, candle_core::CudaStorage>; 3],
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = x.device.clone();
        let stream = dev.cuda_stream();
        let n = x_layout.shape().elem_count();
        let c = w_layout.shape().elem_count();
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
        let through_relu = match &stats.before_relu {
            Some(y) => Some(relu::launch(&dev, relu::BACKWARD, &[y.as_view(), dy.slice(..)])?),
            None => None,
        };
        let dy = match &through_relu {
            Some(d) => d.as_view(),
            None => dy,
        };
        with_handle(&stream, |handle| {
            let d = Descriptors::of(&mut handle.batch_norms, x_layout.shape().dims())?;
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
