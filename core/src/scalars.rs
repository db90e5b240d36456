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

/// The scalars of step t, all `f32` (C layout, passed as is to GPU kernels).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepScalars {
    /// η.
    pub lr: f32,
    /// β1.
    pub beta1: f32,
    /// 1 − β1.
    pub one_minus_beta1: f32,
    /// β2.
    pub beta2: f32,
    /// 1 − β2.
    pub one_minus_beta2: f32,
    /// ε.
    pub eps: f32,
    /// λ (coupled L2: g ← g + λθ).
    pub weight_decay: f32,
    /// Decoupled decay factor: 1 − ηλ (or 1 − λ with `fixed_decay`); 1 when not decoupled.
    pub decay: f32,
    /// bc2 = 1 − β2^t.
    pub bc2: f32,
    /// √bc2.
    pub sqrt_bc2: f32,
    /// η / bc1 with bc1 = 1 − β1^t.
    pub lr_over_bc1: f32,
    /// τ (the calibrated τ of the step where τ is calibrated).
    pub tau: f32,
    /// μ (SGD) or β1 (SWATS SGD phase).
    pub momentum: f32,
    /// 1 − dampening.
    pub one_minus_dampening: f32,
    /// 1 / grad_scale.
    pub inv_grad_scale: f32,
    /// MIAdam κ.
    pub kappa: f32,
    /// MIAdam η² / bc1 (official `MIAdam1`); 0 for the other rules.
    pub lr2_over_bc1: f32,
    /// AdaBelief rectified step: η · r_t / bc1 (RAdam), or η / bc1 when degenerated to SGD.
    pub rect_lr: f32,
    /// SWATS Adam-phase step: η √bc2 / bc1; 0 for the other rules.
    pub swats_step: f32,
    /// SWATS SGD-phase learning rate.
    pub swats_lr: f32,
    /// 1 on step 1, else 0 (SGD momentum starts with b₁ = d).
    pub first_step: u32,
    /// 1 when MIAdam is in its integration phase (t ≤ switch_step).
    pub mi_phase: u32,
    /// AdaBelief rectification: 0 off, 1 rectified step (N_sma ≥ 5), 2 SGD-like step.
    pub rect_mode: u32,
    /// HomeAdam(W)'s home step: η_h / bc1 with η_h = η · `home_lr_scale`.
    pub home_lr_over_bc1: f32,
}

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
