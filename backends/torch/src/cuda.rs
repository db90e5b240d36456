//! CUDA tensors: homeadam-cuda's [`CudaOptimizer`] over the tensors' device memory, launched on
//! PyTorch's current stream in the device's primary context (the context the CUDA runtime,
//! and so PyTorch, works in).
//!
//! A [`Model`] is built for one list of tensors (their θ and state addresses, lengths and
//! partition into parameter groups), one dtype, one device and one stream, and kept while the
//! steps name the same ones: building compiles (once per process and storage) and uploads the
//! tensor table; a step of the same model only replaces the gradient pointers
//! (`CudaOptimizer::set_grads`) and the groups' values (`CudaOptimizer::set_groups`: a
//! scheduler's rates) where they changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::{result, sys, CudaContext};
use homeadam_core::{Config, Dtype, Group, StepReport, TensorAux};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes, Error};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::PyErr;

use crate::nvrtc;
use crate::raw::RawTensor;

/// What a [`Model`] was built for.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    device: usize,
    stream: usize,
    dtypes: Dtypes,
    /// θ's and the state's addresses and θ's length of each tensor, in order.
    tensors: Vec<(usize, usize, usize)>,
    /// Each tensor's group as an index among the distinct groups, in order of appearance.
    partition: Vec<usize>,
}

impl Key {
    /// The key of a step over `tensors` on `device` and `stream`; refuses tensors of more than
    /// one dtype (the model's kernels are compiled for one).
    pub fn new(device: usize, stream: usize, state: Dtype, tensors: &[RawTensor]) -> Result<Self, String> {
        let param = tensors.first().map_or(Dtype::F32, |t| t.dtype.core());
        if let Some(k) = tensors.iter().position(|t| t.dtype.core() != param) {
            return Err(format!(
                "tensor {k} is {}, tensor 0 {}: on CUDA every parameter of an optimizer has one dtype \
                 (the step's kernels are compiled for one)",
                tensors[k].dtype.core().name(),
                param.name()
            ));
        }
        Ok(Key {
            device,
            stream,
            dtypes: Dtypes {
                param,
                grad: param,
                state,
            },
            tensors: tensors.iter().map(|t| (t.param, t.state, t.numel)).collect(),
            partition: partition(tensors),
        })
    }
}

/// Each tensor's group as an index among the distinct groups, in order of appearance.
fn partition(tensors: &[RawTensor]) -> Vec<usize> {
    let mut distinct: Vec<Group> = Vec::new();
    tensors
        .iter()
        .map(|t| {
            distinct.iter().position(|&g| g == t.group).unwrap_or_else(|| {
                distinct.push(t.group);
                distinct.len() - 1
            })
        })
        .collect()
}

