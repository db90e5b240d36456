//! The step over a whole model: unscale, non-finite skip, the HomeAdam decision, the update,
//! telemetry.

use crate::config::{Config, FiniteCheck, Rule, Switch};
use crate::error::Error;
use crate::kernel::{self, Kernel, TensorResult};
use crate::rounding::{tensor_key, NearestStore, Rounding, StochasticStore};
use crate::rules::adabelief::AdaBelief;
use crate::rules::adam::Adam;
use crate::rules::homeadam::{branch, goes_home, home_first_pass, Home};
use crate::rules::miadam::MiAdam;
use crate::rules::sgd::Sgd;
use crate::rules::srf;
use crate::rules::swats::{self, SwatsAdam, SwatsSgd};
use crate::scalars::{powi_by_squaring, StepScalars};
use crate::storage::Storage;
use crate::tensor::{StepReport, Tensor};

/// An optimizer: a validated [`Config`] plus the model-wide state (the step counter t and the
/// SWATS phase). Per-tensor state lives in the caller's slices ([`Tensor::state`]).
///
/// ```
/// use homeadam_core::{Config, Optimizer, Rule, Switch, Tensor, TensorAux};
///
/// let mut config = Config::new(Rule::HomeAdamW(Switch::Element));
/// config.lr = 1e-3;
/// config.tau = 1e-12;
/// let mut opt = Optimizer::new(config)?;
///
/// let mut param = [0.5f32, -0.25, 1.0];
/// let grad = [0.1f32, 0.0, -0.2];
/// let mut state = [0.0f32; 6]; // m and v: opt.state_len(3)
/// let mut aux = TensorAux::default();
/// let mut model = [Tensor::new(&mut param, &grad, &mut state, &mut aux)];
/// let report = opt.step(&mut model, 1.0)?;
/// assert_eq!(report.step, 1);
/// assert_eq!(report.home_elements, 1); // the zero gradient's v̂ = 0 < τ: home branch
/// # Ok::<(), homeadam_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    config: Config,
    step: u64,
    swats_sgd_lr: Option<f64>,
}

