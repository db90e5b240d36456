//! Adam and AdamW, as PyTorch's `torch.optim.Adam` / `torch.optim.AdamW` (non-fused).
//!
//! ```text
//! Adam:   g ← g + λθ                       (coupled L2)
//! AdamW:  θ ← θ (1 − ηλ)                   (decoupled, before the step)
//! m_t = β1 m_{t−1} + (1 − β1) g
//! v_t = β2 v_{t−1} + (1 − β2) g²
//! θ_t = θ − (η / bc1) · m_t / (√v_t / √bc2 + ε)      bc_i = 1 − β_i^t
//! ```
//! State: `m`, `v`.

use crate::kernel::{Elem, Kernel, Options};
use crate::math::sqrt;
use crate::rules::spec::{no_scalars, reads, Decay, Defaults, Kernels, LastSlot, Spec, TORCH};
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// `adam`.
pub const ADAM: Spec = Spec {
    slots: &["m", "v"],
    last_slot: LastSlot::Always,
    second_moments: 0b10,
    rho_slot: Some(1),
    decay: Decay::Coupled,
    reads: reads::ADAM,
    defaults: TORCH,
    kernels: Kernels::One(ElementKernel::Adam),
    scalars: no_scalars,
    model_wide: &[],
};

/// `adamw`: λ = 1e-2 by default, as PyTorch's `AdamW`.
pub const ADAMW: Spec = Spec {
    decay: Decay::Decoupled,
    defaults: Defaults {
        weight_decay: 1e-2,
        ..TORCH
    },
    kernels: Kernels::One(ElementKernel::AdamW),
    scalars: no_scalars,
    model_wide: &[],
    ..ADAM
};

/// `DECOUPLED`: AdamW.
#[derive(Clone, Copy)]
pub(crate) struct Adam<const DECOUPLED: bool> {
    s: StepScalars,
}

impl<const DECOUPLED: bool> Kernel for Adam<DECOUPLED> {
    const SLOTS: usize = ADAM.slots.len();
    const RHO_SLOT: Option<usize> = ADAM.rho_slot;
    const DOTS: bool = false;

    fn new(s: &StepScalars, _: Options) -> Self {
        Adam { s: *s }
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, st: &mut [f32; 3]) -> Elem {
        let s = &self.s;
        let (p, g) = if DECOUPLED {
            (p * s.decay, g)
        } else if s.weight_decay != 0.0 {
            (p, g + s.weight_decay * p)
        } else {
            (p, g)
        };
        let m = s.beta1 * st[0] + s.one_minus_beta1 * g;
        let v = s.beta2 * st[1] + s.one_minus_beta2 * (g * g);
        st[0] = m;
        st[1] = v;
        let denom = sqrt(v) / s.sqrt_bc2 + s.eps;
        Elem::param(p - s.lr_over_bc1 * (m / denom))
    }
}
