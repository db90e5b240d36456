//! The adapter against the core on the same numbers.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::Optimizer as _;
use homeadam_core::{bf16, Config, Rounding, Rule, Switch, TensorAux};

use super::*;

/// Deterministic values in [-1, 1) (splitmix64).
fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let z = homeadam_core::rounding::mix64(seed.wrapping_mul(0x9E37_79B9) ^ i);
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

/// The same steps through one plain core call per step, over the variables with a gradient.
fn core_run<P: homeadam_core::Storage>(config: Config, steps: u64, tiny: f32, dtype: DType) -> Vec<Vec<f32>> {
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
            .filter(|((_, g), _)| !g.is_empty())
            .map(|((p, g), (s, a))| homeadam_core::Tensor::new(p, g, s, a))
            .collect();
        opt.step(&mut tensors, 1.0).unwrap();
    }
    params
        .iter()
        .map(|p| p.iter().map(|x| x.to_f32()).collect())
        .collect()
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
        Config::new(Rule::Sgdm),
        swats,
        Config::new(Rule::MiAdam),
        Config::new(Rule::AdaBelief),
    ] {
        let config = single_group(core);
        for tiny in [1.0, 1e-4] {
            let (got, opt) = adapter_run(config.clone(), 6, tiny, DType::F32);
            let want = core_run::<f32>(*opt.groups[0].opt.config(), 6, tiny, DType::F32);
            assert_eq!(bits(&got), bits(&want), "{} tiny {tiny}", core.rule.name());
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
    let want = core_run::<bf16>(*opt.groups[0].opt.config(), 5, 1.0, DType::BF16);
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

/// Groups: decayed weights and exempt biases under one model-wide HomeAdam decision.
#[test]
fn groups_keep_one_global_decision() {
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.lr = 1e-2;
    core.weight_decay = 0.1;
    core.tau = 1e-6;
    let config = OptimConfig::new(core);
    // tiny = 1e-4 puts ρ below τ in conv.weight only (v̂ ~ 1e-8): every group must go home.
    for (tiny, home) in [(1e-4f32, true), (1.0, false)] {
        let (got, opt) = adapter_run(config.clone(), 1, tiny, DType::F32);
        assert_eq!(opt.groups.len(), 2);
        // Each group alone, its branch forced by τ: huge τ = home everywhere, tiny τ = srf.
        let mut want = vec![Vec::new(); SHAPES.len()];
        for g in &opt.groups {
            let mut c = *g.opt.config();
            c.tau = if home { 1e30 } else { 1e-30 };
            let vars = model(DType::F32);
            let (_, cs) = grads_for(&vars, 0, tiny);
            let mut o = homeadam_core::Optimizer::new(c).unwrap();
            let members: Vec<usize> = (0..SHAPES.len())
                .filter(|&k| k != 2 && is_no_decay(SHAPES[k].0, SHAPES[k].1.len()) == (c.weight_decay == 0.0))
                .collect();
            for &k in &members {
                let mut p = flat(&vars[k].1);
                let mut s = vec![0.0f32; o.state_len(p.len())];
                let mut a = TensorAux::default();
                o.step(
                    &mut [homeadam_core::Tensor::new(&mut p, &cs[k], &mut s, &mut a)],
                    1.0,
                )
                .unwrap();
                // One step of an element rule per tensor: the same as one call over the group.
                want[k] = p;
                o = homeadam_core::Optimizer::new(c).unwrap();
            }
        }
        want[2] = values(2, 4);
        assert_eq!(bits(&got), bits(&want), "tiny {tiny}");
    }
}

#[test]
fn grouped_report_counts_real_elements_only() {
    let mut core = Config::new(Rule::HomeAdamW(Switch::Global));
    core.tau = 1e-6;
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let (grads, _) = grads_for(&vars, 0, 1e-4);
    let out = opt.step_with_report(&grads).unwrap();
    assert_eq!(out.report.home_elements, 12 + 4 + 10 + 2);
    assert!(out.report.rho.unwrap() < 1e-6);
    assert_eq!(opt.step_count(), 1);
}

#[test]
fn nonfinite_gradient_skips_every_group() {
    let core = Config::new(Rule::AdamW);
    let vars = model(DType::F32);
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    let bad = Tensor::new(&[f32::NAN, 0.0], &Device::Cpu).unwrap();
    grads.insert(&vars[4].1, bad);
    let out = opt.step_with_report(&grads).unwrap();
    assert!(out.report.skipped);
    assert_eq!(opt.step_count(), 0);
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
    let mut core = homeadam_core::Optimizer::new(*opt.groups[0].opt.config()).unwrap();
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
    config.lr_multipliers = vec![("fc.".into(), 0.5)];
    let run = |vars: &[(String, Var)], opt: &mut VarOptimizer, steps: std::ops::Range<u64>| {
        for step in steps {
            let (grads, _) = grads_for(vars, step, if step % 2 == 0 { 1e-4 } else { 1.0 });
            opt.step(&grads).unwrap();
            opt.advance_schedule().unwrap();
        }
    };
    let straight = model(DType::F32);
    let mut a = VarOptimizer::from_named(straight.clone(), config.clone()).unwrap();
    run(&straight, &mut a, 0..6);

    let first = model(DType::F32);
    let mut b = VarOptimizer::from_named(first.clone(), config.clone()).unwrap();
    run(&first, &mut b, 0..3);
    let bytes = b.save_state().unwrap();
    // A fresh process: new variables holding the saved values, a fresh optimizer.
    let resumed: Vec<(String, Var)> = first
        .iter()
        .map(|(n, v)| (n.clone(), Var::from_tensor(v.as_tensor()).unwrap()))
        .collect();
    let mut c = VarOptimizer::from_named(resumed.clone(), config).unwrap();
    c.load_state(&bytes).unwrap();
    assert_eq!((c.schedule_position(), c.step_count()), (3, 3));
    run(&resumed, &mut c, 3..6);
    let got: Vec<Vec<f32>> = resumed.iter().map(|(_, v)| flat(v)).collect();
    let want: Vec<Vec<f32>> = straight.iter().map(|(_, v)| flat(v)).collect();
    assert_eq!(bits(&got), bits(&want));
    assert_eq!(c.save_state().unwrap(), a.save_state().unwrap());
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
}

#[test]
fn bad_inputs_are_errors() {
    let vars = model(DType::F32);
    let core = Config::new(Rule::Adam);
    let mut mixed = vars.clone();
    mixed[0].1 = Var::zeros(3, DType::BF16, &Device::Cpu).unwrap();
    assert!(VarOptimizer::from_named(mixed, OptimConfig::new(core)).is_err());
    let mut twice = vars.clone();
    twice.push(("again".into(), vars[0].1.clone()));
    assert!(VarOptimizer::from_named(twice, OptimConfig::new(core)).is_err());
    let mut bad_clip = OptimConfig::new(core);
    bad_clip.max_grad_norm = Some(-1.0);
    assert!(VarOptimizer::from_named(vars.clone(), bad_clip).is_err());

    // A gradient in another variable's storage would deadlock the nested locks: refused.
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    let view = vars[3]
        .1
        .as_tensor()
        .flatten_all()
        .unwrap()
        .narrow(0, 0, 4)
        .unwrap();
    grads.insert(&vars[1].1, view);
    let err = opt.step(&grads).unwrap_err().to_string();
    assert!(err.contains("shares its storage"), "{err}");
    // A wrong shape.
    let (mut grads, _) = grads_for(&vars, 0, 1.0);
    grads.insert(&vars[1].1, Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap());
    assert!(opt.step(&grads).is_err());
    assert_eq!(opt.step_count(), 0);

    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(core)).unwrap();
    opt.set_learning_rate(-1.0);
    let (grads, _) = grads_for(&vars, 0, 1.0);
    assert!(opt.step(&grads).is_err());
    assert!(opt.try_set_learning_rate(f64::NAN).is_err());
    assert!(opt.try_set_learning_rate(1e-3).is_ok());
    assert!(opt.step(&grads).is_ok());
}

#[test]
fn a_thousand_variables_fit_the_test_threads_stack() {
    let vars: Vec<(String, Var)> = (0..1000)
        .map(|k| (format!("w{k}"), Var::new(&[[1.0f32, 2.0]], &Device::Cpu).unwrap()))
        .collect();
    let mut opt = VarOptimizer::from_named(vars.clone(), OptimConfig::new(Config::new(Rule::Sgd))).unwrap();
    let loss = vars
        .iter()
        .map(|(_, v)| v.as_tensor().sum_all().unwrap())
        .reduce(|a, b| (a + b).unwrap())
        .unwrap();
    opt.backward_step(&loss).unwrap();
    assert_eq!(flat(&vars[999].1), [0.999, 1.999]);
}
