//! What backend authors need to reproduce a step bit for bit (CUDA, MCU, other learners):
//! the per-step scalars, the HomeAdam first pass and test, the global rule's srf proof from its
//! bound ([`srf_proven_by`]), the calibration pass of a calibrated τ, the keys of stochastic
//! rounding, the square root and the checksum the core uses, and [`Outcome`] for
//! [`crate::Step::finish_external`] ([`SwatsDots`] for SWATS). A training loop needs none of it.
//! A facade: everything here is defined where the core uses it.

pub use crate::bits::{mix64, stochastic_bits, tensor_key};
pub use crate::calibration::{Histogram, BUCKETS};
pub use crate::checkpoint::layout as checkpoint_layout;
pub use crate::crc32::Crc32;
pub use crate::external::{Outcome, SwatsDots};
pub use crate::math::sqrt;
pub use crate::reduce::SecondMomentMin;
pub use crate::rules::homeadam::{goes_home, home_calibration_pass, home_first_pass};
pub use crate::scalars::{powi_by_squaring, StepScalars};
pub use crate::step::srf_proven_by;

/// Elements per chunk of the global rule's bound on ρ_t: its update keeps the chunk of this many
/// elements that held min v (the fast path's chunk), whose v_t may prove the next home branch.
pub const BOUND_CHUNK: usize = crate::reduce::CHUNK;
