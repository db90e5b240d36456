//! [`CudaOptimizer`]: the model-wide step on the device, the core's semantics bit for bit.
//!
//! A step is at most four launches on one stream, whatever the number of tensors:
//! `ha_reset`; `ha_home_pre_{g}_{s}` (global / per-layer HomeAdam: min v_t and the
//! non-finite flag) or `ha_check_{g}` (the non-finite flag, under `FiniteCheck::SkipStep`);
//! the update `{rule}_{p}_{g}_{s}`, which does nothing when the flag is set, each tensor with the
//! scalars of its parameter group. The host work is the core's: [`Optimizer::begin`] gives t and
//! the scalars of each group, [`homeadam_core::Step::finish_external`] counts the step from the
//! device's 24-byte status, read back at the end (the step's only sync: t does not advance on a
//! skipped step, so the next step's scalars depend on it).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use homeadam_core::backend::{Outcome, StepScalars};
use homeadam_core::{
    Config, Dtype, FiniteCheck, Group, Optimizer, Rounding, Rule, StepReport, Switch, TensorAux,
};

use crate::device::{block_table, HaBlock, HaScalars, HaStatus, HaTensor};
use crate::kernels::{self, flags};
use crate::nvrtc;
use crate::Error;

mod checkpoint;

/// Threads per block of every kernel.
const THREADS: u32 = 256;

/// One tensor of the model on the device: raw device pointers (e.g. from cudarc's
/// `DevicePtr::device_ptr` or candle's `CudaStorage`), its element count and its parameter
/// group.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    /// The tensor's parameter group, as [`homeadam_core::Tensor::group`].
    pub group: Group,
}

impl DeviceTensor {
    /// A tensor of the default group.
    pub fn new(param: u64, grad: u64, state: u64, numel: usize) -> Self {
        DeviceTensor {
            param,
            grad,
            state,
            numel,
            group: Group::DEFAULT,
        }
    }

