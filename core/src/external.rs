//! The protocol of a backend that updates the tensors itself (CUDA, Jetson): it reads the
//! step's scalars, runs its kernels and ends the step with what they found ([`Outcome`], and
//! SWATS's dot products, [`SwatsDots`]), so that the core keeps the model-wide state as if it
//! had updated the tensors.

use crate::calibration::Histogram;
use crate::error::Error;
use crate::exact::ExactSum;
use crate::reduce::RhoOver;
use crate::step::Step;

use crate::rules::only::RuleSet;
use crate::rules::Switch;
use crate::tensor::{Group, StepReport, TensorAux};

/// What a backend that updates the tensors itself (CUDA) tells [`Step::finish_external`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// A non-finite unscaled gradient was found and nothing was written.
    pub skipped: bool,
    /// min v over every tensor after the update (ρ = v_min / bc2), if the rule reports ρ.
    pub v_min: Option<f32>,
    /// Global and per-layer HomeAdam(W): min v over the elements with v > 0 (+∞ for none).
    pub v_min_active: Option<f32>,
    /// Global and per-layer HomeAdam(W) with a calibrated τ, at steps that do not set τ: the
    /// step's decision values ([`crate::RhoOver::rho`] of the model for the global rule, of
    /// each tensor for the per-layer rule) counted into a [`Histogram`]. Ignored otherwise.
    pub decisions: Histogram,
    /// Elements that took the home branch.
    pub home_elements: u64,
    /// A non-finite gradient was applied (under [`crate::FiniteCheck::Trust`]).
    pub nonfinite_applied: bool,
    /// Global HomeAdam(W): the exact first pass over the model decided the branch, as no bound
    /// proved it ([`crate::Optimizer::exact_first_passes`] counts these steps). Ignored for
    /// the other rules.
    pub exact_pass: bool,
}

/// One tensor's SWATS switch test, for [`Step::finish_external_swats`]: its Λ and group, and
/// the dot products of its Adam-phase step p (θ_t − θ_{t−1}) with itself and with the
/// gradient g the step used, summed exactly.
pub struct SwatsDots<'a> {
    /// The tensor's Λ ([`TensorAux::swats_lambda`]), updated by the test.
    pub aux: &'a mut TensorAux,
    /// The tensor's parameter group.
    pub group: Group,
    /// pᵀp.
    pub step_sq: &'a ExactSum,
    /// pᵀg.
    pub step_grad: &'a ExactSum,
}

/// The end of a step whose tensors a backend updated itself.
impl<F: RuleSet> Step<'_, F> {
    /// Sets the calibrated τ of this step from the values a backend counted: for the
    /// element-wise rule v̂ of every element with v > 0 ([`crate::backend::home_calibration_pass`]),
    /// for the global and per-layer rules this step's decision values (as
    /// [`Outcome::decisions`]). Only at a step that [`Step::calibrates`].
    pub fn calibrate_external(&mut self, values: &Histogram) -> Result<(), Error> {
        if !self.calibrates || self.calibrated {
            return Err(Error::StepOrder(
                "calibrate_external once, at a step that calibrates",
            ));
        }
        self.opt.decisions.pending = *values;
        self.calibrate();
        Ok(())
    }

    /// Ends a step whose tensors a backend updated itself, with [`Step::scalars`]: counts it
    /// unless skipped, and reports it as [`Updates::finish`](crate::Updates::finish) would. A
    /// rule before its phase switch (SWATS in its Adam phase), whose test needs the step's dot
    /// products, finishes with [`Step::finish_external_swats`].
    pub fn finish_external(self, outcome: Outcome) -> Result<StepReport, Error> {
        if self.opt.config.rule.spec().phase_switch().is_some() && self.opt.phase_lr.is_none() {
            return Err(Error::NotForRule {
                name: "finish_external before its phase switch",
                rule: self.opt.config.name(),
                hint: "finish with Step::finish_external_swats and the step's dot products",
            });
        }
        self.finish_outcome(outcome)
    }

    /// [`Step::finish_external`] for a rule with a phase switch (SWATS): runs the switch test of
    /// every tensor of the model, in order, on its exact dot products (as the core's own update
    /// does; tensors are not read in the second phase or on a skipped step), and switches the
    /// model when one asks.
    pub fn finish_external_swats(
        mut self,
        outcome: Outcome,
        tensors: &mut [SwatsDots<'_>],
    ) -> Result<StepReport, Error> {
        if self.opt.config.rule.spec().phase_switch().is_none() {
            return Err(Error::NotForRule {
                name: "a phase switch's test",
                rule: self.opt.config.name(),
                hint: "finish with Step::finish_external",
            });
        }
        if !outcome.skipped && self.opt.phase_lr.is_none() {
            for t in tensors.iter_mut() {
                self.switch_test(t.aux, t.group, t.step_sq, t.step_grad);
            }
        }
        self.finish_outcome(outcome)
    }

    fn finish_outcome(mut self, outcome: Outcome) -> Result<StepReport, Error> {
        if outcome.skipped {
            return Ok(StepReport::skipped(self.t - 1));
        }
        if self.calibrates && !self.calibrated {
            return Err(Error::StepOrder(
                "a step that calibrates τ without calibrate_external",
            ));
        }
        let bc2 = self.scalars.bc2;
        let mut report = StepReport::applied(self.t);
        report.rho = outcome.v_min.map(|v| v / bc2);
        report.rho_active = match outcome.v_min_active {
            Some(v) if self.first_pass_ran() => Some(RhoOver::Active.rho(0.0, v / bc2)),
            _ => None,
        };
        report.home_elements = outcome.home_elements;
        report.nonfinite_applied = outcome.nonfinite_applied;
        self.switch_phase(&mut report);
        if !self.calibrated {
            self.opt.decisions.pending = outcome.decisions;
        }
        if outcome.exact_pass && self.opt.config.rule.switch() == Some(Switch::Global) {
            self.opt.decisions.exact += 1;
        }
        self.commit(report)
    }
}
