//! What a user of the core relies on: skipped steps, typed errors, the HomeAdam decisions,
//! first-step values against the formulas, and checkpoints that resume bit for bit.

mod common;

use common::{configs, Model, StateBits};
use homeadam_core::*;

fn model_params() -> Vec<Vec<f32>> {
    vec![
        (0..70).map(|i| (i as f32 * 0.37).sin()).collect(),
        vec![0.5, -0.25, 2.0],
    ]
}

fn grads(step: usize) -> Vec<Vec<f32>> {
    vec![
        (0..70)
            .map(|i| ((i + 3 * step) as f32 * 0.11).cos() * 1e-2)
            .collect(),
        vec![1e-7 * step as f32, -2e-7, 3e-7],
    ]
}

#[test]
fn a_non_finite_gradient_skips_the_whole_step() {
    for mut config in configs() {
        for check in [FiniteCheck::SkipStep, FiniteCheck::Trust] {
            config.finite_check = check;
            let mut opt = Optimizer::new(config).unwrap();
            let mut m = Model::<f32, f32, f32>::new(&opt, &model_params());
            m.set_grads(&grads(1));
            m.step(&mut opt, 1.0, false).unwrap();
            let (params, state) = (m.param_bits(), m.state_bits());
            let mut bad = grads(2);
            bad[1][2] = f32::NAN;
            m.set_grads(&bad);
            let report = m.step(&mut opt, 1.0, false).unwrap();
            let home = matches!(config.rule.switch(), Some(Switch::Global | Switch::Layer));
            if check == FiniteCheck::SkipStep || home {
                assert!(report.skipped, "{}", config.rule.name());
                assert_eq!(opt.step_count(), 1);
                assert_eq!(m.param_bits(), params, "{}", config.rule.name());
                assert_eq!(m.state_bits(), state, "{}", config.rule.name());
                assert!(m
                    .aux
                    .iter()
                    .all(|a| a.rho == f32::INFINITY && a.home_elements == 0));
            } else {
                assert!(
                    !report.skipped && report.nonfinite_applied,
                    "{}",
                    config.rule.name()
                );
                assert_eq!(opt.step_count(), 2);
            }
        }
    }
}

#[test]
fn overflow_on_unscaling_counts_as_non_finite() {
    let mut opt = Optimizer::new(Config::new(Rule::AdamW)).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &[vec![1.0]]);
    m.set_grads(&[vec![3e38]]);
    assert!(m.step(&mut opt, 0.5, false).unwrap().skipped);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let mut opt = Optimizer::new(Config::new(Rule::AdamW)).unwrap();
    let (mut p, g, mut s, mut a) = ([1.0f32; 4], [0.1f32; 3], [0.0f32; 8], TensorAux::default());
    let err = opt
        .step(&mut [Tensor::new(&mut p, &g, &mut s, &mut a)], 1.0)
        .unwrap_err();
    assert_eq!(
        err,
        Error::GradLength {
            tensor: 0,
            numel: 4,
            actual: 3
        }
    );
    let (g, mut s) = ([0.1f32; 4], [0.0f32; 7]);
    let err = opt
        .step(&mut [Tensor::new(&mut p, &g, &mut s, &mut a)], 1.0)
        .unwrap_err();
    assert_eq!(
        err,
        Error::StateLength {
            tensor: 0,
            slots: 2,
            numel: 4,
            per_slot: 4,
            actual: 7
        }
    );
    assert!(err
        .to_string()
        .contains("expected 8 = 2 state slots × 4 parameters"));
    let (mut p600, g600, mut q) = ([0.5f32; 600], [0.1f32; 600], [Q8Block::ZERO; 5]);
    let err = opt
        .step(&mut [Tensor::new(&mut p600, &g600, &mut q, &mut a)], 1.0)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tensor 0: state has 5 q8 blocks, expected 6 = 2 state slots × 3 blocks of 256 for 600 parameters"
    );
    let mut s = [0.0f32; 8];
    for scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = opt
            .step(&mut [Tensor::new(&mut p, &g, &mut s, &mut a)], scale)
            .unwrap_err();
        assert!(matches!(err, Error::InvalidGradScale(_)));
    }
    assert_eq!(opt.step_count(), 0);
    assert!(opt.set_lr(f64::INFINITY).is_err());
    assert!(opt.set_lr(1e-4).is_ok());
    // An empty model and empty tensors are fine.
    assert!(opt.step::<f32, f32, f32>(&mut [], 1.0).unwrap().rho.is_none());
    let (mut p0, g0, mut s0) = ([0.0f32; 0], [0.0f32; 0], [0.0f32; 0]);
    assert!(
        !opt.step(&mut [Tensor::new(&mut p0, &g0, &mut s0, &mut a)], 1.0)
            .unwrap()
            .skipped
    );
}

