//! [`VarOptimizer`]: candle `Var`s stepped in place by `homeadam-core`.

use std::borrow::Cow;

use candle_core::backprop::GradStore;
use candle_core::{DType, Result, Tensor, Var};

use crate::error::bail;
use candle_nn::VarMap;
use homeadam_core::{
    Config, Dtype, ExactSum, Group, Optimizer, StateStorage, Step, StepReport, Storage, TensorAux, Updates,
};

use super::clip::clip_scale;
use super::error::{core_err, core_err_about};
use super::groups::{check_groups, group, GroupSettings};
use super::inspect::slot_tensors;
use super::lend::{add_grad_squares, check_distinct, with_slices, Visit};
use super::options::{self, OptimConfig, SkipPolicy};
use super::params::{OnStatesMut, Param, States};
use super::state::{self, load_into, Adopted, Settings};

/// Where the optimizer state lives: with the variables.
pub(crate) enum Placement {
    /// CPU variables: the state in host memory, stepped by the core.
    Host(States),
    /// CUDA variables: the state on their device, stepped by homeadam-cuda.
    #[cfg(feature = "cuda")]
    Device(Box<crate::cuda::DeviceState>),
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOutcome {
    /// The core's report, over every variable that had a gradient.
    pub report: StepReport,
    /// ‖g‖₂ before clipping, when clipping is on.
    pub grad_norm: Option<f64>,
    /// Parameters of the variables that had a gradient.
    pub elements: u64,
}

impl StepOutcome {
    /// The share of the stepped parameters that took the home (SGDM) branch of HomeAdam(W)
    /// (0 for a skipped step and for other rules).
    pub fn home_share(&self) -> f64 {
        self.report.home_elements as f64 / self.elements.max(1) as f64
    }
}

/// An optimizer over candle `Var`s that updates them in place: on the CPU with
/// `homeadam-core`, on a CUDA device (feature `cuda`) with `homeadam-cuda`'s kernels on
/// candle's own buffers; every rule of [`homeadam_core::ALL_RULES`], the same bits on both.
///
/// A step is one core step over every variable that has a gradient, in the order the
/// variables were given ([`Optimizer::begin`], [`Step::check`] of each variable, then
/// [`Updates::update`] of each), so it gives the same bits as [`homeadam_core::Optimizer::step`]
/// on the same numbers: one step counter, one finite check, the global HomeAdam switch decides
/// on ρ_t = min v̂_t over the whole model, SWATS switches once for the model, stochastic
/// rounding is keyed by the tensor's position among them. Variables without a gradient
/// (BatchNorm running statistics) are neither updated nor decayed; variables with no elements
/// are left out. Variables may be f32, bf16 or f16, mixed in one model.
///
/// Parameter groups: each variable steps in its [`homeadam_core::Group`]: η times its
/// group's `lr_scale`, the group's λ, ε and β where it sets them, and λ = 0 for the variables
/// the decay mask exempts when [`OptimConfig::decay_all`] is off ([`OptimConfig::groups`],
/// [`VarOptimizer::add_group`]).
///
/// A step with a gradient that holds NaN or ±∞ is skipped (nothing changes); the
/// configuration's [`SkipPolicy`] says whether that is only counted, also warned about once,
/// or an error.
///
/// On a CUDA device every variable of one optimizer must be on that device and of one dtype;
/// the state stays on the device (checkpoints copy it), and a step reads the device back once
/// (twice with clipping, whose ‖g‖₂ comes first).
pub struct VarOptimizer {
    pub(crate) params: Vec<Param>,
    pub(crate) opt: Optimizer,
    pub(crate) placement: Placement,
    pub(crate) aux: Vec<TensorAux>,
    pub(crate) config: OptimConfig,
    pub(crate) base_lr: f64,
    pub(crate) position: u64,
    /// Why the last `candle_nn::Optimizer::set_learning_rate` was refused; steps fail until
    /// a valid rate is set.
    pub(crate) refused_lr: Option<String>,
    last: Option<StepOutcome>,
    /// The variables the last step updated (indices into `params`).
    last_active: Vec<usize>,
    /// Steps skipped since construction (and before, for a loaded state).
    pub(crate) skipped: u64,
    warned: bool,
    warn: Box<dyn FnMut(&str) + Send>,
}

/// The warning hook of a new optimizer: standard error.
fn warn_on_stderr(message: &str) {
    eprintln!("warning: {message}");
}

impl VarOptimizer {
    /// Named variables, stepped in the given order (the order fixes stochastic-rounding keys
    /// and the checkpoint layout: give the same order when resuming).
    pub fn from_named(vars: Vec<(String, Var)>, config: OptimConfig) -> Result<Self> {
        let core = Optimizer::new(config.core).map_err(core_err)?;
        config
            .core
            .check_state_dtype(config.state_dtype)
            .map_err(core_err)?;
        options::check(&config)?;
        let params = new_params(vars, &[], |name, rank| {
            let settings = config
                .groups
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix.as_str()))
                .map_or(GroupSettings::DEFAULT, |&(_, s)| s);
            group(name, rank, config.decay_all, settings)
        })?;
        let slots = config.core.state_slots();
        let placement = if params.iter().all(|p| p.var.device().is_cpu()) {
            Placement::Host(States::fresh(
                config.state_dtype,
                slots,
                params.iter().map(|p| p.var.elem_count()),
            ))
        } else {
            device_placement(&params, slots, config.state_dtype)?
        };
        let mut opt = VarOptimizer {
            aux: vec![TensorAux::default(); params.len()],
            params,
            opt: core,
            placement,
            base_lr: config.core.lr,
            config,
            position: 0,
            refused_lr: None,
            last: None,
            last_active: Vec::new(),
            skipped: 0,
            warned: false,
            warn: Box::new(warn_on_stderr),
        };
        opt.apply_lr()?;
        Ok(opt)
    }

    /// Adds the variables `vars` as a parameter group with `settings` (PyTorch's
    /// `add_param_group`): they step after the variables already held, from zeroed state, at
    /// the next step; [`OptimConfig::decay_all`] applies to them as to the others. A saved state
    /// holds them: the optimizer that loads it must have the same groups, added in the same
    /// order. Nothing changes on error.
    pub fn add_group(&mut self, vars: Vec<(String, Var)>, settings: GroupSettings) -> Result<()> {
        check_groups(&[(String::new(), settings)])?;
        let decay_all = self.config.decay_all;
        let added = new_params(vars, &self.params, |name, rank| {
            group(name, rank, decay_all, settings)
        })?;
        if let Some(why) = self.refuse_groups(self.base_lr, &added) {
            bail!("homeadam: {why}");
        }
        let slots = self.config.core.state_slots();
        match &mut self.placement {
            Placement::Host(_) if added.iter().any(|p| !p.var.device().is_cpu()) => {
                bail!("homeadam: add_group: this optimizer steps CPU variables; give CPU variables")
            }
            Placement::Host(states) => states.push_fresh(slots, added.iter().map(|p| p.var.elem_count())),
            #[cfg(feature = "cuda")]
            Placement::Device(d) => d.add(&self.params, &added)?,
        }
        self.aux.extend(added.iter().map(|_| TensorAux::default()));
        self.params.extend(added);
        Ok(())
    }

    /// Sets the function [`SkipPolicy::Warn`] sends its one warning to (standard error by
    /// default), e.g. a `log` or `tracing` macro; a rate refused by the trait's
    /// `candle_nn::Optimizer::set_learning_rate` is reported there too.
    pub fn set_warning_hook(&mut self, hook: impl FnMut(&str) + Send + 'static) {
        self.warn = Box::new(hook);
    }

    /// Steps skipped because a gradient held NaN or ±∞, since construction (a loaded state
    /// brings the count it was saved with).
    pub fn skipped_steps(&self) -> u64 {
        self.skipped
    }

    /// Each variable's name and parameter group, in stepping order.
    pub fn groups(&self) -> impl Iterator<Item = (&str, Group)> {
        self.params.iter().map(|p| (p.name.as_str(), p.group))
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
        self.core().step_count()
    }

    /// Steps at which global HomeAdam(W) ran its exact first pass over g and v to find
    /// ρ_t = min v̂_t, because the bounds kept from its last update did not decide the branch
    /// ([`homeadam_core::Optimizer::exact_first_passes`]); 0 for every other rule. A count of
    /// this process: not saved in checkpoints.
    pub fn exact_first_passes(&self) -> u64 {
        self.core().exact_first_passes()
    }

    /// The core optimizer holding t and the config: on a CUDA device, the kernels' own once
    /// they have stepped.
    pub(crate) fn core(&self) -> &Optimizer {
        match &self.placement {
            Placement::Host(_) => &self.opt,
            #[cfg(feature = "cuda")]
            Placement::Device(d) => d.core().unwrap_or(&self.opt),
        }
    }

    /// What the last step did (`None` before the first); also after
    /// `candle_nn::Optimizer::backward_step`, which returns nothing.
    pub fn last_report(&self) -> Option<StepOutcome> {
        self.last
    }

    /// The current rate η = schedule(η₀, position) after the warm-up (before group
    /// multipliers); also `candle_nn::Optimizer::learning_rate`.
    pub fn current_lr(&self) -> f64 {
        self.config
            .schedule
            .lr_after_warmup(self.base_lr, self.position, self.config.warmup)
    }

    /// The base rate η₀ that the schedule and warm-up scale.
    pub fn base_learning_rate(&self) -> f64 {
        self.base_lr
    }

    /// Sets the base rate η₀ and applies schedule(η₀, position): the schedule goes on from
    /// its position with the new base, so after a cosine decay to its floor the rate stays at
    /// the floor ([`VarOptimizer::current_lr`] reports it). Refused like a bad config (η₀ not
    /// finite and > 0, or ηλ ≥ 1 for decoupled decay in some variable's group), leaving
    /// everything unchanged.
    pub fn try_set_learning_rate(&mut self, base_lr: f64) -> Result<()> {
        if let Some(why) = self.refuse_rate(base_lr) {
            bail!("homeadam: {why}");
        }
        self.base_lr = base_lr;
        self.refused_lr = None;
        self.apply_lr()
    }

    /// The schedule position k.
    pub fn schedule_position(&self) -> u64 {
        self.position
    }

    /// Advances the schedule by one position (call it once per step or once per epoch, as the
    /// schedule is meant) and applies the new η; returns it.
    pub fn advance_schedule(&mut self) -> Result<f64> {
        self.position = self.position.saturating_add(1);
        if let Err(e) = self.apply_lr() {
            self.position -= 1;
            return Err(e);
        }
        Ok(self.current_lr())
    }

    /// Why η₀ = `base_lr` cannot be used at the current position, if it cannot: η =
    /// schedule(η₀, position) is checked in every variable's group (the core checks a group
    /// only when a step reaches it).
    fn refuse_rate(&self, base_lr: f64) -> Option<String> {
        if !(base_lr.is_finite() && base_lr > 0.0) {
            return Some(format!("learning rate {base_lr}: expected a finite value > 0"));
        }
        self.refuse_groups(base_lr, &self.params)
    }

    /// Why η₀ = `base_lr` cannot be used at the current position in the groups of `params`,
    /// if it cannot.
    fn refuse_groups(&self, base_lr: f64, params: &[Param]) -> Option<String> {
        let mut config = *self.opt.config();
        config.lr = self
            .config
            .schedule
            .lr_after_warmup(base_lr, self.position, self.config.warmup);
        if let Err(e) = config.validate() {
            return Some(e.to_string());
        }
        params.iter().find_map(|p| {
            let e = config.check_group(p.group).err()?;
            Some(format!("{} (lr × {}): {e}", p.name, p.group.lr_scale))
        })
    }

    /// Gives η = schedule(η₀, position) to the core, unless refused.
    pub(crate) fn apply_lr(&mut self) -> Result<()> {
        if let Some(why) = self.refuse_rate(self.base_lr) {
            bail!("homeadam: {why}");
        }
        self.opt.set_lr(self.current_lr()).map_err(core_err)?;
        self.sync_device_lr()
    }

    /// Gives the core's η to the device's optimizer, if there is one.
    pub(crate) fn sync_device_lr(&mut self) -> Result<()> {
        match &mut self.placement {
            Placement::Host(_) => Ok(()),
            #[cfg(feature = "cuda")]
            Placement::Device(d) => d.set_lr(self.opt.config().lr),
        }
    }

    /// One step with the gradients in `grads`; variables without a gradient are left alone.
    pub fn step_with_report(&mut self, grads: &GradStore) -> Result<StepOutcome> {
        if let Some(refused) = &self.refused_lr {
            bail!("homeadam: {refused}; no step until a valid rate is set");
        }
        let mut active = Vec::with_capacity(self.params.len());
        for (k, p) in self.params.iter().enumerate() {
            let Some(g) = grads.get(&p.var) else { continue };
            if g.shape() != p.var.shape() || g.dtype() != p.var.dtype() {
                bail!(
                    "homeadam: the gradient of {} is {:?} {:?}, the variable {:?} {:?}",
                    p.name,
                    g.dtype(),
                    g.shape(),
                    p.var.dtype(),
                    p.var.shape()
                );
            }
            active.push((k, g.contiguous()?));
        }
        let params = &self.params;
        check_distinct(
            active
                .iter()
                .map(|(k, g)| (params[*k].name.as_str(), &params[*k].var, g)),
        )?;
        let max_norm = self.config.max_grad_norm;
        // The global rule bounds ρ_t from the v of the variables the last step updated: a step
        // over another set decides on its exact first pass.
        let now: Vec<usize> = active.iter().map(|(k, _)| *k).collect();
        if now != self.last_active {
            self.opt.forget_bound();
        }
        self.last_active = now;
        let (opt, aux) = (&mut self.opt, &mut self.aux);
        let (report, grad_norm) = match &mut self.placement {
            Placement::Host(states) => step_host(opt, params, &active, states, aux, max_norm)?,
            #[cfg(feature = "cuda")]
            Placement::Device(d) => d.step(opt, params, &active, aux, max_norm)?,
        };
        let elements = active
            .iter()
            .map(|(k, _)| params[*k].var.elem_count() as u64)
            .sum();
        let outcome = StepOutcome {
            report,
            grad_norm,
            elements,
        };
        self.last = Some(outcome);
        if report.skipped {
            self.skipped += 1;
            return self.skipped_step(outcome);
        }
        Ok(outcome)
    }

    /// What [`SkipPolicy`] makes of a skipped step.
    fn skipped_step(&mut self, outcome: StepOutcome) -> Result<StepOutcome> {
        let message = || {
            format!(
                "homeadam: step skipped: a gradient holds NaN or ±∞ ({} steps taken, {} skipped); \
                 nothing changed",
                outcome.report.step, self.skipped
            )
        };
        match self.config.on_skip {
            SkipPolicy::Count => Ok(outcome),
            SkipPolicy::Warn => {
                if !self.warned {
                    self.warned = true;
                    let text = message() + " (warned once; skipped_steps() counts the rest)";
                    (self.warn)(&text);
                }
                Ok(outcome)
            }
            SkipPolicy::Error => bail!("{} (SkipPolicy::Error)", message()),
        }
    }
}

