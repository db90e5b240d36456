//! [`CudaOptimizer`]: the model-wide step on the device, the core's semantics bit for bit.
//!
//! The API a training loop uses:
//!
//! - `unsafe fn new(config, dtypes, tensors: &[DeviceTensor], stream) -> Result<Self, Error>`
//! - `fn step(&mut self, grad_scale: f64) -> Result<StepReport, Error>` (every rule, SWATS too)
//! - `unsafe fn set_grads(&mut self, grads: &[u64]) -> Result<(), Error>`: new gradient
//!   pointers, one per tensor in the order of `new`, for the following steps and
//!   [`CudaOptimizer::grad_norm`] (one small host→device copy, no sync);
//! - `fn grad_norm(&mut self) -> Result<f64, Error>`: ‖g‖₂ = √(Σ g²) over every gradient as
//!   stored (no gradient scale), the sum exact ([`ExactSum`]), so it equals the core's
//!   `ExactSum` of the same values rounded once, then `f64::sqrt` (one read);
//! - `set_lr`, `save_state`, `load_state`, `tensor_telemetry`, `core`, `stream`;
//! - for a caller that compiles with an NVRTC of its own and moves the model-wide state and Λ
//!   between optimizers of changing tensor lists (homeadam-torch): `with_compiler`, `core_mut`,
//!   `tensor_aux_mut`; `set_groups` for new rates of the same groups (a scheduler's).
//!
//! A step is at most four kernel launches on one stream, whatever the number of tensors:
//! `ha_reset` (which also installs the gradient pointers); `ha_home_pre_{g}_{s}` (global /
//! per-layer HomeAdam: min v_t over every element and over those with v_t > 0, and the
//! non-finite flag) or `ha_check_{g}` (the non-finite flag, under `FiniteCheck::SkipStep`); the
//! update `{rule}_{p}_{g}_{s}`, which does nothing when the flag is set, each tensor with the
//! scalars of its parameter group (HomeAdam's home branch at η_h: `home_lr_over_bc1`; its ρ
//! over the active elements with [`flags::RHO_ACTIVE`]). The host work is the core's: [`Optimizer::begin`] gives t
//! and the scalars of each group, [`homeadam_core::Step::finish_external`] counts the step from
//! the device's 48-byte status, read back at the end (the step's only sync: t does not advance
//! on a skipped step, so the next step's scalars depend on it).
//!
//! Global HomeAdam(W) with ρ over every element and state of one element per parameter decides
//! as the core's [`homeadam_core::Step::check`], from the bound its last update left
//! ([`flags::BOUND`]: u = min v as stored, read with the status, and the chunk that held min v,
//! kept on the device): where u proves the srf branch
//! ([`homeadam_core::backend::srf_proven_by`]) the pass before the update is `ha_check_{g}`;
//! else `ha_home_bound_{g}_{s}` checks the gradients and takes min v_t over that chunk, which
//! may prove the home branch, and `ha_home_pre_{g}_{s}` follows, doing nothing where it did.
//! There is no bound at the first step, after `load_state`, at steps that calibrate τ and after
//! a skipped one of those; a skipped step keeps the bound it had.
//!
//! A calibrated τ (`Config::tau_calibration`, HomeAdam(W)) is set at the steps that
//! [`homeadam_core::Step::calibrates`], before the update reads it:
//!
//! - element-wise: the pass before the update is `ha_home_hist_{g}_{s}` (the non-finite flag,
//!   and v̂_t = v_t / bc2 of every element with v_t > 0 counted into the core's log2 buckets,
//!   with integer atomics); the status and the counts are read back mid-step (a second sync),
//!   into [`homeadam_core::Step::calibrate_external`], then the update runs with the new τ;
//! - global / per-layer: after `ha_home_pre_{g}_{s}` the status (per-layer: and the tensor
//!   table) is read back mid-step, the step's decision values ρ (of the model, or of each
//!   tensor, as `Config::rho_over` says) go to `calibrate_external`, then the update runs.
//!
//! At the other steps of the global and per-layer rules the same decision values go to the core
//! in [`Outcome::decisions`], from the status read at the end (per-layer: with the table), so
//! a step that does not calibrate still has one sync. Skipped steps count nothing (the core
//! ignores them).
//!
//! q8 state (`Dtypes::state == Dtype::Q8`, the core's `homeadam_core::q8`): the update dequantizes
//! each 256-element block of every slot, updates it as `f32` state, and stores it again with the
//! core's stochastic rounding (one thread block of 256 threads per q8 block at a time); the
//! HomeAdam passes read the dequantized v.
//!
//! SWATS: its Adam phase (`swats_adam_*`) also sums each tensor's pᵀp and pᵀg exactly on the
//! device; they are read back with the status, rounded by [`ExactSum::to_f64`], and the core's
//! [`homeadam_core::Step::finish_external_swats`] runs the switch test on them with each
//! tensor's Λ (kept here, saved in checkpoints). Once switched, steps run `swats_sgd_*` with
//! the core's η'.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use homeadam_core::backend::{srf_proven_by, Histogram, Outcome, StepScalars, SwatsDots, BUCKETS};
use homeadam_core::rules::ElementKernel;
use homeadam_core::{
    Config, Dtype, ExactSum, FiniteCheck, Group, Optimizer, Rounding, Rule, StepReport, Switch, TensorAux,
};

