//! A saved state carries the whole optimizer: the schedule, warm-up, clipping norm and skip
//! policy are refused when they differ or adopted on request; the decay mask and the groups
//! are refused in both cases; a state of the format before them still loads.

use candle_core::{Device, Var};
use candle_nn::Optimizer as _;
use homeadam_candle::core::backend::Crc32;
use homeadam_candle::core::{Config, Rule};
use homeadam_candle::{GroupSettings, OptimConfig, Schedule, SkipPolicy, VarOptimizer};

fn weight() -> Vec<(String, Var)> {
    let w = Var::new(&[[1.0f32, -2.0], [0.5, 3.0]], &Device::Cpu).unwrap();
    vec![("fc.weight".into(), w)]
}

/// The state of one step of AdamW under `config`.
fn saved(config: OptimConfig) -> Vec<u8> {
    let vars = weight();
    let mut opt = VarOptimizer::from_named(vars.clone(), config).unwrap();
    opt.backward_step(&vars[0].1.as_tensor().sqr().unwrap().sum_all().unwrap())
        .unwrap();
    opt.save_state().unwrap()
}

fn plain() -> OptimConfig {
    OptimConfig::new(Config::new(Rule::AdamW))
}

fn scheduled() -> OptimConfig {
    OptimConfig {
        schedule: Schedule::Cosine {
            total: 4,
            min_lr: 1e-5,
        },
        warmup: 2,
        max_grad_norm: Some(1.0),
        on_skip: SkipPolicy::Error,
        ..plain()
    }
}

#[test]
fn schedule_warmup_clipping_and_skip_policy_are_refused_or_adopted() {
    let bytes = saved(scheduled());
    let mut opt = VarOptimizer::from_named(weight(), plain()).unwrap();
    let e = opt.load_state(&bytes).unwrap_err().to_string();
    for field in [
        "schedule = cosine(total 4, min_lr 0.00001) (here constant)",
        "warmup = 2 (here 0)",
        "max_grad_norm = 1 (here none)",
        "on_skip = error (here count)",
    ] {
        assert!(e.contains(field), "{field}: {e}");
    }
    assert_eq!(opt.step_count(), 0);
    let adopted = opt.load_state_adopting(&bytes).unwrap();
    let names: Vec<_> = adopted.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["schedule", "warmup", "max_grad_norm", "on_skip"]);
    assert_eq!(opt.config(), &scheduled());
    assert_eq!((opt.step_count(), opt.learning_rate()), (1, 5e-4));
    assert_eq!(opt.save_state().unwrap(), bytes);
}

#[test]
fn the_decay_mask_and_groups_are_never_adopted() {
    let masked = OptimConfig {
        decay_all: false,
        ..plain()
    };
    let head = GroupSettings {
        lr_scale: 0.1,
        weight_decay: Some(0.0),
        ..GroupSettings::DEFAULT
    };
    let grouped = OptimConfig {
        groups: vec![("head.".into(), head)],
        ..plain()
    };
    for (config, field) in [
        (masked, "decay_all = false (here true)"),
        (
            grouped,
            r#"groups = "head." (lr × 0.1, weight_decay 0) (here none)"#,
        ),
    ] {
        let bytes = saved(config);
        let mut opt = VarOptimizer::from_named(weight(), plain()).unwrap();
        for e in [
            opt.load_state(&bytes).unwrap_err(),
            opt.load_state_adopting(&bytes).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(e.contains(field) && e.contains("never adopts"), "{e}");
        }
        assert_eq!(opt.step_count(), 0);
    }
}

/// `bytes` as the format before the options (version 3) wrote them: the options' section
/// removed, the version 3 and the checksum recomputed.
fn as_version_3(bytes: &[u8]) -> Vec<u8> {
    let mut at = 40;
    let text = |at: &mut usize| *at += 1 + bytes[*at] as usize;
    text(&mut at);
    text(&mut at);
    let count = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let knobs = count(at);
    at += 2;
    for _ in 0..2 * knobs {
        text(&mut at);
    }
    let start = at;
    let options = count(at);
    at += 2;
    for _ in 0..options {
        text(&mut at);
        at += 2 + count(at) as usize;
    }
    let mut old = [&bytes[..start], &bytes[at..bytes.len() - 4]].concat();
    old[8..10].copy_from_slice(&3u16.to_le_bytes());
    let mut crc = Crc32::default();
    crc.update(&old);
    old.extend_from_slice(&crc.finish().to_le_bytes());
    old
}

#[test]
fn a_state_before_the_options_loads_with_the_optimizers_own() {
    let bytes = saved(scheduled());
    let old = as_version_3(&bytes);
    assert!(old.len() < bytes.len());
    let mut opt = VarOptimizer::from_named(weight(), plain()).unwrap();
    opt.load_state(&old).unwrap();
    assert_eq!(opt.step_count(), 1);
    assert_eq!(opt.config(), &plain());
    let mut with_them = VarOptimizer::from_named(weight(), scheduled()).unwrap();
    with_them.load_state(&old).unwrap();
    assert_eq!(with_them.save_state().unwrap(), bytes);
}
