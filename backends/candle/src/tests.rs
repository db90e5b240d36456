//! The adapter against the core on the same numbers.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::Optimizer as _;
use homeadam_core::{bf16, f16, Config, Group, Rounding, Rule, Storage, Switch, TensorAux};

use super::*;
use crate::params::OnStates;

/// Deterministic values in [-1, 1) (splitmix64).
fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let z = homeadam_core::backend::mix64(seed.wrapping_mul(0x9E37_79B9) ^ i);
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

const SHAPES: [(&str, &[usize]); 5] = [
    ("conv.weight", &[4, 3]),
    ("conv.bias", &[4]),
    ("bn.running_mean", &[4]),
    ("fc.weight", &[2, 5]),
    ("fc.bias", &[2]),
];

fn model(dtype: DType) -> Vec<(String, Var)> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(k, (name, shape))| {
            let n = shape.iter().product();
            let t = Tensor::from_vec(values(k as u64, n), *shape, &Device::Cpu).unwrap();
            (
                name.to_string(),
                Var::from_tensor(&t.to_dtype(dtype).unwrap()).unwrap(),
            )
        })
        .collect()
}

/// The gradient of Σ_k sum(w_k ⊙ c_k) is exactly c_k; the running mean gets none. `tiny`
/// scales the gradient of the first tensor (to drive ρ below τ).
fn grads_for(vars: &[(String, Var)], step: u64, tiny: f32) -> (GradStore, Vec<Vec<f32>>) {
    let mut loss = Tensor::new(0f32, &Device::Cpu).unwrap();
    let mut cs = Vec::new();
    for (k, (name, var)) in vars.iter().enumerate() {
        let mut c = values(1000 * step + k as u64, var.elem_count());
        if k == 0 {
            c.iter_mut().for_each(|x| *x *= tiny);
        }
        if name.contains("running") {
            cs.push(Vec::new());
            continue;
        }
        let ct = Tensor::from_vec(c.clone(), var.shape(), &Device::Cpu)
            .unwrap()
            .to_dtype(var.dtype())
            .unwrap();
        // Round c through the parameter type so the core sees the same gradient.
        cs.push(
            ct.to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap(),
        );
        let term = (var.as_tensor() * &ct).unwrap().sum_all().unwrap();
        loss = (loss + term.to_dtype(DType::F32).unwrap()).unwrap();
    }
    (loss.backward().unwrap(), cs)
}

fn flat(var: &Var) -> Vec<f32> {
    var.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// The same steps through one plain core call per step, over the variables with a gradient,
/// each in its group.
fn core_run<P: Storage>(
    config: Config,
    groups: &[Group],
    steps: u64,
    tiny: f32,
    dtype: DType,
) -> Vec<Vec<f32>> {
    let vars = model(dtype);
    let mut params: Vec<Vec<P>> = vars
        .iter()
        .map(|(_, v)| flat(v).into_iter().map(P::from_f32).collect())
        .collect();
    let mut opt = homeadam_core::Optimizer::new(config).unwrap();
    let mut states: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; opt.state_len(p.len())]).collect();
    let mut aux = vec![TensorAux::default(); params.len()];
    for step in 0..steps {
        let (_, cs) = grads_for(&vars, step, tiny);
        let grads: Vec<Vec<P>> = cs
            .iter()
            .map(|c| c.iter().map(|&x| P::from_f32(x)).collect())
            .collect();
        let mut tensors: Vec<_> = params
            .iter_mut()
            .zip(&grads)
            .zip(states.iter_mut().zip(aux.iter_mut()))
            .zip(groups)
            .filter(|(((_, g), _), _)| !g.is_empty())
            .map(|(((p, g), (s, a)), &group)| homeadam_core::Tensor::new(p, g, s, a).in_group(group))
            .collect();
        opt.step(&mut tensors, 1.0).unwrap();
    }
    params
        .iter()
        .map(|p| p.iter().map(|x| x.to_f32()).collect())
        .collect()
}

fn groups(opt: &VarOptimizer) -> Vec<Group> {
    opt.params.iter().map(|p| p.group).collect()
}

fn adapter_run(config: OptimConfig, steps: u64, tiny: f32, dtype: DType) -> (Vec<Vec<f32>>, VarOptimizer) {
    let vars = model(dtype);
    let mut opt = VarOptimizer::from_named(vars.clone(), config).unwrap();
    for step in 0..steps {
        let (grads, _) = grads_for(&vars, step, tiny);
        opt.step(&grads).unwrap();
    }
    (vars.iter().map(|(_, v)| flat(v)).collect(), opt)
}

fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter()
        .map(|t| t.iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// The group of the variables named `prefix…`, at η × `lr_scale`.
fn scaled(prefix: &str, lr_scale: f64) -> (String, GroupSettings) {
    let settings = GroupSettings {
        lr_scale,
        ..GroupSettings::DEFAULT
    };
    (prefix.into(), settings)
}

fn single_group(mut core: Config) -> OptimConfig {
    core.lr = 1e-2;
    let mut c = OptimConfig::new(core);
    c.decay_all = true;
    c
}

#[test]
fn bit_identical_to_the_core_in_one_call() {
    let mut swats = Config::new(Rule::Swats);
    swats.weight_decay = 1e-3;
    let mut tau_mid = Config::new(Rule::HomeAdamW(Switch::Global));
    tau_mid.tau = 1e-6;
    for core in [
        Config::new(Rule::AdamW),
        Config::new(Rule::HomeAdamW(Switch::Global)),
        tau_mid,
        Config::new(Rule::HomeAdam(Switch::Element)),
        Config::named("sgdm").unwrap(),
        swats,
        Config::new(Rule::MiAdam),
        Config::new(Rule::AdaBelief),
    ] {
        let config = single_group(core);
        for tiny in [1.0, 1e-4] {
            let (got, opt) = adapter_run(config.clone(), 6, tiny, DType::F32);
            let want = core_run::<f32>(*opt.opt.config(), &groups(&opt), 6, tiny, DType::F32);
            assert_eq!(bits(&got), bits(&want), "{} tiny {tiny}", core.name());
            // The running mean has no gradient: untouched.
            assert_eq!(got[2], values(2, 4));
        }
    }
}

#[test]
fn bf16_parameters_with_stochastic_rounding() {
    let mut core = Config::new(Rule::AdamW);
    core.rounding = Rounding::Stochastic;
    core.seed = 42;
    let config = single_group(core);
    let (got, opt) = adapter_run(config, 5, 1.0, DType::BF16);
    let want = core_run::<bf16>(*opt.opt.config(), &groups(&opt), 5, 1.0, DType::BF16);
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn bf16_state() {
    let mut config = single_group(Config::new(Rule::HomeAdamW(Switch::Element)));
    config.state_dtype = homeadam_core::Dtype::BF16;
    let (got, _) = adapter_run(config, 3, 1.0, DType::F32);
    assert!(got.iter().flatten().all(|x| x.is_finite()));
    let mut f16_config = single_group(Config::new(Rule::Adam));
    f16_config.state_dtype = homeadam_core::Dtype::F16;
    assert!(VarOptimizer::from_named(model(DType::F32), f16_config).is_err());
}

/// Groups: decayed weights, exempt biases and a learning-rate multiplier under one model-wide
/// HomeAdam decision, as one core step with the same groups.
#[test]
fn groups_are_one_core_step_with_one_global_decision() {
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.lr = 1e-2;
    core.weight_decay = 0.1;
    core.tau = 1e-6;
    let mut config = OptimConfig::new(core);
    config.decay_all = false;
    config.groups = vec![scaled("fc.", 0.5)];
    // tiny = 1e-4 puts ρ below τ in conv.weight only (v̂ ~ 1e-8): every tensor must go home.
    for (tiny, home) in [(1e-4f32, true), (1.0, false)] {
        let (got, opt) = adapter_run(config.clone(), 3, tiny, DType::F32);
        let g = groups(&opt);
        assert_eq!(
            g.iter().map(|g| (g.lr_scale, g.decay)).collect::<Vec<_>>(),
            [(1.0, true), (1.0, false), (1.0, false), (0.5, true), (0.5, false)]
        );
        let want = core_run::<f32>(*opt.opt.config(), &g, 3, tiny, DType::F32);
        assert_eq!(bits(&got), bits(&want), "tiny {tiny}");
        let report = opt.last_report().unwrap().report;
        let stepped = 12 + 4 + 10 + 2;
        assert_eq!(
            report.home_elements,
            if home { stepped } else { 0 },
            "tiny {tiny}"
        );
    }
}

/// The global rule bounds ρ_t from the variables the last step updated: a step that leaves a
/// variable without a gradient, and the step after it, decide on the exact first pass, as the
/// core's reference over the same variables.
#[test]
fn a_variable_left_without_a_gradient_decides_exactly() {
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.tau = 1e-6;
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), single_group(core)).unwrap();
    let mut reference = homeadam_core::Optimizer::new(*opt.opt.config()).unwrap();
    let g = groups(&opt);
    let mut params: Vec<Vec<f32>> = vars.iter().map(|(_, v)| flat(v)).collect();
    let mut states: Vec<Vec<f32>> = params
        .iter()
        .map(|p| vec![0.0; reference.state_len(p.len())])
        .collect();
    let mut aux = vec![TensorAux::default(); params.len()];
    let mut last_skip = 0;
    for step in 0..8 {
        // conv.weight sits out steps 3 and 4.
        let out = step == 3 || step == 4;
        let skip = usize::from(out);
        // Another model than the last step's: the reference forgets its bound, as the adapter.
        if skip != last_skip {
            reference.forget_bound();
            last_skip = skip;
        }
        let (grads, cs) = grads_for(&vars[skip..], step, 1.0);
        opt.step(&grads).unwrap();
        let mut tensors: Vec<_> = params
            .iter_mut()
            .zip(states.iter_mut())
            .zip(aux.iter_mut())
            .zip(&g)
            .enumerate()
            .skip(skip)
            .filter_map(|(k, (((p, s), a), &group))| {
                let c = &cs[k - skip];
                (!c.is_empty()).then(|| homeadam_core::Tensor::new(p, c, s, a).in_group(group))
            })
            .collect();
        reference.step_reference(&mut tensors, 1.0).unwrap();
        let got: Vec<Vec<f32>> = vars.iter().map(|(_, v)| flat(v)).collect();
        assert_eq!(bits(&got), bits(&params), "step {step}");
    }
    let exact = opt.opt.exact_first_passes();
    assert!((3..8).contains(&exact), "{exact} exact first passes in 8 steps");
}

