//! The update rules, one module each, with its formula in the paper's symbols (θ parameters,
//! g the unscaled gradient, η the learning rate, λ the weight decay, m / v the first and
//! second moments, bc_i = 1 − β_i^t, m̂ = m / bc1, v̂ = v / bc2). These pages document the
//! math; a rule is chosen with [`crate::Rule`] and configured with [`crate::Config`].
//!
//! | [`crate::Rule`] | config names | module |
//! | --- | --- | --- |
//! | `Sgd` | `sgd`, `sgdm` | [`sgd`] |
//! | `Adam`, `AdamW` | `adam`, `adamw` | [`adam`] |
//! | `AdamSrf`, `AdamWSrf` (Alg. 1) | `adam-srf`, `adamw-srf` | [`srf`] |
//! | `HomeAdam(_)`, `HomeAdamW(_)` (Alg. 2, 3) | `homeadam[w]`, `-layer`, `-ew` | [`homeadam`] |
//! | `AdaBelief` | `adabelief` | [`adabelief`] |
//! | `Swats` | `swats` | [`swats`] |
//! | `MiAdam` | `miadam` | [`miadam`] |
//!
//! [`only`] names sets of rules for builds that link only their own kernels
//! ([`crate::Optimizer::step_only`]).
//!
//! The srf and HomeAdam rules divide by v̂ + ε, not by √v̂ + ε: see "Choosing
//! hyper-parameters" in the crate's front page before you reuse Adam's η and ε.

pub mod adabelief;
pub mod adam;
pub mod homeadam;
pub mod miadam;
pub mod only;
pub mod sgd;
pub mod srf;
pub mod swats;
