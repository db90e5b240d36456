//! Variables on a CUDA device: homeadam-cuda's kernels step candle's own parameter and
//! gradient buffers, on candle's stream, without a host copy.
//!
//! Every variable's optimizer state is one device buffer (`slots` slots of the state type, in
//! the core's layout: `numel` elements, or for q8 `⌈numel / 256⌉` blocks) for the optimizer's life, zeroed at the start. The kernels' tensor table holds
//! the variables that have a gradient; it is built at the first step and built again when
//! that set changes or a variable's storage moves, carrying t, the state and SWATS's Λ over
//! through the core's checkpoint format. The gradients are fresh buffers at every backward
//! pass: their addresses are refreshed at every step, one small host→device copy. A step
//! reads the device back once (its status), twice with clipping (the exact ‖g‖₂ first).

use std::sync::Arc;

use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use candle_core::{Result, Tensor};

use crate::error::bail;
use homeadam_core::{Dtype, Optimizer, StateStorage, StepReport, TensorAux};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes};

use super::clip::clip_scale;
use super::device::device_address;
use super::error::{core_err_about, cuda_err};
use super::params::{OnStates, OnStatesMut, Param, StateType, States};
use super::state::write_core;

/// The core's storage type of a candle dtype the optimizer steps.
fn storage_dtype(dtype: candle_core::DType) -> Option<Dtype> {
    match dtype {
        candle_core::DType::F32 => Some(Dtype::F32),
        candle_core::DType::BF16 => Some(Dtype::BF16),
        candle_core::DType::F16 => Some(Dtype::F16),
        _ => None,
    }
}

/// The kernels' table and which variables it holds.
struct Table {
    opt: CudaOptimizer,
    /// Indices of the table's variables among the adapter's, in table order.
    active: Vec<usize>,
}

/// The optimizer's side of the variables on one CUDA device.
pub(crate) struct DeviceState {
    stream: Arc<CudaStream>,
    dtypes: Dtypes,
    slots: usize,
    /// Per variable, its state as bytes (at least one, so that every variable has an address).
    buffers: Vec<CudaSlice<u8>>,
    table: Option<Table>,
}

impl DeviceState {
    /// The state of `params`, all on the CUDA device of the first and of one dtype.
    pub(crate) fn new(params: &[Param], slots: usize, state: Dtype) -> Result<Self> {
        let Some(first) = params.first() else {
            bail!("homeadam: no variable to place on a CUDA device");
        };
        let device = first.var.device();
        let stream = device.as_cuda_device()?.cuda_stream();
        let dtype = first.var.dtype();
        let Some(param) = storage_dtype(dtype) else {
            bail!(
                "homeadam: {} has dtype {dtype:?}: expected f32, bf16 or f16",
                first.name
            );
        };
        let mut placed = DeviceState {
            stream,
            dtypes: Dtypes {
                param,
                grad: param,
                state,
            },
            slots,
            buffers: Vec::with_capacity(params.len()),
            table: None,
        };
        placed.buffers = placed.alloc(params, first)?;
        Ok(placed)
    }

    /// Zeroed state buffers for `params`, which must be on the device and of the dtype of
    /// `first` (the optimizer's first variable).
    fn alloc(&self, params: &[Param], first: &Param) -> Result<Vec<CudaSlice<u8>>> {
        let (device, dtype) = (first.var.device(), first.var.dtype());
        let mut buffers = Vec::with_capacity(params.len());
        for p in params {
            if !p.var.device().same_device(device) {
                bail!(
                    "homeadam: {} is on {:?} and {} on {:?}: one optimizer steps one device",
                    first.name,
                    device.location(),
                    p.name,
                    p.var.device().location()
                );
            }
            if p.var.dtype() != dtype {
                bail!(
                    "homeadam: {} is {:?} and {} {:?}: on CUDA every variable of one optimizer \
                     has the same dtype",
                    first.name,
                    dtype,
                    p.name,
                    p.var.dtype()
                );
            }
            let bytes = self.slots * self.dtypes.state.slot_bytes(p.var.elem_count());
            let buffer = self.stream.alloc_zeros::<u8>(bytes.max(1));
            buffers.push(buffer.map_err(core_err_about(format_args!("optimizer state of {}", p.name)))?);
        }
        Ok(buffers)
    }

