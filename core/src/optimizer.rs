//! The optimizer: a validated config and the model-wide state (the step counter, the rule's phase,
//! a calibrated τ, the global rule's bound), with [`Optimizer::step`], the whole step in one
//! call, and [`Optimizer::begin`], the same step in phases ([`crate::Step`], `step.rs`).

use crate::calibration::Histogram;
use crate::checkpoint::{self, ByteSink, Header, TensorState, TensorStateMut};
use crate::config::Config;
use crate::error::{CheckpointError, Error};
use crate::rules::Rule;
use crate::state::StateStorage;
use crate::storage::Dtype;

/// An optimizer: a validated [`Config`] plus the model-wide state (the step counter t, the
/// rule's phase, a calibrated τ and its histogram). Per-tensor state lives in the caller's
/// slices ([`crate::Tensor::state`]).
///
/// ```
/// use homeadam_core::{Config, Group, Optimizer, Rule, Switch, Tensor, TensorAux};
///
/// let mut config = Config::new(Rule::HomeAdamW(Switch::Element));
/// config.lr = 1e-3;
/// config.tau = 1e-12;
/// let mut opt = Optimizer::new(config)?;
///
/// let (mut w, mut b) = ([0.5f32, -0.25, 1.0], [0.0f32]);
/// let (gw, gb) = ([0.1f32, 0.0, -0.2], [0.3f32]);
/// let (mut sw, mut sb) = ([0.0f32; 6], [0.0f32; 2]); // m and v: opt.state_len(numel)
/// let (mut aw, mut ab) = (TensorAux::default(), TensorAux::default());
/// let mut model = [
///     Tensor::new(&mut w, &gw, &mut sw, &mut aw),
///     // A parameter group: the bias is not decayed.
///     Tensor::new(&mut b, &gb, &mut sb, &mut ab).in_group(Group::NO_DECAY),
/// ];
/// let report = opt.step(&mut model, 1.0)?;
/// assert_eq!(report.step, 1);
/// assert_eq!(report.home_elements, 1); // the zero gradient's v̂ = 0 < τ: home branch
/// # Ok::<(), homeadam_core::Error>(())
/// ```
///
/// Between steps the state slices are the optimizer's: the global rule bounds ρ_t from the v
/// its last step wrote (see [`crate::Step::check`]). After writing state other than through
/// [`Optimizer::load_state`], call [`Optimizer::forget_bound`].
#[derive(Clone, Debug, PartialEq)]
pub struct Optimizer {
    pub(crate) config: Config,
    pub(crate) step: u64,
    /// The rate η' of the rule's second phase once the model switched
    /// ([`crate::rules::spec::PhaseSwitch`]).
    pub(crate) phase_lr: Option<f64>,
    /// The τ last calibrated (`None` before the first calibration, or without one).
    pub(crate) calibrated_tau: Option<f32>,
    /// Global and per-layer rules with a calibrated τ: the decision values since the last
    /// calibration.
    pub(crate) window: Histogram,
    pub(crate) decisions: Decisions,
}

/// What the global rule keeps of the v its last update wrote, to bound ρ_t of the next step
/// (see [`crate::Step::check`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    /// u = min_i v_{i,t−1} as stored (+∞ for none; NaN is not counted, as in ρ).
    pub(crate) u: f32,
    /// The model's index of the tensor, and the tensor's index of the first element of the
    /// chunk of at most [`CHUNK`] elements, that held min v_{t−1}.
    pub(crate) tensor: usize,
    pub(crate) at: usize,
    /// Tensors and elements of the model it was taken over.
    pub(crate) tensors: usize,
    pub(crate) numel: usize,
}

impl Bound {
    pub(crate) const EMPTY: Bound = Bound {
        u: f32::INFINITY,
        tensor: 0,
        at: 0,
        tensors: 0,
        numel: 0,
    };
}

/// The global rule's bound and its count of exact first passes: a cache, not state. It is not
/// saved, and a step without it runs the exact first pass and takes the same decision, so two
/// optimizers that differ only in it compare equal, and print alike. Also the decision values
/// of the step in progress, which a calibrated τ reads: scratch, kept here rather than in the
/// [`crate::Step`] that a step moves from phase to phase.
#[derive(Clone, Copy, Default)]
pub(crate) struct Decisions {
    pub(crate) bound: Option<Bound>,
    pub(crate) exact: u64,
    pub(crate) pending: Histogram,
}

impl PartialEq for Decisions {
    fn eq(&self, _: &Decisions) -> bool {
        true
    }
}

impl core::fmt::Debug for Decisions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Decisions { .. }")
    }
}

