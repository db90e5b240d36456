//! On a GPU: every golden case of `tests/golden/cases/` (3 tensors, 100 gradient rows) and
//! larger random multi-tensor models, stepped by [`CudaOptimizer`] and by the core's
//! `Optimizer::step_reference`, compared bit for bit after every step (NaN payloads aside),
//! with the same reports; checkpoints round-trip through the core's byte format. Skipped with a
//! message when no CUDA driver is present; the golden cases are parsed and replayed on the core
//! either way.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use homeadam_core::rounding::mix64;
use homeadam_core::{
    bf16, f16, Config, Dtype, FiniteCheck, Optimizer, Rounding, Rule, StepReport, Storage, Switch, Tensor,
    TensorAux,
};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes};
use serde_json::Value;

/// A model: per tensor θ0 and the gradient rows, plus config and storage types.
struct Case {
    name: String,
    config: Config,
    dtypes: Dtypes,
    grad_scale: f64,
    params: Vec<Vec<f32>>,
    grads: Vec<Vec<Vec<f32>>>,
}

fn read_safetensors(path: &Path) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).expect("safetensors file");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = header
        .as_object()
        .expect("object")
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            assert_eq!(v["dtype"], "F32");
            let shape = v["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim") as usize)
                .collect();
            let (a, b) = (
                v["data_offsets"][0].as_u64().expect("offset") as usize,
                v["data_offsets"][1].as_u64().expect("offset") as usize,
            );
            let values = data[a..b]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect();
            (k.clone(), shape, values)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn golden_case(dir: &Path) -> Case {
    let json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config")).expect("json");
    let rule = Rule::from_name(json["rule"].as_str().expect("rule")).expect("known rule");
    let mut c = Config::new(rule);
    let f = |k: &str, d: f64| json.get(k).and_then(Value::as_f64).unwrap_or(d);
    let b = |k: &str, d: bool| json.get(k).and_then(Value::as_bool).unwrap_or(d);
    c.lr = f("lr", c.lr);
    if let Some(betas) = json.get("betas") {
        c.beta1 = betas[0].as_f64().expect("beta1");
        c.beta2 = betas[1].as_f64().expect("beta2");
    }
    c.eps = f("eps", c.eps);
    c.weight_decay = f("weight_decay", c.weight_decay);
    c.tau = f("tau", c.tau);
    c.momentum = f("momentum", c.momentum);
    c.dampening = f("dampening", c.dampening);
    c.kappa = f("kappa", c.kappa);
    c.switch_step = json
        .get("switch_step")
        .and_then(Value::as_u64)
        .unwrap_or(c.switch_step);
    c.seed = json.get("seed").and_then(Value::as_u64).unwrap_or(c.seed);
    c.nesterov = b("nesterov", c.nesterov);
    c.weight_decouple = b("weight_decouple", c.weight_decouple);
    c.fixed_decay = b("fixed_decay", c.fixed_decay);
    c.rectify = b("rectify", c.rectify);
    c.amsgrad = b("amsgrad", c.amsgrad);
    c.allow_f16_state = b("allow_f16_state", c.allow_f16_state);
    if json.get("rounding").and_then(Value::as_str) == Some("stochastic") {
        c.rounding = Rounding::Stochastic;
    }
    let dtype =
        |k: &str| Dtype::from_name(json.get(k).and_then(Value::as_str).unwrap_or("f32")).expect("dtype");
    let tensors = read_safetensors(&dir.join("input.safetensors"));
    let names: Vec<&str> = ["layer0.weight", "layer0.bias", "layer1.weight"].into();
    let find = |k: String| tensors.iter().find(|t| t.0 == k).unwrap_or_else(|| panic!("{k}"));
    Case {
        name: dir.file_name().expect("name").to_string_lossy().into_owned(),
        config: c,
        dtypes: Dtypes {
            param: dtype("param_dtype"),
            grad: dtype("grad_dtype"),
            state: dtype("state_dtype"),
        },
        grad_scale: f("grad_scale", 1.0),
        params: names
            .iter()
            .map(|n| find(format!("param.{n}")).2.clone())
            .collect(),
        grads: names
            .iter()
            .map(|n| {
                let (_, shape, values) = find(format!("grad.{n}"));
                values.chunks(shape[1]).map(<[f32]>::to_vec).collect()
            })
            .collect(),
    }
}

