//! An accepted configuration writes no NaN or ±∞ into parameters from finite gradients: every
//! rule, each real hyper-parameter at the edges of what a caller can write (0, the smallest
//! positive value, the largest accepted below 1, the largest accepted, f32's and f64's
//! largest), on a gradient with zeros. A value that would divide 0 by 0 or overflow the kernels' `f32` is refused by
//! `Optimizer::new`, naming the knob.

mod common;

use common::Model;
use homeadam_core::*;

/// The edge values of a real knob.
const EDGES: [f64; 8] = [
    0.0,
    5e-324,
    f64::MIN_POSITIVE,
    f32::MIN_POSITIVE as f64,
    1.0 - f64::EPSILON / 2.0,
    LARGEST_KNOB,
    f32::MAX as f64,
    f64::MAX,
];

/// Sets a knob of a config.
type Set = fn(&mut Config, f64);

/// Each real knob, set on a config.
const KNOBS: [(&str, Set); 11] = [
    ("lr", |c, x| c.lr = x),
    ("beta1", |c, x| c.beta1 = x),
    ("beta2", |c, x| c.beta2 = x),
    ("eps", |c, x| c.eps = x),
    ("weight_decay", |c, x| c.weight_decay = x),
    ("momentum", |c, x| c.momentum = x),
    ("dampening", |c, x| c.dampening = x),
    ("kappa", |c, x| c.kappa = x),
    ("tau", |c, x| c.tau = x),
    ("home_lr_scale", |c, x| c.home_lr_scale = x),
    ("tau.home_share", |c, x| {
        c.tau_calibration = Some(TauCalibration {
            home_share: x,
            every: 1,
        })
    }),
];

/// Every rule, and the variants whose kernels differ (momentum, Nesterov, AMSGrad, rectified
/// AdaBelief, decoupled SWATS, a calibrated τ).
fn rules() -> Vec<Config> {
    let mut out: Vec<Config> = ALL_RULES.into_iter().map(Config::new).collect();
    let mut c = Config::new(Rule::Sgd);
    (c.momentum, c.nesterov) = (0.9, true);
    out.push(c);
    let mut c = Config::new(Rule::AdaBelief);
    (c.amsgrad, c.rectify, c.weight_decouple) = (true, true, false);
    out.push(c);
    let mut c = Config::new(Rule::Swats);
    c.weight_decouple = true;
    out.push(c);
    for switch in [Switch::Global, Switch::Element] {
        let mut c = Config::new(Rule::HomeAdamW(switch));
        c.tau_calibration = Some(TauCalibration {
            home_share: 0.5,
            every: 1,
        });
        out.push(c);
    }
    out
}

fn params() -> Vec<Vec<f32>> {
    vec![vec![0.5, -1.0, 1.0, 0.0, -0.5, 0.25, 1.0, 0.0]]
}

fn grads(step: usize) -> Vec<Vec<f32>> {
    let s = step as f32;
    vec![vec![0.0, 0.0, 1.0, -1.0, 1e-3 * s, 3e-2, 1e-20, 0.0]]
}

#[test]
fn accepted_configs_write_finite_parameters_from_finite_gradients() {
    let mut failures = Vec::new();
    for base in rules() {
        for (knob, set) in KNOBS {
            for x in EDGES {
                let mut config = base;
                set(&mut config, x);
                let Ok(mut opt) = Optimizer::new(config) else {
                    continue;
                };
                let mut m = Model::<f32, f32, f32>::new(&opt, &params());
                for step in 1..=3 {
                    m.set_grads(&grads(step));
                    let report = m.step(&mut opt, 1.0, false).unwrap();
                    let finite = m.params_f32().iter().flatten().all(|p| p.is_finite());
                    if !finite && !report.skipped {
                        failures.push(format!("{} {knob} = {x:e}: step {step}", config.name()));
                        break;
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} accepted configs wrote NaN or ±∞:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn refusals_name_the_knob_and_why() {
    let mut c = Config::new(Rule::AdamWSrf);
    c.eps = 0.0;
    let e = Optimizer::new(c).unwrap_err().to_string();
    assert!(
        e.contains("invalid eps = 0") && e.contains("divides by v̂ + ε"),
        "{e}"
    );
    let mut c = Config::new(Rule::Sgd);
    c.lr = 1e7;
    let e = Optimizer::new(c).unwrap_err().to_string();
    assert!(
        e.contains("invalid lr = 10000000: expected a finite value in [0, 1e6]"),
        "{e}"
    );
}
