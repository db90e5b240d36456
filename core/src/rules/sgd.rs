//! SGD and SGD with momentum, as PyTorch's `torch.optim.SGD`.
//!
//! ```text
//! d   = g + λθ                                   (coupled L2)
//! b₁  = d,   b_t = μ b_{t−1} + (1 − dampening) d  (only with μ > 0)
//! d   = d + μ b_t  (Nesterov)   or   d = b_t
//! θ_t = θ_{t−1} − η d
//! ```
//! State: `b` (with momentum).

use crate::kernel::{Elem, Kernel, Options};
use crate::rules::spec::{no_scalars, reads, Decay, Kernels, LastSlot, Spec, TORCH};
use crate::rules::ElementKernel;
use crate::scalars::StepScalars;

/// `sgd`, and `sgdm` with μ > 0.
pub const SPEC: Spec = Spec {
    slots: &["b"],
    last_slot: LastSlot::WithMomentum,
    second_moments: 0,
    rho_slot: None,
    decay: Decay::Coupled,
    reads: reads::MOMENTUM | reads::NESTEROV,
    defaults: TORCH,
    kernels: Kernels::ByLastSlot(ElementKernel::Sgd, ElementKernel::Sgdm),
    scalars: no_scalars,
    model_wide: &[],
};

/// `MOMENTUM`: whether the rule keeps the buffer b.
#[derive(Clone, Copy)]
pub(crate) struct Sgd<const MOMENTUM: bool> {
    lr: f32,
    weight_decay: f32,
    momentum: f32,
    one_minus_dampening: f32,
    first_step: bool,
    nesterov: bool,
}

impl<const MOMENTUM: bool> Kernel for Sgd<MOMENTUM> {
    const SLOTS: usize = if MOMENTUM { SPEC.slots.len() } else { 0 };
    const RHO_SLOT: Option<usize> = None;
    const DOTS: bool = false;

    fn new(s: &StepScalars, options: Options) -> Self {
        Sgd {
            lr: s.lr,
            weight_decay: s.weight_decay,
            momentum: s.momentum,
            one_minus_dampening: s.one_minus_dampening,
            first_step: s.first_step != 0,
            nesterov: options.nesterov,
        }
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, s: &mut [f32; 3]) -> Elem {
        let mut d = if self.weight_decay != 0.0 {
            g + self.weight_decay * p
        } else {
            g
        };
        if MOMENTUM {
            let b = if self.first_step {
                d
            } else {
                self.momentum * s[0] + self.one_minus_dampening * d
            };
            s[0] = b;
            d = if self.nesterov { d + self.momentum * b } else { b };
        }
        Elem::param(p - self.lr * d)
    }
}