/// Variables of f32, bf16 and f16 in one model: one core step over slices of three types.
#[test]
fn mixed_parameter_dtypes_share_one_step() {
    let dtypes = [DType::F32, DType::F32, DType::F32, DType::BF16, DType::F16];
    let mixed = || -> Vec<(String, Var)> {
        model(DType::F32)
            .into_iter()
            .zip(dtypes)
            .map(|((n, v), d)| (n, Var::from_tensor(&v.to_dtype(d).unwrap()).unwrap()))
            .collect()
    };
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.lr = 1e-2;
    core.tau = 1e-6;
    core.rounding = Rounding::Stochastic;
    core.seed = 9;
    let config = single_group(core);
    for tiny in [1e-4, 1.0] {
        let vars = mixed();
        let mut opt = VarOptimizer::from_named(vars.clone(), config.clone()).unwrap();
        for step in 0..4 {
            opt.step(&grads_for(&vars, step, tiny).0).unwrap();
        }
        let got: Vec<Vec<f32>> = vars.iter().map(|(_, v)| flat(v)).collect();

        let start = mixed();
        let mut w: Vec<Vec<f32>> = start[..3].iter().map(|(_, v)| flat(v)).collect();
        let mut b: Vec<bf16> = flat(&start[3].1).into_iter().map(bf16::from_f32).collect();
        let mut h: Vec<f16> = flat(&start[4].1).into_iter().map(f16::from_f32).collect();
        let mut core_opt = homeadam_core::Optimizer::new(*opt.opt.config()).unwrap();
        let mut st: Vec<Vec<f32>> = [12, 4, 4, 10, 2].iter().map(|&n| vec![0.0; 2 * n]).collect();
        let mut aux = [TensorAux::default(); 5];
        for step in 0..4 {
            let (_, cs) = grads_for(&start, step, tiny);
            let gb: Vec<bf16> = cs[3].iter().map(|&x| bf16::from_f32(x)).collect();
            let gh: Vec<f16> = cs[4].iter().map(|&x| f16::from_f32(x)).collect();
            let (st_w, st_rest) = st.split_at_mut(3);
            let (st_b, st_h) = st_rest.split_at_mut(1);
            let (aux_w, aux_rest) = aux.split_at_mut(3);
            let (aux_b, aux_h) = aux_rest.split_at_mut(1);
            // The running mean (index 2) has no gradient: not part of the step.
            let mut dense: Vec<_> = w
                .iter_mut()
                .zip(&cs)
                .zip(st_w.iter_mut().zip(aux_w.iter_mut()))
                .take(2)
                .map(|((p, g), (s, a))| homeadam_core::Tensor::new(p, g, s, a))
                .collect();
            let mut bfs = [homeadam_core::Tensor::new(
                &mut b,
                &gb,
                &mut st_b[0],
                &mut aux_b[0],
            )];
            let mut hs = [homeadam_core::Tensor::new(
                &mut h,
                &gh,
                &mut st_h[0],
                &mut aux_h[0],
            )];
            let mut step = core_opt.begin(1.0).unwrap();
            step.check(&mut dense).unwrap();
            step.check(&mut bfs).unwrap();
            step.check(&mut hs).unwrap();
            let mut updates = step.decide().unwrap();
            updates.update(&mut dense).unwrap();
            updates.update(&mut bfs).unwrap();
            updates.update(&mut hs).unwrap();
            updates.finish().unwrap();
        }
        let mut want = w;
        want.push(b.iter().map(|x| x.to_f32()).collect());
        want.push(h.iter().map(|x| x.to_f32()).collect());
        assert_eq!(bits(&got), bits(&want), "tiny {tiny}");
        assert_eq!(opt.step_count(), 4);
    }
}

