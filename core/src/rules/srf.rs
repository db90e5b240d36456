//! Adam-srf and AdamW-srf: Adam(W) without the square root (paper, Alg. 1).
//!
//! ```text
//! m_t = β1 m_{t−1} + (1 − β1) g_t,      m̂_t = m_t / (1 − β1^t)
//! v_t = β2 v_{t−1} + (1 − β2) g_t²,     v̂_t = v_t / (1 − β2^t)
//! θ_t = θ_{t−1} − η (m̂_t / (v̂_t + ε) + λ θ_{t−1})
//! ```
//! Adam-srf is λ = 0. Evaluated as `θ (1 − ηλ) − (η / bc1) · (m / (v / bc2 + ε))`, the same
//! element math as HomeAdam's srf branch: Adam(W)-srf is HomeAdam(W) that never goes home, and
//! runs its kernel ([`crate::rules::ElementKernel::HomeAdam`]).
//! State: `m`, `v`.

use crate::rules::homeadam::srf_spec;
use crate::rules::spec::Spec;

/// `adam-srf`: λ = 0 by definition.
pub const ADAM_SRF: Spec = srf_spec(false);

/// `adamw-srf`.
pub const ADAMW_SRF: Spec = srf_spec(true);