impl VarOptimizer {
    /// The optimizer state as bytes (format in the source of this crate's `state` module).
    pub fn save_state(&self) -> Result<Vec<u8>> {
        let envelope = state::envelope(&self.settings(), self.config.state_dtype, &self.params)?;
        let (states, aux) = self.host_state()?;
        state::seal(envelope, self.core(), &self.params, &states, &aux)
    }

    /// Restores state saved by [`VarOptimizer::save_state`] for the same variables (names,
    /// shapes, dtypes, order, groups), rule, hyper-parameters, state type, schedule, warm-up,
    /// clipping norm, skip policy, decay mask and groups; a difference is refused, naming the
    /// field and both values. A state saved before the format recorded the options (the
    /// schedule to the groups) loads with this optimizer's. On any error nothing changes.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        self.load(bytes, false).map(|_| ())
    }

    /// [`VarOptimizer::load_state`], but the saved hyper-parameters (η₀ included), schedule,
    /// warm-up, clipping norm and skip policy replace the optimizer's where they differ, as
    /// PyTorch's `load_state_dict` does; returns what was adopted. The variables, the rule, the
    /// state type, the decay mask and the groups must still match.
    pub fn load_state_adopting(&mut self, bytes: &[u8]) -> Result<Vec<Adopted>> {
        self.load(bytes, true)
    }

    /// The optimizer state of `var` as `f32` tensors of its shape on its device, one per
    /// state slot with the slot's name (`[("m", m), ("v", v)]` for the Adam-like rules; see
    /// [`homeadam_core::Config::state_names`]); q8 and half-precision state decoded to `f32`.
    /// A copy: changing it changes nothing. From a CUDA device the whole state is copied to
    /// the host first.
    pub fn state_of(&self, var: &Var) -> Result<Vec<(&'static str, Tensor)>> {
        let Some(k) = self.params.iter().position(|p| p.var.id() == var.id()) else {
            bail!("homeadam: state_of: the variable is not one this optimizer steps");
        };
        let (states, _) = self.host_state()?;
        slot_tensors(&states, k, var, self.opt.config())
    }

    /// The config whose knobs a state records: the rule's, with η = η₀.
    fn knob_config(&self) -> Config {
        Config {
            lr: self.base_lr,
            ..*self.opt.config()
        }
    }

    /// What a state records of this optimizer besides its variables.
    fn settings(&self) -> Settings {
        Settings {
            position: self.position,
            skipped: self.skipped,
            config: OptimConfig {
                core: self.knob_config(),
                ..self.config.clone()
            },
        }
    }

    fn load(&mut self, bytes: &[u8], adopt: bool) -> Result<Vec<Adopted>> {
        let checked = state::check(
            bytes,
            &self.settings(),
            self.config.state_dtype,
            &self.params,
            adopt,
        )?;
        self.restore(checked.settings, checked.core)?;
        Ok(checked.adopted)
    }

    /// The state and telemetry of every variable in host memory: lent on the CPU, copied
    /// from a CUDA device.
    pub(crate) fn host_state(&self) -> Result<(Cow<'_, States>, Cow<'_, [TensorAux]>)> {
        match &self.placement {
            Placement::Host(states) => Ok((Cow::Borrowed(states), Cow::Borrowed(&self.aux))),
            #[cfg(feature = "cuda")]
            Placement::Device(d) => {
                let mut aux = self.aux.clone();
                d.read_aux(&mut aux)?;
                Ok((Cow::Owned(d.download(&self.params)?), Cow::Owned(aux)))
            }
        }
    }

    /// Commits a checked envelope: the config and rate first (they may be refused), then the
    /// core's checkpoint (refused without a change, or loaded whole).
    fn restore(&mut self, saved: Settings, core: &[u8]) -> Result<()> {
        let Settings {
            position,
            skipped,
            config,
        } = saved;
        let old = (
            self.position,
            self.base_lr,
            self.opt.clone(),
            self.config.clone(),
            self.skipped,
        );
        if config.core != self.knob_config() {
            self.opt = Optimizer::new(config.core).map_err(core_err)?;
        }
        (self.position, self.base_lr, self.skipped) = (position, config.core.lr, skipped);
        self.config = config;
        let loaded = self.apply_lr().and_then(|()| self.load_states(core));
        match loaded {
            Ok(()) => self.refused_lr = None,
            Err(_) => {
                (self.position, self.base_lr, self.opt, self.config, self.skipped) = old;
                self.sync_device_lr()?;
            }
        }
        loaded
    }

    /// Loads the core's checkpoint into the core and every variable's state.
    fn load_states(&mut self, core: &[u8]) -> Result<()> {
        let (params, opt) = (&self.params, &mut self.opt);
        match &mut self.placement {
            Placement::Host(states) => load_into(opt, params, states, &mut self.aux, core),
            #[cfg(feature = "cuda")]
            Placement::Device(d) => {
                let slots = opt.config().state_slots();
                let sizes = params.iter().map(|p| p.var.elem_count());
                let mut states = States::fresh(self.config.state_dtype, slots, sizes);
                let mut aux = self.aux.clone();
                load_into(opt, params, &mut states, &mut aux, core)?;
                d.upload(&states)?;
                // The next step builds the kernels' table from the loaded core.
                d.reset_table();
                self.aux = aux;
                Ok(())
            }
        }
    }
}