    /// The same tensor in `group`.
    pub fn in_group(self, group: Group) -> Self {
        DeviceTensor { group, ..self }
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

/// The pass before the update, if any.
enum FirstPass {
    /// `ha_check_{g}(tensors, blocks, 1 / grad_scale, status)`.
    Check(CudaFunction),
    /// `ha_home_pre_{g}_{s}(tensors, blocks, scalars, status)`.
    Home(CudaFunction),
}

/// One model's kernels and device buffers.
struct Device {
    stream: Arc<CudaStream>,
    reset: CudaFunction,
    first_pass: Option<FirstPass>,
    update: CudaFunction,
    update_flags: u32,
    table: CudaSlice<HaTensor>,
    blocks: CudaSlice<HaBlock>,
    /// The step's scalars of each parameter group, indexed by `HaTensor::group`.
    groups: CudaSlice<HaScalars>,
    status: CudaSlice<HaStatus>,
}

/// The optimizer of one model on one CUDA stream.
///
/// The model-wide state (t) is a core [`Optimizer`], so step scalars, validation and
/// checkpoints are the core's own.
pub struct CudaOptimizer {
    core: Optimizer,
    dtypes: Dtypes,
    tensors: Vec<DeviceTensor>,
    /// The distinct parameter groups, in order of first appearance.
    groups: Vec<Group>,
    has_rho: bool,
    device: Device,
}

/// The distinct groups of `tensors` and each tensor's index among them, refused as the core
/// refuses a step over these tensors.
fn group_table(config: &Config, tensors: &[DeviceTensor]) -> Result<(Vec<Group>, Vec<u32>), Error> {
    let mut groups: Vec<Group> = Vec::new();
    let mut index = Vec::with_capacity(tensors.len());
    for (tensor, t) in tensors.iter().enumerate() {
        let i = match groups.iter().position(|&g| g == t.group) {
            Some(i) => i,
            None => {
                let value = t.group.lr_scale;
                if !(value.is_finite() && value >= 0.0) {
                    return Err(homeadam_core::Error::InvalidLrScale { tensor, value }.into());
                }
                config.for_group(t.group).validate()?;
                groups.push(t.group);
                groups.len() - 1
            }
        };
        index.push(i as u32);
    }
    Ok((groups, index))
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
        config.check_state_dtype(dtypes.state)?;
        let (groups, group_index) = group_table(&config, tensors)?;
        let ctx: &Arc<CudaContext> = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        let (kernel, update_flags) = kernels::rule_kernel(&config, false);
        let source = kernels::model_source(kernel, dtypes.param, dtypes.grad, dtypes.state);
        let cubin = nvrtc::cubin_cached(&source, &format!("sm_{major}{minor}"))?;
        let module = ctx.load_module(Ptx::from_binary(cubin.to_vec()))?;
        let (g, s) = (dtypes.grad.name(), dtypes.state.name());
        let first_pass = match config.rule.switch() {
            Some(Switch::Global | Switch::Layer) => Some(FirstPass::Home(
                module.load_function(&format!("ha_home_pre_{g}_{s}"))?,
            )),
            _ if config.finite_check == FiniteCheck::SkipStep => {
                Some(FirstPass::Check(module.load_function(&format!("ha_check_{g}"))?))
            }
            _ => None,
        };
        let update = module.load_function(&kernels::kernel_name(
            kernel,
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
            .zip(group_index)
            .map(|(t, group)| HaTensor {
                param: t.param,
                grad: t.grad,
                state: t.state,
                numel: t.numel as u64,
                group,
                ..HaTensor::default()
            })
            .collect();
        let numels: Vec<usize> = tensors.iter().map(|t| t.numel).collect();
        let device = Device {
            reset: module.load_function("ha_reset")?,
            first_pass,
            update,
            update_flags: update_flags | stochastic,
            table: stream.clone_htod(&table)?,
            blocks: stream.clone_htod(&block_table(&numels, kernels::CHUNK))?,
            groups: stream.alloc_zeros::<HaScalars>(groups.len().max(1))?,
            status: stream.alloc_zeros::<HaStatus>(1)?,
            stream,
        };
        Ok(CudaOptimizer {
            has_rho: config.rho_slot().is_some() && !tensors.is_empty(),
            core,
            dtypes,
            tensors: tensors.to_vec(),
            groups,
            device,
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
        &self.device.stream
    }

    /// Changes η (for schedules), as [`Optimizer::set_lr`].
    pub fn set_lr(&mut self, lr: f64) -> Result<(), Error> {
        Ok(self.core.set_lr(lr)?)
    }

    /// One step over every tensor: θ, state updated in place on the device, exactly as
    /// [`Optimizer::step`] on the same values and groups. Gradients are multiplied by
    /// `1 / grad_scale`; one non-finite unscaled gradient skips the whole step.
    pub fn step(&mut self, grad_scale: f64) -> Result<StepReport, Error> {
        let config = *self.core.config();
        let step = self.core.begin(grad_scale)?;
        let mut scalars = Vec::with_capacity(self.groups.len());
        for &group in &self.groups {
            // As the core's step: η may have changed since `new` (set_lr).
            config.for_group(group).validate()?;
            scalars.push(HaScalars(step.group_scalars(group)));
        }
        let status = self
            .device
            .launch(&config, &HaScalars(*step.scalars()), &scalars, step.t())?;
        Ok(step.finish_external(Outcome {
            skipped: status.nonfinite != 0,
            v_min: self.has_rho.then(|| f32::from_bits(status.vmin_post)),
            home_elements: status.home,
            nonfinite_applied: status.nonfinite_applied != 0,
        })?)
    }

    /// Per-tensor telemetry of the last step (ρ = min v̂ of the tensor, home elements): one
    /// copy of the tensor table.
    pub fn tensor_telemetry(&self) -> Result<Vec<TensorAux>, Error> {
        let stream = &self.device.stream;
        let table = stream.clone_dtoh(&self.device.table)?;
        stream.synchronize()?;
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
}

impl Device {
    /// Queues the passes of step `t` (`step` the step's scalars, `groups` each group's) and
    /// reads the status back.
    fn launch(
        &mut self,
        config: &Config,
        step: &HaScalars,
        groups: &[HaScalars],
        t: u64,
    ) -> Result<HaStatus, Error> {
        let count = self.table.len() as u32;
        let blocks = self.blocks.len() as u32;
        let grid = |n: u32| LaunchConfig {
            grid_dim: (n, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.reset);
        b.arg(&mut self.table).arg(&count).arg(&mut self.status);
        // SAFETY: ha_reset(HaTensor*, u32, HaStatus*) with `count` table entries.
        unsafe { b.launch(grid(count.div_ceil(THREADS).max(1))) }?;
        if blocks > 0 {
            // Pageable memory: the copy is staged before this returns.
            self.stream.memcpy_htod(groups, &mut self.groups)?;
            let inv = step.0.inv_grad_scale;
            let pass = match &self.first_pass {
                Some(FirstPass::Check(f)) => Some((f, None)),
                Some(FirstPass::Home(f)) => Some((f, Some(step))),
                None => None,
            };
            if let Some((f, scalars)) = pass {
                let mut b = self.stream.launch_builder(f);
                b.arg(&mut self.table).arg(&self.blocks);
                match scalars {
                    Some(s) => b.arg(s),
                    None => b.arg(&inv),
                };
                b.arg(&mut self.status);
                // SAFETY: the signatures of ha_check / ha_home_pre; the table's pointers are
                // valid (the contract of `CudaOptimizer::new`).
                unsafe { b.launch(grid(blocks)) }?;
            }
            let sr_base = kernels::sr_base(config.seed, t);
            let mut b = self.stream.launch_builder(&self.update);
            b.arg(&mut self.table)
                .arg(&self.blocks)
                .arg(&self.groups)
                .arg(&self.update_flags)
                .arg(&sr_base)
                .arg(&mut self.status);
            // SAFETY: the update kernels' signature; `groups` holds an entry for every
            // `HaTensor::group`; pointers valid by the contract of `CudaOptimizer::new`.
            unsafe { b.launch(grid(blocks)) }?;
        }
        let status = self.stream.clone_dtoh(&self.status)?;
        self.stream.synchronize()?;
        Ok(status[0])
    }
}
