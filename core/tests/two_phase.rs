//! The two-phase step ([`Optimizer::begin`]): a model split into several slices, of several
//! storage types, steps as one model; parameter groups; misuse is an error, never a panic.

mod common;

use common::{configs, Model};
use homeadam_core::*;

fn params() -> Vec<Vec<f32>> {
    (0..4)
        .map(|k| {
            (0..(37 + 50 * k))
                .map(|i| ((i * 7 + k) % 11) as f32 * 0.1 - 0.5)
                .collect()
        })
        .collect()
}

fn grads(t: usize) -> Vec<Vec<f32>> {
    params()
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let scale = [1e-2, 1e-7, 1.0, 0.0][k];
            (0..p.len())
                .map(|i| ((i * 13 + t * 5) % 17) as f32 * scale - 8.0 * scale)
                .collect()
        })
        .collect()
}

/// Steps `m` through begin / check / update / finish, the model cut in two slices.
fn two_slices(opt: &mut Optimizer, m: &mut Model<bf16, f32, f32>) -> Result<StepReport, Error> {
    let mut tensors: Vec<Tensor<'_, bf16, f32, f32>> = m
        .params
        .iter_mut()
        .zip(&m.grads)
        .zip(m.states.iter_mut())
        .zip(m.aux.iter_mut())
        .zip(&m.groups)
        .map(|((((p, g), s), a), &group)| Tensor::new(p, g, s, a).in_group(group))
        .collect();
    let (a, b) = tensors.split_at_mut(1);
    let mut step = opt.begin(1.0)?;
    step.check(a)?;
    step.check(b)?;
    let mut updates = step.decide()?;
    updates.update(a)?;
    updates.update(b)?;
    updates.finish()
}

#[test]
fn two_slices_step_as_one_model() {
    for mut config in configs() {
        config.rounding = Rounding::Stochastic; // the tensor index keys the rounding
        let mut one = Optimizer::new(config).unwrap();
        let mut split = one.clone();
        let mut a = Model::<bf16, f32, f32>::new(&one, &params());
        a.groups[2] = Group::NO_DECAY;
        a.groups[3] = Group {
            lr_scale: 0.25,
            ..Group::DEFAULT
        };
        let mut b = a.clone();
        for t in 1..=4 {
            a.set_grads(&grads(t));
            b.set_grads(&grads(t));
            let ra = a.step(&mut one, 1.0, false).unwrap();
            let rb = two_slices(&mut split, &mut b).unwrap();
            let name = config.name();
            assert_eq!(format!("{ra:?}"), format!("{rb:?}"), "{name}");
            assert_eq!(a.param_bits(), b.param_bits(), "{name}");
            assert_eq!(a.state_bits(), b.state_bits(), "{name}");
            assert_eq!(a.aux_bits(), b.aux_bits(), "{name}");
            assert_eq!(one, split, "{name}");
        }
    }
}

#[test]
fn slices_of_different_storage_share_one_global_decision() {
    // v̂ of the f32 tensor is ~1e-4, of the bf16 one ~1e-14: τ = 1e-10 sends both home.
    let mut config = Config::new(Rule::HomeAdamW(Switch::Global));
    config.tau = 1e-10;
    let mut opt = Optimizer::new(config).unwrap();
    let (mut w, gw, mut sw, mut aw) = ([0.5f32; 8], [1e-2f32; 8], [0.0f32; 16], TensorAux::default());
    let (mut e, ge) = ([bf16::ONE; 4], [bf16::from_f32(1e-7); 4]);
    let (mut se, mut ae) = ([bf16::ZERO; 8], TensorAux::default());
    let mut dense = [Tensor::new(&mut w, &gw, &mut sw, &mut aw)];
    let mut embedding = [Tensor::new(&mut e, &ge, &mut se, &mut ae)];
    let mut step = opt.begin(1.0).unwrap();
    step.check(&mut dense).unwrap();
    step.check(&mut embedding).unwrap();
    let mut updates = step.decide().unwrap();
    updates.update(&mut dense).unwrap();
    updates.update(&mut embedding).unwrap();
    let report = updates.finish().unwrap();
    assert_eq!(report.home_elements, 12);
    assert_eq!((aw.home_elements, ae.home_elements), (8, 4));
    assert!(report.rho.unwrap() < 1e-10);
}