#[test]
fn f16_second_moment_is_refused_unless_allowed() {
    let mut config = Config::new(Rule::HomeAdamW(Switch::Element));
    let mut opt = Optimizer::new(config).unwrap();
    let (mut p, g, mut s, mut a) = ([1.0f32; 2], [0.1f32; 2], [f16::ZERO; 4], TensorAux::default());
    let err = opt
        .step(&mut [Tensor::new(&mut p, &g, &mut s, &mut a)], 1.0)
        .unwrap_err();
    assert_eq!(err, Error::F16SecondMoment);
    config.allow_f16_state = true;
    let mut opt = Optimizer::new(config).unwrap();
    assert!(opt
        .step(&mut [Tensor::new(&mut p, &g, &mut s, &mut a)], 1.0)
        .is_ok());
    // SGDM has no second moment: f16 state is fine.
    let mut opt = Optimizer::new(Config::named("sgdm").unwrap()).unwrap();
    let mut s = [f16::ZERO; 2];
    assert!(opt
        .step(&mut [Tensor::new(&mut p, &g, &mut s, &mut a)], 1.0)
        .is_ok());
}

/// Tensor 0 has |g| ~ 1e-2 (v̂ ~ 1e-4), tensor 1 has |g| ~ 1e-7 (v̂ ~ 1e-14) at step 1.
fn home_elements(switch: Switch, tau: f64) -> (u64, [u32; 2], f32) {
    let mut config = Config::new(Rule::HomeAdamW(switch));
    config.tau = tau;
    let mut opt = Optimizer::new(config).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &model_params());
    m.set_grads(&grads(1));
    let report = m.step(&mut opt, 1.0, false).unwrap();
    (
        report.home_elements,
        [m.aux[0].home_elements, m.aux[1].home_elements],
        report.rho.unwrap(),
    )
}

#[test]
fn the_switch_is_decided_globally_per_layer_or_per_element() {
    // τ between the two tensors' v̂: global goes home everywhere, per-layer only in tensor 1.
    assert_eq!(home_elements(Switch::Global, 1e-10).1, [70, 3]);
    assert_eq!(home_elements(Switch::Layer, 1e-10).1, [0, 3]);
    assert_eq!(home_elements(Switch::Element, 1e-10).1, [0, 3]);
    // τ below every v̂ (step 1: v̂ = g², the smallest 4e-14... but g₀ of tensor 1 is 1e-7): srf.
    assert_eq!(home_elements(Switch::Global, 1e-16).0, 0);
    // τ inside tensor 0's range: element-wise splits it.
    let (total, per_tensor, _) = home_elements(Switch::Element, 2e-5);
    assert!(per_tensor[0] > 0 && per_tensor[0] < 70 && total == per_tensor[0] as u64 + 3);
    assert_eq!(home_elements(Switch::Layer, 2e-5).1, [70, 3]);
    // ρ₁ = min g² over the model (v̂₁ = g² at t = 1, up to rounding).
    let rho = home_elements(Switch::Global, 1e-10).2 as f64;
    let expected = 1e-14f64; // g = 1e-7 in tensor 1
    assert!((rho - expected).abs() < 1e-6 * expected, "rho {rho:e}");
}

#[test]
fn first_steps_follow_the_formulas() {
    // t = 1: m̂ = g, v̂ = g² exactly (bias corrections cancel up to f32 rounding).
    let (theta, g, lr, wd, eps) = (0.75f64, -0.02f64, 1e-2, 1e-2, 1e-8);
    let run = |rule| {
        let mut c = Config::new(rule);
        c.lr = lr;
        c.eps = eps;
        c.weight_decay = if matches!(rule, Rule::AdamSrf | Rule::HomeAdam(_)) {
            0.0
        } else {
            wd
        };
        c.tau = 1e-12;
        let mut opt = Optimizer::new(c).unwrap();
        let mut m = Model::<f32, f32, f32>::new(&opt, &[vec![theta as f32]]);
        m.set_grads(&[vec![g as f32]]);
        m.step(&mut opt, 1.0, false).unwrap();
        m.params_f32()[0][0] as f64
    };
    let close = |a: f64, b: f64| assert!((a - b).abs() <= 1e-6 * b.abs(), "{a} vs {b}");
    close(run(Rule::AdamWSrf), theta - lr * (g / (g * g + eps) + wd * theta));
    close(run(Rule::AdamSrf), theta - lr * g / (g * g + eps));
    close(
        run(Rule::AdamW),
        theta * (1.0 - lr * wd) - lr * g / (g.abs() + eps),
    );
    close(run(Rule::Sgd), theta - lr * (g + wd * theta));
    // τ above v̂ = 4e-4: the home (SGDM) branch, θ − η(m̂ + λθ).
    let mut c = Config::new(Rule::HomeAdamW(Switch::Global));
    c.lr = lr;
    c.weight_decay = wd;
    c.tau = 1.0;
    let mut opt = Optimizer::new(c).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &[vec![theta as f32]]);
    m.set_grads(&[vec![g as f32]]);
    m.step(&mut opt, 1.0, false).unwrap();
    close(m.params_f32()[0][0] as f64, theta - lr * (g + wd * theta));
}