#[test]
fn report_counts_every_element_and_backward_step_keeps_it() {
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.tau = 1e-6;
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    assert_eq!(opt.last_report(), None);
    let (grads, _) = grads_for(&vars, 0, 1e-4);
    let out = opt.step_with_report(&grads).unwrap();
    assert_eq!(out.report.home_elements, 12 + 4 + 10 + 2);
    assert_eq!((out.elements, out.home_share()), (28, 1.0));
    assert!(out.report.rho.unwrap() < 1e-6);
    assert_eq!(opt.step_count(), 1);
    assert_eq!(opt.last_report(), Some(out));

    let loss = vars
        .iter()
        .map(|(_, v)| v.as_tensor().sum_all().unwrap())
        .reduce(|a, b| (a + b).unwrap())
        .unwrap();
    opt.backward_step(&loss).unwrap();
    let last = opt.last_report().unwrap();
    // The running mean is in the loss here: it has a gradient and is stepped.
    assert_eq!((last.report.step, last.elements), (2, 32));
    assert!(!last.report.skipped);
}

#[test]
fn nonfinite_gradient_skips_the_whole_step() {
    let core = Config::new(Rule::AdamW);
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    let bad = Tensor::new(&[f32::NAN, 0.0], &Device::Cpu).unwrap();
    grads.insert(&vars[4].1, bad);
    let out = opt.step_with_report(&grads).unwrap();
    assert!(out.report.skipped);
    assert_eq!((out.report.step, opt.step_count()), (0, 0));
    for (k, (_, v)) in vars.iter().enumerate() {
        assert_eq!(flat(v), values(k as u64, v.elem_count()));
    }
}

#[test]
fn clipping_equals_the_core_with_the_norm_as_gradient_scale() {
    let mut config = single_group(Config::new(Rule::Adam));
    config.max_grad_norm = Some(0.5);
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), config).unwrap();
    let (grads, cs) = grads_for(&vars, 0, 1.0);
    let out = opt.step_with_report(&grads).unwrap();
    let norm = cs
        .iter()
        .flatten()
        .map(|&x| x as f64 * x as f64)
        .sum::<f64>()
        .sqrt();
    assert_eq!(out.grad_norm, Some(norm));
    assert_eq!(
        out.grad_norm,
        Some(global_grad_norm(&opt_vars(&vars), &grads).unwrap())
    );
    let mut core = homeadam_core::Optimizer::new(*opt.opt.config()).unwrap();
    let mut params: Vec<Vec<f32>> = model(DType::F32).iter().map(|(_, v)| flat(v)).collect();
    let mut states: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; 2 * p.len()]).collect();
    let mut aux = [TensorAux::default(); 5];
    let mut tensors: Vec<_> = params
        .iter_mut()
        .zip(&cs)
        .zip(states.iter_mut().zip(aux.iter_mut()))
        .filter(|((_, g), _)| !g.is_empty())
        .map(|((p, g), (s, a))| homeadam_core::Tensor::new(p, g, s, a))
        .collect();
    core.step(&mut tensors, norm / 0.5).unwrap();
    drop(tensors);
    let got: Vec<Vec<f32>> = vars.iter().map(|(_, v)| flat(v)).collect();
    assert_eq!(bits(&got), bits(&params));
}

fn opt_vars(vars: &[(String, Var)]) -> Vec<Var> {
    vars.iter().map(|(_, v)| v.clone()).collect()
}