use crate::device::{block_table, histogram, HaBlock, HaScalars, HaStatus, HaTensor, HaVmin};
use crate::kernels::{self, flags};
use crate::nvrtc;
use crate::Error;

mod calibration;
mod checkpoint;

use calibration::decisions;

/// Threads per block of every kernel.
const THREADS: u32 = 256;

// The q8 update gives each thread of a block one element of a q8 block.
const _: () = assert!(THREADS as usize == homeadam_core::q8::BLOCK);

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
    /// state type, or for q8 `Config::state_slots() · ⌈numel / 256⌉` [`homeadam_core::Q8Block`]s
    /// (`Optimizer::state_len_of`; 260 bytes each, 4-byte aligned); zeroed before the first step.
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

/// A compiler of the model's kernels: `compile(source, arch)` is the SASS image of `source`
/// for `arch` (`sm_XX`), as [`nvrtc::cubin_cached`] gives it.
pub type Compile<'a> = dyn Fn(&str, &str) -> Result<Arc<Vec<u8>>, nvrtc::CompileError> + 'a;

/// The storage types of a model: parameters, gradients, state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dtypes {
    /// Parameter type P.
    pub param: Dtype,
    /// Gradient type G.
    pub grad: Dtype,
    /// State type S (q8: state only).
    pub state: Dtype,
}

/// The pass before the update, if any.
enum FirstPass {
    /// `ha_check_{g}(tensors, blocks, 1 / grad_scale, status)`.
    Check(CudaFunction),
    /// `ha_home_pre_{g}_{s}(tensors, blocks, scalars, status)`.
    Home(CudaFunction),
}

/// The passes of the global rule's bound ([`flags::BOUND`]).
struct BoundPasses {
    /// `ha_check_{g}(tensors, blocks, 1 / grad_scale, status)`, where u proves the srf branch.
    check: CudaFunction,
    /// `ha_home_bound_{g}_{s}(tensors, blocks, scalars, status, bound_tensor)`.
    home: CudaFunction,
}

/// The bound the last update of the global rule left for the next step.
#[derive(Clone, Copy, Debug)]
struct Bound {
    /// u = min_i v_{i,t−1} as stored (+∞ for none).
    u: f32,
    /// The tensor whose chunk held min v_{t−1}.
    tensor: u32,
    /// `ha_reset` has kept the chunk in the status (after a skipped step, whose update wrote
    /// nothing and whose reset cleared the table's).
    kept: bool,
}

impl Bound {
    /// The start of a step whose last step left `last`: the tensor whose chunk `ha_reset` keeps
    /// (`u32::MAX`: none), the bound of this step, and what decides its branch.
    fn plan(last: Option<Bound>, calibrates: bool, s: &StepScalars) -> (u32, Option<Bound>, Decision) {
        // The chunk of a bound the last update left is kept before the reset clears it.
        let keep = last.filter(|b| !b.kept).map_or(u32::MAX, |b| b.tensor);
        // A step that sets τ needs ρ_t before any update.
        let bound = last.filter(|_| !calibrates);
        let decision = match bound {
            None => Decision::Pass,
            Some(b) if srf_proven_by(b.u, s) => Decision::Srf,
            Some(b) => Decision::Chunk(b.tensor),
        };
        (keep, bound, decision)
    }

