//! What a rule declares about itself, once, in its own file: its state slots, the slot ρ is
//! read from, how it applies λ, the hyper-parameters it reads, its defaults and its element
//! kernels. The config's
//! validation, its slot counts and names, its q8 maps and its listing of knobs are derived
//! from it ([`crate::Config`]); the rule table ([`crate::rules`]) pairs each [`crate::Rule`]
//! with its spec, name and checkpoint code.

use crate::kernel::Options;
use crate::knobs::knob_table;
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// How a rule applies the weight decay λ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    /// λ = 0 by definition (Adam-srf, HomeAdam): the knob is refused.
    None,
    /// Coupled L2: g ← g + λθ.
    Coupled,
    /// Decoupled: θ ← θ(1 − ηλ).
    Decoupled,
    /// Either, by the `weight_decouple` knob (with `fixed_decay`: θ ← θ(1 − λ)).
    Chosen,
}

/// A step's scalars with λ as the kernels of a rule of [`Decay::Chosen`] apply it: coupled,
/// g ← g + λθ (with `weight_decouple` off and λ ≠ 0), then θ ← θ · [`StepScalars::decay`]
/// (1 − ηλ, or 1 − λ with `fixed_decay`, when decoupled; 1 otherwise).
#[derive(Clone, Copy)]
pub(crate) struct ChosenDecay {
    /// The step's scalars.
    pub(crate) s: StepScalars,
    coupled: bool,
}

impl ChosenDecay {
    /// The decay of a kernel built from `s` and `options`.
    pub(crate) fn new(s: &StepScalars, options: Options) -> Self {
        ChosenDecay {
            s: *s,
            coupled: !options.weight_decouple && s.weight_decay != 0.0,
        }
    }

    /// (θ, g) after the decay.
    #[inline(always)]
    pub(crate) fn apply(&self, p: f32, g: f32) -> (f32, f32) {
        let s = &self.s;
        let g = if self.coupled { g + s.weight_decay * p } else { g };
        (p * s.decay, g)
    }
}

/// A state slot that only some configs of a rule keep: always the rule's last slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastSlot {
    /// Every config keeps every slot.
    Always,
    /// Kept with momentum μ ≠ 0 (SGD's buffer).
    WithMomentum,
    /// Kept with `amsgrad` (AdaBelief's running max).
    WithAmsgrad,
}

/// The element kernels a rule runs ([`ElementKernel`]), chosen by its config and, for a rule
/// with a second phase, by its phase.
#[derive(Clone, Copy, Debug)]
pub enum Kernels {
    /// One kernel for every config.
    One(ElementKernel),
    /// The first without the optional last slot ([`LastSlot`]), the second with it.
    ByLastSlot(ElementKernel, ElementKernel),
    /// The first in the first phase, the second once the model switched ([`PhaseSwitch`]).
    ByPhase(ElementKernel, ElementKernel, PhaseSwitch),
}

impl Kernels {
    /// The kernels as a mask, bit k for the kernel of id k.
    pub const fn mask(self) -> u32 {
        match self {
            Kernels::One(k) => k.bit(),
            Kernels::ByLastSlot(a, b) | Kernels::ByPhase(a, b, _) => a.bit() | b.bit(),
        }
    }
}

/// How the whole model switches once to a rule's second phase (SWATS's SGD): after each
/// first-phase step, every tensor in the model's order runs [`PhaseSwitch::test`] on the dot
/// products of its step p = θ_t − θ_{t−1} with itself and with the gradient g, summed exactly;
/// the last tensor that asks sets the second phase's rate η', and the next step runs the
/// second kernel at η' in place of η. The optimizer keeps η' (and saves it); each tensor keeps
/// the test's running value ([`crate::TensorAux::swats_lambda`]).
#[derive(Clone, Copy, Debug)]
pub struct PhaseSwitch {
    /// One tensor's test: updates its running value from pᵀp and pᵀg and returns η'·lr_scale
    /// when the tensor asks for the switch.
    pub test: fn(&mut f32, Dots, &SwitchInputs) -> Option<f64>,
    /// Why a step sharded across processes refuses the rule.
    pub unsharded: &'static str,
}

/// A tensor's dot products for [`PhaseSwitch::test`], each rounded once to `f64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dots {
    /// pᵀp.
    pub step_sq: f64,
    /// pᵀg.
    pub step_grad: f64,
}

/// The model-wide values [`PhaseSwitch::test`] reads, in `f64` (β2 and ε hold for the whole
/// model: a rule with a switch lists them in [`Spec::model_wide`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchInputs {
    /// The step t ≥ 1.
    pub t: u64,
    /// β2.
    pub beta2: f64,
    /// bc2 = 1 − β2^t.
    pub bc2: f64,
    /// ε.
    pub eps: f64,
}

