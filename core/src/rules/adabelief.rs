//! AdaBelief, as the official `adabelief-pytorch` 0.2.1 `AdaBelief.step` (its defaults:
//! ε = 1e-16, decoupled decay, rectification on, degenerated to SGD, no AMSGrad).
//!
//! ```text
//! θ ← θ (1 − ηλ)  (decoupled; 1 − λ with fixed_decay)   or   g ← g + λθ  (coupled)
//! m_t = β1 m + (1 − β1) g
//! s_t = β2 s + (1 − β2)(g − m_t)² + ε          (ε stays in s: the peer adds it in place)
//! s_max = max(s_max, s_t)                      (AMSGrad; the denominator then uses s_max)
//! not rectified:  θ_t = θ − (η / bc1) · m_t / (√s / √bc2 + ε)
//! rectified (RAdam, ρ_∞ = 2/(1−β2) − 1, ρ_t = ρ_∞ − 2tβ2^t/(1−β2^t)):
//!   ρ_t ≥ 5:  θ_t = θ − η r_t / bc1 · m_t / (√s_t + ε),
//!             r_t = √((1−β2^t)(ρ_t−4)(ρ_t−2)ρ_∞ / ((ρ_∞−4)(ρ_∞−2)ρ_t))
//!   else:     θ_t = θ − (η / bc1) · m_t
//! ```
//! As in the peer, the rectified denominator uses s_t even with AMSGrad.
//! State: `m`, `s` (and `s_max`).

use crate::kernel::{Elem, Kernel, Options};
use crate::math::{max, sqrt};
use crate::rules::spec::{reads, ChosenDecay, Decay, Defaults, Kernels, LastSlot, Spec, StepInputs, TORCH};
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// `adabelief`, with the peer's defaults: ε = 1e-16, decoupled decay, rectification on (the
/// last two from [`crate::Config::new`]).
pub const SPEC: Spec = Spec {
    slots: &["m", "s", "s_max"],
    last_slot: LastSlot::WithAmsgrad,
    second_moments: 0b110,
    rho_slot: None,
    decay: Decay::Chosen,
    reads: reads::ADAM | reads::ADABELIEF,
    defaults: Defaults {
        eps: 1e-16,
        weight_decouple: true,
        ..TORCH
    },
    kernels: Kernels::ByLastSlot(ElementKernel::AdaBelief, ElementKernel::AdaBeliefAmsgrad),
    scalars: step_scalars,
    model_wide: &[],
};

/// With `rectify`, the rectification's mode and step size ([`StepScalars::rect_mode`],
/// [`StepScalars::rect_lr`]); without, both stay 0.
fn step_scalars(i: &StepInputs, s: &mut StepScalars) {
    if i.knobs.rectify {
        let (mode, lr) = rectification(i.beta2, i.beta2_t, i.t, i.bc1, i.lr);
        s.rect_mode = mode;
        s.rect_lr = lr as f32;
    }
}

/// RAdam's rectification of step t (β2^t = `beta2_t`) as adabelief-pytorch computes it, in
/// `f64`: the mode of [`StepScalars::rect_mode`] (1: rectified, 2: degenerated to SGD) and
/// its step size, η · r_t / bc1 or η / bc1.
fn rectification(beta2: f64, beta2_t: f64, t: u64, bc1: f64, lr: f64) -> (u32, f64) {
    // The length of the approximated simple moving average.
    let n_sma_max = 2.0 / (1.0 - beta2) - 1.0;
    let n_sma = n_sma_max - 2.0 * t as f64 * beta2_t / (1.0 - beta2_t);
    if n_sma >= 5.0 {
        let r = (1.0 - beta2_t) * (n_sma - 4.0) / (n_sma_max - 4.0) * (n_sma - 2.0) / n_sma * n_sma_max
            / (n_sma_max - 2.0);
        (1, libm::sqrt(r) / bc1 * lr)
    } else {
        (2, 1.0 / bc1 * lr)
    }
}

/// `AMSGRAD`: keep `s_max`.
#[derive(Clone, Copy)]
pub(crate) struct AdaBelief<const AMSGRAD: bool>(ChosenDecay);

impl<const AMSGRAD: bool> Kernel for AdaBelief<AMSGRAD> {
    const SLOTS: usize = SPEC.slots.len() - !AMSGRAD as usize;
    const RHO_SLOT: Option<usize> = SPEC.rho_slot;
    const DOTS: bool = false;

    fn new(s: &StepScalars, options: Options) -> Self {
        AdaBelief(ChosenDecay::new(s, options))
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, st: &mut [f32; 3]) -> Elem {
        let (p, g) = self.0.apply(p, g);
        let s = &self.0.s;
        let m = s.beta1 * st[0] + s.one_minus_beta1 * g;
        let residual = g - m;
        let var = s.beta2 * st[1] + s.one_minus_beta2 * (residual * residual) + s.eps;
        st[0] = m;
        st[1] = var;
        let denom_var = if AMSGRAD {
            st[2] = max(st[2], var);
            st[2]
        } else {
            var
        };
        let p = match s.rect_mode {
            0 => p - s.lr_over_bc1 * (m / (sqrt(denom_var) / s.sqrt_bc2 + s.eps)),
            1 => p - s.rect_lr * (m / (sqrt(var) + s.eps)),
            _ => p - s.rect_lr * m,
        };
        Elem::param(p)
    }
}
