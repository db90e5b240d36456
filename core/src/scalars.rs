//! Per-step scalars, computed once per step in `f64` and rounded to `f32` (DESIGN §4).
//!
//! Every backend receives these exact `f32` values, so the element math that follows is the
//! same sequence of `f32` operations everywhere.

use crate::config::Config;
use crate::rules::{adabelief, Rule};
use crate::tensor::Group;

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
    /// MIAdam η² / bc1 (official `MIAdam1`).
    pub lr2_over_bc1: f32,
    /// AdaBelief rectified step: η · r_t / bc1 (RAdam), or η / bc1 when degenerated to SGD.
    pub rect_lr: f32,
    /// SWATS Adam-phase step: η √bc2 / bc1.
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

impl StepScalars {
    /// The scalars of step `t` (≥ 1) for `config`, with gradient scale `grad_scale` and, once
    /// SWATS has switched, its SGD-phase learning rate `swats_sgd_lr`.
    pub fn new(config: &Config, t: u64, grad_scale: f64, swats_sgd_lr: Option<f64>) -> Self {
        let beta1 = config.beta1;
        let beta2 = config.beta2;
        // SWATS's SGD phase replaces the group's lr, which its decoupled decay uses too.
        let lr = swats_sgd_lr.unwrap_or(config.lr);
        let bc1 = 1.0 - powi_by_squaring(beta1, t);
        let beta2_t = powi_by_squaring(beta2, t);
        let bc2 = 1.0 - beta2_t;
        let decay = if !config.rule.decoupled_decay(config.weight_decouple) {
            1.0
        } else if config.fixed_decay {
            1.0 - config.weight_decay
        } else {
            1.0 - lr * config.weight_decay
        };
        let (momentum, dampening) = match config.rule {
            Rule::Swats => (beta1, 0.0),
            _ => (config.momentum, config.dampening),
        };
        let (rect_mode, rect_lr) = if config.rule == Rule::AdaBelief && config.rectify {
            adabelief::rectification(beta2, beta2_t, t, bc1, lr)
        } else {
            (0, 0.0)
        };
        StepScalars {
            lr: lr as f32,
            beta1: beta1 as f32,
            one_minus_beta1: (1.0 - beta1) as f32,
            beta2: beta2 as f32,
            one_minus_beta2: (1.0 - beta2) as f32,
            eps: config.eps as f32,
            weight_decay: config.weight_decay as f32,
            decay: decay as f32,
            bc2: bc2 as f32,
            sqrt_bc2: libm::sqrt(bc2) as f32,
            lr_over_bc1: (lr / bc1) as f32,
            tau: config.tau as f32,
            momentum: momentum as f32,
            one_minus_dampening: (1.0 - dampening) as f32,
            inv_grad_scale: (1.0 / grad_scale) as f32,
            kappa: config.kappa as f32,
            lr2_over_bc1: (lr * lr / bc1) as f32,
            rect_lr: rect_lr as f32,
            swats_step: (lr * libm::sqrt(bc2) / bc1) as f32,
            swats_lr: lr as f32,
            first_step: (t == 1) as u32,
            mi_phase: (t <= config.switch_step) as u32,
            rect_mode,
            home_lr_over_bc1: (lr * config.home_lr_scale / bc1) as f32,
        }
    }
}

impl StepScalars {
    /// The scalars of step `t` for a tensor of `group`: [`StepScalars::new`] of
    /// [`Config::for_group`] (SWATS's SGD-phase rate scaled as η is).
    pub fn for_group(
        config: &Config,
        group: Group,
        t: u64,
        grad_scale: f64,
        swats_sgd_lr: Option<f64>,
    ) -> Self {
        let swats = swats_sgd_lr.map(|lr| lr * group.lr_scale);
        StepScalars::new(&config.for_group(group), t, grad_scale, swats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