fn golden_cases() -> Vec<Case> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/cases");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("golden cases")
        .map(|e| e.expect("entry").path())
        .collect();
    dirs.sort();
    dirs.iter().map(|d| golden_case(d)).collect()
}

/// A random model: sizes around and across the kernels' chunk, an empty tensor, a non-finite
/// gradient in one row of four.
fn random_case(config: Config, dtypes: Dtypes, seed: u64) -> Case {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(s)
    };
    let sizes = [1usize, 0, 16385, 70_000, 255];
    let value = |r: u64| {
        (((r >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0) as f32
            * [1e-3f32, 1.0, 1e-20, 100.0][(r % 4) as usize]
    };
    let params = sizes
        .iter()
        .map(|&n| (0..n).map(|_| value(next())).collect())
        .collect();
    let rows = 6;
    let grads = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..rows)
                .map(|r| {
                    (0..n)
                        .map(|i| {
                            if r == 3 && k == 2 && i == n / 2 {
                                f32::NAN
                            } else {
                                value(next())
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    Case {
        name: format!("random {} {:?}", config.rule.name(), dtypes),
        config: Config {
            allow_f16_state: true,
            ..config
        },
        dtypes,
        grad_scale: 1024.0,
        params,
        grads,
    }
}

fn stored<T: Storage>(xs: &[f32]) -> Vec<T> {
    xs.iter().map(|&x| T::from_f32(x)).collect()
}

fn bytes<T: Storage>(xs: &[T]) -> Vec<u8> {
    xs.iter()
        .flat_map(|x| x.to_bits32().to_le_bytes()[..T::DTYPE.size()].to_vec())
        .collect()
}

fn assert_same<T: Storage>(what: &str, core: &[T], device: &[u8]) {
    let w = T::DTYPE.size();
    assert_eq!(core.len() * w, device.len(), "{what}: length");
    for (i, (x, d)) in core.iter().zip(device.chunks_exact(w)).enumerate() {
        let mut b = [0u8; 4];
        b[..w].copy_from_slice(d);
        let y = T::from_bits32(u32::from_le_bytes(b));
        let nan = x.to_f32().is_nan() && y.to_f32().is_nan();
        assert!(
            x.to_bits32() == y.to_bits32() || nan,
            "{what}[{i}]: core {:#x} cuda {:#x}",
            x.to_bits32(),
            y.to_bits32()
        );
    }
}

fn same_report(a: &StepReport, b: &StepReport) -> bool {
    let rho = match (a.rho, b.rho) {
        (Some(x), Some(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (x, y) => x == y,
    };
    rho && a.step == b.step
        && a.skipped == b.skipped
        && a.home_elements == b.home_elements
        && a.nonfinite_applied == b.nonfinite_applied
}

/// Steps the case on the core and on the device; compares after every step; round-trips a
/// checkpoint in the middle.
fn run<P: Storage, G: Storage, S: Storage>(case: &Case, stream: &Arc<CudaStream>) -> u64 {
    let slots = case.config.state_slots();
    let mut core = Optimizer::new(case.config).expect("config");
    let mut params: Vec<Vec<P>> = case.params.iter().map(|p| stored(p)).collect();
    let mut states: Vec<Vec<S>> = case
        .params
        .iter()
        .map(|p| vec![S::default(); slots * p.len()])
        .collect();
    let mut auxes = vec![TensorAux::default(); params.len()];
    let up = |b: Vec<u8>| -> CudaSlice<u8> {
        stream
            .clone_htod(&if b.is_empty() { vec![0u8] } else { b })
            .expect("upload")
    };
    let d_params: Vec<CudaSlice<u8>> = params.iter().map(|p| up(bytes(p))).collect();
    let mut d_grads: Vec<CudaSlice<u8>> = params
        .iter()
        .map(|p| up(vec![0u8; p.len() * G::DTYPE.size()]))
        .collect();
    let d_states: Vec<CudaSlice<u8>> = states.iter().map(|s| up(bytes(s))).collect();
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
    let tensors: Vec<DeviceTensor> = (0..params.len())
        .map(|k| DeviceTensor {
            param: ptr(&d_params[k]),
            grad: ptr(&d_grads[k]),
            state: ptr(&d_states[k]),
            numel: params[k].len(),
        })
        .collect();
    // SAFETY: the buffers live until the end of this function and have the stated sizes.
    let mut cuda = unsafe { CudaOptimizer::new(case.config, case.dtypes, &tensors, stream.clone()) }
        .expect("cuda optimizer");
    let rows = case.grads[0].len();
    let mut elements = 0;
    for r in 0..rows {
        let grads: Vec<Vec<G>> = case.grads.iter().map(|g| stored(&g[r])).collect();
        for (d, g) in d_grads.iter_mut().zip(&grads) {
            if !g.is_empty() {
                stream.memcpy_htod(&bytes(g), d).expect("grad upload");
            }
        }
        let expected = {
            let mut model: Vec<Tensor<'_, P, G, S>> = params
                .iter_mut()
                .zip(&grads)
                .zip(states.iter_mut().zip(auxes.iter_mut()))
                .map(|((p, g), (s, a))| Tensor::new(p, g, s, a))
                .collect();
            core.step_reference(&mut model, case.grad_scale)
                .expect("core step")
        };
        let got = cuda.step(case.grad_scale).expect("cuda step");
        assert!(
            same_report(&expected, &got),
            "{} row {r}: core {expected:?} cuda {got:?}",
            case.name
        );
        for k in 0..params.len() {
            let p = stream.clone_dtoh(&d_params[k]).expect("download");
            let s = stream.clone_dtoh(&d_states[k]).expect("download");
            assert_same(
                &format!("{} row {r} param {k}", case.name),
                &params[k],
                &p[..params[k].len() * P::DTYPE.size()],
            );
            assert_same(
                &format!("{} row {r} state {k}", case.name),
                &states[k],
                &s[..states[k].len() * S::DTYPE.size()],
            );
            elements += params[k].len() as u64;
        }
        if r == rows / 2 {
            let saved = cuda.save_state().expect("save");
            cuda.load_state(&saved).expect("load");
            assert_eq!(
                cuda.save_state().expect("save"),
                saved,
                "{}: checkpoint round trip",
                case.name
            );
            let (before, before_aux) = (states.clone(), auxes.clone());
            let mut views: Vec<homeadam_core::TensorState<'_, S>> = states
                .iter_mut()
                .zip(auxes.iter_mut())
                .zip(&params)
                .map(|((s, a), p)| homeadam_core::TensorState {
                    numel: p.len(),
                    state: s,
                    aux: a,
                })
                .collect();
            let mut buf = vec![0u8; core.state_bytes(params.iter().map(Vec::len), S::DTYPE)];
            let mut sink = homeadam_core::SliceSink::new(&mut buf);
            core.save_state(&views, &mut sink).expect("core save");
            core.load_state(&saved, &mut views)
                .expect("the device's checkpoint loads in the core");
            drop(views);
            if buf != saved {
                // Only NaN payloads may differ (GPUs canonicalize NaN): the device's bytes,
                // loaded by the core, must give the core's values, NaN for NaN.
                for (k, (core_state, device_state)) in before.iter().zip(&states).enumerate() {
                    assert_same(
                        &format!("{}: checkpoint state {k}", case.name),
                        core_state,
                        &bytes(device_state),
                    );
                }
                assert_eq!(before_aux, auxes, "{}: checkpoint telemetry", case.name);
            }
        }
    }
    elements
}

fn dispatch(case: &Case, stream: &Arc<CudaStream>) -> u64 {
    fn s<P: Storage, G: Storage>(c: &Case, st: &Arc<CudaStream>) -> u64 {
        match c.dtypes.state {
            Dtype::F32 => run::<P, G, f32>(c, st),
            Dtype::F16 => run::<P, G, f16>(c, st),
            Dtype::BF16 => run::<P, G, bf16>(c, st),
        }
    }
    fn g<P: Storage>(c: &Case, st: &Arc<CudaStream>) -> u64 {
        match c.dtypes.grad {
            Dtype::F32 => s::<P, f32>(c, st),
            Dtype::F16 => s::<P, f16>(c, st),
            Dtype::BF16 => s::<P, bf16>(c, st),
        }
    }
    match case.dtypes.param {
        Dtype::F32 => g::<f32>(case, stream),
        Dtype::F16 => g::<f16>(case, stream),
        Dtype::BF16 => g::<bf16>(case, stream),
    }
}

fn gpu() -> Option<Arc<CudaStream>> {
    // SAFETY: probing for the library has no preconditions.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("SKIPPED gpu: no CUDA driver (libcuda) on this machine");
        return None;
    }
    match CudaContext::new(0) {
        Ok(ctx) => Some(ctx.default_stream()),
        Err(e) => {
            eprintln!("SKIPPED gpu: no usable CUDA device ({e:?})");
            None
        }
    }
}

#[test]
fn golden_cases_parse_into_valid_models() {
    let cases = golden_cases();
    assert!(cases.len() >= 40, "{} golden cases", cases.len());
    for case in &cases {
        assert_eq!(case.params.len(), 3, "{}", case.name);
        assert_eq!(case.grads[0].len(), 100, "{}", case.name);
        for (p, g) in case.params.iter().zip(&case.grads) {
            assert!(g.iter().all(|row| row.len() == p.len()), "{}", case.name);
        }
        Optimizer::new(case.config).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    }
}

#[test]
fn golden_cases_on_the_gpu_match_the_core_bit_for_bit() {
    let Some(stream) = gpu() else { return };
    let mut elements = 0;
    let mut cases = 0;
    for case in golden_cases().iter().filter(|c| c.config.rule != Rule::Swats) {
        elements += dispatch(case, &stream);
        cases += 1;
    }
    println!(
        "gpu: {cases} golden cases (SWATS not supported on CUDA), {elements} element updates bit-identical"
    );
}

#[test]
fn random_models_on_the_gpu_match_the_core_bit_for_bit() {
    let Some(stream) = gpu() else { return };
    let rules = [
        Rule::Sgd,
        Rule::Sgdm,
        Rule::Adam,
        Rule::AdamW,
        Rule::AdamWSrf,
        Rule::HomeAdamW(Switch::Global),
        Rule::HomeAdamW(Switch::Layer),
        Rule::HomeAdamW(Switch::Element),
        Rule::AdaBelief,
        Rule::MiAdam,
    ];
    let mut elements = 0;
    for (i, rule) in rules.into_iter().enumerate() {
        for (j, (param, grad, state)) in [
            (Dtype::F32, Dtype::F32, Dtype::F32),
            (Dtype::BF16, Dtype::BF16, Dtype::F32),
            (Dtype::F16, Dtype::F16, Dtype::F16),
            (Dtype::BF16, Dtype::F32, Dtype::BF16),
        ]
        .into_iter()
        .enumerate()
        {
            for rounding in [Rounding::Nearest, Rounding::Stochastic] {
                for finite_check in [FiniteCheck::SkipStep, FiniteCheck::Trust] {
                    let config = Config {
                        rounding,
                        finite_check,
                        seed: 11,
                        tau: 1e-9,
                        switch_step: 2,
                        ..Config::new(rule)
                    };
                    let case = random_case(config, Dtypes { param, grad, state }, (i * 4 + j) as u64);
                    elements += dispatch(&case, &stream);
                }
            }
        }
    }
    println!("gpu: random models, {elements} element updates bit-identical");
}