    /// Adds zeroed state for `added`, variables after those of `held` (not empty): the next
    /// step builds the table again over them.
    pub(crate) fn add(&mut self, held: &[Param], added: &[Param]) -> Result<()> {
        let Some(first) = held.first() else {
            bail!("homeadam: no variable to add a group to on a CUDA device");
        };
        let buffers = self.alloc(added, first)?;
        self.buffers.extend(buffers);
        Ok(())
    }

    /// The core optimizer of the table (t, the config), once built.
    pub(crate) fn core(&self) -> Option<&Optimizer> {
        self.table.as_ref().map(|t| t.opt.core())
    }

    /// Sets η of the table's optimizer, if built (the adapter's core holds it otherwise).
    pub(crate) fn set_lr(&mut self, lr: f64) -> Result<()> {
        match &mut self.table {
            Some(t) => t.opt.set_lr(lr).map_err(cuda_err),
            None => Ok(()),
        }
    }

    /// Forgets the table: the next step builds it from the adapter's core (after a load).
    pub(crate) fn reset_table(&mut self) {
        self.table = None;
    }

    /// Copies the table's per-tensor telemetry (ρ, home elements, SWATS's Λ) into `aux`.
    pub(crate) fn read_aux(&self, aux: &mut [TensorAux]) -> Result<()> {
        if let Some(t) = &self.table {
            let telemetry = t.opt.tensor_telemetry().map_err(cuda_err)?;
            for (&k, a) in t.active.iter().zip(telemetry) {
                aux[k] = a;
            }
        }
        Ok(())
    }

    /// One step over the variables `active` (index, contiguous gradient on this device);
    /// `host` is the adapter's core, the model-wide state before the table is first built.
    /// Returns the report and ‖g‖₂ when clipping to `max_norm`.
    pub(crate) fn step(
        &mut self,
        host: &Optimizer,
        params: &[Param],
        active: &[(usize, Tensor)],
        aux: &mut [TensorAux],
        max_norm: Option<f64>,
    ) -> Result<(StepReport, Option<f64>)> {
        let mut tensors = Vec::with_capacity(active.len());
        let mut grads = Vec::with_capacity(active.len());
        for (k, grad) in active {
            let p = &params[*k];
            let param = device_address(p.var.as_tensor(), &p.name)?;
            let grad = device_address(grad, &format!("the gradient of {}", p.name))?;
            let state = self.buffers[*k].device_ptr(&self.stream).0;
            tensors.push(DeviceTensor::new(param, grad, state, p.var.elem_count()).in_group(p.group));
            grads.push(grad);
        }
        let indices: Vec<usize> = active.iter().map(|(k, _)| *k).collect();
        let current = self.table.as_ref().is_some_and(|t| {
            t.active == indices
                && t.opt
                    .tensors()
                    .iter()
                    .zip(&tensors)
                    .all(|(a, b)| a.param == b.param && a.state == b.state)
        });
        if !current {
            self.rebuild(host, params, &tensors, indices, aux)?;
        }
        let Some(table) = self.table.as_mut() else {
            bail!("homeadam (CUDA): no tensor table after building it");
        };
        // SAFETY: every address is a live buffer of this stream's device: the gradients are
        // held by the caller's GradStore until this returns, and the stream frees them only
        // after the launches queued here.
        unsafe { table.opt.set_grads(&grads) }.map_err(cuda_err)?;
        let norm = match max_norm {
            Some(_) => Some(table.opt.grad_norm().map_err(cuda_err)?),
            None => None,
        };
        let scale = match (max_norm, norm) {
            (Some(c), Some(norm)) => clip_scale(norm, c),
            _ => 1.0,
        };
        let report = table.opt.step(scale).map_err(cuda_err)?;
        Ok((report, norm))
    }

