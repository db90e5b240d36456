//! The options a candle user sets, through the public API only: what a skipped step does, a
//! saved state that names its settings, schedules with warm-up and the base rate.

use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::Optimizer as _;
use homeadam_candle::core::{Config, Rule};
use homeadam_candle::{Adopted, OptimConfig, Schedule, SkipPolicy, VarOptimizer};

/// w · x summed, for a gradient of x (all ones: NaN when `x` holds one).
fn loss(w: &Var, x: &[f32]) -> Tensor {
    let x = Tensor::new(x, &Device::Cpu).unwrap();
    w.as_tensor().mul(&x).unwrap().sum_all().unwrap()
}

fn optimizer(rule: Rule, on_skip: SkipPolicy) -> (Var, VarOptimizer) {
    let w = Var::new(&[1.0f32, -2.0, 0.5], &Device::Cpu).unwrap();
    let mut config = OptimConfig::new(Config::new(rule));
    config.on_skip = on_skip;
    let opt = VarOptimizer::from_named(vec![("w".into(), w.clone())], config).unwrap();
    (w, opt)
}

const GOOD: [f32; 3] = [0.5, -1.0, 2.0];
const BAD: [f32; 3] = [0.5, f32::NAN, 2.0];

#[test]
fn skipped_steps_are_counted_by_default() {
    let (w, mut opt) = optimizer(Rule::AdamW, SkipPolicy::Count);
    let before: Vec<f32> = w.to_vec1().unwrap();
    for k in 1..=3 {
        opt.backward_step(&loss(&w, &BAD)).unwrap();
        assert_eq!(opt.skipped_steps(), k);
        assert!(opt.last_report().unwrap().report.skipped);
    }
    assert_eq!(w.to_vec1::<f32>().unwrap(), before);
    assert_eq!(opt.step_count(), 0);
    opt.backward_step(&loss(&w, &GOOD)).unwrap();
    assert_eq!((opt.step_count(), opt.skipped_steps()), (1, 3));
}

#[test]
fn skipped_steps_warn_once() {
    let (w, mut opt) = optimizer(Rule::AdamW, SkipPolicy::Warn);
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    opt.set_warning_hook(move |m| sink.lock().unwrap().push(m.to_string()));
    for _ in 0..3 {
        opt.backward_step(&loss(&w, &BAD)).unwrap();
    }
    let heard = heard.lock().unwrap();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(
        heard[0].contains("step skipped") && heard[0].contains("NaN"),
        "{}",
        heard[0]
    );
    assert_eq!(opt.skipped_steps(), 3);
}

#[test]
fn skipped_steps_can_be_errors() {
    let (w, mut opt) = optimizer(Rule::AdamW, SkipPolicy::Error);
    let before: Vec<f32> = w.to_vec1().unwrap();
    let e = opt.backward_step(&loss(&w, &BAD)).unwrap_err().to_string();
    assert!(e.contains("step skipped"), "{e}");
    let grads = loss(&w, &BAD).backward().unwrap();
    assert!(opt.step(&grads).is_err());
    assert!(opt.step_with_report(&grads).is_err());
    assert_eq!((opt.skipped_steps(), opt.step_count()), (3, 0));
    assert_eq!(w.to_vec1::<f32>().unwrap(), before);
    opt.backward_step(&loss(&w, &GOOD)).unwrap();
}

/// Saved under ε = 1e-8 and η₀ = 1e-3, loaded by an optimizer with ε = 1e-6 and η₀ = 2e-3:
/// refused, naming both; adopted on request, and then it steps as the saved one does.
#[test]
fn a_state_names_its_settings_and_can_be_adopted() {
    let (w, mut saved) = optimizer(Rule::AdamW, SkipPolicy::Count);
    saved.backward_step(&loss(&w, &GOOD)).unwrap();
    let bytes = saved.save_state().unwrap();

    let other_w = Var::new(w.to_vec1::<f32>().unwrap().as_slice(), &Device::Cpu).unwrap();
    let mut core = Config::new(Rule::AdamW);
    (core.eps, core.lr) = (1e-6, 2e-3);
    let config = OptimConfig::new(core);
    let mut other = VarOptimizer::from_named(vec![("w".into(), other_w.clone())], config).unwrap();
    let e = other.load_state(&bytes).unwrap_err().to_string();
    assert!(
        e.contains("lr = 0.001 (here 0.002)") && e.contains("eps = 1e-8 (here 1e-6)"),
        "{e}"
    );
    assert_eq!(other.step_count(), 0);
    let adopted = other.load_state_adopting(&bytes).unwrap();
    let change = |name: &str, was: &str, now: &str| Adopted {
        name: name.into(),
        was: was.into(),
        now: now.into(),
    };
    assert_eq!(
        adopted,
        [change("lr", "0.002", "0.001"), change("eps", "1e-6", "1e-8")]
    );
    assert_eq!(
        (other.base_learning_rate(), other.config().core.eps),
        (1e-3, 1e-8)
    );
    assert_eq!(other.save_state().unwrap(), bytes);
    for _ in 0..3 {
        saved.backward_step(&loss(&w, &GOOD)).unwrap();
        other.backward_step(&loss(&other_w, &GOOD)).unwrap();
    }
    assert_eq!(w.to_vec1::<f32>().unwrap(), other_w.to_vec1::<f32>().unwrap());
}

/// The rule, the state type and each variable's dtype are never adopted.
#[test]
fn other_rules_state_types_and_dtypes_are_refused() {
    let (w, mut opt) = optimizer(Rule::AdamW, SkipPolicy::Count);
    opt.backward_step(&loss(&w, &GOOD)).unwrap();
    let bytes = opt.save_state().unwrap();
    let load = |config: OptimConfig, dtype: DType| {
        let v = Var::zeros(3, dtype, &Device::Cpu).unwrap();
        let mut o = VarOptimizer::from_named(vec![("w".into(), v)], config).unwrap();
        o.load_state_adopting(&bytes).unwrap_err().to_string()
    };
    let e = load(OptimConfig::new(Config::new(Rule::Adam)), DType::F32);
    assert!(e.contains("saved by another rule (adamw)"), "{e}");
    let mut q8 = OptimConfig::new(Config::new(Rule::AdamW));
    q8.state_dtype = homeadam_candle::core::Dtype::Q8;
    let e = load(q8, DType::F32);
    assert!(e.contains("saved f32, here q8"), "{e}");
    let e = load(OptimConfig::new(Config::new(Rule::AdamW)), DType::BF16);
    assert!(e.contains("w was f32, the variable is bf16"), "{e}");
}

/// `set_learning_rate` sets the base rate η₀; under a schedule the rate stays on its curve.
#[test]
fn set_learning_rate_sets_the_base_rate_under_a_schedule() {
    let w = Var::new(&[1.0f32], &Device::Cpu).unwrap();
    let mut config = OptimConfig::new(Config::new(Rule::AdamW));
    config.schedule = Schedule::Cosine {
        total: 4,
        min_lr: 1e-4,
    };
    config.warmup = 2;
    let mut opt = VarOptimizer::from_named(vec![("w".into(), w)], config).unwrap();
    let rates: Vec<f64> = (0..8)
        .map(|_| {
            let lr = opt.learning_rate();
            opt.advance_schedule().unwrap();
            lr
        })
        .collect();
    assert_eq!(rates[..3], [5e-4, 1e-3, 1e-3]);
    assert_eq!(rates[6..], [1e-4, 1e-4]);
    opt.set_learning_rate(2e-2);
    assert_eq!(opt.base_learning_rate(), 2e-2);
    assert_eq!(opt.learning_rate(), 1e-4);
}
