//! HomeAdam(W): Adam(W)-srf that returns home to SGDM where v̂ is small (paper, Alg. 2 and 3).
//!
//! ```text
//! m_t, v_t, m̂_t, v̂_t as Adam(W)-srf
//! if v̂_t ≥ τ:  θ_t = θ_{t−1} − η (m̂_t / (v̂_t + ε) + λ θ_{t−1})     (srf branch)
//! else:        θ_t = θ_{t−1} − η_h m̂_t − η λ θ_{t−1}             (home branch, SGDM)
//! ```
//! with η_h = η (the paper) unless `home_lr_scale` sets η_h = η · scale; λ acts at η in both
//! branches. The condition is tested on ρ_t = min v̂_t over the whole model (global, Alg. 2),
//! over one tensor (per-layer), or on each element (element-wise, Alg. 3); for the first two
//! `rho_over` may restrict the min to the elements with v_t > 0. HomeAdam is λ = 0. ρ_t = min
//! v̂_t is reported by every step. Because `v ↦ v / bc2` is monotonic, min v̂ = (min v) / bc2
//! exactly: the global and per-layer first pass folds min v and divides once.
//! State: `m`, `v`.

use crate::calibration::Histogram;
use crate::kernel::{Apply, Elem, Kernel, Options, SCALAR_FPU, SCALAR_LOOP};
use crate::reduce::SecondMomentMin;
use crate::rules::adam::{ADAM, ADAMW};
use crate::rules::only::RuleSet;
use crate::rules::spec::{reads, Decay, Defaults, Kernels, Spec, StepInputs};
use crate::rules::{ElementKernel, Rule, Switch};
use crate::scalars::StepScalars;
use crate::simd::{Convert, Portable};
use crate::state::StateStorage;
use crate::storage::Storage;

/// ε of the rules with the srf step, 1e-3 rather than Adam's 1e-8: the step η · m̂ / (v̂ + ε)
/// reaches η / (2√ε) per element, 5000 η with ε = 1e-8 (weights jump by 5 at η = 1e-3 and a
/// typical model diverges), 16 η with ε = 1e-3. Tune ε with η (the crate's front page,
/// "Choosing hyper-parameters"); the paper pairs ε = 1e-7 with η = 1e-6.
pub const SRF_EPS: f64 = 1e-3;

/// Adam(W)-srf (`decoupled`: the W variant, with AdamW's λ; otherwise λ = 0 by definition):
/// Adam's slots and knobs with ε = [`SRF_EPS`].
pub const fn srf_spec(decoupled: bool) -> Spec {
    let (adam, decay) = if decoupled {
        (ADAMW, Decay::Decoupled)
    } else {
        (ADAM, Decay::None)
    };
    Spec {
        decay,
        defaults: Defaults {
            eps: SRF_EPS,
            ..adam.defaults
        },
        kernels: Kernels::One(ElementKernel::HomeAdam),
        ..adam
    }
}

/// HomeAdam(W) with `switch`: Adam(W)-srf's spec, reading τ, its calibration and η_h, and for
/// the global and per-layer switches which elements ρ is taken over. τ defaults to 1e-12, the
/// paper's CIFAR-10 setting ([`crate::Config::new`]).
pub const fn spec(switch: Switch, decoupled: bool) -> Spec {
    let srf = srf_spec(decoupled);
    let rho_over = match switch {
        Switch::Global | Switch::Layer => reads::RHO_OVER,
        Switch::Element => 0,
    };
    Spec {
        reads: srf.reads | reads::HOME | rho_over,
        scalars: step_scalars,
        ..srf
    }
}

/// The home branch's step η_h / bc1 with η_h = η · `home_lr_scale`
/// ([`StepScalars::home_lr_over_bc1`]).
fn step_scalars(i: &StepInputs, s: &mut StepScalars) {
    s.home_lr_over_bc1 = (i.lr * i.knobs.home_lr_scale / i.bc1) as f32;
}

