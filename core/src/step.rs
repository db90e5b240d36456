//! One step in phases, for models whose tensors do not fit one slice (several storage types,
//! parameters lent one at a time, as by candle): unscale, the non-finite skip, the HomeAdam
//! decision, the update, telemetry. A backend that updates the tensors itself ends the step
//! through `external.rs`.

use crate::bits::tensor_key;
use crate::calibration::Histogram;
use crate::config::FiniteCheck;
use crate::dispatch::{dispatch, KernelChoice, Run};
#[cfg(feature = "std")]
use crate::erased::{self, AnyTensor};
use crate::error::Error;
use crate::exact::ExactSum;
use crate::kernel::{self, SlotStores};
use crate::optimizer::{Bound, Optimizer};
#[cfg(feature = "std")]
use crate::parallel;
use crate::reduce::{RhoOver, SecondMomentMin, CHUNK};

use crate::rules::homeadam::{
    branch, goes_home, home_calibration_pass, home_first_pass, home_first_pass_with, links_switch,
};
use crate::rules::only::{All, RuleSet};
use crate::rules::spec::{Dots, SwitchInputs};
use crate::rules::Switch;
use crate::scalars::{powi_by_squaring, StepScalars};
use crate::simd::{Convert, Isa, Simd, WithConvert};
use crate::state::StateStorage;
use crate::storage::{Dtype, Storage};
use crate::tensor::{Group, StepReport, Tensor, TensorAux};
use core::marker::PhantomData;

/// Whether u = min_i v_{i,t−1} as stored by the last update proves the srf branch of global
/// HomeAdam(W) at the step whose scalars are `s`: every new v_i = fl(β2 v_{i,t−1} +
/// (1 − β2) g_i²) ≥ fl(β2 u) (rounding is monotonic and fl((1 − β2) g_i²) ≥ 0), so
/// ρ_t = (min_i v_i) / bc2 ≥ fl(β2 u) / bc2 ≥ τ. Also for a backend that keeps the bound itself.
pub fn srf_proven_by(u: f32, s: &StepScalars) -> bool {
    !goes_home((s.beta2 * u) / s.bc2, s.tau)
}

/// Whether `F` holds any HomeAdam(W) rule.
#[inline(always)]
pub(crate) fn links_home<F: RuleSet>() -> bool {
    links_switch::<F>(None)
}

/// Stepping: the whole step in one call, or begun for its phases.
impl Optimizer {
    /// One step over every tensor of the model, with the fast path.
    ///
    /// Gradients are multiplied by `1 / grad_scale` first. If any unscaled gradient is not
    /// finite, nothing changes and the report says `skipped` (under [`FiniteCheck::SkipStep`]).
    pub fn step<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<StepReport, Error> {
        self.whole_step::<All, false, P, G, S>(tensors, grad_scale, 1)
    }

    /// [`Optimizer::step`] built for the rules of `F` only ([`crate::rules::only`]): the
    /// other rules' kernels are not linked. Same bits as [`Optimizer::step`]; a config whose
    /// rule is not in `F` is refused with [`Error::RuleNotLinked`] before anything is read or
    /// written.
    pub fn step_only<F: RuleSet, P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<StepReport, Error> {
        self.whole_step::<F, false, P, G, S>(tensors, grad_scale, 1)
    }