    /// The bound of the next step, after a step whose bound was `bound`: the one its update
    /// left in `status`, or on a skipped step, which wrote nothing, `bound` with its chunk kept.
    fn after(bound: Option<Bound>, skipped: bool, status: &HaStatus) -> Option<Bound> {
        if skipped {
            return bound.map(|b| Bound { kept: true, ..b });
        }
        let (u, tensor) = status.bound();
        Some(Bound {
            u,
            tensor,
            kept: false,
        })
    }
}

/// What decides the global rule's branch at a step with a bound.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Decision {
    /// The rule's pass before the update (for the global rule the exact first pass).
    Pass,
    /// u proves the srf branch: `ha_check_{g}` only.
    Srf,
    /// `ha_home_bound_{g}_{s}` over the bound's chunk in this tensor, then the exact first pass
    /// where that does not prove the home branch.
    Chunk(u32),
}

/// The element-wise rule's calibration pass and its counts (with a calibrated τ).
struct Calibration {
    /// `ha_home_hist_{g}_{s}(tensors, blocks, scalars, status, counts)`.
    function: CudaFunction,
    /// [`BUCKETS`] 64-bit counts.
    counts: CudaSlice<u64>,
}

/// What [`Device::read`] brings back.
struct Readback {
    status: HaStatus,
    table: Vec<HaTensor>,
    counts: Vec<u64>,
    dots: Vec<u64>,
}

/// An update kernel and its flags.
struct Update {
    function: CudaFunction,
    flags: u32,
}

