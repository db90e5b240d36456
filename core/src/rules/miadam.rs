//! MIAdam, as the official `MIAdam1` (LongJin-lab/MIAdam).
//!
//! ```text
//! g ← g + λθ                                  (coupled L2)
//! m_t = β1 m + (1 − β1) g,   v_t = β2 v + (1 − β2) g²,   d = √v_t / √bc2 + ε
//! t ≤ switch_step:  b ← κ b + m_t,   θ_t = θ − (η² / bc1) · b / d     (η squared, as the official code)
//! afterwards:       θ_t = θ − (η / bc1) · m_t / d
//! ```
//! State: `m`, `v`, `b` (the official code keeps its buffers in a growing list; here they are
//! per-tensor state).

use crate::kernel::{Elem, Kernel, Options};
use crate::math::sqrt;
use crate::rules::spec::{reads, Decay, Kernels, LastSlot, Spec, TORCH};
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// `miadam`.
pub const SPEC: Spec = Spec {
    slots: &["m", "v", "b"],
    last_slot: LastSlot::Always,
    second_moments: 0b10,
    rho_slot: Some(1),
    decay: Decay::Coupled,
    reads: reads::ADAM | reads::MIADAM,
    defaults: TORCH,
    kernels: Kernels::One(ElementKernel::MiAdam),
};

/// The MIAdam kernel.
#[derive(Clone, Copy)]
pub(crate) struct MiAdam {
    s: StepScalars,
}

impl Kernel for MiAdam {
    const SLOTS: usize = SPEC.slots.len();
    const RHO_SLOT: Option<usize> = SPEC.rho_slot;
    const DOTS: bool = false;

    fn new(s: &StepScalars, _: Options) -> Self {
        MiAdam { s: *s }
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, st: &mut [f32; 3]) -> Elem {
        let s = &self.s;
        let g = if s.weight_decay != 0.0 {
            g + s.weight_decay * p
        } else {
            g
        };
        let m = s.beta1 * st[0] + s.one_minus_beta1 * g;
        let v = s.beta2 * st[1] + s.one_minus_beta2 * (g * g);
        st[0] = m;
        st[1] = v;
        let denom = sqrt(v) / s.sqrt_bc2 + s.eps;
        let p = if s.mi_phase != 0 {
            let b = s.kappa * st[2] + m;
            st[2] = b;
            p - s.lr2_over_bc1 * (b / denom)
        } else {
            p - s.lr_over_bc1 * (m / denom)
        };
        Elem::param(p)
    }
}
