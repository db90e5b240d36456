//! The views a step works on: one entry per tensor of the model.

/// Per-tensor scalars: optimizer state that is one number per tensor, and that tensor's
/// telemetry of the last step (after a skipped step: ρ = +∞, no home elements).
/// Zero-initialise with `TensorAux::default()`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TensorAux {
    /// SWATS: Λ, the running average of the projected SGD learning rate γ (state).
    pub swats_lambda: f32,
    /// Telemetry: min v̂_t over this tensor at the last step (+∞ for rules without v). Between
    /// [`crate::Step::check`] and the tensor's update of global / per-layer HomeAdam(W): the
    /// tensor's deciding ρ ([`crate::Config::rho_over`]), where the first pass ran over it (the
    /// global rule's check skips it once bounds decide, and leaves `rho` as it was).
    pub rho: f32,
    /// Telemetry: elements of this tensor that took the home (SGDM) branch at the last step.
    pub home_elements: u32,
}

/// A parameter group: what a tensor changes of the rule's hyper-parameters. Every tensor of a
/// step still shares the step counter, the finite check and (global HomeAdam) one decision.
///
/// The tensor steps with η · `lr_scale` in place of η (schedules set η, so they scale every
/// group), with λ (or the group's own `weight_decay`), or with λ = 0 when `decay` is false
/// (biases and normalisation parameters are usually not decayed), and with the group's own ε
/// and β where set ([`Config::for_group`](crate::Config::for_group)). A group with every
/// override `None` steps exactly as the config says.
///
/// β2 may differ between groups only where nothing compares v̂ across tensors: not for the
/// global and per-layer HomeAdam(W) rules, nor with a calibrated τ, nor for SWATS (whose one
/// switch test reads β2 and ε), which refuse such a group when a step reaches it.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Group {
    /// Multiplies η for this tensor (finite, ≥ 0).
    pub lr_scale: f64,
    /// Whether λ applies to this tensor.
    pub decay: bool,
    /// λ for this tensor in place of the config's (when `decay` is true).
    pub weight_decay: Option<f64>,
    /// ε for this tensor in place of the config's.
    pub eps: Option<f64>,
    /// β1 for this tensor in place of the config's.
    pub beta1: Option<f64>,
    /// β2 for this tensor in place of the config's.
    pub beta2: Option<f64>,
}

impl Group {
    /// η and λ as configured.
    pub const DEFAULT: Group = Group {
        lr_scale: 1.0,
        decay: true,
        weight_decay: None,
        eps: None,
        beta1: None,
        beta2: None,
    };
    /// η as configured, no weight decay.
    pub const NO_DECAY: Group = Group {
        decay: false,
        ..Group::DEFAULT
    };
}

impl Default for Group {
    fn default() -> Self {
        Group::DEFAULT
    }
}

/// One tensor of the model: parameters θ, gradients g and optimizer state, each in its own
/// storage type, and its parameter group.
///
/// `state` holds [`crate::Config::state_slots`] slots one after the other, each as long as
/// `param`: for Adam-like rules `[m₀ … m_{d−1}, v₀ … v_{d−1}]`. It must start zeroed.
pub struct Tensor<'a, P, G, S> {
    /// θ, updated in place.
    pub param: &'a mut [P],
    /// g as produced by backprop, still multiplied by the loss scale.
    pub grad: &'a [G],
    /// The optimizer state slots, updated in place.
    pub state: &'a mut [S],
    /// Per-tensor scalars (state and telemetry).
    pub aux: &'a mut TensorAux,
    /// The tensor's parameter group ([`Group::DEFAULT`] from [`Tensor::new`]).
    pub group: Group,
}

impl<'a, P, G, S> Tensor<'a, P, G, S> {
    /// Bundles the slices of one tensor, in the default group.
    pub fn new(param: &'a mut [P], grad: &'a [G], state: &'a mut [S], aux: &'a mut TensorAux) -> Self {
        Tensor {
            param,
            grad,
            state,
            aux,
            group: Group::DEFAULT,
        }
    }

    /// The same tensor in `group`.
    pub fn in_group(self, group: Group) -> Self {
        Tensor { group, ..self }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepReport {
    /// The step counter after the call, as [`crate::Optimizer::step_count`]: t for a step
    /// taken, unchanged (t − 1) for a skipped one.
    pub step: u64,
    /// A non-finite gradient was found and nothing changed.
    pub skipped: bool,
    /// ρ_t = min over every element of every tensor of v̂_t; `None` for rules that report no ρ
    /// ([`crate::Config::rho_slot`]; SWATS in its SGD phase) and for skipped steps.
    pub rho: Option<f32>,
    /// Global and per-layer HomeAdam(W): ρ_t over the elements with v_t > 0 (0 when there is
    /// none), whether or not it decided ([`crate::Config::rho_over`]); `None` otherwise.
    pub rho_active: Option<f32>,
    /// HomeAdam(W): the τ this step compared with (calibrated or not); `None` otherwise.
    pub tau: Option<f32>,
    /// Elements that took the home (SGDM) branch of HomeAdam(W).
    pub home_elements: u64,
    /// Under [`crate::FiniteCheck::Trust`]: a non-finite gradient was applied.
    pub nonfinite_applied: bool,
    /// SWATS switched to its SGD phase at the end of this step.
    pub swats_switched: bool,
}

impl StepReport {
    /// The report of a step that was taken: the counter is now `t`; no telemetry yet.
    pub const fn applied(t: u64) -> Self {
        StepReport {
            step: t,
            skipped: false,
            rho: None,
            rho_active: None,
            tau: None,
            home_elements: 0,
            nonfinite_applied: false,
            swats_switched: false,
        }
    }

    /// The report of a skipped step: nothing changed and the counter stays at `count`.
    pub const fn skipped(count: u64) -> Self {
        StepReport {
            skipped: true,
            ..StepReport::applied(count)
        }
    }
}