/// One model's kernels and device buffers.
struct Device {
    stream: Arc<CudaStream>,
    reset: CudaFunction,
    first_pass: Option<FirstPass>,
    /// Global HomeAdam with [`flags::BOUND`].
    bound: Option<BoundPasses>,
    /// Element-wise HomeAdam with a calibrated τ: replaces `first_pass` at the steps that
    /// calibrate.
    calibration: Option<Calibration>,
    /// The rule's update; SWATS's Adam phase.
    update: Update,
    /// SWATS's SGD phase.
    swats_sgd: Option<Update>,
    grad_sq: CudaFunction,
    table: CudaSlice<HaTensor>,
    /// The gradient pointers `ha_reset` installs in the table.
    grads: CudaSlice<u64>,
    /// SWATS: per tensor, the exact accumulators of pᵀp and pᵀg (`ExactSum::WORDS` each).
    dots: CudaSlice<u64>,
    /// The exact accumulator of Σ g².
    norm: CudaSlice<u64>,
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
    /// Per tensor: Λ (SWATS's state); the telemetry lives on the device.
    aux: Vec<TensorAux>,
    has_rho: bool,
    /// The update keeps the global rule's bound ([`flags::BOUND`]).
    bounded: bool,
    /// The bound of the next step.
    bound: Option<Bound>,
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
                config.check_group(t.group)?;
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
        Self::with_compiler(config, dtypes, tensors, stream, &nvrtc::cubin_cached)
    }

    /// As [`CudaOptimizer::new`], with the model's kernels compiled by `compile(source, arch)`
    /// (the SASS image of `source` for `sm_XX`, compiled with [`nvrtc::options`] and
    /// [`kernels::headers`]) instead of [`nvrtc::cubin_cached`]: for a process whose NVRTC is
    /// not one that cudarc's loader finds by name, such as another CUDA major version's at a
    /// path the caller knows.
    ///
    /// # Safety
    ///
    /// As [`CudaOptimizer::new`].
    pub unsafe fn with_compiler(
        config: Config,
        dtypes: Dtypes,
        tensors: &[DeviceTensor],
        stream: Arc<CudaStream>,
        compile: &Compile<'_>,
    ) -> Result<Self, Error> {
        let core = Optimizer::new(config)?;
        config.check_state_dtype(dtypes.state)?;
        if !(dtypes.param.is_element() && dtypes.grad.is_element()) {
            return Err(Error::Unsupported(
                "q8 parameters or gradients (q8 is a state storage type only)",
            ));
        }
        let (groups, group_index) = group_table(&config, tensors)?;
        let ctx: &Arc<CudaContext> = stream.context();
        let (major, minor) = ctx.compute_capability()?;
        let stochastic = if config.rounding == Rounding::Stochastic {
            flags::STOCHASTIC
        } else {
            0
        };
        // On state whose min as stored is the stored min (not q8), as the core's.
        let bounded = config.keeps_rho_bound() && dtypes.state.is_element();
        let mut update = vec![kernels::rule_kernel(&config, false)];
        if bounded {
            update[0].1 |= flags::BOUND;
        }
        if config.rule == Rule::Swats {
            update.push(kernels::rule_kernel(&config, true));
        }
        let names: Vec<ElementKernel> = update.iter().map(|&(k, _)| k).collect();
        let source = kernels::model_source(&names, dtypes.param, dtypes.grad, dtypes.state);
        let cubin = compile(&source, &format!("sm_{major}{minor}"))?;
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
        let bound = match bounded {
            true => Some(BoundPasses {
                check: module.load_function(&format!("ha_check_{g}"))?,
                home: module.load_function(&format!("ha_home_bound_{g}_{s}"))?,
            }),
            false => None,
        };
        let calibration = match config.rule.switch() {
            Some(Switch::Element) if config.tau_calibration.is_some() => Some(Calibration {
                function: module.load_function(&format!("ha_home_hist_{g}_{s}"))?,
                counts: stream.alloc_zeros::<u64>(BUCKETS)?,
            }),
            _ => None,
        };
        let mut update = update.into_iter().map(|(kernel, f)| {
            let name = kernels::kernel_name(kernel, dtypes.param, dtypes.grad, dtypes.state);
            Ok::<_, Error>(Update {
                function: module.load_function(&name)?,
                flags: f | stochastic,
            })
        });
        let (adam, swats_sgd) = (update.next(), update.next().transpose()?);
        let update = adam.expect("every rule has an update kernel")?;
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
        let grads: Vec<u64> = tensors.iter().map(|t| t.grad).collect();
        let device = Device {
            reset: module.load_function("ha_reset")?,
            first_pass,
            bound,
            calibration,
            update,
            swats_sgd,
            grad_sq: module.load_function(&format!("ha_grad_sq_{g}"))?,
            table: stream.clone_htod(&table)?,
            grads: stream.clone_htod(&if grads.is_empty() { vec![0] } else { grads })?,
            dots: stream.alloc_zeros::<u64>(2 * ExactSum::WORDS * tensors.len().max(1))?,
            norm: stream.alloc_zeros::<u64>(ExactSum::WORDS)?,
            blocks: stream.clone_htod(&block_table(&numels, kernels::CHUNK))?,
            groups: stream.alloc_zeros::<HaScalars>(groups.len().max(1))?,
            status: stream.alloc_zeros::<HaStatus>(1)?,
            stream,
        };
        Ok(CudaOptimizer {
            has_rho: config.rho_slot().is_some() && !tensors.is_empty(),
            bounded,
            bound: None,
            core,
            dtypes,
            tensors: tensors.to_vec(),
            groups,
            aux: vec![TensorAux::default(); tensors.len()],
            device,
        })
    }

    /// The core optimizer holding t and the config.
    pub fn core(&self) -> &Optimizer {
        &self.core
    }

    /// The core optimizer, to restore its model-wide state (t, a calibrated τ) from a
    /// checkpoint of no tensors ([`Optimizer::load_state`]). The global rule's bound is
    /// forgotten: the next step takes the exact first pass.
    pub fn core_mut(&mut self) -> &mut Optimizer {
        self.bound = None;
        &mut self.core
    }

    /// Each tensor's state kept on the host, in the order of [`CudaOptimizer::new`]: SWATS's
    /// Λ, which a step reads and writes (the per-tensor telemetry is the device's:
    /// [`CudaOptimizer::tensor_telemetry`]).
    pub fn tensor_aux_mut(&mut self) -> &mut [TensorAux] {
        &mut self.aux
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

    /// Replaces every tensor's gradient pointer (as [`DeviceTensor::grad`], one per tensor in
    /// the order of [`CudaOptimizer::new`]) for the next steps and [`CudaOptimizer::grad_norm`]:
    /// one small host→device copy on the stream, no sync.
    ///
    /// # Safety
    ///
    /// Each pointer must be a live device allocation of the stream's context holding the
    /// tensor's `numel` gradients, for as long as this optimizer steps with it.
    pub unsafe fn set_grads(&mut self, grads: &[u64]) -> Result<(), Error> {
        if grads.len() != self.tensors.len() {
            return Err(Error::TensorCount {
                expected: self.tensors.len(),
                actual: grads.len(),
            });
        }
        if grads.is_empty() {
            return Ok(());
        }
        // Pageable memory: the copy is staged before this returns.
        self.device.stream.memcpy_htod(grads, &mut self.device.grads)?;
        for (t, &g) in self.tensors.iter_mut().zip(grads) {
            t.grad = g;
        }
        Ok(())
    }

    /// Replaces every tensor's parameter group (one per tensor, in the order of
    /// [`CudaOptimizer::new`]) for the next steps, where the tensors fall into the same groups
    /// as before, as under a scheduler that sets each group's rate: the device's table keeps its
    /// group indices, and each step uploads the groups' scalars. Another partition into groups
    /// is refused ([`Error::Unsupported`]): a new optimizer takes it.
    pub fn set_groups(&mut self, groups: &[Group]) -> Result<(), Error> {
        if groups.len() != self.tensors.len() {
            return Err(Error::TensorCount {
                expected: self.tensors.len(),
                actual: groups.len(),
            });
        }
        let config = *self.core.config();
        let tensors: Vec<DeviceTensor> = self
            .tensors
            .iter()
            .zip(groups)
            .map(|(t, &group)| t.in_group(group))
            .collect();
        let (distinct, index) = group_table(&config, &tensors)?;
        if index != group_table(&config, &self.tensors)?.1 {
            return Err(Error::Unsupported(
                "another partition of the tensors into parameter groups",
            ));
        }
        self.groups = distinct;
        self.tensors = tensors;
        Ok(())
    }

    /// ‖g‖₂ = √(Σ_k Σ_i g_{k,i}²) over every registered gradient as stored (no gradient
    /// scale): the sum is exact on the device ([`ExactSum`]), rounded once to `f64` as the
    /// core rounds it, then `f64::sqrt`; NaN or +∞ when a gradient is not finite. One launch,
    /// one read.
    pub fn grad_norm(&mut self) -> Result<f64, Error> {
        let words = self.device.grad_sum_squares()?;
        Ok(ExactSum::from_words(&words).to_f64().sqrt())
    }

    /// One step over every tensor: θ, state updated in place on the device, exactly as
    /// [`Optimizer::step`] on the same values and groups. Gradients are multiplied by
    /// `1 / grad_scale`; one non-finite unscaled gradient skips the whole step.
    pub fn step(&mut self, grad_scale: f64) -> Result<StepReport, Error> {
        let config = *self.core.config();
        let swats_sgd = self.core.swats_sgd_lr().is_some();
        let mut step = self.core.begin(grad_scale)?;
        for &group in &self.groups {
            // As the core's step: η may have changed since `new` (set_lr).
            config.check_group(group)?;
        }
        let switch = config.rule.switch();
        let bc2 = step.scalars().bc2;
        let calibrates = step.calibrates();
        let (keep, bound, decision) = Bound::plan(self.bound.take(), calibrates, step.scalars());
        self.device
            .first_pass(&HaScalars(*step.scalars()), calibrates, keep, decision)?;
        if calibrates {
            // τ is set from this step's values before any update reads it.
            let element = switch == Some(Switch::Element);
            let pre = self.device.read(switch == Some(Switch::Layer), element, false)?;
            let values = if element {
                histogram(&pre.counts)
            } else {
                decisions(&config, bc2, pre.status.vmin_pre, &pre.table)
            };
            step.calibrate_external(&values)?;
        }
        let scalars: Vec<HaScalars> = self
            .groups
            .iter()
            .map(|&group| HaScalars(step.group_scalars(group)))
            .collect();
        let swats_adam = config.rule == Rule::Swats && !swats_sgd;
        self.device
            .update(&config, &scalars, step.t(), swats_sgd, swats_adam)?;
        // A calibrated τ counts the decision values of the steps between its calibrations.
        let window = config.tau_calibration.is_some() && !calibrates;
        let end = self
            .device
            .read(window && switch == Some(Switch::Layer), false, swats_adam)?;
        let status = &end.status;
        let skipped = status.nonfinite != 0;
        // With a bound the first pass may not run: the update's minima are the model's (the
        // same v_t, and ρ is over every element).
        let model = if self.bounded {
            HaVmin {
                all: status.vmin_post,
                active: status.vmin_post_active,
            }
        } else {
            status.vmin_pre
        };
        if self.bounded {
            self.bound = Bound::after(bound, skipped, status);
        }
        let outcome = Outcome {
            skipped,
            // SWATS reports ρ in its Adam phase only, as the core.
            v_min: (self.has_rho && !swats_sgd).then(|| f32::from_bits(status.vmin_post)),
            v_min_active: matches!(switch, Some(Switch::Global | Switch::Layer)).then(|| model.get().active),
            home_elements: status.home,
            nonfinite_applied: status.nonfinite_applied != 0,
            decisions: if window {
                decisions(&config, bc2, model, &end.table)
            } else {
                Histogram::new()
            },
            exact_pass: match decision {
                Decision::Pass => true,
                Decision::Srf => false,
                Decision::Chunk(_) => status.decided == 0,
            },
        };
        if config.rule != Rule::Swats {
            return Ok(step.finish_external(outcome)?);
        }
        let sums: Vec<ExactSum> = end
            .dots
            .chunks_exact(ExactSum::WORDS)
            .map(|w| ExactSum::from_words(w.try_into().expect("WORDS words")))
            .collect();
        let mut tests: Vec<SwatsDots<'_>> = self
            .aux
            .iter_mut()
            .zip(&self.tensors)
            .zip(sums.chunks_exact(2))
            .map(|((aux, t), pair)| SwatsDots {
                aux,
                group: t.group,
                step_sq: &pair[0],
                step_grad: &pair[1],
            })
            .collect();
        Ok(step.finish_external_swats(outcome, &mut tests)?)
    }

    /// Per-tensor telemetry of the last step (ρ = min v̂ of the tensor, home elements) and
    /// SWATS's Λ: one copy of the tensor table.
    pub fn tensor_telemetry(&self) -> Result<Vec<TensorAux>, Error> {
        let stream = &self.device.stream;
        let table = stream.clone_dtoh(&self.device.table)?;
        stream.synchronize()?;
        let bc2 = StepScalars::new(self.core.config(), self.core.step_count().max(1), 1.0, None).bc2;
        Ok(table
            .iter()
            .zip(&self.aux)
            .map(|(t, aux)| TensorAux {
                swats_lambda: aux.swats_lambda,
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
    /// Queues the start of a step: `ha_reset` (keeping the bound's chunk of tensor `keep`, if
    /// any), then the pass before the update, with the step's scalars `step`: at a step that
    /// `calibrates` τ, the element-wise rule's calibration pass `ha_home_hist_*` (its counts
    /// zeroed first); for the global rule's bound, as `decision` says.
    fn first_pass(
        &mut self,
        step: &HaScalars,
        calibrates: bool,
        keep: u32,
        decision: Decision,
    ) -> Result<(), Error> {
        let count = self.table.len() as u32;
        let blocks = self.blocks.len() as u32;
        let mut b = self.stream.launch_builder(&self.reset);
        b.arg(&mut self.table)
            .arg(&count)
            .arg(&self.grads)
            .arg(&mut self.status)
            .arg(&keep);
        // SAFETY: ha_reset(HaTensor*, u32, const u64*, HaStatus*, u32) with `count` entries in
        // the table and in `grads`.
        unsafe { b.launch(grid(count.div_ceil(THREADS).max(1), 0)) }?;
        let mut calibration = self.calibration.as_mut().filter(|_| calibrates);
        if let Some(c) = &mut calibration {
            self.stream.memset_zeros(&mut c.counts)?;
        }
        if blocks == 0 {
            return Ok(());
        }
        let inv = step.0.inv_grad_scale;
        if let Some(passes) = self.bound.as_ref().filter(|_| decision != Decision::Pass) {
            let mut b = match decision {
                Decision::Chunk(ref tensor) => {
                    let mut b = self.stream.launch_builder(&passes.home);
                    b.arg(&self.table)
                        .arg(&self.blocks)
                        .arg(step)
                        .arg(&mut self.status)
                        .arg(tensor);
                    b
                }
                _ => {
                    let mut b = self.stream.launch_builder(&passes.check);
                    b.arg(&self.table)
                        .arg(&self.blocks)
                        .arg(&inv)
                        .arg(&mut self.status);
                    b
                }
            };
            // SAFETY: the signatures of ha_home_bound and ha_check; the table's pointers are
            // valid (the contract of `CudaOptimizer::new`).
            unsafe { b.launch(grid(blocks, 0)) }?;
            if decision == Decision::Srf {
                return Ok(());
            }
        }
        let mut b = match (calibration, &self.first_pass) {
            (Some(c), _) => {
                let mut b = self.stream.launch_builder(&c.function);
                b.arg(&self.table)
                    .arg(&self.blocks)
                    .arg(step)
                    .arg(&mut self.status)
                    .arg(&mut c.counts);
                b
            }
            (None, Some(FirstPass::Home(f))) => {
                let mut b = self.stream.launch_builder(f);
                b.arg(&mut self.table)
                    .arg(&self.blocks)
                    .arg(step)
                    .arg(&mut self.status);
                b
            }
            (None, Some(FirstPass::Check(f))) => {
                let mut b = self.stream.launch_builder(f);
                b.arg(&self.table)
                    .arg(&self.blocks)
                    .arg(&inv)
                    .arg(&mut self.status);
                b
            }
            (None, None) => return Ok(()),
        };
        // SAFETY: the signatures of ha_home_hist (with `BUCKETS` counts), ha_home_pre and
        // ha_check; the table's pointers are valid (the contract of `CudaOptimizer::new`).
        unsafe { b.launch(grid(blocks, 0)) }?;
        Ok(())
    }

    /// Queues the update of step `t` (`groups` each group's scalars; SWATS in its SGD phase
    /// with `swats_sgd`, summing its dot products with `dots`).
    fn update(
        &mut self,
        config: &Config,
        groups: &[HaScalars],
        t: u64,
        swats_sgd: bool,
        dots: bool,
    ) -> Result<(), Error> {
        let blocks = self.blocks.len() as u32;
        if blocks == 0 {
            return Ok(());
        }
        // Pageable memory: the copy is staged before this returns.
        self.stream.memcpy_htod(groups, &mut self.groups)?;
        if dots {
            self.stream.memset_zeros(&mut self.dots)?;
        }
        let update = match (&self.swats_sgd, swats_sgd) {
            (Some(sgd), true) => sgd,
            _ => &self.update,
        };
        let sr_base = kernels::sr_base(config.seed, t);
        let mut b = self.stream.launch_builder(&update.function);
        b.arg(&mut self.table)
            .arg(&self.blocks)
            .arg(&self.groups)
            .arg(&update.flags)
            .arg(&sr_base)
            .arg(&mut self.status)
            .arg(&mut self.dots);
        let shared = if dots { kernels::exact_shared_bytes(2) } else { 0 };
        // SAFETY: the update kernels' signature; `groups` holds an entry for every
        // `HaTensor::group`, `dots` two accumulators per tensor, the shared memory two when
        // SWATS sums; pointers valid by the contract of `CudaOptimizer::new`.
        unsafe { b.launch(grid(blocks, shared)) }?;
        Ok(())
    }

    /// Waits for the queued work and reads the status back, with the tensor table if `table`,
    /// the calibration counts if `counts`, the dot products' accumulators if `dots` (else
    /// empty): one sync.
    fn read(&self, table: bool, counts: bool, dots: bool) -> Result<Readback, Error> {
        let status = self.stream.clone_dtoh(&self.status)?;
        let table = if table && !self.table.is_empty() {
            self.stream.clone_dtoh(&self.table)?
        } else {
            Vec::new()
        };
        let counts = match &self.calibration {
            Some(c) if counts => self.stream.clone_dtoh(&c.counts)?,
            _ => Vec::new(),
        };
        let dots = if dots {
            self.stream.clone_dtoh(&self.dots)?
        } else {
            Vec::new()
        };
        self.stream.synchronize()?;
        Ok(Readback {
            status: status[0],
            table,
            counts,
            dots,
        })
    }

    /// The exact Σ g² over every gradient (`grads`), as raw accumulator words.
    fn grad_sum_squares(&mut self) -> Result<[u64; ExactSum::WORDS], Error> {
        let blocks = self.blocks.len() as u32;
        self.stream.memset_zeros(&mut self.norm)?;
        if blocks > 0 {
            let mut b = self.stream.launch_builder(&self.grad_sq);
            b.arg(&self.table)
                .arg(&self.blocks)
                .arg(&self.grads)
                .arg(&mut self.norm);
            // SAFETY: ha_grad_sq(const HaTensor*, const HaBlock*, const u64*, u64*): one
            // gradient pointer per tensor, valid by the contracts of `new` and `set_grads`;
            // one accumulator of shared memory.
            unsafe { b.launch(grid(blocks, kernels::exact_shared_bytes(1))) }?;
        }
        let words = self.stream.clone_dtoh(&self.norm)?;
        self.stream.synchronize()?;
        Ok(words.try_into().expect("ExactSum::WORDS words"))
    }
}

/// `n` blocks of [`THREADS`] threads with `shared` bytes of dynamic shared memory.
fn grid(n: u32, shared: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: shared,
    }
}

#[cfg(test)]
mod tests {
    use homeadam_core::{Config, Rule, Switch};

    use super::*;

    fn status(u: f32, tensor: u32) -> HaStatus {
        HaStatus {
            bound: u64::from(u.to_bits()) << 32 | u64::from(tensor),
            ..HaStatus::default()
        }
    }

    /// The host's part of the bound over a sequence of steps: the chunk kept once after each
    /// update, through skipped steps; none after a skipped step that set τ.
    #[test]
    fn the_bound_follows_the_steps_as_the_cores() {
        let config = Config {
            tau: 1e-6,
            ..Config::new(Rule::HomeAdamW(Switch::Global))
        };
        let s = StepScalars::new(&config, 5, 1.0, None);
        let (large, small) = (1.0, 1e-12);
        let (keep, bound, decision) = Bound::plan(None, false, &s);
        assert_eq!((keep, decision), (u32::MAX, Decision::Pass));
        let next = Bound::after(bound, false, &status(large, 3));
        let (keep, bound, decision) = Bound::plan(next, false, &s);
        assert_eq!((keep, decision), (3, Decision::Srf));
        let next = Bound::after(bound, false, &status(small, 2));
        let (keep, bound, decision) = Bound::plan(next, false, &s);
        assert_eq!((keep, decision), (2, Decision::Chunk(2)));
        // Skipped: the same bound, its chunk already kept.
        let next = Bound::after(bound, true, &status(large, 5));
        let (keep, bound, decision) = Bound::plan(next, false, &s);
        assert_eq!((keep, decision), (u32::MAX, Decision::Chunk(2)));
        let next = Bound::after(bound, true, &status(large, 5));
        // A step that sets τ runs the exact pass; skipped, it leaves no bound.
        let (keep, bound, decision) = Bound::plan(next, true, &s);
        assert_eq!((keep, decision), (u32::MAX, Decision::Pass));
        assert!(Bound::after(bound, true, &status(large, 5)).is_none());
        let next = Bound::after(None, false, &status(f32::INFINITY, 0));
        let (keep, _, decision) = Bound::plan(next, true, &s);
        assert_eq!(
            (keep, decision),
            (0, Decision::Pass),
            "a fresh bound's chunk is kept"
        );
        let (_, _, decision) = Bound::plan(next, false, &s);
        assert_eq!(decision, Decision::Srf, "u = +∞ (no element) proves srf");
    }
}