/// The variables of `vars` with elements, checked (dtype; the variable or its name given twice
/// here or among `held`: a name identifies its variable in a saved state), each in the group
/// `group(name, rank)` gives it.
fn new_params(
    vars: Vec<(String, Var)>,
    held: &[Param],
    group: impl Fn(&str, usize) -> Group,
) -> Result<Vec<Param>> {
    let mut seen: std::collections::HashSet<_> = held.iter().map(|p| p.var.id()).collect();
    let mut names: std::collections::HashSet<String> = held.iter().map(|p| p.name.clone()).collect();
    let mut params = Vec::with_capacity(vars.len());
    for (name, var) in vars.into_iter().filter(|(_, v)| v.elem_count() > 0) {
        if !matches!(var.dtype(), DType::F32 | DType::BF16 | DType::F16) {
            bail!(
                "homeadam: {name} has dtype {:?}: expected f32, bf16 or f16",
                var.dtype()
            );
        }
        if !seen.insert(var.id()) {
            bail!("homeadam: variable {name} is given twice");
        }
        if !names.insert(name.clone()) {
            bail!("homeadam: the name {name:?} is given to two variables; names identify variables in a saved state");
        }
        let group = group(&name, var.rank());
        params.push(Param { name, var, group });
    }
    Ok(params)
}

