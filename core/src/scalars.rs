//! Per-step scalars, computed once per step in `f64` and rounded to `f32` (DESIGN §4; their
//! computation from a config, [`StepScalars::new`], is with the config).
//!
//! Every backend receives these exact `f32` values, so the element math that follows is the
//! same sequence of `f32` operations everywhere.

/// β^t by repeated squaring, in `f64`: a fixed algorithm so every backend gets the same bits.
pub fn powi_by_squaring(base: f64, mut exp: u64) -> f64 {
    let mut result = 1.0;
    let mut square = base;
    while exp > 0 {
        if exp & 1 == 1 {
            result *= square;
        }
        square *= square;
        exp >>= 1;
    }
    result
}

use crate::knobs::knob_table;

/// Generates [`StepScalars`] from its shared fields, listed here, and the per-step knobs of
/// the knob table ([`crate::config`]'s table, the lines marked `step`): each a copy of the
/// config's value as `f32`, under the knob's name, after the shared fields.
macro_rules! step_scalars {
    (@ [$($knobs:tt)*]) => {
        scalars_struct! {
            /// η (η' in a rule's second phase: [`crate::rules::spec::PhaseSwitch`]).
            lr: f32 "float",
            /// 1 − β1.
            one_minus_beta1: f32 "float",
            /// 1 − β2.
            one_minus_beta2: f32 "float",
            /// Decoupled decay factor: 1 − ηλ (or 1 − λ with `fixed_decay`); 1 when not decoupled.
            decay: f32 "float",
            /// bc2 = 1 − β2^t.
            bc2: f32 "float",
            /// √bc2.
            sqrt_bc2: f32 "float",
            /// η / bc1 with bc1 = 1 − β1^t.
            lr_over_bc1: f32 "float",
            /// μ (SGD) or β1 (SWATS SGD phase).
            momentum: f32 "float",
            /// 1 − dampening.
            one_minus_dampening: f32 "float",
            /// 1 / grad_scale.
            inv_grad_scale: f32 "float",
            /// MIAdam η² / bc1 (official `MIAdam1`); 0 for the other rules.
            lr2_over_bc1: f32 "float",
            /// AdaBelief rectified step: η · r_t / bc1 (RAdam), or η / bc1 when degenerated to SGD.
            rect_lr: f32 "float",
            /// SWATS Adam-phase step: η √bc2 / bc1; 0 for the other rules.
            swats_step: f32 "float",
            /// 1 on step 1, else 0 (SGD momentum starts with b₁ = d).
            first_step: u32 "ha_u32",
            /// 1 when MIAdam is in its integration phase (t ≤ switch_step).
            mi_phase: u32 "ha_u32",
            /// AdaBelief rectification: 0 off, 1 rectified step (N_sma ≥ 5), 2 SGD-like step.
            rect_mode: u32 "ha_u32",
            /// HomeAdam(W)'s home step: η_h / bc1 with η_h = η · `home_lr_scale`; 0 for the other rules.
            home_lr_over_bc1: f32 "float",
            $($knobs)*
        }

    };
    (@ [$($knobs:tt)*] $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, valid $valid:tt,
        $(knob $knob:tt,)* json $json:tt, step; $($rest:tt)*) => {
        step_scalars!(@ [$($knobs)* $(#[$doc])* $field: f32 "float",] $($rest)*);
    };
    (@ [$($knobs:tt)*] $(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, valid $valid:tt,
        $(knob $knob:tt,)* json $json:tt, $kept:ident; $($rest:tt)*) => {
        step_scalars!(@ [$($knobs)*] $($rest)*);
    };
    (defaults $d:ident; $($lines:tt)*) => {
        step_scalars!(@ [] $($lines)*);
    };
}

/// The struct of [`step_scalars`]'s fields, and their C twins' layout.
macro_rules! scalars_struct {
    ($($(#[$doc:meta])* $field:ident: $ty:ident $c:literal,)*) => {
        /// The scalars of step t, all 4-byte (C layout, passed as is to GPU kernels, whose
        /// `HaScalars` is generated from [`StepScalars::FIELDS`]).
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct StepScalars {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl StepScalars {
            /// Each field as `(name, C type, byte offset)`, in order: the C twin's layout.
            pub const FIELDS: [(&'static str, &'static str, usize); [$($c),*].len()] =
                [$((stringify!($field), $c, core::mem::offset_of!(StepScalars, $field))),*];
        }
    };
}

knob_table!(step_scalars);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::rules::Rule;

    #[test]
    fn powi_matches_repeated_multiplication_closely() {
        for t in [0u64, 1, 2, 3, 10, 100, 1000, 12345] {
            let slow = (0..t).fold(1.0f64, |acc, _| acc * 0.999);
            let fast = powi_by_squaring(0.999, t);
            assert!((slow - fast).abs() <= 1e-12 * slow.max(1e-300), "t = {t}");
        }
    }

    #[test]
    fn first_step_bias_corrections() {
        let c = Config::new(Rule::AdamW);
        let s = StepScalars::new(&c, 1, 1.0, None);
        assert_eq!(s.lr_over_bc1, (1e-3f64 / 0.1f64) as f32);
        assert_eq!(s.bc2, (1.0f64 - 0.999) as f32);
        assert_eq!(s.decay, (1.0 - 1e-3 * 1e-2) as f32);
        assert_eq!(s.first_step, 1);
    }
}