/// Whether an element's step η m̂/(v̂ + ε) or η_h m̂ is a select between the two products
/// rather than one product of the selected rate and direction: the same bits, written for the
/// compiler. Wherever a float multiply is one instruction: on scalar FPUs one select of the
/// products makes the Cortex-M4F's loop shorter, and in the vectorized loop a select of the
/// two rates may become a select of their addresses, vectorized as a gather of the kernel's
/// fields. On soft-float cores each product is a library call (a long one on the Cortex-M0).
const SELECT_PRODUCTS: bool = SCALAR_FPU || !SCALAR_LOOP;

/// Which branch an element takes: a const parameter of the kernel, so that the element loop has
/// no branch on it and vectorizes.
pub(crate) mod branch {
    /// The srf step everywhere: a global / layer decision ρ ≥ τ.
    pub const ALL_SRF: u8 = 0;
    /// The home step everywhere (a global / layer decision ρ < τ).
    pub const ALL_HOME: u8 = 1;
    /// Decide per element on v̂ ≥ τ (Alg. 3).
    pub const PER_ELEMENT: u8 = 2;
    /// The srf step everywhere, with no decision to bound at the next step: Adam(W)-srf.
    pub const SRF: u8 = 3;
}

/// The srf / home kernel; `BRANCH` is one of [`branch`].
#[derive(Clone, Copy)]
pub(crate) struct Home<const BRANCH: u8> {
    decay: f32,
    beta1: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    bc2: f32,
    eps: f32,
    lr_over_bc1: f32,
    home_lr_over_bc1: f32,
    tau: f32,
}

impl<const BRANCH: u8> Home<BRANCH> {
    /// v_t from v_{t−1} and g: shared by the update and the global / per-layer first pass, so
    /// the decision is taken on exactly the v the update stores.
    #[inline(always)]
    pub fn second_moment(self, v: f32, g: f32) -> f32 {
        self.beta2 * v + self.one_minus_beta2 * (g * g)
    }
}

impl<const BRANCH: u8> Kernel for Home<BRANCH> {
    const SLOTS: usize = ADAM.slots.len();
    const RHO_SLOT: Option<usize> = ADAM.rho_slot;
    const DOTS: bool = false;
    const DECIDES: bool = BRANCH == branch::ALL_SRF || BRANCH == branch::ALL_HOME;

    fn new(s: &StepScalars, _: Options) -> Self {
        Home {
            decay: s.decay,
            beta1: s.beta1,
            one_minus_beta1: s.one_minus_beta1,
            beta2: s.beta2,
            one_minus_beta2: s.one_minus_beta2,
            bc2: s.bc2,
            eps: s.eps,
            lr_over_bc1: s.lr_over_bc1,
            home_lr_over_bc1: s.home_lr_over_bc1,
            tau: s.tau,
        }
    }

    #[inline(always)]
    fn element(self, p: f32, g: f32, st: &mut [f32; 3]) -> Elem {
        let m = self.beta1 * st[0] + self.one_minus_beta1 * g;
        let v = self.second_moment(st[1], g);
        st[0] = m;
        st[1] = v;
        let v_hat = v / self.bc2;
        let home = match BRANCH {
            branch::ALL_SRF | branch::SRF => false,
            branch::ALL_HOME => true,
            _ => goes_home(v_hat, self.tau),
        };
        let srf = m / (v_hat + self.eps);
        let change = if SELECT_PRODUCTS {
            if home {
                self.home_lr_over_bc1 * m
            } else {
                self.lr_over_bc1 * srf
            }
        } else {
            let (rate, direction) = if home {
                (self.home_lr_over_bc1, m)
            } else {
                (self.lr_over_bc1, srf)
            };
            rate * direction
        };
        Elem {
            p: p * self.decay - change,
            home,
            step: 0.0,
            grad: 0.0,
        }
    }
}

/// Whether `F` holds a HomeAdam(W) rule of `switch` (`None`: of any switch).
#[inline(always)]
pub(crate) fn links_switch<F: RuleSet>(switch: Option<Switch>) -> bool {
    let admits = |s: Switch| {
        (switch.is_none() || switch == Some(s))
            && (F::admits(Rule::HomeAdam(s)) || F::admits(Rule::HomeAdamW(s)))
    };
    admits(Switch::Global) || admits(Switch::Layer) || admits(Switch::Element)
}

