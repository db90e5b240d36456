//! HomeAdam(W)'s options beyond the paper: ρ over the active elements, the home branch's own
//! learning rate, and τ calibrated to a home share.

use homeadam_core::backend::{srf_proven_by, Histogram, Outcome};
use homeadam_core::*;

/// One tensor of four elements whose last element never gets a gradient.
struct Dead {
    param: [f32; 4],
    state: [f32; 8],
    aux: TensorAux,
}

impl Dead {
    fn new() -> Self {
        Dead {
            param: [0.5, -0.5, 0.25, 1.0],
            state: [0.0; 8],
            aux: TensorAux::default(),
        }
    }

    fn step(&mut self, opt: &mut Optimizer, g: f32) -> StepReport {
        let grad = [g, -2.0 * g, 0.5 * g, 0.0];
        let mut model = [Tensor::new(
            &mut self.param,
            &grad,
            &mut self.state,
            &mut self.aux,
        )];
        opt.step(&mut model, 1.0).unwrap()
    }
}

fn home_config(switch: Switch) -> Config {
    let mut c = Config::new(Rule::HomeAdamW(switch));
    c.lr = 1e-3;
    c.tau = 1e-8;
    c
}

#[test]
fn rho_over_all_goes_home_at_every_step_and_active_does_not() {
    for switch in [Switch::Global, Switch::Layer] {
        let mut all = Optimizer::new(home_config(switch)).unwrap();
        let mut c = home_config(switch);
        c.rho_over = RhoOver::Active;
        let mut active = Optimizer::new(c).unwrap();
        let (mut a, mut b) = (Dead::new(), Dead::new());
        for t in 1..=5 {
            let ra = a.step(&mut all, 1e-3);
            let rb = b.step(&mut active, 1e-3);
            assert_eq!(ra.home_elements, 4, "{switch:?} t = {t}: ρ = 0 sends all home");
            assert_eq!(
                rb.home_elements, 0,
                "{switch:?} t = {t}: ρ over the active elements"
            );
            assert_eq!(ra.rho, Some(0.0));
            // v̂ of the smallest active gradient, 0.5e-3: (0.5e-3)² = 2.5e-7 at every t.
            let expected = 2.5e-7f32;
            let got = rb.rho_active.unwrap();
            assert!(
                (got - expected).abs() < 1e-6 * expected,
                "{switch:?} t = {t}: {got}"
            );
            assert_eq!(ra.rho_active, rb.rho_active, "reported whatever decides");
            assert_eq!(rb.tau, Some(1e-8));
        }
    }
}

#[test]
fn rho_over_active_is_zero_without_any_gradient() {
    let mut c = home_config(Switch::Global);
    c.rho_over = RhoOver::Active;
    let mut opt = Optimizer::new(c).unwrap();
    let report = Dead::new().step(&mut opt, 0.0);
    assert_eq!(report.rho_active, Some(0.0));
    assert_eq!(report.home_elements, 4);
}

#[test]
fn the_home_step_uses_its_own_learning_rate_and_decay_stays_at_eta() {
    let mut c = home_config(Switch::Element);
    c.tau = 1.0; // every element goes home
    c.home_lr_scale = 100.0;
    let mut opt = Optimizer::new(c).unwrap();
    let mut d = Dead::new();
    let theta0 = d.param;
    d.step(&mut opt, 1e-3);
    // Step 1: m̂ = g, θ₁ = θ₀ (1 − ηλ) − η_h g, in f32 as the kernel computes it.
    let (lr, decay) = (1e-3f64, 1e-2f64);
    let decay_factor = (1.0 - lr * decay) as f32;
    let home_lr_over_bc1 = (lr * 100.0 / (1.0 - 0.9f64)) as f32;
    for (k, g) in [1e-3f32, -2e-3, 0.5e-3, 0.0].into_iter().enumerate() {
        let m = 0.9f32 * 0.0 + (1.0 - 0.9f64) as f32 * g;
        let expected = theta0[k] * decay_factor - home_lr_over_bc1 * m;
        assert_eq!(d.param[k].to_bits(), expected.to_bits(), "element {k}");
    }
}

#[test]
fn knobs_without_a_decision_are_refused() {
    let mut c = Config::new(Rule::HomeAdamW(Switch::Element));
    c.rho_over = RhoOver::Active;
    assert!(matches!(
        c.validate(),
        Err(Error::NotForRule { name: "rho_over", .. })
    ));
    let mut c = Config::new(Rule::AdamW);
    c.home_lr_scale = 2.0;
    assert!(matches!(
        c.validate(),
        Err(Error::NotForRule {
            name: "home_lr_scale",
            ..
        })
    ));
    let mut c = Config::new(Rule::AdamWSrf);
    c.tau_calibration = Some(TauCalibration {
        home_share: 0.1,
        every: 1,
    });
    assert!(c.validate().is_err());
    let mut c = home_config(Switch::Global);
    c.home_lr_scale = -1.0;
    assert!(matches!(c.validate(), Err(Error::InvalidHyper { .. })));
}

/// 64 elements with v̂ spread over 64 binades; element k's gradient is 2^(−k/2 − 2).
fn spread_grad() -> Vec<f32> {
    (0..64)
        .map(|k| 2f32.powf(-(k as f32) / 2.0 - 2.0) * 1.1)
        .collect()
}