    /// [`Optimizer::step`] with each tensor's elements spread over up to `threads` threads
    /// (`std`; [`Step::with_threads`]). The same bits for any thread count.
    #[cfg(feature = "std")]
    pub fn step_parallel<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
        threads: usize,
    ) -> Result<StepReport, Error> {
        self.whole_step::<All, false, P, G, S>(tensors, grad_scale, threads)
    }

    /// The same step through the scalar reference: one element at a time. Every fast path
    /// (this crate's, CUDA, MCU) must give the same bits, and it refuses what
    /// [`Optimizer::step`] refuses (a model other than the last step's without
    /// [`Optimizer::forget_bound`], where the global rule's bound would decide).
    pub fn step_reference<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<StepReport, Error> {
        self.whole_step::<All, true, P, G, S>(tensors, grad_scale, 1)
    }

    /// The one step the entries above name: the rules `F` and the driver `REFERENCE` are
    /// types and constants, not run-time options, because they decide what a build links (a
    /// firmware links one rule's fast path only); the thread count is a number.
    fn whole_step<F: RuleSet, const REFERENCE: bool, P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
        threads: usize,
    ) -> Result<StepReport, Error> {
        let mut step = self.begin_only::<F>(grad_scale)?;
        #[cfg(feature = "std")]
        {
            step = step.with_threads(threads);
        }
        #[cfg(not(feature = "std"))]
        let _ = threads;
        if REFERENCE {
            step = step.exact_decision();
        }
        step.check(tensors)?;
        let mut updates = step.decide()?;
        let isa = if REFERENCE { Isa::Portable } else { Isa::detect() };
        updates
            .step
            .update_with::<REFERENCE, P, G, S>(tensors, isa, None)?;
        updates.finish()
    }

    /// Starts step t = [`Optimizer::step_count`] + 1 in phases, each its own type:
    /// [`Step::check`] every tensor of the model (the finite check and the first pass of
    /// global / per-layer HomeAdam), [`Step::decide`] (the skip and the HomeAdam decision),
    /// then [`Updates::update`] every tensor, in the same order, then [`Updates::finish`]. The
    /// calls may split the model into several slices, of different storage types too: they make
    /// one step, with one HomeAdam decision over all of them (tensor indices, which key
    /// stochastic rounding, count on across the calls).
    ///
    /// ```
    /// use homeadam_core::{bf16, Config, Optimizer, Rule, Switch, Tensor, TensorAux};
    ///
    /// let mut opt = Optimizer::new(Config::new(Rule::HomeAdamW(Switch::Global)))?;
    /// let (mut w, gw, mut sw, mut aw) = ([0.5f32; 4], [1e-3f32; 4], [0.0f32; 8], TensorAux::default());
    /// let (mut e, ge) = ([bf16::ONE; 2], [bf16::from_f32(2e-3); 2]);
    /// let (mut se, mut ae) = ([0.0f32; 4], TensorAux::default());
    /// let mut dense = [Tensor::new(&mut w, &gw, &mut sw, &mut aw)];
    /// let mut embedding = [Tensor::new(&mut e, &ge, &mut se, &mut ae)];
    ///
    /// let mut step = opt.begin(1.0)?;
    /// step.check(&mut dense)?;
    /// step.check(&mut embedding)?;
    /// let mut updates = step.decide()?; // one decision on ρ over both slices
    /// updates.update(&mut dense)?;
    /// updates.update(&mut embedding)?;
    /// let report = updates.finish()?;
    /// assert_eq!(report.step, 1);
    /// # Ok::<(), homeadam_core::Error>(())
    /// ```
    pub fn begin(&mut self, grad_scale: f64) -> Result<Step<'_>, Error> {
        self.begin_only::<All>(grad_scale)
    }

    /// [`Optimizer::begin`] for the rules of `F` only (see [`Optimizer::step_only`]).
    pub fn begin_only<F: RuleSet>(&mut self, grad_scale: f64) -> Result<Step<'_, F>, Error> {
        if !F::admits(self.config.rule) {
            return Err(Error::RuleNotLinked {
                rule: self.config.name(),
            });
        }
        if !(grad_scale.is_finite() && grad_scale > 0.0) {
            return Err(Error::InvalidGradScale(grad_scale));
        }
        let t = self.step.checked_add(1).ok_or(Error::StepOverflow)?;
        let config = self.step_config();
        let calibrates = links_home::<F>()
            && config.rule.switch().is_some()
            && config.tau_calibration.is_some_and(|c| c.calibrates_at(t));
        let scalars = StepScalars::new(&config, t, grad_scale, self.phase_lr);
        // With `rho_over: active` a newly active element can undercut u; a step that sets τ
        // needs ρ_t before any update.
        let bounded = links_switch::<F>(Some(Switch::Global)) && config.keeps_rho_bound();
        let bound = self.decisions.bound.take().filter(|_| bounded && !calibrates);
        // The values this step adds to the calibration histogram; read only with a calibrated τ.
        if links_home::<F>() && config.tau_calibration.is_some() {
            self.decisions.pending = Histogram::new();
        }
        Ok(Step {
            scalars,
            // The phase switch's test works in f64.
            switch_bc2: if F::PHASE_SWITCH && config.rule.spec().phase_switch().is_some() {
                1.0 - powi_by_squaring(config.beta2, t)
            } else {
                0.0
            },
            opt: self,
            t,
            grad_scale,
            finite: true,
            checked: 0,
            updated: 0,
            global_home: false,
            bound,
            decided: bound.and_then(|b| srf_proven_by(b.u, &scalars).then_some(false)),
            exact: false,
            next: bounded.then_some(Bound::EMPTY),
            checked_numel: 0,
            rho: f32::INFINITY,
            rho_active: f32::INFINITY,
            has_rho: false,
            calibrates,
            calibrated: false,
            new_tau: None,
            report: StepReport::applied(t),
            next_phase_lr: None,
            #[cfg(feature = "std")]
            threads: 1,
            rules: PhantomData,
        })
    }
}

