//! The views a step works on: one entry per tensor of the model.

/// Per-tensor scalars: optimizer state that is one number per tensor, and that tensor's
/// telemetry of the last step (after a skipped step: ρ = +∞, no home elements).
/// Zero-initialise with `TensorAux::default()`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TensorAux {
    /// SWATS: Λ, the running average of the projected SGD learning rate γ (state).
    pub swats_lambda: f32,
    /// Telemetry: min v̂_t over this tensor at the last step (+∞ for rules without v).
    pub rho: f32,
    /// Telemetry: elements of this tensor that took the home (SGDM) branch at the last step.
    pub home_elements: u32,
}

/// One tensor of the model: parameters θ, gradients g and optimizer state, each in its own
/// storage type.
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
}

impl<'a, P, G, S> Tensor<'a, P, G, S> {
    /// Bundles the slices of one tensor.
    pub fn new(param: &'a mut [P], grad: &'a [G], state: &'a mut [S], aux: &'a mut TensorAux) -> Self {
        Tensor {
            param,
            grad,
            state,
            aux,
        }
    }
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepReport {
    /// The step counter t after this step (unchanged when skipped).
    pub step: u64,
    /// A non-finite gradient was found and nothing changed.
    pub skipped: bool,
    /// ρ_t = min over every element of every tensor of v̂_t; `None` for rules without a second
    /// moment (SGD, SGDM, AdaBelief, SWATS in its SGD phase) and for skipped steps.
    pub rho: Option<f32>,
    /// Elements that took the home (SGDM) branch of HomeAdam(W).
    pub home_elements: u64,
    /// Under [`crate::FiniteCheck::Trust`]: a non-finite gradient was applied.
    pub nonfinite_applied: bool,
    /// SWATS switched to its SGD phase at the end of this step.
    pub swats_switched: bool,
}

impl StepReport {
    pub(crate) const fn skipped(step: u64) -> Self {
        StepReport {
            step,
            skipped: true,
            rho: None,
            home_elements: 0,
            nonfinite_applied: false,
            swats_switched: false,
        }
    }
}
