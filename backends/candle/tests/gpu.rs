//! On a CUDA device (feature `cuda`): [`VarOptimizer`] steps candle's CUDA variables with
//! homeadam-cuda's kernels and ends every step with the bits of the same optimizer on the CPU
//! (itself bit-identical to the core's scalar reference, see the crate's unit tests).
//!
//! The model is the digits MLP (64-128-10, and a variable that never gets a gradient). A CPU
//! run trains it for 20 steps on fixed batches and records every gradient; the GPU run
//! uploads those gradients (as the exact gradients of Σ w ⊙ c, fresh buffers at every step)
//! and must match the CPU's parameters after every step and its checkpoint bytes at the end,
//! for every rule, for f32 and bf16 parameters (stochastic rounding) and bf16 and q8 state, with
//! parameter groups (decay exemptions, a learning-rate multiplier) and with clipping.
//! Checkpoints move between the devices: saved on one, continued on the other, same bits.
//! Without a CUDA device the tests say so and pass.
#![cfg(feature = "cuda")]

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var, D};
use homeadam_candle::core::{Config, Dtype, Rounding, Rule};
use homeadam_candle::{GroupSettings, OptimConfig, SkipPolicy, VarOptimizer};

const STEPS: u64 = 20;
const BATCH: usize = 32;
const SHAPES: [(&str, &[usize]); 5] = [
    ("fc1.weight", &[128, 64]),
    ("fc1.bias", &[128]),
    ("fc2.weight", &[10, 128]),
    ("fc2.bias", &[10]),
    ("norm.running_mean", &[10]),
];

fn cuda() -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("gpu: skipped, no CUDA device ({e})");
            None
        }
    }
}

/// Deterministic values in [-scale, scale) (splitmix64).
fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let z = homeadam_candle::core::backend::mix64(seed.wrapping_mul(0x9E37_79B9) ^ i);
            ((z >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
        })
        .collect()
}

fn model(dtype: DType, device: &Device) -> Vec<(String, Var)> {
    SHAPES
        .iter()
        .enumerate()
        .map(|(k, (name, shape))| {
            let n = shape.iter().product();
            let t = Tensor::from_vec(values(k as u64, n, 0.2), *shape, device).unwrap();
            (
                name.to_string(),
                Var::from_tensor(&t.to_dtype(dtype).unwrap()).unwrap(),
            )
        })
        .collect()
}

/// The MLP's loss on batch `step`: cross-entropy of relu(x W1ᵀ + b1) W2ᵀ + b2.
fn loss(vars: &[(String, Var)], step: u64) -> Tensor {
    let dev = &Device::Cpu;
    let dtype = vars[0].1.dtype();
    let x = Tensor::from_vec(values(100 + step, BATCH * 64, 1.0), (BATCH, 64), dev)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let labels: Vec<u32> = (0..BATCH as u32).map(|i| (i * 7 + step as u32) % 10).collect();
    let labels = Tensor::from_vec(labels, BATCH, dev).unwrap();
    let w = |k: usize| vars[k].1.as_tensor();
    let h = x
        .matmul(&w(0).t().unwrap())
        .unwrap()
        .broadcast_add(w(1))
        .unwrap()
        .relu()
        .unwrap();
    let logits = h
        .matmul(&w(2).t().unwrap())
        .unwrap()
        .broadcast_add(w(3))
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let logp = candle_nn::ops::log_softmax(&logits, D::Minus1).unwrap();
    candle_nn::loss::nll(&logp, &labels).unwrap()
}