impl Optimizer {
    /// Validates `config` and starts at step 0.
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        Ok(Optimizer {
            config,
            step: 0,
            phase_lr: None,
            calibrated_tau: None,
            window: Histogram::new(),
            decisions: Decisions::default(),
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

    /// The rate η' of the rule's second phase once the model switched: SWATS's SGD-phase
    /// learning rate.
    pub fn swats_sgd_lr(&self) -> Option<f64> {
        self.phase_lr
    }

    /// The τ of the next step: the calibrated τ once calibrated, else `Config::tau`.
    pub fn tau(&self) -> f64 {
        self.calibrated_tau.map_or(self.config.tau, f64::from)
    }

    /// With a calibrated τ on the global or per-layer rule: the histogram of the decision
    /// values since the last calibration (saved in checkpoints).
    pub fn calibration_window(&self) -> &Histogram {
        &self.window
    }

    /// Global HomeAdam(W): the steps taken by this optimizer (since it was made or loaded;
    /// not saved) whose decision needed the exact first pass over the model, because the
    /// bounds on ρ_t did not decide it ([`crate::Step::check`]). The per-layer rule runs it at every
    /// step; 0 for the other rules.
    pub fn exact_first_passes(&self) -> u64 {
        self.decisions.exact
    }

    /// Drops the global rule's bound on the next ρ_t, so that the next step runs the exact
    /// first pass: for state written other than by this optimizer's steps and
    /// [`Optimizer::load_state`]. Changes no decision, only the work of one step.
    pub fn forget_bound(&mut self) {
        self.decisions.bound = None;
    }

    /// The config a step runs with: τ as [`Optimizer::tau`].
    pub(crate) fn step_config(&self) -> Config {
        let mut config = self.config;
        config.tau = self.tau();
        config
    }

    /// Changes η (for schedules); refused like a bad config, leaving η unchanged.
    pub fn set_lr(&mut self, lr: f64) -> Result<(), Error> {
        let mut config = self.config;
        config.lr = lr;
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// Elements of state a tensor of `numel` parameters needs (one per parameter and slot).
    pub fn state_len(&self, numel: usize) -> usize {
        self.state_len_of::<f32>(numel)
    }

    /// Items of state of type `S` a tensor of `numel` parameters needs: [`Optimizer::state_len`]
    /// elements, or for q8 ⌈numel / 256⌉ [`crate::Q8Block`]s per slot.
    ///
    /// ```
    /// use homeadam_core::{Config, Optimizer, Q8Block, Rule};
    ///
    /// let opt = Optimizer::new(Config::new(Rule::AdamW))?;
    /// assert_eq!(opt.state_len_of::<Q8Block>(600), 2 * 3); // m and v, 3 blocks each
    /// # Ok::<(), homeadam_core::Error>(())
    /// ```
    pub fn state_len_of<S: StateStorage>(&self, numel: usize) -> usize {
        self.config.state_slots() * S::slot_len(numel)
    }
}

/// The optimizer's state as bytes (the format of `checkpoint.rs`, DESIGN §10): what a config
/// writes, and what it accepts back.
impl Optimizer {
    /// Bytes [`Optimizer::save_state`] writes for tensors of these sizes and state type `dtype`.
    pub fn state_bytes(&self, numels: impl IntoIterator<Item = usize>, dtype: Dtype) -> usize {
        checkpoint::state_bytes(
            self.config.state_slots(),
            self.config.tau_calibration.is_some(),
            numels,
            dtype,
        )
    }

    /// Writes the step counter, the rule's phase, a calibrated τ and every tensor's state to
    /// `sink`.
    pub fn save_state<S: StateStorage, W: ByteSink>(
        &self,
        tensors: &[TensorState<'_, S>],
        sink: &mut W,
    ) -> Result<(), Error> {
        let header = Header {
            rule: self.config.rule.code(),
            slots: self.config.state_slots(),
            step: self.step,
            phase_lr: self.phase_lr,
            calibration: self
                .config
                .tau_calibration
                .map(|_| (self.calibrated_tau, &self.window)),
        };
        checkpoint::write(&header, tensors, sink)
    }

    /// Reads state saved by [`Optimizer::save_state`] into `tensors`. On any error (corrupt
    /// bytes, another rule, other sizes) nothing is changed.
    pub fn load_state<S: StateStorage>(
        &mut self,
        bytes: &[u8],
        tensors: &mut [TensorStateMut<'_, S>],
    ) -> Result<(), Error> {
        use CheckpointError::*;
        let saved = checkpoint::parse(bytes)?;
        let slots = self.config.state_slots();
        let rule = Rule::from_code(saved.rule).ok_or(Corrupt)?;
        if rule != self.config.rule || saved.slots != slots {
            return Err(RuleMismatch.into());
        }
        if saved.dtype != S::DTYPE {
            return Err(DtypeMismatch.into());
        }
        if saved.calibrated() != self.config.tau_calibration.is_some() {
            return Err(CalibrationMismatch.into());
        }
        if saved.count as usize != tensors.len() {
            return Err(TensorCountMismatch {
                stored: saved.count,
                given: tensors.len() as u32,
            }
            .into());
        }
        for (k, (numel, t)) in saved.numels().zip(tensors.iter()).enumerate() {
            if numel != t.numel || Some(t.state.len()) != slots.checked_mul(S::slot_len(numel)) {
                return Err(TensorSizeMismatch { tensor: k as u32 }.into());
            }
        }
        let values = saved.values(rule.spec().phase_switch().is_some())?;
        saved.read_into(tensors);
        self.step = values.step;
        self.phase_lr = values.phase_lr;
        self.calibrated_tau = values.tau;
        self.window = values.window;
        self.decisions.bound = None;
        Ok(())
    }
}