#[test]
fn a_calibrated_tau_sends_about_the_share_home_element_wise() {
    let mut c = home_config(Switch::Element);
    c.tau_calibration = Some(TauCalibration {
        home_share: 0.25,
        every: 3,
    });
    let mut opt = Optimizer::new(c).unwrap();
    let (mut p, g, mut s, mut aux) = (
        vec![0.1f32; 64],
        spread_grad(),
        vec![0.0f32; 128],
        TensorAux::default(),
    );
    let mut taus = Vec::new();
    for t in 1..=7 {
        let mut model = [Tensor::new(&mut p, &g, &mut s, &mut aux)];
        let report = opt.step(&mut model, 1.0).unwrap();
        if (t - 1) % 3 == 0 {
            // Each gradient is its own binade pair: the 16 smallest of 64 go home.
            assert_eq!(report.home_elements, 16, "t = {t}");
        }
        let tau = report.tau.unwrap();
        assert_eq!(tau.to_bits() & 0x807f_ffff, 0, "τ = {tau} is a power of two");
        taus.push(tau);
    }
    assert_eq!(taus[0], taus[1], "kept between calibrations");
    assert_eq!(opt.tau(), f64::from(taus[6]));
}

#[test]
fn a_calibrated_global_tau_follows_the_window_of_rho() {
    let mut c = home_config(Switch::Global);
    c.rho_over = RhoOver::Active;
    c.tau_calibration = Some(TauCalibration {
        home_share: 0.5,
        every: 4,
    });
    let mut opt = Optimizer::new(c).unwrap();
    let mut d = Dead::new();
    // t = 1 calibrates on its own ρ: τ = the power of two below it, the srf step.
    let first = d.step(&mut opt, 1e-3);
    let rho1 = first.rho_active.unwrap();
    assert_eq!(first.tau, Some(f32::from_bits(rho1.to_bits() & 0x7f80_0000)));
    assert_eq!(first.home_elements, 0);
    assert_eq!(opt.calibration_window().total(), 0, "emptied by the calibration");
    for _ in 2..=4 {
        d.step(&mut opt, 1e-3);
    }
    assert_eq!(opt.calibration_window().total(), 3, "one ρ per step since");
    // A skipped step changes neither the window nor τ.
    let before = opt.clone();
    let grad = [f32::NAN, 0.0, 0.0, 0.0];
    let mut model = [Tensor::new(&mut d.param, &grad, &mut d.state, &mut d.aux)];
    assert!(opt.step(&mut model, 1.0).unwrap().skipped);
    assert_eq!(opt, before);
    let fifth = d.step(&mut opt, 1e-3);
    assert_eq!(opt.calibration_window().total(), 0);
    assert!(fifth.tau.is_some());
}

#[test]
fn an_external_backend_must_calibrate_before_it_finishes() {
    let mut c = home_config(Switch::Element);
    c.tau_calibration = Some(TauCalibration {
        home_share: 0.5,
        every: 2,
    });
    let mut opt = Optimizer::new(c).unwrap();
    let outcome = Outcome {
        skipped: false,
        v_min: Some(1.0),
        v_min_active: None,
        home_elements: 0,
        nonfinite_applied: false,
        decisions: Histogram::new(),
        exact_pass: false,
    };
    let step = opt.begin(1.0).unwrap();
    assert!(step.calibrates());
    assert!(matches!(step.finish_external(outcome), Err(Error::StepOrder(_))));
    assert_eq!(opt.step_count(), 0);

    let mut step = opt.begin(1.0).unwrap();
    let mut values = Histogram::new();
    (0..3).for_each(|_| values.add(1e-9));
    values.add(1e-3);
    step.calibrate_external(&values).unwrap();
    assert!(step.calibrate_external(&values).is_err(), "once per step");
    let tau = step.scalars().tau;
    assert_eq!(tau, f32::from_bits(1e-9f32.to_bits() & 0x7f80_0000));
    let report = step.finish_external(outcome).unwrap();
    assert_eq!(report.tau, Some(tau));
    // t = 2 does not calibrate; calibrating then is refused.
    let mut step = opt.begin(1.0).unwrap();
    assert!(!step.calibrates());
    assert!(step.calibrate_external(&values).is_err());
    assert_eq!(step.scalars().tau, tau);
}

#[test]
fn an_external_backend_counts_the_global_rules_exact_first_passes() {
    let outcome = |skipped, exact_pass| Outcome {
        skipped,
        v_min: Some(1.0),
        v_min_active: Some(1.0),
        home_elements: 0,
        nonfinite_applied: false,
        decisions: Histogram::new(),
        exact_pass,
    };
    let mut opt = Optimizer::new(home_config(Switch::Global)).unwrap();
    for (skipped, exact, count) in [
        (false, true, 1),
        (false, false, 1),
        (true, true, 1),
        (false, true, 2),
    ] {
        opt.begin(1.0)
            .unwrap()
            .finish_external(outcome(skipped, exact))
            .unwrap();
        assert_eq!(opt.exact_first_passes(), count);
    }
    for switch in [Switch::Layer, Switch::Element] {
        let mut opt = Optimizer::new(home_config(switch)).unwrap();
        opt.begin(1.0)
            .unwrap()
            .finish_external(outcome(false, true))
            .unwrap();
        assert_eq!(opt.exact_first_passes(), 0, "{switch:?}");
    }
}

#[test]
fn the_srf_proof_of_a_backend_is_the_cores() {
    // fl(β2 u) / bc2 ≥ τ proves srf: at t = 1 bc2 = 1 − β2.
    let mut c = home_config(Switch::Global);
    c.tau = 1e-3;
    let mut opt = Optimizer::new(c).unwrap();
    let step = opt.begin(1.0).unwrap();
    let s = *step.scalars();
    let at_tau = s.tau * s.bc2 / s.beta2;
    assert!(srf_proven_by(at_tau * 2.0, &s));
    assert!(!srf_proven_by(at_tau * 0.5, &s));
    assert!(srf_proven_by(f32::INFINITY, &s));
    assert!(!srf_proven_by(0.0, &s));
}
