//! [`VarOptimizer`]: candle `Var`s stepped in place by `homeadam-core`.

use candle_core::backprop::GradStore;
use candle_core::{bail, DType, Result, Tensor, Var};
use candle_nn::VarMap;
use homeadam_core::{
    bf16, f16, goes_home, home_first_pass, Config, Dtype, FiniteCheck, Optimizer, StepReport, StepScalars,
    Storage, Switch, TensorAux,
};

use super::clip::{check_max_norm, clip_scale, sum_squares};
use super::groups::{is_no_decay, lr_multiplier};
use super::nest::{check_distinct, with_slices, Elem, Pair};
use super::schedule::Schedule;

/// Everything [`VarOptimizer`] needs besides the variables.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimConfig {
    /// The rule and its hyper-parameters; `core.lr` is the base rate η₀ and `core.weight_decay`
    /// the λ of decayed variables.
    pub core: Config,
    /// Storage of the optimizer state (f32, bf16; f16 only with `core.allow_f16_state`).
    pub state_dtype: Dtype,
    /// Decay every variable; by default biases and normalisation parameters are not decayed
    /// (see [`crate::optim::is_no_decay`]).
    pub decay_all: bool,
    /// Learning-rate multipliers: `(name prefix, factor)`, the first matching prefix wins.
    pub lr_multipliers: Vec<(String, f64)>,
    /// c of global-norm clipping (see [`crate::optim::clip_grad_norm`]); `None`: no clipping.
    pub max_grad_norm: Option<f64>,
    /// η as a function of the schedule position.
    pub schedule: Schedule,
}

impl OptimConfig {
    /// `core` with f32 state, the default decay exemptions, no clipping, a constant rate.
    pub fn new(core: Config) -> Self {
        OptimConfig {
            core,
            state_dtype: Dtype::F32,
            decay_all: false,
            lr_multipliers: Vec::new(),
            max_grad_norm: None,
            schedule: Schedule::Constant,
        }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOutcome {
    /// The core's report, over every variable that had a gradient.
    pub report: StepReport,
    /// ‖g‖₂ before clipping, when clipping is on.
    pub grad_norm: Option<f64>,
}

/// One core optimizer: the variables sharing a learning-rate multiplier and a decay choice.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) opt: Optimizer,
    lr_mult: f64,
}

/// A variable and what the adapter knows of it.
#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) var: Var,
    pub(crate) group: usize,
}

/// Per-variable optimizer state in the chosen storage type.
#[derive(Clone, Debug)]
pub(crate) enum States {
    F32(Vec<Vec<f32>>),
    BF16(Vec<Vec<bf16>>),
    F16(Vec<Vec<f16>>),
}

/// An optimizer over candle `Var`s on the CPU that updates them in place with
/// `homeadam-core`: every rule of [`homeadam_core::ALL_RULES`].
///
/// A step hands every variable that has a gradient to the core in one call, in the order the
/// variables were given, so it gives the same bits as [`homeadam_core::Optimizer::step`] on
/// the same numbers: the global HomeAdam switch decides on ρ_t = min v̂_t over the whole model,
/// SWATS's switch takes the last asking tensor, stochastic rounding is keyed by the tensor's
/// position among them. Variables without a gradient (BatchNorm running statistics) are
/// neither updated nor decayed; variables with no elements are left out.
///
/// Parameter groups: variables with another learning-rate multiplier, or exempt from decay,
/// are stepped by another core optimizer (the core has one λ and one η per optimizer). Each
/// still sees the whole model's tensor positions (the others as empty tensors), so rounding
/// keys are unchanged; the global HomeAdam decision stays model-wide (when ρ_t < τ over the
/// model, each group also gets a one-element tensor with v = g = 0 that forces its home
/// branch, then discarded); a non-finite gradient anywhere skips the step everywhere. SWATS
/// switches per group, as `pytorch-optimizer` does per parameter group.
pub struct VarOptimizer {
    pub(crate) params: Vec<Param>,
    pub(crate) groups: Vec<Group>,
    pub(crate) states: States,
    pub(crate) aux: Vec<TensorAux>,
    pub(crate) param_dtype: DType,
    config: OptimConfig,
    pub(crate) base_lr: f64,
    pub(crate) position: u64,
}