#[test]
fn a_group_steps_as_its_own_config() {
    let group = Group {
        lr_scale: 0.5,
        ..Group::NO_DECAY
    };
    for config in configs() {
        let mut grouped = Optimizer::new(config).unwrap();
        let mut plain = Optimizer::new(config.for_group(group)).unwrap();
        let mut a = Model::<f32, f32, f32>::new(&grouped, &params()[1..2]);
        a.groups[0] = group;
        let mut b = Model::<f32, f32, f32>::new(&plain, &params()[1..2]);
        for t in 1..=4 {
            a.set_grads(&grads(t)[1..2]);
            b.set_grads(&grads(t)[1..2]);
            a.step(&mut grouped, 1.0, false).unwrap();
            b.step(&mut plain, 1.0, false).unwrap();
            assert_eq!(a.param_bits(), b.param_bits(), "{}", config.name());
            assert_eq!(a.state_bits(), b.state_bits(), "{}", config.name());
        }
    }
}

#[test]
fn bad_groups_are_refused() {
    let mut config = Config::new(Rule::AdamW);
    config.weight_decay = 0.5;
    let mut opt = Optimizer::new(config).unwrap();
    let (mut p, g, mut s, mut a) = ([1.0f32; 2], [0.1f32; 2], [0.0f32; 4], TensorAux::default());
    let mut refused = |lr_scale: f64, decay: bool| {
        let group = Group {
            lr_scale,
            decay,
            ..Group::DEFAULT
        };
        let model = &mut [Tensor::new(&mut p, &g, &mut s, &mut a).in_group(group)];
        opt.step(model, 1.0).unwrap_err()
    };
    for (scale, decay) in [(f64::NAN, true), (-1.0, true), (f64::INFINITY, false)] {
        let err = refused(scale, decay);
        assert!(matches!(err, Error::InvalidLrScale { tensor: 0, .. }), "{err:?}");
    }
    // η·scale·λ = 1e-3 · 4000 · 0.5 ≥ 1: decoupled decay would flip the sign.
    let err = refused(4000.0, true);
    assert!(matches!(err, Error::DecayTooLarge { .. }), "{err:?}");
    assert!(err.to_string().contains("lr * weight_decay"));
    assert_eq!(opt.step_count(), 0);
}

#[test]
fn updates_other_than_the_checked_tensors_are_errors() {
    let mut opt = Optimizer::new(Config::new(Rule::AdamW)).unwrap();
    let (mut p, g, mut s, mut a) = ([1.0f32; 2], [0.1f32; 2], [0.0f32; 4], TensorAux::default());
    let mut t = [Tensor::new(&mut p, &g, &mut s, &mut a)];

    let mut updates = opt.begin(1.0).unwrap().decide().unwrap();
    assert!(matches!(updates.update(&mut t), Err(Error::StepOrder(_))));
    assert!(matches!(updates.finish(), Ok(report) if report.step == 1));

    let mut step = opt.begin(1.0).unwrap();
    step.check(&mut t).unwrap();
    let mut updates = step.decide().unwrap();
    updates.update(&mut t).unwrap();
    assert!(matches!(updates.update(&mut t), Err(Error::StepOrder(_))));
    assert_eq!(updates.finish().unwrap().step, 2);

    let mut step = opt.begin(1.0).unwrap();
    step.check(&mut t).unwrap();
    let updates = step.decide().unwrap();
    assert!(matches!(updates.finish(), Err(Error::StepOrder(_))));
    assert_eq!(opt.step_count(), 2, "an unfinished step is not counted");

    let mut step = opt.begin(1.0).unwrap();
    step.check(&mut t).unwrap();
    step.decide().unwrap().update(&mut t).unwrap();
    // Dropped without finish: not counted.
    assert_eq!(opt.step_count(), 2);
}

#[test]
fn a_skipped_step_reports_the_unchanged_count() {
    let mut opt = Optimizer::new(Config::new(Rule::AdamW)).unwrap();
    let (mut p, mut s, mut a) = ([1.0f32; 2], [0.0f32; 4], TensorAux::default());
    let ok = [0.1f32; 2];
    opt.step(&mut [Tensor::new(&mut p, &ok, &mut s, &mut a)], 1.0)
        .unwrap();
    let bad = [f32::NAN, 0.1];
    let report = opt
        .step(&mut [Tensor::new(&mut p, &bad, &mut s, &mut a)], 1.0)
        .unwrap();
    assert_eq!(report, StepReport::skipped(1));
    assert_eq!(opt.step_count(), 1);
}