/// The placement of variables that are not all on the CPU.
#[cfg(feature = "cuda")]
fn device_placement(params: &[Param], slots: usize, state: Dtype) -> Result<Placement> {
    Ok(Placement::Device(Box::new(crate::cuda::DeviceState::new(
        params, slots, state,
    )?)))
}

/// The placement of variables that are not all on the CPU: refused without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
fn device_placement(params: &[Param], _slots: usize, _state: Dtype) -> Result<Placement> {
    let p = params.iter().find(|p| !p.var.device().is_cpu());
    let (name, device) = p.map_or(("?", "?".into()), |p| {
        (p.name.as_str(), format!("{:?}", p.var.device().location()))
    });
    bail!(
        "homeadam: {name} is on {device}; this build steps CPU variables only (build \
         homeadam-candle with its `cuda` feature to step CUDA variables)"
    )
}

/// A step of CPU variables: ‖g‖₂ when clipping to `max_norm`, then [`step_all`].
fn step_host(
    opt: &mut Optimizer,
    params: &[Param],
    active: &[(usize, Tensor)],
    states: &mut States,
    aux: &mut [TensorAux],
    max_norm: Option<f64>,
) -> Result<(StepReport, Option<f64>)> {
    let grad_norm = match max_norm {
        Some(_) => {
            let mut sum = ExactSum::new();
            for (_, g) in active {
                add_grad_squares(g, "a gradient", &mut sum)?;
            }
            Some(sum.to_f64().sqrt())
        }
        None => None,
    };
    let grad_scale = match (max_norm, grad_norm) {
        (Some(c), Some(norm)) => clip_scale(norm, c),
        _ => 1.0,
    };
    let report = states.visit_mut(StepAll {
        opt,
        params,
        active,
        aux,
        grad_scale,
    })?;
    Ok((report, grad_norm))
}