/// One step in progress, in its checking phase: see [`Optimizer::begin`]. Dropped before
/// [`Updates::finish`], the step is not counted (tensors updated so far keep their update). `F`
/// is the set of rules whose kernels it links ([`Optimizer::begin_only`]).
pub struct Step<'o, F: RuleSet = All> {
    pub(crate) opt: &'o mut Optimizer,
    pub(crate) t: u64,
    pub(crate) grad_scale: f64,
    pub(crate) scalars: StepScalars,
    /// A rule with a phase switch: 1 − β2^t in `f64`, for its test (0 for the other rules).
    pub(crate) switch_bc2: f64,
    pub(crate) finite: bool,
    pub(crate) checked: usize,
    pub(crate) updated: usize,
    pub(crate) global_home: bool,
    /// The global rule's bound from the last step (`None` without one).
    pub(crate) bound: Option<Bound>,
    /// The global decision (home?) once the bounds prove it; `None` while it needs ρ_t.
    pub(crate) decided: Option<bool>,
    /// [`Step::exact_decision`]: the first pass runs and decides whatever the bounds prove.
    pub(crate) exact: bool,
    /// The bound this step's update leaves for the next step (`None` where it cannot).
    pub(crate) next: Option<Bound>,
    /// Elements checked so far.
    pub(crate) checked_numel: usize,
    /// min v̂ over every element checked (then updated) so far.
    pub(crate) rho: f32,
    /// min v̂ over the active elements checked (then updated) so far (+∞ for none).
    pub(crate) rho_active: f32,
    pub(crate) has_rho: bool,
    /// This step sets a calibrated τ.
    pub(crate) calibrates: bool,
    /// τ was set (at the first update, or by [`Step::calibrate_external`]).
    pub(crate) calibrated: bool,
    /// The τ this step calibrated (`None` without values to calibrate on).
    pub(crate) new_tau: Option<f32>,
    pub(crate) report: StepReport,
    /// The second phase's rate η' that this step's switch test asked for.
    pub(crate) next_phase_lr: Option<f64>,
    #[cfg(feature = "std")]
    pub(crate) threads: usize,
    pub(crate) rules: PhantomData<F>,
}

impl<'o, F: RuleSet> Step<'o, F> {
    /// Spreads each tensor's elements over up to `threads` threads (`std`): scoped threads,
    /// started per tensor, for the finite check, the first pass and the fast path's update,
    /// each with at least 32 K elements (smaller tensors stay on the caller's thread).
    /// Deterministic: the same bits for any thread count, since every per-tensor result is
    /// merged exactly (min, integer and exact sums). 0 and 1 mean the caller's thread only,
    /// the default; [`Updates::update_reference`] always runs on the caller's thread.
    #[cfg(feature = "std")]
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// Takes the global rule's decision on ρ_t from the exact first pass, not from the bounds
    /// of [`Step::check`]: the same decision, for the scalar reference
    /// ([`Optimizer::step_reference`]) and tests. The bounds are still kept and checked, so
    /// that a model other than the last step's is refused as on the fast path. Call it before
    /// [`Step::check`].
    pub fn exact_decision(mut self) -> Self {
        self.exact = true;
        self
    }