/// A failure of the CUDA step as Python's exception: what the core refuses (a group, a gradient
/// scale) is a `ValueError`, a failure of the driver, NVRTC or the device a `RuntimeError`.
pub fn error(e: Error) -> PyErr {
    match e {
        Error::Core(_) | Error::TensorCount { .. } => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// The primary context of device `ordinal`, retained once per process.
fn context(ordinal: usize) -> Result<Arc<CudaContext>, PyErr> {
    // SAFETY: probing for the library has no preconditions.
    if !unsafe { sys::is_culib_present() } {
        return Err(PyRuntimeError::new_err(
            "CUDA tensors: the NVIDIA driver's library (libcuda.so.1) cannot be loaded",
        ));
    }
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<CudaContext>>>> = OnceLock::new();
    let mut contexts = CONTEXTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(ctx) = contexts.get(&ordinal) {
        return Ok(ctx.clone());
    }
    let ctx = CudaContext::new(ordinal)
        .map_err(|e| PyRuntimeError::new_err(format!("CUDA device {ordinal}: {e:?}")))?;
    // SAFETY: every buffer a model allocates is used on that model's stream only, so cudarc's
    // events between streams are not needed; without them no buffer records an event per use.
    unsafe { ctx.disable_event_tracking() };
    contexts.insert(ordinal, ctx.clone());
    Ok(ctx)
}

/// A [`CudaOptimizer`] over one list of PyTorch's tensors.
pub struct Model {
    key: Key,
    grads: Vec<u64>,
    groups: Vec<Group>,
    opt: CudaOptimizer,
}

impl Model {
    /// Builds the optimizer of `config` for the tensors of `key` (`tensors`), its kernels
    /// compiled by the NVRTC `library`.
    ///
    /// # Safety
    /// `tensors` are live, disjoint, contiguous tensors of `key`'s device and dtypes, with the
    /// lengths recorded and the state the rule needs ([`RawTensor::check`] passed), which the
    /// caller keeps alive and does not free for as long as it steps this model.
    pub unsafe fn new(config: Config, key: Key, tensors: &[RawTensor], library: &str) -> Result<Self, PyErr> {
        let ctx = context(key.device)?;
        // SAFETY: PyTorch's current stream of this device, whose Python object `homeadam.torch`
        // holds while this model exists; launches on it follow PyTorch's own work there.
        let stream = unsafe { ctx.wrap_borrowed_stream(key.stream as sys::CUstream) };
        let device: Vec<DeviceTensor> = tensors
            .iter()
            .map(|t| {
                DeviceTensor::new(t.param as u64, t.grad as u64, t.state as u64, t.numel).in_group(t.group)
            })
            .collect();
        let compile = |source: &str, arch: &str| nvrtc::cubin(library, source, arch);
        let opt =
            CudaOptimizer::with_compiler(config, key.dtypes, &device, stream, &compile).map_err(error)?;
        Ok(Model {
            grads: device.iter().map(|t| t.grad).collect(),
            groups: device.iter().map(|t| t.group).collect(),
            key,
            opt,
        })
    }

    /// Whether this model was built for `key`.
    pub fn is_for(&self, key: &Key) -> bool {
        self.key == *key
    }

    /// The gradients, groups and Λ of this step's tensors (those of [`Model::is_for`]).
    ///
    /// # Safety
    /// As [`Model::new`], for the gradients of `tensors`.
    pub unsafe fn bind(&mut self, tensors: &[RawTensor], auxes: &[TensorAux]) -> Result<(), PyErr> {
        let grads: Vec<u64> = tensors.iter().map(|t| t.grad as u64).collect();
        if grads != self.grads {
            self.opt.set_grads(&grads).map_err(error)?;
            self.grads = grads;
        }
        let groups: Vec<Group> = tensors.iter().map(|t| t.group).collect();
        if groups != self.groups {
            self.opt.set_groups(&groups).map_err(error)?;
            self.groups = groups;
        }
        for (aux, given) in self.opt.tensor_aux_mut().iter_mut().zip(auxes) {
            aux.swats_lambda = given.swats_lambda;
        }
        Ok(())
    }

    /// The optimizer.
    pub fn optimizer(&mut self) -> &mut CudaOptimizer {
        &mut self.opt
    }

    /// One step at gradient scale `grad_scale`: its report and each tensor's Λ.
    pub fn step(&mut self, grad_scale: f64) -> Result<(StepReport, Vec<f32>), PyErr> {
        let report = self.opt.step(grad_scale).map_err(error)?;
        let lambdas = self.opt.tensor_aux_mut().iter().map(|a| a.swats_lambda).collect();
        Ok((report, lambdas))
    }
}

/// Drops `model` and gives the calling thread back its current CUDA context: cudarc makes the
/// model's context current to free its buffers, and PyTorch takes its current device from the
/// thread's context.
pub fn release(model: Model) {
    let previous = result::ctx::get_current().ok().flatten();
    drop(model);
    // SAFETY: the context that was current (a live primary context), or none.
    unsafe { result::ctx::set_current(previous.unwrap_or(std::ptr::null_mut())) }.ok();
}