/// [`step_all`] for the state type of the states.
struct StepAll<'a> {
    opt: &'a mut Optimizer,
    params: &'a [Param],
    active: &'a [(usize, Tensor)],
    aux: &'a mut [TensorAux],
    grad_scale: f64,
}

impl OnStatesMut for StepAll<'_> {
    type Out = Result<StepReport>;
    fn on<S: StateStorage>(self, states: &mut Vec<Vec<S>>) -> Result<StepReport> {
        step_all(
            self.opt,
            self.params,
            self.active,
            states,
            self.aux,
            self.grad_scale,
        )
    }
}

/// One core step over the variables `active` (index, contiguous gradient): every variable is
/// checked, then every variable is updated, each lent by candle on its own.
fn step_all<S: StateStorage>(
    opt: &mut Optimizer,
    params: &[Param],
    active: &[(usize, Tensor)],
    states: &mut [Vec<S>],
    aux: &mut [TensorAux],
    grad_scale: f64,
) -> Result<StepReport> {
    let mut step = opt.begin(grad_scale).map_err(core_err)?;
    let mut each = |phase: &mut StepPhase<'_, '_>| {
        for (k, grad) in active {
            let p = &params[*k];
            let mut visit = VarStep {
                phase: &mut *phase,
                state: &mut states[*k],
                aux: &mut aux[*k],
                group: p.group,
                name: &p.name,
            };
            with_slices(&p.var, grad, &mut visit)?;
        }
        Result::Ok(())
    };
    each(&mut StepPhase::Check(&mut step))?;
    let mut updates = step.decide().map_err(core_err)?;
    each(&mut StepPhase::Update(&mut updates))?;
    updates.finish().map_err(core_err)
}