fn tensor_states<'a, S>(m: &'a mut Model<f32, f32, S>) -> Vec<TensorStateMut<'a, S>> {
    m.states
        .iter_mut()
        .zip(m.aux.iter_mut())
        .zip(&m.params)
        .map(|((state, aux), p)| TensorStateMut {
            numel: p.len(),
            state,
            aux,
        })
        .collect()
}

fn saved_states<'a, S>(m: &'a Model<f32, f32, S>) -> Vec<TensorState<'a, S>> {
    m.states
        .iter()
        .zip(&m.aux)
        .zip(&m.params)
        .map(|((state, aux), p)| TensorState {
            numel: p.len(),
            state,
            aux,
        })
        .collect()
}

fn save<S: StateBits>(opt: &Optimizer, m: &Model<f32, f32, S>) -> Vec<u8> {
    let numels: Vec<usize> = m.params.iter().map(Vec::len).collect();
    let mut bytes = vec![0u8; opt.state_bytes(numels, S::DTYPE)];
    let mut sink = SliceSink::new(&mut bytes);
    opt.save_state(&saved_states(m), &mut sink).unwrap();
    assert_eq!(sink.len(), bytes.len());
    bytes
}

fn resumes_bit_for_bit<S: StateBits>() {
    for mut config in configs() {
        config.lr = 1e-2;
        let mut opt = Optimizer::new(config).unwrap();
        let mut m = Model::<f32, f32, S>::new(&opt, &model_params());
        for t in 1..=4 {
            m.set_grads(&grads(t));
            m.step(&mut opt, 1.0, false).unwrap();
        }
        let bytes = save(&opt, &m);
        let mut resumed_opt = Optimizer::new(config).unwrap();
        let mut resumed = Model::<f32, f32, S>::new(&resumed_opt, &model_params());
        resumed.params = m.params.clone();
        resumed_opt
            .load_state(&bytes, &mut tensor_states(&mut resumed))
            .unwrap();
        assert_eq!(resumed_opt, opt, "{}", config.rule.name());
        for t in 5..=8 {
            m.set_grads(&grads(t));
            resumed.set_grads(&grads(t));
            m.step(&mut opt, 1.0, false).unwrap();
            resumed.step(&mut resumed_opt, 1.0, false).unwrap();
        }
        assert_eq!(m.param_bits(), resumed.param_bits(), "{}", config.rule.name());
        assert_eq!(m.state_bits(), resumed.state_bits(), "{}", config.rule.name());
    }
}

#[test]
fn checkpoints_resume_bit_for_bit() {
    resumes_bit_for_bit::<bf16>();
}

#[test]
fn q8_checkpoints_resume_bit_for_bit() {
    resumes_bit_for_bit::<Q8Block>();
}

#[test]
fn swats_switches_and_its_phase_is_saved() {
    let mut config = Config::new(Rule::Swats);
    config.eps = 0.5;
    let mut opt = Optimizer::new(config).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &model_params());
    let mut switched = false;
    for t in 1..=20 {
        m.set_grads(&grads(t));
        switched |= m.step(&mut opt, 1.0, false).unwrap().swats_switched;
    }
    assert!(switched && opt.swats_sgd_lr().is_some());
    let bytes = save(&opt, &m);
    let mut fresh = Optimizer::new(config).unwrap();
    let mut other = Model::<f32, f32, f32>::new(&fresh, &model_params());
    fresh.load_state(&bytes, &mut tensor_states(&mut other)).unwrap();
    assert_eq!(fresh.swats_sgd_lr(), opt.swats_sgd_lr());
}