/// Steps `steps` of `opt` on `vars`, advancing the schedule after each: ρ swings around τ, or
/// with `constant` every step has the first step's gradient.
fn train(vars: &[(String, Var)], opt: &mut VarOptimizer, steps: std::ops::Range<u64>, constant: bool) {
    for step in steps {
        let (grads, _) = match constant {
            true => grads_for(vars, 0, 1.0),
            false => grads_for(vars, step, if step % 3 == 0 { 1e-4 } else { 1.0 }),
        };
        opt.step(&grads).unwrap();
        opt.advance_schedule().unwrap();
    }
}

/// Trains 0..n straight and 0..k, save, load into a fresh optimizer over fresh variables,
/// k..n; both must end with the same parameter and state bits. Returns the optimizer saved.
fn assert_resumes(config: &OptimConfig, k: u64, n: u64, constant: bool, what: &str) -> VarOptimizer {
    let straight = model(DType::F32);
    let mut a = VarOptimizer::from_named(straight.clone(), config.clone()).unwrap();
    train(&straight, &mut a, 0..n, constant);

    let first = model(DType::F32);
    let mut b = VarOptimizer::from_named(first.clone(), config.clone()).unwrap();
    train(&first, &mut b, 0..k, constant);
    let bytes = b.save_state().unwrap();
    // A fresh process: new variables holding the saved values, a fresh optimizer.
    let resumed: Vec<(String, Var)> = first
        .iter()
        .map(|(n, v)| (n.clone(), Var::from_tensor(v.as_tensor()).unwrap()))
        .collect();
    let mut c = VarOptimizer::from_named(resumed.clone(), config.clone()).unwrap();
    c.load_state(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(
        (c.schedule_position(), c.step_count()),
        (k, b.step_count()),
        "{what}"
    );
    train(&resumed, &mut c, k..n, constant);
    let got: Vec<Vec<f32>> = resumed.iter().map(|(_, v)| flat(v)).collect();
    let want: Vec<Vec<f32>> = straight.iter().map(|(_, v)| flat(v)).collect();
    assert_eq!(bits(&got), bits(&want), "{what}");
    assert!(
        c.save_state().unwrap() == a.save_state().unwrap(),
        "{what}: state differs"
    );
    b
}

#[test]
fn save_load_continue_is_bit_identical() {
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.lr = 1e-2;
    core.tau = 1e-6;
    let mut config = OptimConfig::new(core);
    config.schedule = Schedule::Cosine {
        total: 6,
        min_lr: 1e-3,
    };
    config.groups = vec![scaled("fc.", 0.5)];
    assert_resumes(&config, 3, 6, false, "homeadamw, cosine");
}

/// Every config name, plain SGD (no state at all) included.
#[test]
fn every_optimizer_resumes_to_the_same_bits() {
    for name in Config::NAMES {
        let mut core = Config::named(name).unwrap();
        core.lr = 1e-2;
        if core.rule.switch().is_some() {
            core.tau = 1e-6;
        }
        let mut config = OptimConfig::new(core);
        config.groups = vec![scaled("fc.", 0.5)];
        config.schedule = Schedule::Step { every: 2, gamma: 0.5 };
        assert_resumes(&config, 4, 8, false, name);
        let mut bf16_state = config.clone();
        bf16_state.state_dtype = homeadam_core::Dtype::BF16;
        assert_resumes(&bf16_state, 3, 6, false, &format!("{name}, bf16 state"));
        let mut q8_state = config.clone();
        q8_state.state_dtype = homeadam_core::Dtype::Q8;
        assert_resumes(&q8_state, 3, 6, false, &format!("{name}, q8 state"));
    }
}

/// A constant gradient and the smallest ε (lost beside √v̂ in f32) make SWATS's step
/// −η sign(g), so its projected rate γ is constant: it switches to SGD at t = 2, and the
/// checkpoint carries the SGD phase and rate.
#[test]
fn swats_resumes_in_its_sgd_phase() {
    let mut config = single_group(Config::new(Rule::Swats));
    config.core.eps = f32::MIN_POSITIVE.into();
    let saved = assert_resumes(&config, 3, 6, true, "swats, constant gradient");
    assert!(saved.opt.swats_sgd_lr().is_some());
}

#[test]
fn load_refuses_mismatches_and_changes_nothing() {
    let vars = model(DType::F32);
    let core = Config::new(Rule::AdamW);
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let (grads, _) = grads_for(&vars, 0, 1.0);
    opt.step(&grads).unwrap();
    let bytes = opt.save_state().unwrap();
    let err = |opt: &mut VarOptimizer, b: &[u8]| opt.load_state(b).unwrap_err().to_string();

    let mut other =
        VarOptimizer::from_named(model(DType::F32), OptimConfig::new(Config::new(Rule::AdamWSrf))).unwrap();
    assert!(err(&mut other, &bytes).contains("another rule"));
    let before = other.save_state().unwrap();

    let mut corrupt = bytes.clone();
    corrupt[40] ^= 1;
    assert!(err(&mut other, &corrupt).contains("checksum"));
    assert!(err(&mut other, &bytes[..bytes.len() - 9]).contains("checksum"));
    assert!(err(&mut other, b"HACANDL").contains("magic"));
    assert!(err(&mut other, b"").contains("magic"));
    let mut version_1 = bytes.clone();
    version_1[8..10].copy_from_slice(&1u16.to_le_bytes());
    let e = err(&mut other, &version_1);
    assert!(
        e.contains("format version 1") && e.contains("versions 2 to 4 only"),
        "{e}"
    );
    assert_eq!(other.save_state().unwrap(), before);

    let mut shapes = model(DType::F32);
    shapes[3].1 = Var::zeros((5, 2), DType::F32, &Device::Cpu).unwrap();
    let mut reshaped = VarOptimizer::from_named(shapes, OptimConfig::new(core)).unwrap();
    assert!(err(&mut reshaped, &bytes).contains("fc.weight has shape [2, 5]"));

    let mut fewer =
        VarOptimizer::from_named(model(DType::F32)[..4].to_vec(), OptimConfig::new(core)).unwrap();
    assert!(err(&mut fewer, &bytes).contains("holds 5 variables"));

    let mut bf16_state = OptimConfig::new(core);
    bf16_state.state_dtype = homeadam_core::Dtype::BF16;
    let mut other_dtype = VarOptimizer::from_named(model(DType::F32), bf16_state).unwrap();
    assert!(err(&mut other_dtype, &bytes).contains("storage type"));

    let mut multiplied = OptimConfig::new(core);
    multiplied.groups = vec![scaled("conv.", 2.0)];
    let mut regrouped = VarOptimizer::from_named(model(DType::F32), multiplied).unwrap();
    let e = err(&mut regrouped, &bytes);
    assert!(e.contains(r#"groups = none (here "conv." (lr × 2))"#), "{e}");
    // A group added after construction is checked variable by variable.
    let mut added =
        VarOptimizer::from_named(model(DType::F32)[..4].to_vec(), OptimConfig::new(core)).unwrap();
    added
        .add_group(model(DType::F32)[4..].to_vec(), scaled("", 2.0).1)
        .unwrap();
    let e = err(&mut added, &bytes);
    assert!(
        e.contains("fc.bias was in group (lr × 1, decayed), here (lr × 2, decayed)"),
        "{e}"
    );
    assert_eq!(regrouped.step_count(), 0);
}

#[test]
fn bad_inputs_are_errors() {
    let vars = model(DType::F32);
    let core = Config::new(Rule::Adam);
    let mut ints = vars.clone();
    ints[0].1 = Var::zeros(3, DType::U32, &Device::Cpu).unwrap();
    let e = VarOptimizer::from_named(ints, OptimConfig::new(core))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("conv.weight has dtype U32"), "{e}");
    let mut twice = vars.clone();
    twice.push(("again".into(), vars[0].1.clone()));
    assert!(VarOptimizer::from_named(twice, OptimConfig::new(core)).is_err());
    let mut bad_clip = OptimConfig::new(core);
    bad_clip.max_grad_norm = Some(-1.0);
    assert!(VarOptimizer::from_named(vars.clone(), bad_clip).is_err());
    let mut bad_multiplier = OptimConfig::new(core);
    bad_multiplier.groups = vec![scaled("nothing.", f64::INFINITY)];
    assert!(VarOptimizer::from_named(vars.clone(), bad_multiplier).is_err());
    let mut same_prefix = OptimConfig::new(core);
    same_prefix.groups = vec![scaled("fc.", 2.0), scaled("fc.", 3.0)];
    let e = VarOptimizer::from_named(vars.clone(), same_prefix)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("group \"fc.\" is given twice"), "{e}");
    let mut renamed = vars.clone();
    renamed[1].0 = renamed[0].0.clone();
    let e = VarOptimizer::from_named(renamed, OptimConfig::new(core))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("the name \"conv.weight\" is given to two variables"),
        "{e}"
    );
    let mut grown = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let fresh = Var::zeros(3, DType::F32, &Device::Cpu).unwrap();
    let e = grown
        .add_group(vec![("fc.bias".into(), fresh)], GroupSettings::DEFAULT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the name \"fc.bias\""), "{e}");
    assert_eq!(grown.names().count(), vars.len());
    let mut zero_rate = core;
    zero_rate.lr = 0.0;
    let e = VarOptimizer::from_named(vars.clone(), OptimConfig::new(zero_rate))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("learning rate 0: expected a finite value > 0"), "{e}");

    // A gradient in another variable's storage would be read after that variable's update.
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    let view = vars[3]
        .1
        .as_tensor()
        .flatten_all()
        .unwrap()
        .narrow(0, 2, 4)
        .unwrap();
    grads.insert(&vars[1].1, view);
    let err = opt.step(&grads).unwrap_err().to_string();
    assert!(
        err.contains("the gradient of conv.bias shares its storage"),
        "{err}"
    );
    // A wrong shape, a wrong dtype.
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    grads.insert(&vars[1].1, Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap());
    assert!(opt.step(&grads).is_err());
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    grads.insert(&vars[1].1, Tensor::zeros(4, DType::BF16, &Device::Cpu).unwrap());
    assert!(opt.step(&grads).is_err());
    assert_eq!(opt.step_count(), 0);
}