/// The phase of a step a variable is lent to.
enum StepPhase<'a, 'o> {
    Check(&'a mut Step<'o>),
    Update(&'a mut Updates<'o>),
}

/// One variable's part of a step: [`Step::check`] or [`Updates::update`].
struct VarStep<'a, 'p, 'o, S> {
    phase: &'a mut StepPhase<'p, 'o>,
    state: &'a mut [S],
    aux: &'a mut TensorAux,
    group: Group,
    name: &'a str,
}

impl<S: StateStorage> Visit for VarStep<'_, '_, '_, S> {
    fn visit<P: Storage>(&mut self, param: &mut [P], grad: &[P]) -> Result<()> {
        let tensor = homeadam_core::Tensor::new(param, grad, self.state, self.aux).in_group(self.group);
        let done = match self.phase {
            StepPhase::Check(step) => step.check(&mut [tensor]),
            StepPhase::Update(updates) => updates.update(&mut [tensor]),
        };
        done.map_err(core_err_about(self.name))
    }
}

impl candle_nn::Optimizer for VarOptimizer {
    type Config = OptimConfig;

    /// Unnamed variables, named by their position: with [`OptimConfig::decay_all`] off, the
    /// decay exemption falls back to rank ≤ 1. Note that
    /// `VarMap::all_vars()` comes in a per-process random order; use
    /// [`VarOptimizer::from_varmap`] when checkpoints must be resumed.
    fn new(vars: Vec<Var>, config: OptimConfig) -> Result<Self> {
        let named = vars.into_iter().enumerate().map(|(k, v)| (k.to_string(), v));
        Self::from_named(named.collect(), config)
    }