/// The kernel table's runner of HomeAdam's kernel: applies `a` to the kernel of the `decision`
/// ([`branch`]) if `F` holds a rule that takes it (the element-wise switch decides per element,
/// the global and per-layer switches decide for a whole tensor, Adam(W)-srf always takes the
/// srf branch), so that a build of one switch links that switch's kernels only.
#[inline(always)]
pub(crate) fn by_branch<F: RuleSet, A: Apply>(
    a: A,
    s: &StepScalars,
    o: Options,
    decision: u8,
) -> Option<A::Out> {
    let decides = links_switch::<F>(Some(Switch::Global)) || links_switch::<F>(Some(Switch::Layer));
    let srf = F::admits(Rule::AdamSrf) || F::admits(Rule::AdamWSrf);
    Some(match decision {
        branch::PER_ELEMENT if links_switch::<F>(Some(Switch::Element)) => {
            a.apply(Home::<{ branch::PER_ELEMENT }>::new(s, o))
        }
        branch::ALL_HOME if decides => a.apply(Home::<{ branch::ALL_HOME }>::new(s, o)),
        branch::ALL_SRF if decides => a.apply(Home::<{ branch::ALL_SRF }>::new(s, o)),
        branch::SRF if srf => a.apply(Home::<{ branch::SRF }>::new(s, o)),
        _ => return None,
    })
}

/// The home (SGDM) branch is taken unless v̂ ≥ τ; a NaN v̂ (a non-finite gradient applied under
/// `FiniteCheck::Trust`) goes home rather than dividing by it. One unordered comparison (τ is
/// never NaN: τ > 0 is validated, a calibrated τ is a finite histogram edge).
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn goes_home(v_hat: f32, tau: f32) -> bool {
    !(v_hat >= tau)
}

/// The global and per-layer rules' first pass over one tensor, exactly as the step computes it:
/// min_j v_t,j with v_t,j = β2 v_{t−1},j + (1 − β2) g_j² (g unscaled by `s.inv_grad_scale`),
/// over every element and over those with v_t,j > 0, and whether every unscaled g is finite.
/// ρ_t is the min of `Config::rho_over` divided by bc2 ([`crate::RhoOver::rho`], then
/// [`goes_home`]). A backend that runs its own first pass (CUDA) is tested against this one.
#[inline(always)]
pub fn home_first_pass<G: Storage, S: StateStorage>(
    grad: &[G],
    v: &[S],
    s: &StepScalars,
) -> (SecondMomentMin, bool) {
    home_first_pass_with(Portable, grad, v, s)
}

/// [`home_first_pass`] with `conv`'s conversions of half-precision data.
#[inline(always)]
pub(crate) fn home_first_pass_with<C: Convert, G: Storage, S: StateStorage>(
    conv: C,
    grad: &[G],
    v: &[S],
    s: &StepScalars,
) -> (SecondMomentMin, bool) {
    let home = Home::<{ branch::PER_ELEMENT }>::new(s, Options::default());
    S::min_new_v(conv, grad, v, s.inv_grad_scale, |v, g| home.second_moment(v, g))
}

/// The element-wise rule's calibration pass over one tensor (at the steps a calibrated τ is
/// set): v̂_t,j = v_t,j / bc2 of every element with v_t,j > 0 counted into `hist`, and whether
/// every unscaled g is finite.
pub fn home_calibration_pass<G: Storage, S: StateStorage>(
    grad: &[G],
    v: &[S],
    s: &StepScalars,
    hist: &mut Histogram,
) -> bool {
    let home = Home::<{ branch::PER_ELEMENT }>::new(s, Options::default());
    let v_new = |v, g| home.second_moment(v, g);
    S::count_new_v(grad, v, s.inv_grad_scale, s.bc2, v_new, hist)
}