#[test]
fn a_refused_learning_rate_is_reported_at_once_and_by_the_next_step() {
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(Config::new(Rule::AdamW))).unwrap();
    let (grads, _) = grads_for(&vars, 0, 1.0);
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = heard.clone();
    opt.set_warning_hook(move |m| sink.lock().unwrap().push(m.to_string()));
    for bad in [f64::NAN, -1.0, 0.0, f64::INFINITY, 1e3] {
        assert!(opt.try_set_learning_rate(bad).is_err(), "{bad}");
        assert_eq!(opt.learning_rate(), 1e-3);
        opt.set_learning_rate(bad);
        assert_eq!(opt.learning_rate(), 1e-3);
        let said = heard.lock().unwrap().pop().unwrap();
        assert!(
            said.contains(&format!("set_learning_rate({bad}) was refused")),
            "{said}"
        );
        let e = opt.step(&grads).unwrap_err().to_string();
        assert!(
            e.contains(&format!("set_learning_rate({bad}) was refused")),
            "{e}"
        );
    }
    // ηλ = 1e3 · 1e-2 ≥ 1.
    let e = opt.try_set_learning_rate(1e3).unwrap_err().to_string();
    assert!(e.contains("lr * weight_decay"), "{e}");
    assert_eq!(opt.step_count(), 0);
    opt.set_learning_rate(2e-3);
    assert_eq!(opt.learning_rate(), 2e-3);
    opt.step(&grads).unwrap();
    assert_eq!(opt.step_count(), 1);
}