#[test]
fn corrupt_or_mismatched_checkpoints_are_refused_and_change_nothing() {
    let config = Config::new(Rule::AdamW);
    let mut opt = Optimizer::new(config).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &model_params());
    m.set_grads(&grads(1));
    m.step(&mut opt, 1.0, false).unwrap();
    let bytes = save(&opt, &m);

    let mut target_opt = Optimizer::new(config).unwrap();
    let mut target = Model::<f32, f32, f32>::new(&target_opt, &model_params());
    let mut load = |bytes: &[u8]| {
        target_opt
            .load_state(bytes, &mut tensor_states(&mut target))
            .unwrap_err()
    };

    let mut flipped = bytes.clone();
    flipped[100] ^= 1;
    assert_eq!(
        load(&flipped),
        Error::Checkpoint(CheckpointError::ChecksumMismatch)
    );
    assert_eq!(
        load(&bytes[..bytes.len() - 1]),
        Error::Checkpoint(CheckpointError::Truncated)
    );
    assert_eq!(load(&bytes[..20]), Error::Checkpoint(CheckpointError::Truncated));
    assert_eq!(
        load(b"not a checkpoint"),
        Error::Checkpoint(CheckpointError::BadMagic)
    );
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(load(&longer), Error::Checkpoint(CheckpointError::TrailingBytes));
    let mut future = bytes.clone();
    future[8] = 9;
    assert_eq!(
        load(&future),
        Error::Checkpoint(CheckpointError::UnsupportedVersion(9))
    );
    assert_eq!(
        target.state_bits(),
        Model::<f32, f32, f32>::new(&opt, &model_params()).state_bits()
    );
    assert_eq!(target_opt.step_count(), 0);

    let mut adam_opt = Optimizer::new(Config::new(Rule::Adam)).unwrap();
    let mut adam = Model::<f32, f32, f32>::new(&adam_opt, &model_params());
    let err = adam_opt
        .load_state(&bytes, &mut tensor_states(&mut adam))
        .unwrap_err();
    assert_eq!(err, Error::Checkpoint(CheckpointError::RuleMismatch));

    let mut bf = Model::<f32, f32, bf16>::new(&opt, &model_params());
    let mut bf_opt = Optimizer::new(config).unwrap();
    let err = bf_opt
        .load_state(&bytes, &mut tensor_states(&mut bf))
        .unwrap_err();
    assert_eq!(err, Error::Checkpoint(CheckpointError::DtypeMismatch));

    let mut small = Model::<f32, f32, f32>::new(&opt, &model_params()[..1]);
    let err = bf_opt
        .load_state(&bytes, &mut tensor_states(&mut small))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Checkpoint(CheckpointError::TensorCountMismatch { stored: 2, given: 1 })
    );

    let mut short = [0u8; 16];
    let err = opt
        .save_state(&saved_states(&m), &mut SliceSink::new(&mut short))
        .unwrap_err();
    assert_eq!(err, Error::Checkpoint(CheckpointError::BufferTooSmall));
}

/// `bytes` with its CRC-32 recomputed, so a test reaches the checks after the checksum.
fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
    let body = bytes.len() - 4;
    let mut crc = backend::Crc32::default();
    crc.update(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.finish().to_le_bytes());
    bytes
}

/// Inputs the fuzzer found: a tensor size whose byte count overflows, and header fields that
/// no save writes (they could not be saved back). Each is an error, never a panic.
#[test]
fn impossible_checkpoint_fields_are_corrupt() {
    let config = Config::new(Rule::AdamW);
    let opt = Optimizer::new(config).unwrap();
    let m = Model::<f32, f32, f32>::new(&opt, &model_params());
    let bytes = save(&opt, &m);
    let corrupt = Error::Checkpoint(CheckpointError::Corrupt);
    let load = |bytes: Vec<u8>| {
        let mut opt = Optimizer::new(config).unwrap();
        let mut target = Model::<f32, f32, f32>::new(&opt, &model_params());
        opt.load_state(&resealed(bytes), &mut tensor_states(&mut target))
            .unwrap_err()
    };
    let mut huge = bytes.clone();
    // 2 slots × 4 bytes × numel = 2⁶⁴ − 8: the tensor header (12 bytes) overflows the sum.
    huge[36..44].copy_from_slice(&((u64::MAX - 4) / 8).to_le_bytes());
    assert_eq!(load(huge), corrupt);
    let mut stray_rate = bytes.clone();
    stray_rate[24] = 1; // SWATS's rate without its phase
    assert_eq!(load(stray_rate), corrupt);
    let mut phase = bytes.clone();
    phase[13] = 1; // an SGD phase for AdamW
    assert_eq!(load(phase), corrupt);
    let mut reserved = bytes;
    reserved[15] = 1;
    assert_eq!(load(reserved), corrupt);
}