impl Optimizer {
    /// Validates `config` and starts at step 0.
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Optimizer {
            config,
            step: 0,
            swats_sgd_lr: None,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Steps taken so far (t of the last step; skipped steps do not count).
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// SWATS: the SGD-phase learning rate once switched.
    pub fn swats_sgd_lr(&self) -> Option<f64> {
        self.swats_sgd_lr
    }

    /// Changes η (for schedules); refused like a bad config.
    pub fn set_lr(&mut self, lr: f64) -> Result<(), Error> {
        let mut config = self.config;
        config.lr = lr;
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// Elements of state a tensor of `numel` parameters needs.
    pub fn state_len(&self, numel: usize) -> usize {
        self.config.state_slots() * numel
    }

    pub(crate) fn restore(&mut self, step: u64, swats_sgd_lr: Option<f64>) {
        self.step = step;
        self.swats_sgd_lr = swats_sgd_lr;
    }

    /// One step over every tensor of the model, with the fast path.
    ///
    /// Gradients are multiplied by `1 / grad_scale` first. If any unscaled gradient is not
    /// finite, nothing changes and the report says `skipped` (under [`FiniteCheck::SkipStep`]).
    pub fn step<P: Storage, G: Storage, S: Storage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<StepReport, Error> {
        self.step_with::<false, P, G, S>(tensors, grad_scale)
    }

    /// The same step through the scalar reference: one element at a time. Every fast path
    /// (this crate's, CUDA, MCU) must give the same bits.
    pub fn step_reference<P: Storage, G: Storage, S: Storage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<StepReport, Error> {
        self.step_with::<true, P, G, S>(tensors, grad_scale)
    }

    fn check_inputs<P: Storage, G: Storage, S: Storage>(
        &self,
        tensors: &[Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<(), Error> {
        if !(grad_scale.is_finite() && grad_scale > 0.0) {
            return Err(Error::InvalidGradScale(grad_scale));
        }
        self.config.check_state_dtype(S::DTYPE)?;
        let slots = self.config.state_slots();
        for (k, t) in tensors.iter().enumerate() {
            let n = t.param.len();
            if t.grad.len() != n {
                return Err(Error::LengthMismatch {
                    tensor: k,
                    what: "grad",
                    expected: n,
                    actual: t.grad.len(),
                });
            }
            if t.state.len() != slots * n {
                return Err(Error::LengthMismatch {
                    tensor: k,
                    what: "state",
                    expected: slots * n,
                    actual: t.state.len(),
                });
            }
        }
        Ok(())
    }

    /// `REFERENCE` is a const so that a program calling only [`Optimizer::step`] links only the
    /// fast drivers (flash matters on microcontrollers).
    fn step_with<const REFERENCE: bool, P: Storage, G: Storage, S: Storage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        grad_scale: f64,
    ) -> Result<StepReport, Error> {
        self.check_inputs(tensors, grad_scale)?;
        let t = self.step.checked_add(1).ok_or(Error::StepOverflow)?;
        let config = self.config;
        let scalars = StepScalars::new(&config, t, grad_scale, self.swats_sgd_lr);
        let inv = scalars.inv_grad_scale;
        let switch = config.rule.switch();

        // First pass: nothing is written until every gradient is known to be finite.
        if matches!(switch, Some(Switch::Global | Switch::Layer)) {
            for tensor in tensors.iter_mut() {
                let n = tensor.param.len();
                let (v_min, finite) = home_first_pass(tensor.grad, &tensor.state[n..2 * n], &scalars);
                if !finite {
                    return Ok(skip(tensors, t));
                }
                tensor.aux.rho = v_min / scalars.bc2;
            }
        } else if config.finite_check == FiniteCheck::SkipStep
            && !tensors
                .iter()
                .all(|tensor| kernel::grads_finite(tensor.grad, inv))
        {
            return Ok(skip(tensors, t));
        }
        let global_home = switch == Some(Switch::Global) && {
            let model_rho = tensors
                .iter()
                .fold(f32::INFINITY, |a, t| if t.aux.rho < a { t.aux.rho } else { a });
            goes_home(model_rho, scalars.tau)
        };
        // SWATS's switch test works in f64.
        let bc2 = 1.0 - powi_by_squaring(config.beta2, t);

        let mut report = StepReport {
            step: t,
            skipped: false,
            rho: None,
            home_elements: 0,
            nonfinite_applied: false,
            swats_switched: false,
        };
        let mut rho = f32::INFINITY;
        let mut has_rho = false;
        let mut next_swats_lr = None;
        for (index, tensor) in tensors.iter_mut().enumerate() {
            let branch = match switch {
                Some(Switch::Global) => home_branch(global_home),
                Some(Switch::Layer) => home_branch(goes_home(tensor.aux.rho, scalars.tau)),
                _ => branch::PER_ELEMENT,
            };
            let run = Run::<REFERENCE> {
                rounding: config.rounding,
                key: tensor_key(config.seed, t, index as u64),
                inv,
            };
            let (result, tensor_has_rho) = dispatch(
                &config,
                &scalars,
                self.swats_sgd_lr.is_some(),
                branch,
                run,
                tensor,
            );
            tensor.aux.home_elements = result.home;
            tensor.aux.rho = if tensor_has_rho {
                result.v_min / scalars.bc2
            } else {
                f32::INFINITY
            };
            has_rho |= tensor_has_rho;
            if tensor.aux.rho < rho {
                rho = tensor.aux.rho;
            }
            report.home_elements += result.home as u64;
            report.nonfinite_applied |= result.nonfinite;
            if config.rule == Rule::Swats && self.swats_sgd_lr.is_none() {
                let asks = swats::switch_test(
                    &mut tensor.aux.swats_lambda,
                    result.step_sq,
                    result.step_grad,
                    t,
                    config.beta2,
                    bc2,
                    config.eps,
                );
                next_swats_lr = asks.or(next_swats_lr);
            }
        }
        if let Some(lr) = next_swats_lr {
            self.swats_sgd_lr = Some(lr);
            report.swats_switched = true;
        }
        report.rho = has_rho.then_some(rho);
        self.step = t;
        Ok(report)
    }
}

/// A skipped step: parameters and state untouched, per-tensor telemetry cleared.
fn skip<P, G, S>(tensors: &mut [Tensor<'_, P, G, S>], t: u64) -> StepReport {
    for tensor in tensors.iter_mut() {
        tensor.aux.rho = f32::INFINITY;
        tensor.aux.home_elements = 0;
    }
    StepReport::skipped(t)
}

fn home_branch(home: bool) -> u8 {
    if home {
        branch::ALL_HOME
    } else {
        branch::ALL_SRF
    }
}

/// How one tensor is driven: which driver (`REFERENCE` or the fast path), which rounding.
#[derive(Clone, Copy)]
struct Run<const REFERENCE: bool> {
    rounding: Rounding,
    key: u64,
    inv: f32,
}

impl<const REFERENCE: bool> Run<REFERENCE> {
    fn apply<K: Kernel, P: Storage, G: Storage, S: Storage>(
        self,
        kernel: K,
        tensor: &mut Tensor<'_, P, G, S>,
    ) -> (TensorResult, bool) {
        let result = match (REFERENCE, self.rounding) {
            (false, Rounding::Nearest) => kernel::run_fast(kernel, tensor, self.inv, NearestStore),
            (false, Rounding::Stochastic) => {
                kernel::run_fast(kernel, tensor, self.inv, StochasticStore { key: self.key })
            }
            (true, Rounding::Nearest) => kernel::run_reference(kernel, tensor, self.inv, NearestStore),
            (true, Rounding::Stochastic) => {
                kernel::run_reference(kernel, tensor, self.inv, StochasticStore { key: self.key })
            }
        };
        (result, K::RHO_SLOT.is_some())
    }
}

fn dispatch<const REFERENCE: bool, P: Storage, G: Storage, S: Storage>(
    config: &Config,
    s: &StepScalars,
    swats_in_sgd_phase: bool,
    branch: u8,
    run: Run<REFERENCE>,
    tensor: &mut Tensor<'_, P, G, S>,
) -> (TensorResult, bool) {
    match config.rule {
        Rule::Sgd if config.momentum == 0.0 => run.apply(Sgd::<false>::new(s, config.nesterov), tensor),
        Rule::Sgd | Rule::Sgdm => run.apply(Sgd::<true>::new(s, config.nesterov), tensor),
        Rule::Adam => run.apply(Adam::<false>::new(s), tensor),
        Rule::AdamW => run.apply(Adam::<true>::new(s), tensor),
        Rule::AdamSrf | Rule::AdamWSrf => run.apply(srf::kernel(s), tensor),
        Rule::HomeAdam(_) | Rule::HomeAdamW(_) => match branch {
            branch::ALL_SRF => run.apply(Home::<{ branch::ALL_SRF }>::new(s), tensor),
            branch::ALL_HOME => run.apply(Home::<{ branch::ALL_HOME }>::new(s), tensor),
            _ => run.apply(Home::<{ branch::PER_ELEMENT }>::new(s), tensor),
        },
        Rule::AdaBelief if config.amsgrad => {
            run.apply(AdaBelief::<true>::new(s, config.weight_decouple), tensor)
        }
        Rule::AdaBelief => run.apply(AdaBelief::<false>::new(s, config.weight_decouple), tensor),
        Rule::Swats if swats_in_sgd_phase => {
            run.apply(SwatsSgd::new(s, config.weight_decouple, config.nesterov), tensor)
        }
        Rule::Swats => run.apply(SwatsAdam::new(s, config.weight_decouple), tensor),
        Rule::MiAdam => run.apply(MiAdam::new(s), tensor),
    }
}
