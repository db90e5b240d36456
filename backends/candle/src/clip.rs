//! Global-norm gradient clipping: ‖g‖₂ = √(Σ_k Σ_i g_{k,i}²) over every gradient of the model;
//! when ‖g‖₂ > c (the maximum), every gradient is scaled by c / ‖g‖₂.
//!
//! The sum is exact: the squares of the values widened to `f32` are added in the core's
//! fixed-point [`ExactSum`] and rounded once to `f64`, so it does not depend on the order of
//! the variables or elements, and equals the CUDA optimizer's `grad_norm` (the same
//! accumulator on the device) bit for bit. [`global_grad_norm`] sums every variable into one
//! accumulator; [`crate::VarOptimizer`] clips without writing new gradient tensors (by stepping
//! with the core's gradient scale ‖g‖₂ / c).

use candle_core::backprop::GradStore;
use candle_core::{DType, Result, Var};

use crate::error::bail;
use homeadam_core::ExactSum;

/// The gradient scale that clips a gradient of norm `norm` to `max_norm`: ‖g‖₂ / c when
/// above, else 1 (also for a non-finite norm: the step's finite check deals with it).
pub(crate) fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if norm.is_finite() && norm > max_norm {
        norm / max_norm
    } else {
        1.0
    }
}

/// Checks a maximum norm: finite and > 0.
pub(crate) fn check_max_norm(max_norm: f64) -> Result<()> {
    if !(max_norm.is_finite() && max_norm > 0.0) {
        bail!("homeadam: max_grad_norm = {max_norm}, expected a finite value > 0");
    }
    Ok(())
}

/// ‖g‖₂ over the gradients of `vars` present in `grads` (variables without one are skipped).
/// Contiguous `f32`, bf16 and f16 gradients on the CPU are read in place; others are copied
/// to the host as `f32` first.
pub fn global_grad_norm(vars: &[Var], grads: &GradStore) -> Result<f64> {
    let mut sum = ExactSum::new();
    for var in vars {
        if let Some(g) = grads.get(var) {
            let in_place = g.device().is_cpu()
                && g.is_contiguous()
                && matches!(g.dtype(), DType::F32 | DType::BF16 | DType::F16);
            if in_place {
                crate::lend::add_grad_squares(g, "a gradient", &mut sum)?;
            } else {
                sum.add_squares(&g.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?);
            }
        }
    }
    Ok(sum.to_f64().sqrt())
}

/// Scales the gradients of `vars` in `grads` by c / ‖g‖₂ when ‖g‖₂ > c = `max_norm`;
/// returns ‖g‖₂ before clipping. For optimizers other than [`crate::VarOptimizer`]
/// (which clips by itself, see [`crate::OptimConfig::max_grad_norm`]).
pub fn clip_grad_norm(vars: &[Var], grads: &mut GradStore, max_norm: f64) -> Result<f64> {
    check_max_norm(max_norm)?;
    let norm = global_grad_norm(vars, grads)?;
    let scale = clip_scale(norm, max_norm);
    if scale != 1.0 {
        for var in vars {
            if let Some(g) = grads.get(var) {
                let clipped = g.affine(1.0 / scale, 0.0)?;
                grads.insert(var, clipped);
            }
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn setup() -> (Vec<Var>, GradStore) {
        let a = Var::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
        let b = Var::new(&[[0.5f32]], &Device::Cpu).unwrap();
        let c = Var::new(&[7.0f32], &Device::Cpu).unwrap();
        let loss = (a.as_tensor() * Tensor::new(&[3.0f32, 4.0], &Device::Cpu).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
            .add(&(b.as_tensor() * 12.0).unwrap().sum_all().unwrap())
            .unwrap();
        let grads = loss.backward().unwrap();
        (vec![a, b, c], grads)
    }

    #[test]
    fn norm_of_3_4_12_is_13() {
        let (vars, grads) = setup();
        assert_eq!(global_grad_norm(&vars, &grads).unwrap(), 13.0);
    }

    #[test]
    fn clipping_halves_to_6_5() {
        let (vars, mut grads) = setup();
        assert_eq!(clip_grad_norm(&vars, &mut grads, 6.5).unwrap(), 13.0);
        let a: Vec<f32> = grads.get(&vars[0]).unwrap().to_vec1().unwrap();
        assert_eq!(a, [1.5, 2.0]);
        assert_eq!(global_grad_norm(&vars, &grads).unwrap(), 6.5);
    }

    #[test]
    fn the_sum_is_exact_and_rounded_once() {
        // 2^60 + 1 − 2^60 in f64 is 0 in this order; exactly, it is 1.
        let big = 2f32.powi(30);
        let mut sum = ExactSum::new();
        sum.add_squares(&[big, 1.0]);
        sum.add_product(-big, big);
        assert_eq!(sum.to_f64(), 1.0);
    }

    #[test]
    fn below_the_maximum_nothing_changes() {
        let (vars, mut grads) = setup();
        assert_eq!(clip_grad_norm(&vars, &mut grads, 13.0).unwrap(), 13.0);
        let a: Vec<f32> = grads.get(&vars[0]).unwrap().to_vec1().unwrap();
        assert_eq!(a, [3.0, 4.0]);
        assert!(clip_grad_norm(&vars, &mut grads, 0.0).is_err());
        assert!(clip_grad_norm(&vars, &mut grads, f64::NAN).is_err());
    }

    #[test]
    fn in_place_and_copied_gradients_give_the_same_norm() {
        let (vars, mut grads) = setup();
        let plain = Tensor::new(&[[3.0f32, 0.25], [4.0, 12.0]], &Device::Cpu).unwrap();
        let mut expected = ExactSum::new();
        for x in [3.0f32, 0.25, 4.0, 12.0] {
            expected.add_square(x);
        }
        let expected = expected.to_f64().sqrt();
        let half = plain.to_dtype(DType::BF16).unwrap();
        for g in [plain.clone(), plain.t().unwrap(), half.clone(), half.t().unwrap()] {
            grads.insert(&vars[0], g.clone());
            grads.remove(&vars[1]);
            assert_eq!(
                global_grad_norm(&vars[..2], &grads).unwrap(),
                expected,
                "{:?}",
                g.layout()
            );
        }
    }
}