fn core_err(e: homeadam_core::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("homeadam: {e}"))
}

fn fresh_states(dtype: Dtype, sizes: impl Iterator<Item = usize>) -> States {
    match dtype {
        Dtype::F32 => States::F32(sizes.map(|n| vec![0.0; n]).collect()),
        Dtype::BF16 => States::BF16(sizes.map(|n| vec![bf16::ZERO; n]).collect()),
        Dtype::F16 => States::F16(sizes.map(|n| vec![f16::ZERO; n]).collect()),
    }
}

impl VarOptimizer {
    /// Named variables, stepped in the given order (the order fixes stochastic-rounding keys
    /// and the checkpoint layout: give the same order when resuming).
    pub fn from_named(vars: Vec<(String, Var)>, config: OptimConfig) -> Result<Self> {
        config.core.validate().map_err(core_err)?;
        config
            .core
            .check_state_dtype(config.state_dtype)
            .map_err(core_err)?;
        config.schedule.validate().map_err(candle_core::Error::Msg)?;
        if let Some(c) = config.max_grad_norm {
            check_max_norm(c)?;
        }
        for (prefix, m) in &config.lr_multipliers {
            if !(m.is_finite() && *m >= 0.0) {
                bail!("homeadam: lr multiplier {m} for {prefix:?}: expected a finite value >= 0");
            }
        }
        let vars: Vec<_> = vars.into_iter().filter(|(_, v)| v.elem_count() > 0).collect();
        let param_dtype = vars.first().map_or(DType::F32, |(_, v)| v.dtype());
        if !matches!(param_dtype, DType::F32 | DType::BF16 | DType::F16) {
            bail!("homeadam: parameters of dtype {param_dtype:?}: expected f32, bf16 or f16");
        }
        let mut seen = std::collections::HashSet::new();
        for (name, var) in &vars {
            if var.dtype() != param_dtype {
                bail!(
                    "homeadam: {name} is {:?} but the first variable is {param_dtype:?}: \
                     one core step takes one parameter type",
                    var.dtype()
                );
            }
            if !var.device().is_cpu() {
                bail!(
                    "homeadam: {name} is on {:?}; this adapter steps CPU tensors",
                    var.device()
                );
            }
            if !seen.insert(var.id()) {
                bail!("homeadam: variable {name} is given twice");
            }
        }
        let base_lr = config.core.lr;
        let mut keys: Vec<(u64, bool)> = Vec::new();
        let mut groups = Vec::new();
        let mut params = Vec::with_capacity(vars.len());
        for (name, var) in vars {
            let lr_mult = lr_multiplier(&name, &config.lr_multipliers);
            let decay =
                config.core.weight_decay != 0.0 && (config.decay_all || !is_no_decay(&name, var.rank()));
            let key = (lr_mult.to_bits(), decay);
            let group = match keys.iter().position(|k| *k == key) {
                Some(g) => g,
                None => {
                    let mut core = config.core;
                    core.lr = config.schedule.lr(base_lr, 0) * lr_mult;
                    if !decay {
                        core.weight_decay = 0.0;
                    }
                    groups.push(Group {
                        opt: Optimizer::new(core).map_err(core_err)?,
                        lr_mult,
                    });
                    keys.push(key);
                    keys.len() - 1
                }
            };
            params.push(Param { name, var, group });
        }
        if groups.is_empty() {
            groups.push(Group {
                opt: Optimizer::new(config.core).map_err(core_err)?,
                lr_mult: 1.0,
            });
        }
        let slots = config.core.state_slots();
        let states = fresh_states(
            config.state_dtype,
            params.iter().map(|p| slots * p.var.elem_count()),
        );
        Ok(VarOptimizer {
            aux: vec![TensorAux::default(); params.len()],
            params,
            groups,
            states,
            param_dtype,
            config,
            base_lr,
            position: 0,
        })
    }

