//! SWATS (Keskar & Socher, 2017), as `pytorch-optimizer` 4.1.0 `SWATS.step` (non-foreach).
//!
//! ```text
//! g ← g + λθ (coupled, default)   or   θ ← θ (1 − η λ)  (weight_decouple; 1 − λ with fixed_decay)
//! Adam phase:
//!   m_t = β1 m + (1 − β1) g,   v_t = β2 v + (1 − β2) g²
//!   p_t = −(η √bc2 / bc1) · m_t / (√(v_t + 1e−15) + ε),    θ_t = θ + p_t
//!   per tensor, if pᵀg ≠ 0:  γ = pᵀp / (−pᵀg),   Λ ← Λ + (1 − β2)(γ − Λ)
//!   if t > 1, Λ/bc2 > 0 and |Λ/bc2 − γ| ≤ 1e−8 + ε|γ| for some tensor, the whole model
//!   switches at the next step to SGD with η' = Λ/bc2 (the last tensor, in order, that met it)
//! SGD phase:
//!   b ← β1 b + g  (b starts at 0),   u = (1 − β1) b  (+ β1 b with Nesterov),   θ_t = θ − η' u
//! ```
//! With parameter groups ([`crate::Group`]) the model still switches once: η' is Λ/bc2 of the
//! asking tensor divided by its `lr_scale`, and each tensor's SGD phase steps at η'·lr_scale.
//! The dot products pᵀp and pᵀg of each tensor are summed exactly ([`crate::ExactSum`]: the
//! products of `f32` in a fixed-point integer) and rounded once to `f64`, so that every order
//! of summation, and every backend, gives the same bits (pytorch-optimizer sums in `f32`; the
//! difference is within the golden tolerance). γ, Λ and the test are `f64`, Λ is stored as
//! `f32`. State: `m`, `v`, `b`, and Λ per tensor in [`crate::TensorAux`].

use crate::kernel::{Elem, Kernel, Options};
use crate::math::sqrt;
use crate::rules::spec::{
    reads, ChosenDecay, Decay, Defaults, Dots, Kernels, LastSlot, PhaseSwitch, Spec, StepInputs,
    SwitchInputs, ONE_BETA2, TORCH,
};
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// `swats`, with the peer's ε = 1e-6 and coupled decay. ρ is reported in the Adam phase only.
pub const SPEC: Spec = Spec {
    slots: &["m", "v", "b"],
    last_slot: LastSlot::Always,
    second_moments: 0b10,
    rho_slot: Some(1),
    decay: Decay::Chosen,
    reads: reads::ADAM | reads::NESTEROV,
    defaults: Defaults { eps: 1e-6, ..TORCH },
    kernels: Kernels::ByPhase(
        ElementKernel::SwatsAdam,
        ElementKernel::SwatsSgd,
        PhaseSwitch {
            test: switch_test,
            unsharded: "SWATS's switch test reads every tensor's dot products in the model's order",
        },
    ),
    scalars: step_scalars,
    model_wide: SWATS_MODEL_WIDE,
};

/// The whole model switches on one test that reads v̂ and ε.
const SWATS_MODEL_WIDE: &[(u32, &str)] = &[
    (reads::BETA2, ONE_BETA2),
    (
        reads::EPS,
        "SWATS switches the whole model on one test that reads ε: one ε for every group",
    ),
];

/// The SGD phase's momentum β1 without dampening ([`StepScalars::momentum`]) and the Adam
/// phase's step size η √bc2 / bc1 ([`StepScalars::swats_step`]). The SGD phase's rate η' is
/// the step's η ([`StepScalars::lr`]).
fn step_scalars(i: &StepInputs, s: &mut StepScalars) {
    s.momentum = i.beta1 as f32;
    s.one_minus_dampening = 1.0;
    s.swats_step = (i.lr * i.sqrt_bc2 / i.bc1) as f32;
}

/// The Adam phase, which also yields the step p and gradient g for the dot products.
#[derive(Clone, Copy)]
pub(crate) struct SwatsAdam(ChosenDecay);

/// The SGD phase.
#[derive(Clone, Copy)]
pub(crate) struct SwatsSgd {
    decayed: ChosenDecay,
    nesterov: bool,
}

/// pytorch-optimizer's `exp_avg_sq_eps`, added to v under the square root.
const V_EPS: f32 = 1e-15;

impl Kernel for SwatsAdam {
    const SLOTS: usize = SPEC.slots.len();
    /// m and v: the SGD phase's b waits untouched.
    const TOUCHES: u8 = 0b011;
    const RHO_SLOT: Option<usize> = SPEC.rho_slot;
    const DOTS: bool = true;

    fn new(s: &StepScalars, options: Options) -> Self {
        SwatsAdam(ChosenDecay::new(s, options))
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, st: &mut [f32; 3]) -> Elem {
        let (p, g) = self.0.apply(p, g);
        let s = &self.0.s;
        let m = s.beta1 * st[0] + s.one_minus_beta1 * g;
        let v = s.beta2 * st[1] + s.one_minus_beta2 * (g * g);
        st[0] = m;
        st[1] = v;
        let step = (m / (sqrt(v + V_EPS) + s.eps)) * -s.swats_step;
        Elem {
            p: p + step,
            home: false,
            step,
            grad: g,
        }
    }
}

impl Kernel for SwatsSgd {
    const SLOTS: usize = SPEC.slots.len();
    /// b: the Adam phase's moments are no longer read.
    const TOUCHES: u8 = 0b100;
    const RHO_SLOT: Option<usize> = None;
    const DOTS: bool = false;

    fn new(s: &StepScalars, options: Options) -> Self {
        SwatsSgd {
            decayed: ChosenDecay::new(s, options),
            nesterov: options.nesterov,
        }
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, st: &mut [f32; 3]) -> Elem {
        let (p, g) = self.decayed.apply(p, g);
        let s = &self.decayed.s;
        let b = s.beta1 * st[2] + g;
        st[2] = b;
        let update = b * s.one_minus_beta1;
        let update = if self.nesterov {
            update + s.beta1 * b
        } else {
            update
        };
        Elem::param(p - s.lr * update)
    }
}

/// The switch test of one tensor after an Adam-phase step ([`PhaseSwitch::test`]): updates Λ
/// and returns the SGD learning rate Λ/bc2 when the tensor asks for the switch.
fn switch_test(lambda: &mut f32, dots: Dots, at: &SwitchInputs) -> Option<f64> {
    let SwitchInputs { t, beta2, bc2, eps } = *at;
    if dots.step_grad == 0.0 {
        return None;
    }
    let gamma = dots.step_sq / -dots.step_grad;
    let updated = *lambda as f64 + (1.0 - beta2) * (gamma - *lambda as f64);
    *lambda = updated as f32;
    let corrected = *lambda as f64 / bc2;
    let close = (corrected - gamma).abs() <= 1e-8 + eps * gamma.abs();
    (t > 1 && corrected > 0.0 && close).then_some(corrected)
}