    /// Builds the table over `tensors`, carrying the model-wide state over from the old table
    /// (or from `host` before the first build).
    fn rebuild(
        &mut self,
        host: &Optimizer,
        params: &[Param],
        tensors: &[DeviceTensor],
        active: Vec<usize>,
        aux: &mut [TensorAux],
    ) -> Result<()> {
        self.read_aux(aux)?;
        let core = self.core().unwrap_or(host).clone();
        // SAFETY: the addresses are candle's buffers of the variables (held by `params` for
        // the adapter's life; a moved storage makes the next step build again) and this
        // state's buffers, all on the stream's device, pairwise distinct (checked by the
        // adapter).
        let mut opt =
            unsafe { CudaOptimizer::new(*core.config(), self.dtypes, tensors, self.stream.clone()) }
                .map_err(cuda_err)?;
        if core.step_count() > 0 || core.swats_sgd_lr().is_some() {
            let states = self.download(params)?;
            let bytes = checkpoint(&core, params, &states, aux, &active)?;
            opt.load_state(&bytes).map_err(cuda_err)?;
        }
        self.table = Some(Table { opt, active });
        Ok(())
    }

    /// Every variable's state, copied to the host.
    pub(crate) fn download(&self, params: &[Param]) -> Result<States> {
        let mut host = Vec::with_capacity(self.buffers.len());
        for (p, buffer) in params.iter().zip(&self.buffers) {
            let len = self.slots * self.dtypes.state.slot_bytes(p.var.elem_count());
            let bytes = if len == 0 {
                Vec::new()
            } else {
                self.stream.clone_dtoh(&buffer.slice(..len)).map_err(cuda_err)?
            };
            host.push(bytes);
        }
        self.stream.synchronize().map_err(cuda_err)?;
        let numels = params.iter().map(|p| p.var.elem_count());
        let mut states = States::fresh(self.dtypes.state, self.slots, numels);
        states.visit_mut(Decode(&host));
        Ok(states)
    }

    /// Replaces every variable's state with `states` (of the state type, one per variable).
    pub(crate) fn upload(&mut self, states: &States) -> Result<()> {
        let bytes = states.visit(Encode);
        for (bytes, buffer) in bytes.iter().zip(&mut self.buffers) {
            if !bytes.is_empty() {
                let mut view = buffer.slice_mut(..bytes.len());
                self.stream.memcpy_htod(bytes, &mut view).map_err(cuda_err)?;
            }
        }
        Ok(())
    }
}

/// The core checkpoint of the variables `active` (indices into `params`), to load into a new
/// table.
fn checkpoint(
    core: &Optimizer,
    params: &[Param],
    states: &States,
    aux: &[TensorAux],
    active: &[usize],
) -> Result<Vec<u8>> {
    struct Write<'a> {
        core: &'a Optimizer,
        params: &'a [Param],
        aux: &'a [TensorAux],
        active: &'a [usize],
    }
    impl OnStates for Write<'_> {
        type Out = Result<Vec<u8>>;
        fn on<S: StateStorage>(self, states: &[Vec<S>]) -> Result<Vec<u8>> {
            let mut bytes = Vec::new();
            let which = self.active.iter().copied();
            write_core(self.core, self.params, states, self.aux, which, &mut bytes)?;
            Ok(bytes)
        }
    }
    states.visit(Write {
        core,
        params,
        aux,
        active,
    })
}

/// Fills each variable's state from its buffer's bytes.
struct Decode<'a>(&'a [Vec<u8>]);

impl OnStatesMut for Decode<'_> {
    type Out = ();
    fn on<S: StateType>(self, states: &mut Vec<Vec<S>>) {
        for (state, bytes) in states.iter_mut().zip(self.0) {
            for (item, b) in state.iter_mut().zip(bytes.chunks_exact(S::BYTES)) {
                *item = S::read(b);
            }
        }
    }
}

/// Each variable's state as its buffer's bytes.
struct Encode;

impl OnStates for Encode {
    type Out = Vec<Vec<u8>>;
    fn on<S: StateType>(self, states: &[Vec<S>]) -> Vec<Vec<u8>> {
        states
            .iter()
            .map(|state| {
                let mut bytes = vec![0; state.len() * S::BYTES];
                for (item, b) in state.iter().zip(bytes.chunks_exact_mut(S::BYTES)) {
                    item.write(b);
                }
                bytes
            })
            .collect()
    }
}