    /// Every variable of `varmap`, sorted by name, so that the order (and so checkpoints and
    /// rounding keys) does not depend on the map's iteration order, which changes from process
    /// to process.
    pub fn from_varmap(varmap: &VarMap, config: OptimConfig) -> Result<Self> {
        let mut vars: Vec<(String, Var)> = match varmap.data().lock() {
            Ok(data) => data.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Err(_) => bail!("homeadam: the VarMap's lock is poisoned"),
        };
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        Self::from_named(vars, config)
    }

    /// The configuration.
    pub fn config(&self) -> &OptimConfig {
        &self.config
    }

    /// The variable names, in stepping order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.params.iter().map(|p| p.name.as_str())
    }

    /// Steps taken (t of the last step; skipped steps do not count).
    pub fn step_count(&self) -> u64 {
        self.groups[0].opt.step_count()
    }

    /// The current rate η = schedule(η₀, position) (before group multipliers).
    pub fn current_lr(&self) -> f64 {
        self.config.schedule.lr(self.base_lr, self.position)
    }

    /// Sets η₀ and applies schedule(η₀, position) to every group; refused like a bad config
    /// (e.g. ηλ ≥ 1 for decoupled decay), leaving everything unchanged.
    pub fn try_set_learning_rate(&mut self, base_lr: f64) -> Result<()> {
        let old = self.base_lr;
        self.base_lr = base_lr;
        let applied = self.apply_lr();
        if applied.is_err() {
            self.base_lr = old;
            self.apply_lr()?;
        }
        applied
    }

    /// The schedule position k.
    pub fn schedule_position(&self) -> u64 {
        self.position
    }

    /// Advances the schedule by one position (call it once per step or once per epoch, as the
    /// schedule is meant) and applies the new η; returns it.
    pub fn advance_schedule(&mut self) -> Result<f64> {
        self.position = self.position.saturating_add(1);
        self.apply_lr()?;
        Ok(self.current_lr())
    }

    pub(crate) fn apply_lr(&mut self) -> Result<()> {
        let lr = self.current_lr();
        for g in &self.groups {
            let mut c = *g.opt.config();
            c.lr = lr * g.lr_mult;
            c.validate().map_err(core_err)?;
        }
        for g in &mut self.groups {
            g.opt.set_lr(lr * g.lr_mult).map_err(core_err)?;
        }
        Ok(())
    }

    /// One step with the gradients in `grads`; variables without a gradient are left alone.
    pub fn step_with_report(&mut self, grads: &GradStore) -> Result<StepOutcome> {
        self.apply_lr()?;
        let mut pairs = Vec::with_capacity(self.params.len());
        let mut active = Vec::with_capacity(self.params.len());
        for (k, p) in self.params.iter().enumerate() {
            let Some(g) = grads.get(&p.var) else { continue };
            if g.shape() != p.var.shape() {
                bail!(
                    "homeadam: the gradient of {} has shape {:?}, the variable {:?}",
                    p.name,
                    g.shape(),
                    p.var.shape()
                );
            }
            pairs.push((p.var.clone(), g.contiguous()?));
            active.push(k);
        }
        let names: Vec<&str> = active.iter().map(|&k| self.params[k].name.as_str()).collect();
        let group_of: Vec<usize> = active.iter().map(|&k| self.params[k].group).collect();
        let job = Job {
            pairs: &pairs,
            names: &names,
            active: &active,
            group_of: &group_of,
            max_norm: self.config.max_grad_norm,
        };
        let groups = &mut self.groups;
        let aux = &mut self.aux;
        match (&mut self.states, self.param_dtype) {
            (States::F32(s), DType::F32) => job.run::<f32, f32>(groups, s, aux),
            (States::F32(s), DType::BF16) => job.run::<bf16, f32>(groups, s, aux),
            (States::F32(s), DType::F16) => job.run::<f16, f32>(groups, s, aux),
            (States::BF16(s), DType::F32) => job.run::<f32, bf16>(groups, s, aux),
            (States::BF16(s), DType::BF16) => job.run::<bf16, bf16>(groups, s, aux),
            (States::BF16(s), DType::F16) => job.run::<f16, bf16>(groups, s, aux),
            (States::F16(s), DType::F32) => job.run::<f32, f16>(groups, s, aux),
            (States::F16(s), DType::BF16) => job.run::<bf16, f16>(groups, s, aux),
            (States::F16(s), DType::F16) => job.run::<f16, f16>(groups, s, aux),
            (_, other) => bail!("homeadam: parameters of dtype {other:?}"),
        }
    }
}