    /// t, the step being taken.
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The step's scalars for tensors of the default group (backends pass them to kernels).
    pub fn scalars(&self) -> &StepScalars {
        &self.scalars
    }

    /// The step's scalars for tensors of `group`.
    pub fn group_scalars(&self, group: Group) -> StepScalars {
        if group == Group::DEFAULT {
            return self.scalars;
        }
        let c = &self.opt.config;
        let mut s = StepScalars::for_group(c, group, self.t, self.grad_scale, self.opt.phase_lr);
        s.tau = self.scalars.tau;
        s
    }

    /// Whether this step sets a calibrated τ ([`crate::calibration`]). A backend that updates
    /// the tensors itself then calls [`Step::calibrate_external`] before it reads the scalars.
    pub fn calibrates(&self) -> bool {
        self.calibrates
    }

    /// τ ← the share's quantile of the window and this step's values (element-wise: this
    /// step's only); τ is kept when there is no value.
    pub(crate) fn calibrate(&mut self) {
        let config = &self.opt.config;
        let Some(c) = config.tau_calibration else {
            return;
        };
        let window = match config.rule.switch() {
            Some(Switch::Element) => &Histogram::EMPTY,
            _ => &self.opt.window,
        };
        self.new_tau = Histogram::tau_of_sum(&self.opt.decisions.pending, window, c.home_share);
        self.scalars.tau = self.new_tau.unwrap_or(self.scalars.tau);
        self.calibrated = true;
    }

