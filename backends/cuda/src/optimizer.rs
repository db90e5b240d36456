//! [`CudaOptimizer`]: the model-wide step on the device, the core's semantics bit for bit.
//!
//! A step is at most four launches on one stream, whatever the number of tensors:
//! `ha_reset`; `ha_home_pre_{g}_{s}` (global / per-layer HomeAdam: min v_t and the
//! non-finite flag) or `ha_check_{g}` (the non-finite flag, under `FiniteCheck::SkipStep`);
//! the update `{rule}_{p}_{g}_{s}`, which does nothing when the flag is set. The only host
//! round trip is one 24-byte status read at the end of the step: the core's step counter t
//! does not advance on a skipped step, so the host must know before computing the next step's
//! scalars.

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use homeadam_core::rounding::{mix64, tensor_key};
use homeadam_core::{
    bf16, f16, ByteSink, CheckpointError, Config, Dtype, FiniteCheck, Optimizer, Rounding, Rule, StepReport,
    StepScalars, Storage, Switch, TensorAux, TensorState,
};

use crate::device::{block_table, HaBlock, HaScalars, HaStatus, HaTensor};
use crate::kernels::{self, flags, CompileError};

/// Threads per block of every kernel.
const THREADS: u32 = 256;

/// One tensor of the model on the device: raw device pointers (e.g. from cudarc's
/// `DevicePtr::device_ptr` or candle's `CudaStorage`) and its element count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceTensor {
    /// θ: `numel` elements of the parameter type.
    pub param: u64,
    /// g: `numel` elements of the gradient type.
    pub grad: u64,
    /// The state slots, one after the other: `Config::state_slots() · numel` elements of the
    /// state type, zeroed before the first step.
    pub state: u64,
    /// Number of parameters.
    pub numel: usize,
}

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The core refused (config, gradient scale, f16 second moment, checkpoint).
    Core(homeadam_core::Error),
    /// A CUDA driver call failed.
    Driver(DriverError),
    /// NVRTC failed.
    Compile(CompileError),
    /// Not supported on this backend yet.
    Unsupported(&'static str),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Core(e) => write!(f, "{e}"),
            Error::Driver(e) => write!(f, "CUDA driver: {e:?}"),
            Error::Compile(e) => write!(f, "{e}"),
            Error::Unsupported(what) => write!(f, "not supported on CUDA: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<homeadam_core::Error> for Error {
    fn from(e: homeadam_core::Error) -> Self {
        Error::Core(e)
    }
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

impl From<CompileError> for Error {
    fn from(e: CompileError) -> Self {
        Error::Compile(e)
    }
}

/// The storage types of a model: parameters, gradients, state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dtypes {
    /// Parameter type P.
    pub param: Dtype,
    /// Gradient type G.
    pub grad: Dtype,
    /// State type S.
    pub state: Dtype,
}

/// The optimizer of one model on one CUDA stream.
///
/// The model-wide state (t, the SWATS phase) is a core [`Optimizer`], advanced once per
/// applied step, so step scalars, checkpoints and validation are the core's own.
pub struct CudaOptimizer {
    core: Optimizer,
    dtypes: Dtypes,
    stream: Arc<CudaStream>,
    reset: CudaFunction,
    first_pass: Option<CudaFunction>,
    update: CudaFunction,
    update_flags: u32,
    has_rho: bool,
    tensors: Vec<DeviceTensor>,
    table: CudaSlice<HaTensor>,
    blocks: CudaSlice<HaBlock>,
    status: CudaSlice<HaStatus>,
}

/// Advances the core's step counter as an applied step over no tensors does (t + 1) and
/// checks `grad_scale` and the state type as the core does.
fn advance(core: &mut Optimizer, state: Dtype, grad_scale: f64) -> Result<StepReport, homeadam_core::Error> {
    match state {
        Dtype::F32 => core.step::<f32, f32, f32>(&mut [], grad_scale),
        Dtype::F16 => core.step::<f32, f32, f16>(&mut [], grad_scale),
        Dtype::BF16 => core.step::<f32, f32, bf16>(&mut [], grad_scale),
    }
}

impl CudaOptimizer {
    /// Compiles the model's kernels for the stream's device and uploads the tensor table.
    ///
    /// # Safety
    ///
    /// Every pointer of `tensors` must be a live device allocation of the stream's context
    /// with the sizes [`DeviceTensor`] states, for as long as this optimizer steps it, and the
    /// tensors must not overlap.
    pub unsafe fn new(
        config: Config,
        dtypes: Dtypes,
        tensors: &[DeviceTensor],
        stream: Arc<CudaStream>,
    ) -> Result<Self, Error> {
        if config.rule == Rule::Swats {
            return Err(Error::Unsupported(
                "SWATS: its switch test needs pᵀp and pᵀg summed in f64 in index order",
            ));
        }
        let core = Optimizer::new(config)?;
        // The core's own checks of the state type (f16 second moments), on a copy.
        advance(&mut core.clone(), dtypes.state, 1.0)?;
        let ctx: &Arc<CudaContext> = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        let (rule, update_flags) = kernels::rule_kernel(&config, false);
        let source = kernels::model_source(rule, dtypes.param, dtypes.grad, dtypes.state);
        let cubin = kernels::cubin_cached(&source, &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(Ptx::from_binary(cubin.to_vec()))?;
        let (g, s) = (dtypes.grad.name(), dtypes.state.name());
        let first_pass = match config.rule.switch() {
            Some(Switch::Global | Switch::Layer) => {
                Some(module.load_function(&format!("ha_home_pre_{g}_{s}"))?)
            }
            _ if config.finite_check == FiniteCheck::SkipStep => {
                Some(module.load_function(&format!("ha_check_{g}"))?)
            }
            _ => None,
        };
        let update = module.load_function(&kernels::kernel_name(
            rule,
            dtypes.param,
            dtypes.grad,
            dtypes.state,
        ))?;
        let stochastic = if config.rounding == Rounding::Stochastic {
            flags::STOCHASTIC
        } else {
            0
        };
        let table: Vec<HaTensor> = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| HaTensor {
                param: t.param,
                grad: t.grad,
                state: t.state,
                numel: t.numel as u64,
                index: i as u32,
                ..HaTensor::default()
            })
            .collect();
        let numels: Vec<usize> = tensors.iter().map(|t| t.numel).collect();
        let blocks = block_table(&numels, kernels::CHUNK);
        let has_rho =
            matches!(rule, "adam" | "adamw" | "homeadam" | "swats_adam" | "miadam") && !tensors.is_empty();
        Ok(CudaOptimizer {
            reset: module.load_function("ha_reset")?,
            first_pass,
            update,
            update_flags: update_flags | stochastic,
            has_rho,
            tensors: tensors.to_vec(),
            table: stream.clone_htod(&table)?,
            blocks: stream.clone_htod(&blocks)?,
            status: stream.alloc_zeros::<HaStatus>(1)?,
            core,
            dtypes,
            stream,
        })
    }

    /// The core optimizer holding t and the config.
    pub fn core(&self) -> &Optimizer {
        &self.core
    }

    /// The storage types.
    pub fn dtypes(&self) -> Dtypes {
        self.dtypes
    }

    /// The registered tensors.
    pub fn tensors(&self) -> &[DeviceTensor] {
        &self.tensors
    }

    /// The stream every launch goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Changes η (for schedules), as [`Optimizer::set_lr`].
    pub fn set_lr(&mut self, lr: f64) -> Result<(), Error> {
        Ok(self.core.set_lr(lr)?)
    }

    /// One step over every tensor: θ, state updated in place on the device, exactly as
    /// [`Optimizer::step_reference`] on the same values. Gradients are multiplied by
    /// `1 / grad_scale`; one non-finite unscaled gradient skips the whole step.
    pub fn step(&mut self, grad_scale: f64) -> Result<StepReport, Error> {
        let t = self.core.step_count() + 1;
        let config = *self.core.config();
        if !(grad_scale.is_finite() && grad_scale > 0.0) {
            return Err(homeadam_core::Error::InvalidGradScale(grad_scale).into());
        }
        let scalars = HaScalars(StepScalars::new(&config, t, grad_scale, None));
        let status = self.launch(&scalars, t)?;
        if status.nonfinite != 0 {
            // As the core's report of a skipped step: t is the step that was not taken.
            return Ok(StepReport {
                step: t,
                skipped: true,
                rho: None,
                home_elements: 0,
                nonfinite_applied: false,
                swats_switched: false,
            });
        }
        let mut report = advance(&mut self.core, self.dtypes.state, grad_scale)?;
        report.rho = self
            .has_rho
            .then(|| f32::from_bits(status.vmin_post) / scalars.0.bc2);
        report.home_elements = status.home;
        report.nonfinite_applied = status.nonfinite_applied != 0;
        Ok(report)
    }

    /// Queues the passes of step `t` and reads the status back (the step's only sync).
    fn launch(&mut self, scalars: &HaScalars, t: u64) -> Result<HaStatus, Error> {
        let config = self.core.config();
        let count = self.tensors.len() as u32;
        let blocks = self.blocks.len() as u32;
        let grid = |n: u32| LaunchConfig {
            grid_dim: (n, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let inv = scalars.0.inv_grad_scale;
        let sr_base = mix64(mix64(config.seed) ^ t);
        debug_assert_eq!(mix64(sr_base ^ 3), tensor_key(config.seed, t, 3));
        let mut b = self.stream.launch_builder(&self.reset);
        b.arg(&mut self.table).arg(&count).arg(&mut self.status);
        // SAFETY: ha_reset(HaTensor*, u32, HaStatus*) with `count` table entries.
        unsafe { b.launch(grid(count.div_ceil(THREADS).max(1))) }?;
        if blocks > 0 {
            if let Some(pass) = &self.first_pass {
                let mut b = self.stream.launch_builder(pass);
                b.arg(&mut self.table).arg(&self.blocks);
                if config.rule.switch().is_some() {
                    b.arg(scalars);
                } else {
                    b.arg(&inv);
                }
                b.arg(&mut self.status);
                // SAFETY: the signatures of ha_home_pre / ha_check; the table's pointers are
                // valid (the contract of `new`).
                unsafe { b.launch(grid(blocks)) }?;
            }
            let mut b = self.stream.launch_builder(&self.update);
            b.arg(&mut self.table)
                .arg(&self.blocks)
                .arg(scalars)
                .arg(&self.update_flags)
                .arg(&sr_base)
                .arg(&mut self.status);
            // SAFETY: the update kernels' signature; pointers valid by the contract of `new`.
            unsafe { b.launch(grid(blocks)) }?;
        }
        let status = self.stream.clone_dtoh(&self.status)?;
        self.stream.synchronize()?;
        Ok(status[0])
    }

    /// Per-tensor telemetry of the last step (ρ = min v̂ of the tensor, home elements): one
    /// copy of the tensor table.
    pub fn tensor_telemetry(&self) -> Result<Vec<TensorAux>, Error> {
        let table = self.stream.clone_dtoh(&self.table)?;
        self.stream.synchronize()?;
        let bc2 = StepScalars::new(self.core.config(), self.core.step_count().max(1), 1.0, None).bc2;
        Ok(table
            .iter()
            .map(|t| TensorAux {
                swats_lambda: 0.0,
                rho: if self.has_rho {
                    f32::from_bits(t.vmin_post) / bc2
                } else {
                    f32::INFINITY
                },
                home_elements: t.home,
            })
            .collect())
    }

    /// The optimizer state in the core's checkpoint format ([`Optimizer::save_state`]),
    /// copied from the device.
    pub fn save_state(&self) -> Result<Vec<u8>, Error> {
        match self.dtypes.state {
            Dtype::F32 => self.save_typed::<f32>(),
            Dtype::F16 => self.save_typed::<f16>(),
            Dtype::BF16 => self.save_typed::<bf16>(),
        }
    }

    fn save_typed<S: Storage>(&self) -> Result<Vec<u8>, Error> {
        let mut host = self.state_to_host::<S>()?;
        let mut aux = vec![TensorAux::default(); host.len()];
        let views = state_views(&mut host, &mut aux, &self.tensors);
        self.save_state_with(&views)
    }

    /// Saves state the caller reads itself (e.g. mapped host memory on Jetson), after the
    /// stream has finished.
    pub fn save_state_with<S: Storage>(&self, tensors: &[TensorState<'_, S>]) -> Result<Vec<u8>, Error> {
        self.stream.synchronize()?;
        let mut sink = VecSink(Vec::new());
        self.core.save_state(tensors, &mut sink)?;
        Ok(sink.0)
    }

    /// Loads state saved by [`CudaOptimizer::save_state`] (or any backend's
    /// [`Optimizer::save_state`]) into the device state. Nothing changes on error.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        match self.dtypes.state {
            Dtype::F32 => self.load_typed::<f32>(bytes),
            Dtype::F16 => self.load_typed::<f16>(bytes),
            Dtype::BF16 => self.load_typed::<bf16>(bytes),
        }
    }

    fn load_typed<S: Storage>(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let slots = self.core.config().state_slots();
        let mut host: Vec<Vec<S>> = self
            .tensors
            .iter()
            .map(|t| vec![S::default(); slots * t.numel])
            .collect();
        let mut aux = vec![TensorAux::default(); host.len()];
        let mut views = state_views(&mut host, &mut aux, &self.tensors);
        let mut core = self.core.clone();
        core.load_state(bytes, &mut views)?;
        for (t, state) in self.tensors.iter().zip(&host) {
            // SAFETY: `t.state` holds `slots · numel` elements of S (the contract of `new`).
            unsafe { cudarc::driver::result::memcpy_htod_sync(t.state, state) }?;
        }
        self.core = core;
        Ok(())
    }

    /// Loads state into memory the caller writes itself (e.g. mapped host memory on Jetson),
    /// after the stream has finished; the step counter is restored from `bytes`.
    pub fn load_state_with<S: Storage>(
        &mut self,
        bytes: &[u8],
        tensors: &mut [TensorState<'_, S>],
    ) -> Result<(), Error> {
        self.stream.synchronize()?;
        Ok(self.core.load_state(bytes, tensors)?)
    }

    fn state_to_host<S: Storage>(&self) -> Result<Vec<Vec<S>>, Error> {
        self.stream.synchronize()?;
        let slots = self.core.config().state_slots();
        self.tensors
            .iter()
            .map(|t| {
                let mut host = vec![S::default(); slots * t.numel];
                // SAFETY: `t.state` holds `slots · numel` elements of S (the contract of `new`).
                unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, t.state) }?;
                Ok(host)
            })
            .collect()
    }
}

/// A growable [`ByteSink`].
struct VecSink(Vec<u8>);

impl ByteSink for VecSink {
    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

/// The core's checkpoint views over host copies of the device state.
fn state_views<'a, S>(
    host: &'a mut [Vec<S>],
    aux: &'a mut [TensorAux],
    tensors: &[DeviceTensor],
) -> Vec<TensorState<'a, S>> {
    host.iter_mut()
        .zip(aux.iter_mut())
        .zip(tensors)
        .map(|((state, aux), t)| TensorState {
            numel: t.numel,
            state,
            aux,
        })
        .collect()
}