/// One step's inputs, in stepping order (`active[i]` is the variable of `pairs[i]`).
struct Job<'a> {
    pairs: &'a [(Var, Tensor)],
    names: &'a [&'a str],
    active: &'a [usize],
    group_of: &'a [usize],
    max_norm: Option<f64>,
}

impl Job<'_> {
    fn run<P: Elem, S: Storage>(
        &self,
        groups: &mut [Group],
        states: &mut [Vec<S>],
        aux: &mut [TensorAux],
    ) -> Result<StepOutcome> {
        check_distinct::<P>(self.pairs, self.names)?;
        let mut is_active = vec![false; states.len()];
        for &k in self.active {
            is_active[k] = true;
        }
        let mut slots: Vec<(&mut [S], &mut TensorAux)> = states
            .iter_mut()
            .zip(aux.iter_mut())
            .zip(&is_active)
            .filter(|(_, &on)| on)
            .map(|((s, a), _)| (s.as_mut_slice(), a))
            .collect();
        let outcome = with_slices::<P, _>(self.pairs, |pairs| {
            let grad_norm = self
                .max_norm
                .map(|_| pairs.iter().map(|(_, g)| sum_squares(g)).sum::<f64>().sqrt());
            let grad_scale = match (self.max_norm, grad_norm) {
                (Some(c), Some(norm)) => clip_scale(norm, c),
                _ => 1.0,
            };
            let report = if groups.len() == 1 {
                let mut tensors: Vec<_> = pairs
                    .iter_mut()
                    .zip(slots.iter_mut())
                    .map(|((p, g), (s, a))| homeadam_core::Tensor::new(p, g, s, a))
                    .collect();
                groups[0].opt.step(&mut tensors, grad_scale)
            } else {
                step_groups(groups, pairs, &mut slots, self.group_of, grad_scale)
            };
            report.map(|report| StepOutcome { report, grad_norm })
        })?;
        outcome.map_err(core_err)
    }
}