    /// The finite check and the first pass of global / per-layer HomeAdam over `tensors`
    /// (nothing is written but each tensor's telemetry). Every tensor of the model is checked
    /// before [`Step::decide`].
    ///
    /// The global rule (with `rho_over: all`, at steps that do not set τ) runs the first pass
    /// only while bounds from its last update do not decide: with u = min_i v_{i,t−1} as
    /// stored, fl(β2 u) / bc2 ≥ τ proves the srf branch (every new v_i ≥ fl(β2 u)), and
    /// min v_t / bc2 < τ over the chunk of the model that held min v_{t−1} proves the home
    /// branch (ρ_t is at most that). Either way the decision is the one ρ_t takes; the
    /// gradients are still checked for finiteness. ρ_t for the report and the calibration
    /// window is then min v_t of the update.
    pub fn check<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
    ) -> Result<(), Error> {
        self.validate(tensors, self.checked)?;
        let first = self.checked;
        self.checked += tensors.len();
        let config = &self.opt.config;
        let inv = self.scalars.inv_grad_scale;
        let bc2 = self.scalars.bc2;
        match config.rule.switch() {
            Some(switch @ (Switch::Global | Switch::Layer))
                if links_switch::<F>(Some(Switch::Global)) || links_switch::<F>(Some(Switch::Layer)) =>
            {
                for (k, tensor) in tensors.iter_mut().enumerate() {
                    let n = S::slot_len(tensor.param.len());
                    let v = &tensor.state[n..2 * n];
                    self.checked_numel += tensor.param.len();
                    if self.decided.is_none() && self.home_proven(first + k, tensor.grad, v) {
                        self.decided = Some(true);
                    }
                    if self.decided.is_some() && !self.exact {
                        if self.finite {
                            self.finite = self.grads_finite(tensor.grad, inv);
                        }
                        continue;
                    }
                    let (v_min, finite) = self.first_pass(tensor.grad, v);
                    self.finite &= finite;
                    let (all, active) = (v_min.all / bc2, v_min.active / bc2);
                    self.rho = if all < self.rho { all } else { self.rho };
                    self.rho_active = if active < self.rho_active {
                        active
                    } else {
                        self.rho_active
                    };
                    // Until its update, a tensor's ρ is the one that decides its layer. Where
                    // a bound decides, the fast path runs no first pass and leaves it as is,
                    // and so does the exact decision.
                    if self.decided.is_none() {
                        tensor.aux.rho = v_min.rho(config.rho_over, bc2);
                        if switch == Switch::Layer {
                            self.opt.decisions.pending.add(tensor.aux.rho);
                        }
                    }
                }
            }
            Some(Switch::Element) if self.calibrates => {
                for tensor in tensors.iter() {
                    let n = S::slot_len(tensor.param.len());
                    self.finite &= self.calibration_pass(tensor.grad, &tensor.state[n..2 * n]);
                }
            }
            _ if config.finite_check == FiniteCheck::SkipStep => {
                for tensor in tensors.iter() {
                    if !self.finite {
                        break;
                    }
                    self.finite = self.grads_finite(tensor.grad, inv);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Ends the checking phase: the step is skipped if a checked gradient was not finite, and
    /// global / per-layer HomeAdam takes its decision on ρ_t over every tensor checked (a
    /// calibrating step sets τ first). Refused where the global rule's bound decides but the
    /// model is not the last step's (see [`Optimizer::forget_bound`]).
    pub fn decide(mut self) -> Result<Updates<'o, F>, Error> {
        let config = self.opt.config;
        let switch = config.rule.switch();
        let proven = match (self.decided, self.bound) {
            (Some(home), Some(b)) => {
                // A skipped step writes nothing, so the bound's model does not matter.
                if self.finite && (self.checked, self.checked_numel) != (b.tensors, b.numel) {
                    return Err(Error::StepOrder(
                        "a model other than the last step's without Optimizer::forget_bound",
                    ));
                }
                Some(home)
            }
            _ => None,
        };
        if let Some(home) = proven.filter(|_| !self.exact) {
            self.global_home = home;
        } else {
            let rho = config.rho_over.rho(self.rho, self.rho_active);
            if switch == Some(Switch::Global) {
                self.opt.decisions.pending.add(rho);
            }
            if self.calibrates && self.finite {
                self.calibrate();
            }
            self.global_home = switch == Some(Switch::Global) && goes_home(rho, self.scalars.tau);
        }
        // From here ρ is min v̂_t of the update.
        self.rho = f32::INFINITY;
        self.rho_active = f32::INFINITY;
        Ok(Updates { step: self })
    }

    /// Whether the bound's chunk lies in this tensor, the model's `tensor`th, and proves the
    /// home branch: min v_t / bc2 < τ over it (ρ_t is at most that; a NaN min proves nothing).
    fn home_proven<G: Storage, S: StateStorage>(&self, tensor: usize, grad: &[G], v: &[S]) -> bool {
        let Some(b) = self.bound.filter(|b| b.tensor == tensor) else {
            return false;
        };
        let end = grad.len().min(b.at.saturating_add(CHUNK));
        if S::DTYPE == Dtype::Q8 || b.at >= end {
            return false;
        }
        let (min, _) = home_first_pass(&grad[b.at..end], &v[b.at..end], &self.scalars);
        min.all / self.scalars.bc2 < self.scalars.tau
    }

    /// [`home_first_pass`] of one tensor, over the step's threads, compiled for the best
    /// instruction set.
    fn first_pass<G: Storage, S: StateStorage>(&self, grad: &[G], v: &[S]) -> (SecondMomentMin, bool) {
        let scalars = &self.scalars;
        let pass = |(grad, v): (&[G], &[S])| Isa::detect().run(FirstPass { grad, v, scalars });
        #[cfg(feature = "std")]
        if self.threads > 1 {
            let merge = |a: (SecondMomentMin, bool), b: (SecondMomentMin, bool)| (a.0.merge(b.0), a.1 && b.1);
            let empty = (SecondMomentMin::EMPTY, true);
            return parallel::run_split((grad, v), self.threads, pass, merge, empty);
        }
        pass((grad, v))
    }

    /// [`home_calibration_pass`] of one tensor into the step's values, over the step's
    /// threads; whether every unscaled gradient is finite.
    fn calibration_pass<G: Storage, S: StateStorage>(&mut self, grad: &[G], v: &[S]) -> bool {
        let scalars = &self.scalars;
        #[cfg(feature = "std")]
        if self.threads > 1 {
            let pass = |(g, v): (&[G], &[S])| {
                let mut values = Histogram::new();
                let finite = home_calibration_pass(g, v, scalars, &mut values);
                (values, finite)
            };
            let merge = |mut a: (Histogram, bool), b: (Histogram, bool)| {
                a.0.merge(&b.0);
                (a.0, a.1 && b.1)
            };
            let empty = (Histogram::new(), true);
            let (values, finite) = parallel::run_split((grad, v), self.threads, pass, merge, empty);
            self.opt.decisions.pending.merge(&values);
            return finite;
        }
        home_calibration_pass(grad, v, scalars, &mut self.opt.decisions.pending)
    }

    /// Whether every unscaled gradient of one tensor is finite, over the step's threads,
    /// compiled for the best instruction set.
    fn grads_finite<G: Storage>(&self, grad: &[G], inv: f32) -> bool {
        let check = |grad: &[G]| Isa::detect().run(GradsFinite { grad, inv });
        #[cfg(feature = "std")]
        if self.threads > 1 {
            return parallel::run_split(grad, self.threads, check, |a, b| a && b, true);
        }
        check(grad)
    }

    /// [`Updates::finish`].
    fn finish(mut self) -> Result<StepReport, Error> {
        if !self.finite {
            // Nothing was written: the bound still holds.
            self.opt.decisions.bound = self.bound;
            return Ok(StepReport::skipped(self.t - 1));
        }
        if self.updated != self.checked {
            return Err(Error::StepOrder("fewer tensors updated than checked"));
        }
        if self.decided.is_some() && !self.exact {
            // `bound` is only taken with `rho_over: all`: ρ_t is min v̂_t of the update.
            self.opt.decisions.pending.add(self.rho);
        }
        let opt = &mut *self.opt;
        opt.decisions.bound = self.next;
        if opt.config.rule.switch() == Some(Switch::Global) && (self.decided.is_none() || self.exact) {
            opt.decisions.exact += 1;
        }
        let mut report = self.report;
        self.switch_phase(&mut report);
        report.rho = self.has_rho.then_some(self.rho);
        report.rho_active = self
            .first_pass_ran()
            .then(|| RhoOver::Active.rho(0.0, self.rho_active));
        self.commit(report)
    }

    /// Whether the rule ran the first pass of the global / per-layer rules.
    pub(crate) fn first_pass_ran(&self) -> bool {
        matches!(
            self.opt.config.rule.switch(),
            Some(Switch::Global | Switch::Layer)
        )
    }

    /// Counts an applied step: the calibration state, τ in the report, t.
    pub(crate) fn commit(self, mut report: StepReport) -> Result<StepReport, Error> {
        let opt = self.opt;
        if self.calibrated {
            opt.calibrated_tau = self.new_tau.or(opt.calibrated_tau);
            opt.window = Histogram::new();
        } else if opt.config.tau_calibration.is_some() && opt.config.rule.switch() != Some(Switch::Element) {
            opt.window.merge(&opt.decisions.pending);
        }
        if opt.config.rule.switch().is_some() {
            report.tau = Some(self.scalars.tau);
        }
        opt.step = self.t;
        Ok(report)
    }

    /// The phase switch's test of one tensor after its first-phase step
    /// ([`crate::rules::spec::PhaseSwitch`]); nothing for a rule without one.
    pub(crate) fn switch_test(
        &mut self,
        aux: &mut TensorAux,
        group: Group,
        step_sq: &ExactSum,
        step_grad: &ExactSum,
    ) {
        let config = &self.opt.config;
        let Some(switch) = config.rule.spec().phase_switch() else {
            return;
        };
        let dots = Dots {
            step_sq: step_sq.to_f64(),
            step_grad: step_grad.to_f64(),
        };
        let at = SwitchInputs {
            t: self.t,
            beta2: config.beta2,
            bc2: self.switch_bc2,
            eps: config.eps,
        };
        // The test estimates the rate of this tensor's steps, η'·lr_scale: the model's second
        // phase runs at η' scaled again per group.
        let base = (switch.test)(&mut aux.swats_lambda, dots, &at).map(|lr| lr / group.lr_scale);
        self.next_phase_lr = base.or(self.next_phase_lr);
    }

    /// Switches the model to its rule's second phase where this step's test asked for it.
    pub(crate) fn switch_phase(&mut self, report: &mut StepReport) {
        if let Some(lr) = self.next_phase_lr {
            self.opt.phase_lr = Some(lr);
            report.swats_switched = true;
        }
    }

    /// Lengths, state type and groups of `tensors`, numbered from `first`.
    fn validate<P: Storage, G: Storage, S: StateStorage>(
        &self,
        tensors: &[Tensor<'_, P, G, S>],
        first: usize,
    ) -> Result<(), Error> {
        let config = &self.opt.config;
        config.check_state_dtype(S::DTYPE)?;
        let slots = config.state_slots();
        let mut last_group = Group::DEFAULT;
        for (k, t) in tensors.iter().enumerate() {
            let (tensor, numel) = (first + k, t.param.len());
            if t.grad.len() != numel {
                return Err(Error::GradLength {
                    tensor,
                    numel,
                    actual: t.grad.len(),
                });
            }
            if Some(t.state.len()) != slots.checked_mul(S::slot_len(numel)) {
                return Err(Error::StateLength {
                    tensor,
                    slots,
                    numel,
                    per_slot: S::slot_len(numel),
                    actual: t.state.len(),
                });
            }
            if t.group != last_group {
                let scale = t.group.lr_scale;
                if !(scale.is_finite() && scale >= 0.0) {
                    return Err(Error::InvalidLrScale { tensor, value: scale });
                }
                config.check_group(t.group)?;
                last_group = t.group;
            }
        }
        Ok(())
    }

    /// `REFERENCE` is a const so that a program calling only the fast path links only the
    /// fast drivers (flash matters on microcontrollers). `first_key` is the model-wide index
    /// that keys the first tensor's random draws (`None`: its place in this step,
    /// [`Updates::update_as`] gives another).
    pub(crate) fn update_with<const REFERENCE: bool, P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        isa: Isa,
        first_key: Option<u64>,
    ) -> Result<(), Error> {
        if self.updated + tensors.len() > self.checked {
            return Err(Error::StepOrder("update of a tensor that was not checked"));
        }
        self.validate(tensors, self.updated)?;
        let config = self.opt.config;
        let switch = config.rule.switch();
        if !self.finite {
            for tensor in tensors.iter_mut() {
                tensor.aux.rho = f32::INFINITY;
                tensor.aux.home_elements = 0;
            }
            self.updated += tensors.len();
            return Ok(());
        }
        let second_phase = self.opt.phase_lr.is_some();
        let first_key = first_key.unwrap_or(self.updated as u64);
        let (mut group, mut scalars) = (Group::DEFAULT, self.scalars);
        for (k, tensor) in tensors.iter_mut().enumerate() {
            let index = self.updated;
            self.updated += 1;
            if tensor.group != group {
                group = tensor.group;
                scalars = self.group_scalars(group);
            }
            let branch = match switch {
                Some(Switch::Global) => home_branch(self.global_home),
                Some(Switch::Layer) => home_branch(goes_home(tensor.aux.rho, scalars.tau)),
                Some(Switch::Element) => branch::PER_ELEMENT,
                // Adam(W)-srf, and every rule that ignores the branch.
                None => branch::SRF,
            };
            let key = tensor_key(config.seed, self.t, first_key + k as u64);
            let run = Run::<REFERENCE> {
                rounding: config.rounding,
                key,
                slots: match S::DTYPE {
                    Dtype::Q8 => SlotStores::new(&config, key),
                    _ => SlotStores::ELEMENTS,
                },
                inv: scalars.inv_grad_scale,
                isa,
                #[cfg(feature = "std")]
                threads: self.threads,
            };
            let choice = KernelChoice {
                config: &config,
                scalars: &scalars,
                second_phase,
                branch,
            };
            #[cfg(feature = "std")]
            let outcome = if F::EVERY_RULE {
                erased::update(choice, run, AnyTensor::of(tensor))
            } else {
                dispatch::<F, REFERENCE, P, G, S>(choice, run, tensor)
            };
            #[cfg(not(feature = "std"))]
            let outcome = dispatch::<F, REFERENCE, P, G, S>(choice, run, tensor);
            let Some((result, tensor_has_rho)) = outcome else {
                return Err(Error::RuleNotLinked { rule: config.name() });
            };
            tensor.aux.home_elements = result.home;
            tensor.aux.rho = if tensor_has_rho {
                result.v_min / scalars.bc2
            } else {
                f32::INFINITY
            };
            self.has_rho |= tensor_has_rho;
            if tensor.aux.rho < self.rho {
                self.rho = tensor.aux.rho;
            }
            let active = result.v_min_active / scalars.bc2;
            if active < self.rho_active {
                self.rho_active = active;
            }
            if let Some(mut next) = self.next {
                self.next = S::stored_min(result.v_min).map(|u| {
                    // Ties keep the earlier tensor: its check proves home sooner.
                    if u < next.u {
                        (next.u, next.tensor, next.at) = (u, index, result.v_min_at);
                    }
                    next.tensors += 1;
                    next.numel += tensor.param.len();
                    next
                });
            }
            self.report.home_elements += result.home as u64;
            self.report.nonfinite_applied |= result.nonfinite;
            if F::PHASE_SWITCH && !second_phase {
                self.switch_test(tensor.aux, group, &result.step_sq, &result.step_grad);
            }
        }
        Ok(())
    }
}

/// One step in progress, in its updating phase: see [`Step::decide`].
pub struct Updates<'o, F: RuleSet = All> {
    pub(crate) step: Step<'o, F>,
}

impl<F: RuleSet> Updates<'_, F> {
    /// t, the step being taken.
    pub fn t(&self) -> u64 {
        self.step.t
    }

    /// The step's scalars for tensors of `group`, τ as decided.
    pub fn group_scalars(&self, group: Group) -> StepScalars {
        self.step.group_scalars(group)
    }

    /// Updates `tensors` with the fast path, in the order they were checked; on a skipped step
    /// only their telemetry is cleared.
    pub fn update<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
    ) -> Result<(), Error> {
        self.step
            .update_with::<false, P, G, S>(tensors, Isa::detect(), None)
    }

    /// [`Updates::update`] through the scalar reference.
    pub fn update_reference<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
    ) -> Result<(), Error> {
        self.step
            .update_with::<true, P, G, S>(tensors, Isa::Portable, None)
    }

    /// [`Updates::update`] with the instruction set `simd` ([`Simd::Portable`]: no explicit SIMD,
    /// what a `no_std` build runs). Same bits as [`Updates::update`]; for tests and benches that
    /// compare the instruction sets on one machine. Refused when this CPU or build lacks it.
    pub fn update_on<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        simd: Simd,
    ) -> Result<(), Error> {
        let isa = Isa::of(simd).ok_or(Error::SimdUnavailable(simd))?;
        self.step.update_with::<false, P, G, S>(tensors, isa, None)
    }

    /// Ends the step: counts it (unless skipped) and reports it. Refused, with the step not
    /// counted, when fewer tensors were updated than checked.
    pub fn finish(self) -> Result<StepReport, Error> {
        self.step.finish()
    }
}

fn home_branch(home: bool) -> u8 {
    if home {
        branch::ALL_HOME
    } else {
        branch::ALL_SRF
    }
}

/// [`home_first_pass_with`] of one tensor (or part), with an instruction set's conversions.
struct FirstPass<'a, G, S> {
    grad: &'a [G],
    v: &'a [S],
    scalars: &'a StepScalars,
}

impl<G: Storage, S: StateStorage> WithConvert for FirstPass<'_, G, S> {
    type Output = (SecondMomentMin, bool);

    #[inline(always)]
    fn run<C: Convert>(self, conv: C) -> Self::Output {
        home_first_pass_with(conv, self.grad, self.v, self.scalars)
    }
}

/// [`kernel::grads_finite`] of one tensor (or part), with an instruction set's conversions.
struct GradsFinite<'a, G> {
    grad: &'a [G],
    inv: f32,
}

impl<G: Storage> WithConvert for GradsFinite<'_, G> {
    type Output = bool;

    #[inline(always)]
    fn run<C: Convert>(self, conv: C) -> bool {
        kernel::grads_finite(conv, self.grad, self.inv)
    }
}
