//! Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"), as
//! `lion-pytorch` 0.2.5.
//!
//! ```text
//! θ ← θ (1 − ηλ)                        (decoupled)
//! c = β1 m_{t−1} + (1 − β1) g
//! θ_t = θ − η sign(c)                   (sign(0) = 0)
//! m_t = β2 m_{t−1} + (1 − β2) g
//! ```
//! One state slot, no division and no square root: the cheapest rule per element. Every
//! element moves by η, so η is 3–10× smaller than AdamW's (the peer's default is 1e-4) and λ
//! correspondingly larger. State: `m`.

use crate::kernel::{Elem, Kernel, Options};
use crate::rules::spec::{no_scalars, reads, Decay, Defaults, Kernels, LastSlot, Spec, TORCH};
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// `lion`, with the peer's defaults: η = 1e-4, β = (0.9, 0.99), λ = 0.
pub const SPEC: Spec = Spec {
    slots: &["m"],
    last_slot: LastSlot::Always,
    second_moments: 0,
    rho_slot: None,
    decay: Decay::Decoupled,
    reads: reads::BETA1 | reads::BETA2,
    defaults: Defaults {
        lr: 1e-4,
        beta2: 0.99,
        ..TORCH
    },
    kernels: Kernels::One(ElementKernel::Lion),
    scalars: no_scalars,
    model_wide: &[],
};

/// The Lion kernel.
#[derive(Clone, Copy)]
pub(crate) struct Lion {
    decay: f32,
    lr: f32,
    beta1: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
}

/// sign(c) as `torch.sign`: ±1, and c itself where c is ±0 or NaN.
#[inline(always)]
fn sign(c: f32) -> f32 {
    if c > 0.0 {
        1.0
    } else if c < 0.0 {
        -1.0
    } else {
        c
    }
}

impl Kernel for Lion {
    const SLOTS: usize = SPEC.slots.len();
    const RHO_SLOT: Option<usize> = SPEC.rho_slot;
    const DOTS: bool = false;

    fn new(s: &StepScalars, _: Options) -> Self {
        Lion {
            decay: s.decay,
            lr: s.lr,
            beta1: s.beta1,
            one_minus_beta1: s.one_minus_beta1,
            beta2: s.beta2,
            one_minus_beta2: s.one_minus_beta2,
        }
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, s: &mut [f32; 3]) -> Elem {
        let c = self.beta1 * s[0] + self.one_minus_beta1 * g;
        s[0] = self.beta2 * s[0] + self.one_minus_beta2 * g;
        Elem::param(p * self.decay - self.lr * sign(c))
    }
}