/// The grouped step: see [`VarOptimizer`] for how it keeps the model-wide semantics.
fn step_groups<P: Elem, S: Storage>(
    groups: &mut [Group],
    pairs: &mut [Pair<'_, P>],
    slots: &mut [(&mut [S], &mut TensorAux)],
    group_of: &[usize],
    grad_scale: f64,
) -> std::result::Result<StepReport, homeadam_core::Error> {
    let config = *groups[0].opt.config();
    let t = groups[0]
        .opt
        .step_count()
        .checked_add(1)
        .ok_or(homeadam_core::Error::StepOverflow)?;
    // β2, bc2, τ and 1/scale do not depend on η or λ: every group computes the same ones.
    let s = StepScalars::new(&config, t, grad_scale, None);
    let switch = config.rule.switch();
    let checks = config.finite_check == FiniteCheck::SkipStep
        || matches!(switch, Some(Switch::Global | Switch::Layer));
    let finite = |g: &[P]| g.iter().all(|g| (g.to_f32() * s.inv_grad_scale).is_finite());
    if checks && !pairs.iter().all(|(_, g)| finite(g)) {
        for (_, a) in slots.iter_mut() {
            a.rho = f32::INFINITY;
            a.home_elements = 0;
        }
        return Ok(StepReport {
            step: t - 1,
            skipped: true,
            rho: None,
            home_elements: 0,
            nonfinite_applied: false,
            swats_switched: false,
        });
    }
    // The core's first pass, folded over the whole model (every group), so that all groups take
    // one decision: ρ_t = min v_t / bc2 (v ↦ v / bc2 is monotonic).
    let force_home = switch == Some(Switch::Global) && {
        let v_min = pairs
            .iter()
            .zip(slots.iter())
            .map(|((_, g), (st, _))| home_first_pass(g, &st[g.len()..2 * g.len()], &s).0)
            .fold(f32::INFINITY, |a, b| if b < a { b } else { a });
        goes_home(v_min / s.bc2, s.tau)
    };
    let mut merged = StepReport {
        step: t,
        skipped: false,
        rho: None,
        home_elements: 0,
        nonfinite_applied: false,
        swats_switched: false,
    };
    let slots_per_elem = config.state_slots();
    for (gi, group) in groups.iter_mut().enumerate() {
        let mut scratch = vec![TensorAux::default(); pairs.len()];
        let (mut dummy_p, dummy_g) = ([P::from_f32(0.0)], [P::from_f32(0.0)]);
        let mut dummy_s = vec![S::from_f32(0.0); slots_per_elem];
        let mut dummy_aux = TensorAux::default();
        let mut tensors = Vec::with_capacity(pairs.len() + 1);
        for (((p, g), (st, a)), (sc, &owner)) in pairs
            .iter_mut()
            .zip(slots.iter_mut())
            .zip(scratch.iter_mut().zip(group_of))
        {
            tensors.push(if owner == gi {
                homeadam_core::Tensor::new(p, g, st, a)
            } else {
                homeadam_core::Tensor::new(&mut [], &[], &mut [], sc)
            });
        }
        if force_home {
            tensors.push(homeadam_core::Tensor::new(
                &mut dummy_p,
                &dummy_g,
                &mut dummy_s,
                &mut dummy_aux,
            ));
        }
        let r = group.opt.step(&mut tensors, grad_scale)?;
        drop(tensors);
        merged.skipped |= r.skipped;
        merged.home_elements += r.home_elements - dummy_aux.home_elements as u64;
        merged.nonfinite_applied |= r.nonfinite_applied;
        merged.swats_switched |= r.swats_switched;
        if r.rho.is_some() {
            merged.rho = Some(f32::INFINITY);
        }
    }
    if merged.rho.is_some() {
        let rho = slots
            .iter()
            .fold(f32::INFINITY, |m, (_, a)| if a.rho < m { a.rho } else { m });
        merged.rho = Some(rho);
    }
    Ok(merged)
}

impl candle_nn::Optimizer for VarOptimizer {
    type Config = OptimConfig;

    /// Unnamed variables: the decay exemption falls back to rank ≤ 1. Note that
    /// `VarMap::all_vars()` comes in a per-process random order; use
    /// [`VarOptimizer::from_varmap`] when checkpoints must be resumed.
    fn new(vars: Vec<Var>, config: OptimConfig) -> Result<Self> {
        let named = vars.into_iter().enumerate().map(|(k, v)| (k.to_string(), v));
        Self::from_named(named.collect(), config)
    }

    fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step_with_report(grads).map(|_| ())
    }

    /// η = schedule(η₀, position).
    fn learning_rate(&self) -> f64 {
        self.current_lr()
    }

    /// Sets η₀. An invalid rate (negative, or ηλ ≥ 1) is refused by the next
    /// [`candle_nn::Optimizer::step`]; [`VarOptimizer::try_set_learning_rate`] refuses it at
    /// once.
    fn set_learning_rate(&mut self, lr: f64) {
        self.base_lr = lr;
    }
}
