//! Our errors under `RUST_BACKTRACE=1`: one message each, without candle's backtrace in it.
//! Its own test binary, so that the variable is set before anything captures a backtrace.

use candle_core::{Device, Var};
use homeadam_candle::core::{Config, Rule};
use homeadam_candle::{OptimConfig, SkipPolicy, VarOptimizer};

#[test]
fn errors_are_one_line_with_backtraces_on() {
    std::env::set_var("RUST_BACKTRACE", "1");
    let w = Var::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
    let vars = vec![("w".to_string(), w.clone())];
    let config = OptimConfig {
        on_skip: SkipPolicy::Error,
        ..OptimConfig::new(Config::new(Rule::AdamW))
    };
    let mut opt = VarOptimizer::from_named(vars.clone(), config.clone()).unwrap();
    let nan = (w.as_tensor() * f64::NAN).unwrap().sum_all().unwrap();
    let mut twice = vars.clone();
    twice.push(("w".into(), Var::new(&[0f32], &Device::Cpu).unwrap()));
    let errors = [
        opt.try_set_learning_rate(-1.0).unwrap_err(),
        opt.load_state(b"HACANDLE").unwrap_err(),
        opt.step_with_report(&nan.backward().unwrap()).unwrap_err(),
        VarOptimizer::from_named(twice, config).err().unwrap(),
    ];
    for e in errors {
        let text = e.to_string();
        assert!(text.starts_with("homeadam") && !text.contains('\n'), "{text}");
    }
}