/// Per-group λ, ε, β1 and β2 step as the core steps the same groups, and differ from the
/// config's values.
#[test]
fn group_overrides_are_the_cores() {
    let mut core = Config::new(Rule::AdamW);
    core.lr = 1e-2;
    let mut config = OptimConfig::new(core);
    config.decay_all = false;
    let head = GroupSettings {
        lr_scale: 0.5,
        weight_decay: Some(0.3),
        eps: Some(1e-4),
        beta1: Some(0.8),
        beta2: Some(0.99),
    };
    config.groups = vec![("fc.".into(), head)];
    let (got, opt) = adapter_run(config.clone(), 3, 1.0, DType::F32);
    let g = groups(&opt);
    assert_eq!(g[3].eps, Some(1e-4));
    assert!(!g[4].decay && g[4].beta2 == Some(0.99));
    let want = core_run::<f32>(*opt.opt.config(), &g, 3, 1.0, DType::F32);
    assert_eq!(bits(&got), bits(&want));
    let plain = OptimConfig {
        decay_all: false,
        ..OptimConfig::new(core)
    };
    let (plain, _) = adapter_run(plain, 3, 1.0, DType::F32);
    assert_eq!(bits(&got[..3]), bits(&plain[..3]));
    assert_ne!(bits(&got[3..]), bits(&plain[3..]));

    let mut global = OptimConfig::new(Config::new(Rule::HomeAdamW(Switch::Global)));
    global.groups = config.groups.clone();
    let e = VarOptimizer::from_named(model(DType::F32), global)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("beta2 (of a group)"), "{e}");
}