/// The hyper-parameters besides η, the rounding and its seed (which every rule reads) that a
/// rule may read, as bits of [`Spec::reads`]. λ and the knobs that choose how it applies
/// follow from [`Spec::decay`] instead.
pub mod reads {
    /// β1.
    pub const BETA1: u32 = 1;
    /// β2.
    pub const BETA2: u32 = 1 << 1;
    /// ε.
    pub const EPS: u32 = 1 << 2;
    /// τ, its calibration and η_h / η (HomeAdam(W)).
    pub const HOME: u32 = 1 << 3;
    /// Over which elements ρ is taken (global and per-layer HomeAdam(W)).
    pub const RHO_OVER: u32 = 1 << 4;
    /// μ and the dampening (SGD).
    pub const MOMENTUM: u32 = 1 << 5;
    /// Nesterov momentum.
    pub const NESTEROV: u32 = 1 << 6;
    /// RAdam's rectification and AMSGrad (AdaBelief).
    pub const ADABELIEF: u32 = 1 << 7;
    /// κ and the switch step (MIAdam).
    pub const MIADAM: u32 = 1 << 8;
    /// β1, β2 and ε: what the Adam family reads.
    pub const ADAM: u32 = BETA1 | BETA2 | EPS;
}

/// A rule's defaults, those of its peer package ([`crate::Config::new`]); β1 = 0.9, no
/// momentum, and the other knobs off for every rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Defaults {
    /// η.
    pub lr: f64,
    /// β2.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
    /// λ.
    pub weight_decay: f64,
    /// Decoupled decay, for rules whose [`Decay`] is [`Decay::Chosen`].
    pub weight_decouple: bool,
}

/// PyTorch's Adam defaults: η = 1e-3, β2 = 0.999, ε = 1e-8, λ = 0.
pub const TORCH: Defaults = Defaults {
    lr: 1e-3,
    beta2: 0.999,
    eps: 1e-8,
    weight_decay: 0.0,
    weight_decouple: false,
};

/// What a rule declares about itself.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The names of the state slots, in slot order (as in checkpoints and `homeadam replay`).
    pub slots: &'static [&'static str],
    /// Whether the last slot is kept by every config.
    pub last_slot: LastSlot,
    /// Bit k: slot k holds a second moment (f16 storage refused, unsigned q8 codes).
    pub second_moments: u8,
    /// The slot holding v, whose minimum over the elements divided by bc2 is ρ = min v̂.
    pub rho_slot: Option<usize>,
    /// How λ applies.
    pub decay: Decay,
    /// The knobs it reads ([`reads`]).
    pub reads: u32,
    /// Its defaults.
    pub defaults: Defaults,
    /// Its element kernels.
    pub kernels: Kernels,
    /// Its per-step scalars beyond the shared ones and the knobs copied as they are, from the
    /// step's values and the knobs of [`RuleKnobs`] ([`no_scalars`]: none).
    pub scalars: fn(&StepInputs, &mut StepScalars),
    /// The group overrides it refuses, as bits of [`reads`] (β2, ε), each with why one value
    /// must hold for the whole model.
    pub model_wide: &'static [(u32, &'static str)],
}

impl Spec {
    /// The rule's switch to a second phase, if it has one.
    pub const fn phase_switch(&self) -> Option<PhaseSwitch> {
        match self.kernels {
            Kernels::ByPhase(_, _, switch) => Some(switch),
            _ => None,
        }
    }
}

/// What a rule's per-step hook ([`Spec::scalars`]) reads: the step's values, in `f64`, and the
/// config's knobs the hooks read ([`RuleKnobs`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepInputs {
    /// The step t ≥ 1.
    pub t: u64,
    /// η of the step.
    pub lr: f64,
    /// β1.
    pub beta1: f64,
    /// β2.
    pub beta2: f64,
    /// β2^t.
    pub beta2_t: f64,
    /// bc1 = 1 − β1^t.
    pub bc1: f64,
    /// √bc2.
    pub sqrt_bc2: f64,
    /// The config's knobs the hooks read.
    pub knobs: RuleKnobs,
}

/// Generates [`RuleKnobs`] from the knob table's lines marked `rule` ([`crate::knobs`]).
macro_rules! rule_knobs {
    (@ [$($fields:tt)*]) => {
        /// The config's knobs a rule derives its per-step scalars from ([`Spec::scalars`]): the
        /// knob table's lines marked `rule`, each under its field's name and of its type.
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct RuleKnobs {
            $($fields)*
        }
    };
    (@ [$($fields:tt)*] $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, valid $valid:tt,
        $(knob $knob:tt,)* json $json:tt, rule; $($rest:tt)*) => {
        rule_knobs!(@ [$($fields)* $(#[$doc])* pub $field: $ty,] $($rest)*);
    };
    (@ [$($fields:tt)*] $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, valid $valid:tt,
        $(knob $knob:tt,)* json $json:tt, $kept:ident; $($rest:tt)*) => {
        rule_knobs!(@ [$($fields)*] $($rest)*);
    };
    (defaults $d:ident; $($lines:tt)*) => {
        rule_knobs!(@ [] $($lines)*);
    };
}

knob_table!(rule_knobs);

/// The hook of a rule whose kernels read the shared scalars only.
pub fn no_scalars(_: &StepInputs, _: &mut StepScalars) {}

/// Why rules that compare v̂ = v / (1 − β2^t) across the model refuse a group's β2.
pub const ONE_BETA2: &str = "ρ, τ calibration and SWATS's switch compare v̂ = v / (1 − β2^t) \
                             over the whole model: one β2 for every group";
