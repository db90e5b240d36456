//! The host side of a calibrated τ on the global and per-layer rules: the step's decision
//! values from the first pass's minima.

use homeadam_core::backend::Histogram;
use homeadam_core::{Config, Switch};

use crate::device::{HaTensor, HaVmin};

/// The step's decision values ([`homeadam_core::backend::Outcome::decisions`]), counted as the
/// core counts them: ρ = `rho_over`'s min v̂ of the model (global, from the model's minima of
/// v_t, `model`) or of each tensor (per-layer, from the table); none for the other rules.
pub(super) fn decisions(config: &Config, bc2: f32, model: HaVmin, table: &[HaTensor]) -> Histogram {
    let mut values = Histogram::new();
    match config.rule.switch() {
        Some(Switch::Global) => values.add(model.rho(config.rho_over, bc2)),
        Some(Switch::Layer) => {
            for t in table {
                values.add(t.vmin_pre.rho(config.rho_over, bc2));
            }
        }
        _ => {}
    }
    values
}

#[cfg(test)]
mod tests {
    use homeadam_core::backend::{home_first_pass, mix64, Outcome, SecondMomentMin};
    use homeadam_core::{Optimizer, RhoOver, Rule, TauCalibration, Tensor, TensorAux};

    use super::*;

    fn bits(m: SecondMomentMin) -> HaVmin {
        HaVmin {
            all: m.all.to_bits(),
            active: m.active.to_bits(),
        }
    }

    /// A CPU model stepped by the core, and a second core optimizer driven as
    /// `CudaOptimizer::step` drives it: the first pass's minima (the core's `home_first_pass`,
    /// which `ha_home_pre` equals) through `decisions` into `calibrate_external` or
    /// `Outcome::decisions`. After every step τ, ρ_active and the calibration window are the
    /// core's.
    fn follows_the_core(switch: Switch, rho_over: RhoOver) {
        let config = Config {
            rho_over,
            tau_calibration: Some(TauCalibration {
                home_share: 0.4,
                every: 3,
            }),
            ..Config::new(Rule::HomeAdamW(switch))
        };
        let mut reference = Optimizer::new(config).expect("config");
        let mut backend = Optimizer::new(config).expect("config");
        // An empty tensor, one that never gets a gradient (never active), two whose gradients
        // span 40 binades.
        let sizes = [0usize, 4, 7, 9];
        let mut params: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.5; n]).collect();
        let mut states: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![0.0; 2 * n]).collect();
        let mut auxes = vec![TensorAux::default(); sizes.len()];
        let mut r = 0u64;
        for t in 1..=12 {
            let grads: Vec<Vec<f32>> = sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| {
                    (0..n)
                        .map(|i| {
                            r = mix64(r + 1);
                            match (k, i) {
                                (1, _) => 0.0,
                                (3, 0) if t == 5 => f32::NAN,
                                _ => (r % 2000) as f32 * 2f32.powi(-(((r >> 32) % 40) as i32)),
                            }
                        })
                        .collect()
                })
                .collect();
            let mut step = backend.begin(1.0).expect("step");
            let s = *step.scalars();
            let mut model = SecondMomentMin::EMPTY;
            let table: Vec<HaTensor> = states
                .iter()
                .zip(&grads)
                .map(|(state, grad)| {
                    let (m, _) = home_first_pass(grad, &state[grad.len()..], &s);
                    model = model.merge(m);
                    HaTensor {
                        vmin_pre: bits(m),
                        ..HaTensor::default()
                    }
                })
                .collect();
            let values = decisions(&config, s.bc2, bits(model), &table);
            let calibrates = step.calibrates();
            if calibrates {
                step.calibrate_external(&values).expect("calibrates");
            }
            let mut tensors: Vec<Tensor<'_, f32, f32, f32>> = params
                .iter_mut()
                .zip(&grads)
                .zip(states.iter_mut().zip(auxes.iter_mut()))
                .map(|((p, g), (s, a))| Tensor::new(p, g, s, a))
                .collect();
            let expected = reference.step(&mut tensors, 1.0).expect("core step");
            let outcome = Outcome {
                skipped: expected.skipped,
                v_min: None,
                v_min_active: Some(model.active),
                decisions: if calibrates { Histogram::new() } else { values },
                home_elements: 0,
                nonfinite_applied: false,
                exact_pass: true,
            };
            let got = step.finish_external(outcome).expect("finish");
            let what = format!("{switch:?} {rho_over:?} t = {t}");
            assert_eq!(got.skipped, t == 5, "{what}");
            assert_eq!(got.tau, expected.tau, "{what}");
            assert_eq!(
                got.rho_active.map(f32::to_bits),
                expected.rho_active.map(f32::to_bits),
                "{what}"
            );
            assert_eq!(
                backend.calibration_window(),
                reference.calibration_window(),
                "{what}"
            );
        }
    }

    #[test]
    fn decision_values_are_the_cores() {
        for switch in [Switch::Global, Switch::Layer] {
            for rho_over in [RhoOver::All, RhoOver::Active] {
                follows_the_core(switch, rho_over);
            }
        }
    }
}