/// A group added after some steps steps from zeroed state with its settings, is saved, and
/// must be added again before a load.
#[test]
fn a_group_added_later() {
    let vars = model(DType::F32);
    let (first, later) = (vars[..3].to_vec(), vars[3..].to_vec());
    let mut core = Config::new(Rule::AdamW);
    core.lr = 1e-2;
    let settings = GroupSettings {
        lr_scale: 2.0,
        eps: Some(1e-3),
        ..GroupSettings::DEFAULT
    };
    let build = |steps_before: u64| {
        let mut opt = VarOptimizer::from_named(first.clone(), OptimConfig::new(core)).unwrap();
        for step in 0..steps_before {
            opt.step(&grads_for(&vars, step, 1.0).0).unwrap();
        }
        opt.add_group(later.clone(), settings).unwrap();
        opt
    };
    let mut opt = build(2);
    let names: Vec<_> = opt
        .groups()
        .map(|(n, g)| (n.to_string(), g.lr_scale, g.eps))
        .collect();
    assert_eq!(names[3], ("fc.weight".to_string(), 2.0, Some(1e-3)));
    let fresh = opt.state_of(&later[0].1).unwrap();
    assert_eq!(
        fresh[0]
            .1
            .abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap(),
        0.0
    );
    opt.step(&grads_for(&vars, 2, 1.0).0).unwrap();
    assert_eq!(opt.step_count(), 3);
    let m = opt.state_of(&later[0].1).unwrap();
    assert_eq!(m.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["m", "v"]);
    assert!(m[1].1.sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);

    let bytes = opt.save_state().unwrap();
    let mut again = build(0);
    again.load_state(&bytes).unwrap();
    assert_eq!(again.save_state().unwrap(), bytes);
    let mut without = VarOptimizer::from_named(first.clone(), OptimConfig::new(core)).unwrap();
    let e = without.load_state(&bytes).unwrap_err().to_string();
    assert!(e.contains("holds 5 variables, this optimizer has 3"), "{e}");

    let e = opt
        .add_group(vars[..1].to_vec(), settings)
        .unwrap_err()
        .to_string();
    assert!(e.contains("given twice"), "{e}");
    let mut global = VarOptimizer::from_named(
        first,
        OptimConfig::new(Config::new(Rule::HomeAdamW(Switch::Global))),
    )
    .unwrap();
    let beta2 = GroupSettings {
        beta2: Some(0.9),
        ..GroupSettings::DEFAULT
    };
    assert!(global.add_group(later, beta2).is_err());
    assert_eq!(global.groups().count(), 3);
}

/// `state_of` decodes every state type to the core's values.
#[test]
fn state_of_every_state_type() {
    for dtype in [
        homeadam_core::Dtype::F32,
        homeadam_core::Dtype::BF16,
        homeadam_core::Dtype::Q8,
    ] {
        let mut config = single_group(Config::new(Rule::AdamW));
        config.state_dtype = dtype;
        let (_, opt) = adapter_run(config, 2, 1.0, DType::F32);
        let var = &opt.params[3].var;
        let state = opt.state_of(var).unwrap();
        assert_eq!(state.len(), 2);
        assert_eq!(state[0].1.dims(), var.dims());
        let (states, _) = opt.host_state().unwrap();
        struct Read;
        impl OnStates for Read {
            type Out = Vec<f32>;
            fn on<S: homeadam_core::StateStorage>(self, states: &[Vec<S>]) -> Vec<f32> {
                let per_slot = S::slot_len(10);
                let mut v = vec![0.0; 10];
                S::read_slot(&states[3][per_slot..], homeadam_core::q8::Map::Unsigned, &mut v);
                v
            }
        }
        let v: Vec<f32> = state[1].1.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(v, states.visit(Read), "{dtype:?}");
        assert!(v.iter().all(|&x| x > 0.0), "{dtype:?}");
    }
    let (_, opt) = adapter_run(single_group(Config::new(Rule::AdamW)), 1, 1.0, DType::F32);
    let stranger = Var::zeros(3, DType::F32, &Device::Cpu).unwrap();
    assert!(opt.state_of(&stranger).is_err());
}

/// The README's table of the knobs each rule reads is `Config::knobs`.
#[test]
fn the_readme_lists_the_knobs_each_rule_reads() {
    let readme = include_str!("../README.md");
    let table = readme.split("| rule | knobs |").nth(1).unwrap();
    let mut names = Vec::new();
    for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let listed = cells[2];
        for name in cells[1].split(", ").map(|n| n.trim_matches('`')) {
            let config = Config::named(name).unwrap();
            let reads: Vec<&str> = config
                .knobs()
                .map(|(knob, _)| knob)
                .filter(|knob| !["lr", "rounding", "seed"].contains(knob))
                .collect();
            assert_eq!(listed, reads.join(", "), "{name}");
            names.push(name);
        }
    }
    assert_eq!(names.len(), homeadam_core::Config::NAMES.len());
}
