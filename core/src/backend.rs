//! What backend authors need to reproduce a step bit for bit (CUDA, MCU, other learners):
//! the per-step scalars, the HomeAdam first pass and test, the calibration pass of a calibrated
//! τ, the keys of stochastic rounding, the square root and the checksum the core uses, and
//! [`Outcome`] for [`crate::Step::finish_external`] ([`SwatsDots`] for SWATS). A training loop
//! needs none of it.

use crate::rules::homeadam::{branch, Home};
use crate::state::StateStorage;
use crate::storage::Storage;

pub use crate::calibration::{Histogram, BUCKETS};
pub use crate::crc32::Crc32;
pub use crate::kernel::SecondMomentMin;
pub use crate::math::sqrt;
pub use crate::optimizer::{Outcome, SwatsDots};
pub use crate::rounding::{mix64, stochastic_bits, tensor_key};
pub use crate::scalars::{powi_by_squaring, StepScalars};

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
    let home = Home::<{ branch::PER_ELEMENT }>::new(s);
    S::min_new_v(grad, v, s.inv_grad_scale, |v, g| home.second_moment(v, g))
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
    let home = Home::<{ branch::PER_ELEMENT }>::new(s);
    let v_new = |v, g| home.second_moment(v, g);
    S::count_new_v(grad, v, s.inv_grad_scale, s.bc2, v_new, hist)
}