    /// [`VarOptimizer::step_with_report`]; its outcome is kept for
    /// [`VarOptimizer::last_report`]. A skipped step is an error under [`SkipPolicy::Error`].
    fn step(&mut self, grads: &GradStore) -> Result<()> {
        self.step_with_report(grads).map(|_| ())
    }

    /// The current η = schedule(η₀, position) after the warm-up
    /// ([`VarOptimizer::current_lr`]); the base rate η₀ is
    /// [`VarOptimizer::base_learning_rate`].
    fn learning_rate(&self) -> f64 {
        self.current_lr()
    }

    /// Sets the base rate η₀ as [`VarOptimizer::try_set_learning_rate`] does: under a
    /// schedule, `candle_nn::Optimizer::learning_rate` then reports schedule(η₀, position),
    /// not `lr`. The trait's setter cannot return an error: an invalid rate (negative, not
    /// finite, or ηλ ≥ 1) leaves η unchanged and every later step fails, naming the refused
    /// rate, until a valid rate is set. The refusal is also sent to the warning hook
    /// ([`VarOptimizer::set_warning_hook`]) at once, so that it is seen at the call that made it.
    fn set_learning_rate(&mut self, lr: f64) {
        self.refused_lr = match self.refuse_rate(lr) {
            Some(why) => Some(format!("set_learning_rate({lr}) was refused ({why})")),
            None => self.try_set_learning_rate(lr).err().map(|e| e.to_string()),
        };
        if let Some(refused) = &self.refused_lr {
            (self.warn)(&format!("homeadam: {refused}; no step until a valid rate is set"));
        }
    }
}
