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

use crate::kernel::{Apply, Elem, Kernel, Options};
use crate::math::sqrt;
use crate::rules::only::RuleSet;
use crate::rules::spec::{reads, Decay, Kernels, LastSlot, Spec, StepInputs, TORCH};
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
    scalars: step_scalars,
    model_wide: &[],
};

/// η² / bc1, the integrated update's step size ([`StepScalars::lr2_over_bc1`]), computed for
/// this rule only, in software on cores without a double-precision FPU; and whether step t is
/// in the integration phase, t ≤ switch_step ([`StepScalars::mi_phase`]).
fn step_scalars(i: &StepInputs, s: &mut StepScalars) {
    s.lr2_over_bc1 = (i.lr * i.lr / i.bc1) as f32;
    s.mi_phase = (i.t <= i.knobs.switch_step) as u32;
}

/// The MIAdam kernel; `MI`: the integration phase (t ≤ switch_step), a constant of the kernel,
/// so that the steps after it leave b alone.
#[derive(Clone, Copy)]
pub(crate) struct MiAdam<const MI: bool> {
    s: StepScalars,
}

impl<const MI: bool> Kernel for MiAdam<MI> {
    const SLOTS: usize = SPEC.slots.len();
    const TOUCHES: u8 = if MI { 0b111 } else { 0b011 };
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
        let p = if MI {
            let b = s.kappa * st[2] + m;
            st[2] = b;
            p - s.lr2_over_bc1 * (b / denom)
        } else {
            p - s.lr_over_bc1 * (m / denom)
        };
        Elem::param(p)
    }
}

/// The kernel table's runner of MIAdam's kernel: applies `a` to the kernel of the step's phase.
/// It takes the rule set `F` as every runner of the table does (both phases are linked with the
/// rule).
#[inline(always)]
#[allow(clippy::extra_unused_type_parameters)]
pub(crate) fn by_phase<F: RuleSet, A: Apply>(a: A, s: &StepScalars, o: Options, _: u8) -> Option<A::Out> {
    Some(if s.mi_phase != 0 {
        a.apply(MiAdam::<true>::new(s, o))
    } else {
        a.apply(MiAdam::<false>::new(s, o))
    })
}