/// The bits of a tensor's elements, widened to f32 (exactly).
fn bits(t: &Tensor) -> Vec<u32> {
    t.flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn flat(var: &Var) -> Vec<u32> {
    bits(var.as_tensor())
}

/// The CPU run: per step the gradients (None for a variable without one) and the parameters
/// after the step; the optimizer at the end.
struct CpuRun {
    grads: Vec<Vec<Option<Tensor>>>,
    params: Vec<Vec<Vec<u32>>>,
    opt: VarOptimizer,
}

fn cpu_run(config: &OptimConfig, dtype: DType) -> CpuRun {
    let vars = model(dtype, &Device::Cpu);
    let mut opt = VarOptimizer::from_named(vars.clone(), config.clone()).unwrap();
    let (mut grads, mut params) = (Vec::new(), Vec::new());
    for step in 0..STEPS {
        let g = loss(&vars, step).backward().unwrap();
        grads.push(vars.iter().map(|(_, v)| g.get(v).cloned()).collect());
        opt.step_with_report(&g).unwrap();
        params.push(vars.iter().map(|(_, v)| flat(v)).collect());
    }
    CpuRun { grads, params, opt }
}

/// The gradients `grads` (on the CPU) as the gradients of `vars` on their device: those of
/// Σ_k sum(w_k ⊙ c_k), which are c_k exactly.
fn upload(vars: &[(String, Var)], grads: &[Option<Tensor>]) -> GradStore {
    let device = vars[0].1.device();
    let mut loss: Option<Tensor> = None;
    for ((_, var), g) in vars.iter().zip(grads) {
        let Some(g) = g else { continue };
        let c = g.to_device(device).unwrap();
        let term = (var.as_tensor() * c)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .sum_all()
            .unwrap();
        loss = Some(match loss {
            Some(l) => (l + term).unwrap(),
            None => term,
        });
    }
    let store = loss.expect("a gradient").backward().unwrap();
    for ((_, var), g) in vars.iter().zip(grads) {
        if let (Some(want), Some(got)) = (g, store.get(var)) {
            let got = got.to_device(&Device::Cpu).unwrap();
            assert_eq!(bits(want), bits(&got), "the uploaded gradient is not exact");
        }
    }
    store
}

/// The optimizer settings under test: every rule, four storage combinations, groups, and
/// clipping for some.
fn cases() -> Vec<(String, OptimConfig, DType)> {
    let mut out = Vec::new();
    for (k, name) in Config::NAMES.iter().enumerate() {
        let core = Config::named(name).expect("a named config");
        for (dtype, state, stochastic) in [
            (DType::F32, Dtype::F32, false),
            (DType::BF16, Dtype::F32, true),
            (DType::F32, Dtype::BF16, false),
            (DType::F32, Dtype::Q8, false),
        ] {
            let mut config = OptimConfig::new(Config {
                rounding: if stochastic {
                    Rounding::Stochastic
                } else {
                    core.rounding
                },
                ..core
            });
            config.state_dtype = state;
            config.groups = vec![(
                "fc2.".into(),
                GroupSettings {
                    lr_scale: 0.5,
                    // A group ε where the rule reads one that may differ by group.
                    eps: (!matches!(core.rule, Rule::Sgd | Rule::Swats)).then_some(1e-3),
                    ..GroupSettings::DEFAULT
                },
            )];
            config.max_grad_norm = k.is_multiple_of(2).then_some(0.5);
            let label = format!(
                "{name} {dtype:?} params, {state:?} state, clip {:?}",
                config.max_grad_norm
            );
            out.push((label, config, dtype));
        }
    }
    out
}

#[test]
fn every_rule_on_the_gpu_has_the_cpu_bits_after_every_step() {
    let Some(gpu) = cuda() else { return };
    let mut checked = 0;
    for (label, config, dtype) in cases() {
        let state_ok = config.core.check_state_dtype(config.state_dtype).is_ok();
        if config.core.validate().is_err() || !state_ok {
            continue;
        }
        let cpu = cpu_run(&config, dtype);
        let vars = model(dtype, &gpu);
        let mut opt = VarOptimizer::from_named(vars.clone(), config.clone()).unwrap();
        for step in 0..STEPS as usize {
            let grads = upload(&vars, &cpu.grads[step]);
            opt.step_with_report(&grads)
                .unwrap_or_else(|e| panic!("{label}: step {step}: {e}"));
            for ((name, var), want) in vars.iter().zip(&cpu.params[step]) {
                assert!(
                    flat(var) == *want,
                    "{label}: {name} differs after step {}",
                    step + 1
                );
            }
        }
        assert_eq!(opt.step_count(), cpu.opt.step_count(), "{label}: t");
        let (a, b) = (opt.save_state().unwrap(), cpu.opt.save_state().unwrap());
        assert!(a == b, "{label}: the checkpoints differ");
        checked += 1;
    }
    eprintln!("gpu: {checked} settings × {STEPS} steps bit-identical to the CPU");
    assert!(checked >= 30, "only {checked} settings ran");
}

#[test]
fn checkpoints_move_between_cpu_and_gpu() {
    let Some(gpu) = cuda() else { return };
    for name in ["homeadamw", "adamw-srf", "swats", "miadam"] {
        let config = OptimConfig::new(Config::named(name).unwrap());
        let cpu = cpu_run(&config, DType::F32);
        let half = STEPS as usize / 2;
        for start_on_gpu in [true, false] {
            let (first, second) = if start_on_gpu {
                (gpu.clone(), Device::Cpu)
            } else {
                (Device::Cpu, gpu.clone())
            };
            let vars = model(DType::F32, &first);
            let mut opt = VarOptimizer::from_named(vars.clone(), config.clone()).unwrap();
            for step in 0..half {
                opt.step_with_report(&upload(&vars, &cpu.grads[step])).unwrap();
            }
            let bytes = opt.save_state().unwrap();
            let moved: Vec<(String, Var)> = vars
                .iter()
                .map(|(n, v)| {
                    (
                        n.clone(),
                        Var::from_tensor(&v.to_device(&second).unwrap()).unwrap(),
                    )
                })
                .collect();
            let mut opt = VarOptimizer::from_named(moved.clone(), config.clone()).unwrap();
            opt.load_state(&bytes).unwrap();
            for step in half..STEPS as usize {
                opt.step_with_report(&upload(&moved, &cpu.grads[step])).unwrap();
            }
            for ((n, var), want) in moved.iter().zip(&cpu.params[STEPS as usize - 1]) {
                assert!(
                    flat(var) == *want,
                    "{name} (GPU first: {start_on_gpu}): {n} differs"
                );
            }
            assert!(
                opt.save_state().unwrap() == cpu.opt.save_state().unwrap(),
                "{name} (GPU first: {start_on_gpu}): the checkpoints differ"
            );
        }
    }
}

#[test]
fn mixed_devices_and_dtypes_are_clear_errors() {
    let Some(gpu) = cuda() else { return };
    let config = OptimConfig::new(Config::named("adamw").unwrap());
    let mut vars = model(DType::F32, &gpu);
    vars.push((
        "cpu.weight".into(),
        Var::zeros((2, 2), DType::F32, &Device::Cpu).unwrap(),
    ));
    let e = VarOptimizer::from_named(vars, config.clone())
        .err()
        .expect("refused");
    assert!(e.to_string().contains("one optimizer steps one device"), "{e}");
    let mut vars = model(DType::F32, &gpu);
    vars.push((
        "half.weight".into(),
        Var::zeros((2, 2), DType::BF16, &gpu).unwrap(),
    ));
    let e = VarOptimizer::from_named(vars, config).err().expect("refused");
    assert!(e.to_string().contains("same dtype"), "{e}");
}

/// A group added after two steps, the state read back as tensors and a skipped step under
/// `SkipPolicy::Error`: the same bits on the GPU as on the CPU.
#[test]
fn added_groups_state_of_and_skipped_steps_as_on_the_cpu() {
    let Some(gpu) = cuda() else { return };
    let mut config = OptimConfig::new(Config::named("homeadamw-ew").unwrap());
    config.on_skip = SkipPolicy::Error;
    let run = |device: &Device| {
        let vars = model(DType::F32, device);
        let (first, later) = (vars[..2].to_vec(), vars[2..].to_vec());
        let mut opt = VarOptimizer::from_named(first, config.clone()).unwrap();
        let cpu_vars = model(DType::F32, &Device::Cpu);
        for step in 0..4 {
            if step == 2 {
                let head = GroupSettings {
                    lr_scale: 0.5,
                    eps: Some(1e-2),
                    ..GroupSettings::DEFAULT
                };
                opt.add_group(later.clone(), head).unwrap();
            }
            let g = loss(&cpu_vars, step).backward().unwrap();
            let grads: Vec<_> = cpu_vars.iter().map(|(_, v)| g.get(v).cloned()).collect();
            opt.step_with_report(&upload(&vars, &grads)).unwrap();
        }
        let inf = vec![Some(
            Tensor::full(f32::INFINITY, (128, 64), &Device::Cpu).unwrap(),
        )];
        let e = opt
            .step_with_report(&upload(&vars[..1], &inf))
            .unwrap_err()
            .to_string();
        assert!(e.contains("step skipped"), "{e}");
        let state: Vec<Vec<u32>> = vars[..4]
            .iter()
            .flat_map(|(_, v)| opt.state_of(v).unwrap())
            .map(|(_, t)| bits(&t))
            .collect();
        let params: Vec<Vec<u32>> = vars.iter().map(|(_, v)| flat(v)).collect();
        (state, params, opt.skipped_steps(), opt.save_state().unwrap())
    };
    let (cpu, gpu) = (run(&Device::Cpu), run(&gpu));
    assert!(cpu.0 == gpu.0, "state_of differs");
    assert!(cpu.1 == gpu.1, "parameters differ");
    assert_eq!((cpu.2, gpu.2), (1, 1));
    assert!(cpu.3 == gpu.3, "saved states differ");
}

/// A timing, not a check (`--ignored` runs it): one AdamW step over 64 M parameters in 16
/// tensors with fresh gradient buffers, whose addresses the optimizer refreshes (what
/// [`VarOptimizer`] does), against the copies that persistent gradient buffers would add
/// (every gradient copied into a buffer of fixed address before the step), in one run.
#[test]
#[ignore]
fn pointer_refresh_versus_persistent_gradient_buffers() {
    let Some(gpu) = cuda() else { return };
    const TENSORS: usize = 16;
    const NUMEL: usize = 4 << 20;
    const STEPS: usize = 50;
    let vars: Vec<(String, Var)> = (0..TENSORS)
        .map(|k| {
            let t = Tensor::randn(0f32, 0.1, (NUMEL / 1024, 1024), &gpu).unwrap();
            (format!("layer{k}.weight"), Var::from_tensor(&t).unwrap())
        })
        .collect();
    let persistent: Vec<Var> = vars
        .iter()
        .map(|(_, v)| Var::zeros(v.shape(), DType::F32, &gpu).unwrap())
        .collect();
    // Gradients as a backward pass leaves them: new buffers every step (a few sets, cycled).
    let fresh: Vec<Vec<Tensor>> = (0..4)
        .map(|_| {
            vars.iter()
                .map(|(_, v)| Tensor::randn(0f32, 1e-3, v.shape(), &gpu).unwrap())
                .collect()
        })
        .collect();
    let mut store = vars[0].1.as_tensor().sum_all().unwrap().backward().unwrap();
    let mut opt =
        VarOptimizer::from_named(vars.clone(), OptimConfig::new(Config::named("adamw").unwrap())).unwrap();
    let mut time = |copy: bool| {
        gpu.synchronize().unwrap();
        let start = std::time::Instant::now();
        for step in 0..STEPS {
            for (((_, var), g), buffer) in vars.iter().zip(&fresh[step % 4]).zip(&persistent) {
                let grad = if copy {
                    buffer.set(g).unwrap();
                    buffer.as_tensor().clone()
                } else {
                    g.clone()
                };
                store.insert(var.as_tensor(), grad);
            }
            opt.step_with_report(&store).unwrap();
        }
        gpu.synchronize().unwrap();
        start.elapsed().as_secs_f64() * 1e3 / STEPS as f64
    };
    time(false);
    let refresh = time(false);
    let persistent = time(true);
    eprintln!(
        "gpu: AdamW step over {} M parameters: pointer refresh {refresh:.3} ms, with copies into \
         persistent buffers {persistent:.3} ms (× {:.2})",
        (TENSORS * NUMEL) >> 20,
        persistent / refresh
    );
}
