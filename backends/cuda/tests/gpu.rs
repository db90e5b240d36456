//! On a GPU: every golden case of `tests/golden/cases/` (3 tensors, 100 gradient rows; SWATS,
//! HomeAdam's ρ over the active elements, η_h ≠ η and a calibrated τ included) and larger random
//! multi-tensor models in several parameter groups (η scaled or not, λ or none; SWATS switching
//! to its SGD phase included; HomeAdam calibrating τ at a skipped step), stepped by
//! [`CudaOptimizer`] and by the core's `Optimizer::step_reference`, compared bit for bit after
//! every step (NaN payloads aside), with the same reports (ρ, ρ_active, τ) and per-tensor
//! telemetry and Λ, and the same calibration state (τ and its window); checkpoints round-trip
//! through the core's byte format. q8 state (the golden q8 cases, and random models whose sizes
//! end in partial 256-element blocks) is compared block for block: scales bit for bit, codes
//! equal. `grad_norm` equals the core's exact sum, and `set_grads` steps with
//! the new gradients. Global HomeAdam(W) with its bound on ρ_t runs many steps against the core's
//! `Optimizer::step`, ρ_t crossing τ both ways, with the same decisions and exact first passes.
//! Skipped with a message when no CUDA driver is present; the golden cases
//! are parsed and replayed on the core either way.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use homeadam_core::backend::mix64;
use homeadam_core::{
    bf16, f16, Config, Dtype, ExactSum, FiniteCheck, Group, Optimizer, Q8Block, RhoOver, Rounding, Rule,
    StateStorage, StepReport, Storage, Switch, TauCalibration, Tensor, TensorAux, TensorState,
    TensorStateMut,
};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes, Error};

mod common;

/// A model: per tensor θ0, the gradient rows and the parameter group, plus config and storage
/// types.
struct Case {
    name: String,
    config: Config,
    dtypes: Dtypes,
    grad_scale: f64,
    params: Vec<Vec<f32>>,
    grads: Vec<Vec<Vec<f32>>>,
    groups: Vec<Group>,
}

/// The golden cases through the one loader every backend shares (`homeadam-tests`).
fn golden_cases() -> Vec<Case> {
    homeadam_tests::all_cases()
        .expect("golden cases")
        .into_iter()
        .map(|case| {
            let c = &case.config;
            let tensors = &case.input.tensors;
            Case {
                name: case.name.clone(),
                config: c.optimizer,
                dtypes: Dtypes {
                    param: c.param_dtype,
                    grad: c.grad_dtype,
                    state: c.state_dtype,
                },
                grad_scale: c.grad_scale,
                params: tensors.iter().map(|t| t.param.clone()).collect(),
                grads: tensors
                    .iter()
                    .map(|t| {
                        t.grads
                            .chunks(t.param.len().max(1))
                            .map(<[f32]>::to_vec)
                            .collect()
                    })
                    .collect(),
                groups: vec![Group::DEFAULT; tensors.len()],
            }
        })
        .collect()
}

/// A random model: sizes around and across the kernels' chunk (16-byte accesses where a size is
/// a multiple of 4), an empty tensor, four parameter groups (the default one and a scaled one
/// each shared by two tensors apart in the table), a non-finite gradient in one row of four.
fn random_case(config: Config, dtypes: Dtypes, seed: u64) -> Case {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(s)
    };
    let sizes = [1usize, 0, 16385, 70_000, 255, 4096];
    let scaled = Group {
        lr_scale: 0.5,
        ..Group::DEFAULT
    };
    let groups = vec![
        Group::DEFAULT,
        Group::NO_DECAY,
        scaled,
        Group {
            lr_scale: 2.0,
            decay: false,
            ..Group::DEFAULT
        },
        Group::DEFAULT,
        scaled,
    ];
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
        name: format!("random {} {:?}", config.name(), dtypes),
        config: Config {
            allow_f16_state: true,
            ..config
        },
        dtypes,
        grad_scale: 1024.0,
        params,
        grads,
        groups,
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

/// A state type as the device holds it: its bytes (the core's layout) and the comparison of the
/// core's items with the device's bytes.
trait DeviceState: StateStorage {
    fn state_bytes(xs: &[Self]) -> Vec<u8>;
    fn assert_state(what: &str, core: &[Self], device: &[u8]);
}

/// The element types (a blanket impl would overlap Q8Block's).
macro_rules! element_state {
    ($($t:ty),*) => {$(
        impl DeviceState for $t {
            fn state_bytes(xs: &[Self]) -> Vec<u8> {
                bytes(xs)
            }
            fn assert_state(what: &str, core: &[Self], device: &[u8]) {
                assert_same(what, core, device);
            }
        }
    )*};
}

element_state!(f32, f16, bf16);

impl DeviceState for Q8Block {
    fn state_bytes(xs: &[Self]) -> Vec<u8> {
        xs.iter().flat_map(|b| b.to_bytes()).collect()
    }
    /// Equal codes, and equal scales (NaN for NaN).
    fn assert_state(what: &str, core: &[Self], device: &[u8]) {
        let w = homeadam_core::q8::BLOCK_BYTES;
        assert_eq!(core.len() * w, device.len(), "{what}: length");
        for (i, (x, d)) in core.iter().zip(device.chunks_exact(w)).enumerate() {
            let y = Q8Block::from_bytes(d);
            assert!(
                canonical(x.scale) == canonical(y.scale) && x.codes == y.codes,
                "{what}: block {i}: core {x:?} cuda {y:?}"
            );
        }
    }
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

/// The bits of `x`, every NaN as one (GPUs canonicalize NaN payloads).
fn canonical(x: f32) -> u32 {
    if x.is_nan() {
        f32::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

fn same_report(a: &StepReport, b: &StepReport) -> bool {
    let same = |a: Option<f32>, b: Option<f32>| a.map(canonical) == b.map(canonical);
    same(a.rho, b.rho)
        && same(a.rho_active, b.rho_active)
        && same(a.tau, b.tau)
        && a.step == b.step
        && a.skipped == b.skipped
        && a.home_elements == b.home_elements
        && a.nonfinite_applied == b.nonfinite_applied
        && a.swats_switched == b.swats_switched
}

/// One step of the core's scalar reference over the case's tensors in their groups.
fn reference_step<P: Storage, G: Storage, S: StateStorage>(
    core: &mut Optimizer,
    case: &Case,
    params: &mut [Vec<P>],
    grads: &[Vec<G>],
    states: &mut [Vec<S>],
    auxes: &mut [TensorAux],
) -> StepReport {
    let mut model: Vec<Tensor<'_, P, G, S>> = params
        .iter_mut()
        .zip(grads)
        .zip(states.iter_mut().zip(auxes.iter_mut()))
        .zip(&case.groups)
        .map(|(((p, g), (s, a)), &group)| Tensor::new(p, g, s, a).in_group(group))
        .collect();
    core.step_reference(&mut model, case.grad_scale)
        .expect("core step")
}

/// Steps the case on the core and on the device; compares after every step; round-trips a
/// checkpoint in the middle.
fn run<P: Storage, G: Storage, S: DeviceState>(case: &Case, stream: &Arc<CudaStream>) -> u64 {
    let mut core = Optimizer::new(case.config).expect("config");
    let mut params: Vec<Vec<P>> = case.params.iter().map(|p| stored(p)).collect();
    let mut states: Vec<Vec<S>> = case
        .params
        .iter()
        .map(|p| vec![S::default(); core.state_len_of::<S>(p.len())])
        .collect();
    let mut auxes = vec![TensorAux::default(); params.len()];
    let d_params: Vec<CudaSlice<u8>> = params.iter().map(|p| upload(stream, p)).collect();
    let mut d_grads: Vec<CudaSlice<u8>> = params
        .iter()
        .map(|p| upload_bytes(stream, vec![0u8; p.len() * G::DTYPE.size()]))
        .collect();
    let d_states: Vec<CudaSlice<u8>> = states
        .iter()
        .map(|s| upload_bytes(stream, S::state_bytes(s)))
        .collect();
    let tensors = device_tensors(
        stream,
        [&d_params, &d_grads, &d_states],
        params.iter().map(Vec::len),
        case.groups.iter().copied(),
    );
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
        let expected = reference_step(&mut core, case, &mut params, &grads, &mut states, &mut auxes);
        let got = cuda.step(case.grad_scale).expect("cuda step");
        assert!(
            same_report(&expected, &got),
            "{} row {r}: core {expected:?} cuda {got:?}",
            case.name
        );
        assert!(
            cuda.core().tau().to_bits() == core.tau().to_bits()
                && cuda.core().calibration_window() == core.calibration_window(),
            "{} row {r}: the calibration state",
            case.name
        );
        let telemetry = cuda.tensor_telemetry().expect("telemetry");
        for (k, (core_aux, cuda_aux)) in auxes.iter().zip(&telemetry).enumerate() {
            let rho = |a: &TensorAux| a.rho.to_bits();
            let lambda = |a: &TensorAux| a.swats_lambda.to_bits();
            assert!(
                rho(core_aux) == rho(cuda_aux)
                    && lambda(core_aux) == lambda(cuda_aux)
                    && core_aux.home_elements == cuda_aux.home_elements,
                "{} row {r} tensor {k}: core {core_aux:?} cuda {cuda_aux:?}",
                case.name
            );
        }
        for k in 0..params.len() {
            let p = stream.clone_dtoh(&d_params[k]).expect("download");
            let s = stream.clone_dtoh(&d_states[k]).expect("download");
            assert_same(
                &format!("{} row {r} param {k}", case.name),
                &params[k],
                &p[..params[k].len() * P::DTYPE.size()],
            );
            let state_len = S::state_bytes(&states[k]).len();
            S::assert_state(
                &format!("{} row {r} state {k}", case.name),
                &states[k],
                &s[..state_len],
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
            let views: Vec<TensorState<'_, S>> = states
                .iter()
                .zip(&auxes)
                .zip(&params)
                .map(|((state, aux), p)| TensorState {
                    numel: p.len(),
                    state,
                    aux,
                })
                .collect();
            let mut buf = vec![0u8; core.state_bytes(params.iter().map(Vec::len), S::DTYPE)];
            let mut sink = homeadam_core::SliceSink::new(&mut buf);
            core.save_state(&views, &mut sink).expect("core save");
            let mut views: Vec<TensorStateMut<'_, S>> = states
                .iter_mut()
                .zip(auxes.iter_mut())
                .zip(&params)
                .map(|((state, aux), p)| TensorStateMut {
                    numel: p.len(),
                    state,
                    aux,
                })
                .collect();
            core.load_state(&saved, &mut views)
                .expect("the device's checkpoint loads in the core");
            if buf != saved {
                // Only NaN payloads may differ (GPUs canonicalize NaN): the device's bytes,
                // loaded by the core, must give the core's values, NaN for NaN.
                for (k, (core_state, device_state)) in before.iter().zip(&states).enumerate() {
                    S::assert_state(
                        &format!("{}: checkpoint state {k}", case.name),
                        core_state,
                        &S::state_bytes(device_state),
                    );
                }
                let bits = |a: &[TensorAux]| -> Vec<(u32, u32, u32)> {
                    a.iter()
                        .map(|x| (canonical(x.swats_lambda), canonical(x.rho), x.home_elements))
                        .collect()
                };
                assert_eq!(
                    bits(&before_aux),
                    bits(&auxes),
                    "{}: checkpoint telemetry",
                    case.name
                );
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
            Dtype::Q8 => run::<P, G, Q8Block>(c, st),
        }
    }
    fn g<P: Storage>(c: &Case, st: &Arc<CudaStream>) -> u64 {
        match c.dtypes.grad {
            Dtype::F32 => s::<P, f32>(c, st),
            Dtype::F16 => s::<P, f16>(c, st),
            Dtype::BF16 => s::<P, bf16>(c, st),
            Dtype::Q8 => panic!("{}: q8 gradients", c.name),
        }
    }
    match case.dtypes.param {
        Dtype::F32 => g::<f32>(case, stream),
        Dtype::F16 => g::<f16>(case, stream),
        Dtype::BF16 => g::<bf16>(case, stream),
        Dtype::Q8 => panic!("{}: q8 parameters", case.name),
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
    for case in golden_cases() {
        elements += dispatch(&case, &stream);
        cases += 1;
    }
    println!("gpu: {cases} golden cases, {elements} element updates bit-identical");
}

#[test]
fn random_models_on_the_gpu_match_the_core_bit_for_bit() {
    let Some(stream) = gpu() else { return };
    // λ on every rule that takes it, so that the groups without decay differ.
    let decayed = |rule| Config {
        weight_decay: 0.01,
        ..Config::new(rule)
    };
    let home = |switch| Config {
        tau: 1e-9,
        ..Config::new(Rule::HomeAdamW(switch))
    };
    // τ calibrated at t = 1, 4, 7: row 3 (t = 4) holds a NaN, so a calibrating step is skipped.
    let calibrated = |switch| Config {
        tau_calibration: Some(TauCalibration {
            home_share: 0.3,
            every: 3,
        }),
        home_lr_scale: 0.5,
        ..home(switch)
    };
    let active = |switch| Config {
        rho_over: RhoOver::Active,
        ..calibrated(switch)
    };
    let bases = [
        decayed(Rule::Sgd),
        Config {
            momentum: 0.9,
            ..decayed(Rule::Sgd)
        },
        decayed(Rule::Adam),
        Config::new(Rule::AdamW),
        Config::new(Rule::AdamWSrf),
        home(Switch::Global),
        home(Switch::Layer),
        home(Switch::Element),
        calibrated(Switch::Global),
        calibrated(Switch::Layer),
        calibrated(Switch::Element),
        active(Switch::Global),
        active(Switch::Layer),
        decayed(Rule::AdaBelief),
        Config {
            switch_step: 2,
            ..decayed(Rule::MiAdam)
        },
        decayed(Rule::Swats),
        // ε = 10 makes the switch test pass at t = 2: the SGD phase runs from t = 3.
        Config {
            eps: 10.0,
            nesterov: true,
            ..decayed(Rule::Swats)
        },
        Config {
            eps: 10.0,
            weight_decouple: true,
            ..decayed(Rule::Swats)
        },
    ];
    let mut elements = 0;
    for (i, base) in bases.into_iter().enumerate() {
        for (j, (param, grad, state)) in [
            (Dtype::F32, Dtype::F32, Dtype::F32),
            (Dtype::BF16, Dtype::BF16, Dtype::F32),
            (Dtype::F16, Dtype::F16, Dtype::F16),
            (Dtype::BF16, Dtype::F32, Dtype::BF16),
            (Dtype::F32, Dtype::F32, Dtype::Q8),
            (Dtype::BF16, Dtype::BF16, Dtype::Q8),
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
                        ..base
                    };
                    let case = random_case(config, Dtypes { param, grad, state }, (i * 6 + j) as u64);
                    elements += dispatch(&case, &stream);
                }
            }
        }
    }
    println!("gpu: random models, {elements} element updates bit-identical");
}

/// Uploads `xs` (at least one byte, so that empty tensors get a pointer).
fn upload<T: Storage>(stream: &Arc<CudaStream>, xs: &[T]) -> CudaSlice<u8> {
    upload_bytes(stream, bytes(xs))
}

/// Uploads `b` (at least one byte, so that empty tensors get a pointer).
fn upload_bytes(stream: &Arc<CudaStream>, b: Vec<u8>) -> CudaSlice<u8> {
    stream
        .clone_htod(&if b.is_empty() { vec![0u8] } else { b })
        .expect("upload")
}

/// The device tensors of the buffers of θ, g and the state of each tensor, of `lens` elements,
/// in `groups`.
fn device_tensors(
    stream: &Arc<CudaStream>,
    [params, grads, states]: [&[CudaSlice<u8>]; 3],
    lens: impl IntoIterator<Item = usize>,
    groups: impl IntoIterator<Item = Group>,
) -> Vec<DeviceTensor> {
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
    lens.into_iter()
        .zip(groups)
        .enumerate()
        .map(|(k, (len, group))| {
            DeviceTensor::new(ptr(&params[k]), ptr(&grads[k]), ptr(&states[k]), len).in_group(group)
        })
        .collect()
}

/// The core's ‖g‖₂ of `grads`: one exact sum of every g² (widened to `f32`), rounded once.
fn core_norm<G: Storage>(grads: &[Vec<G>]) -> f64 {
    let mut sum = ExactSum::new();
    for g in grads.iter().flatten() {
        sum.add_square(g.to_f32());
    }
    sum.to_f64().sqrt()
}

/// `grad_norm` against the core's exact sum, before and after `set_grads`, then a step with
/// the new gradients against the core's reference.
fn norm_and_new_grads<G: Storage>(stream: &Arc<CudaStream>) {
    let config = Config {
        weight_decay: 0.01,
        ..Config::new(Rule::Swats)
    };
    let case = random_case(
        config,
        Dtypes {
            param: Dtype::F32,
            grad: G::DTYPE,
            state: Dtype::F32,
        },
        99,
    );
    let slots = case.config.state_slots();
    let mut params: Vec<Vec<f32>> = case.params.clone();
    let mut states: Vec<Vec<f32>> = params.iter().map(|p| vec![0.0; slots * p.len()]).collect();
    let mut auxes = vec![TensorAux::default(); params.len()];
    // Row 3 holds a NaN: ‖g‖ is NaN and the step is skipped.
    let rows: Vec<Vec<Vec<G>>> = (0..4)
        .map(|r| case.grads.iter().map(|g| stored(&g[r])).collect())
        .collect();
    let d_params: Vec<CudaSlice<u8>> = params.iter().map(|p| upload(stream, p)).collect();
    let d_states: Vec<CudaSlice<u8>> = states.iter().map(|s| upload(stream, s)).collect();
    let d_rows: Vec<Vec<CudaSlice<u8>>> = rows
        .iter()
        .map(|row| row.iter().map(|g| upload(stream, g)).collect())
        .collect();
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
    let tensors = device_tensors(
        stream,
        [&d_params, &d_rows[0], &d_states],
        params.iter().map(Vec::len),
        case.groups.iter().copied(),
    );
    // SAFETY: the buffers live until the end of this function and have the stated sizes.
    let mut cuda = unsafe { CudaOptimizer::new(case.config, case.dtypes, &tensors, stream.clone()) }
        .expect("cuda optimizer");
    let mut core = Optimizer::new(case.config).expect("config");
    for (r, row) in rows.iter().enumerate() {
        let pointers: Vec<u64> = d_rows[r].iter().map(ptr).collect();
        // SAFETY: as above.
        unsafe { cuda.set_grads(&pointers) }.expect("set_grads");
        let (expected, got) = (core_norm(row), cuda.grad_norm().expect("grad_norm"));
        assert!(
            expected.to_bits() == got.to_bits() || (expected.is_nan() && got.is_nan()),
            "row {r}: core ‖g‖ {expected:e}, cuda {got:e}"
        );
        let report = reference_step(&mut core, &case, &mut params, row, &mut states, &mut auxes);
        let got = cuda.step(case.grad_scale).expect("cuda step");
        assert!(
            same_report(&report, &got),
            "row {r}: core {report:?} cuda {got:?}"
        );
        for (k, p) in params.iter().enumerate() {
            let d = stream.clone_dtoh(&d_params[k]).expect("download");
            assert_same(&format!("row {r} param {k}"), p, &d[..p.len() * 4]);
        }
    }
    // SAFETY: nothing is installed: the count is refused first.
    let refused = unsafe { cuda.set_grads(&[0]) };
    assert!(
        matches!(
            refused,
            Err(Error::TensorCount {
                expected: 6,
                actual: 1
            })
        ),
        "{refused:?}"
    );
}

#[test]
fn grad_norm_is_the_cores_exact_sum_and_set_grads_steps_with_new_pointers() {
    let Some(stream) = gpu() else { return };
    norm_and_new_grads::<f32>(&stream);
    norm_and_new_grads::<bf16>(&stream);
    norm_and_new_grads::<f16>(&stream);
    println!("gpu: grad_norm = the core's exact ‖g‖₂, set_grads steps with the new gradients");
}

/// The sizes of the bounded models: several kernel chunks (16384 elements) and many chunks of
/// the bound (256), partial ones, an empty tensor.
const BOUND_SIZES: [usize; 6] = [70_000, 0, 16_385, 300, 4096, 257];

/// Global HomeAdam(W) over many steps on the device and in the core's `Optimizer::step`, which
/// bounds ρ_t itself: parameters and state bit for bit after every step, the same reports and
/// per-tensor telemetry, and the same `exact_first_passes` (the device's bound proving srf and
/// home where the core's does); state reloaded in the middle (no bound on either side after it).
/// Returns the exact first passes and the applied steps.
fn bounded<P: Storage, G: Storage, S: DeviceState>(
    config: Config,
    stream: &Arc<CudaStream>,
    seed: u64,
) -> (u64, u64) {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(s)
    };
    let mut core = Optimizer::new(config).expect("config");
    let mut params: Vec<Vec<P>> = BOUND_SIZES
        .iter()
        .map(|&n| {
            (0..n)
                .map(|_| P::from_f32((next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5))
                .collect()
        })
        .collect();
    let mut states: Vec<Vec<S>> = BOUND_SIZES
        .iter()
        .map(|&n| vec![S::default(); core.state_len_of::<S>(n)])
        .collect();
    let mut auxes = vec![TensorAux::default(); BOUND_SIZES.len()];
    let d_params: Vec<CudaSlice<u8>> = params.iter().map(|p| upload(stream, p)).collect();
    let mut d_grads: Vec<CudaSlice<u8>> = BOUND_SIZES
        .iter()
        .map(|&n| upload(stream, &vec![G::from_f32(0.0); n]))
        .collect();
    let d_states: Vec<CudaSlice<u8>> = states
        .iter()
        .map(|st| upload_bytes(stream, S::state_bytes(st)))
        .collect();
    let tensors = device_tensors(
        stream,
        [&d_params, &d_grads, &d_states],
        BOUND_SIZES,
        [Group::DEFAULT; BOUND_SIZES.len()],
    );
    let dtypes = Dtypes {
        param: P::DTYPE,
        grad: G::DTYPE,
        state: S::DTYPE,
    };
    // SAFETY: the buffers live until the end of this function and have the stated sizes.
    let mut cuda =
        unsafe { CudaOptimizer::new(config, dtypes, &tensors, stream.clone()) }.expect("cuda optimizer");
    let name = format!("bound {} {dtypes:?}", config.name());
    let steps = 80;
    for r in 0..steps {
        let grads: Vec<Vec<G>> = common::bound_grads(&BOUND_SIZES, &mut next)
            .iter()
            .map(|g| stored(g))
            .collect();
        for (d, g) in d_grads.iter_mut().zip(&grads) {
            if !g.is_empty() {
                stream.memcpy_htod(&bytes(g), d).expect("grad upload");
            }
        }
        let grad_scale = [1.0, 4.0][(next() % 2) as usize];
        let expected = common::core_step(
            &mut core,
            &mut params,
            &grads,
            &mut states,
            &mut auxes,
            grad_scale,
        );
        let got = cuda.step(grad_scale).expect("cuda step");
        assert!(
            same_report(&expected, &got),
            "{name} step {r}: core {expected:?} cuda {got:?}"
        );
        assert_eq!(
            cuda.core().exact_first_passes(),
            core.exact_first_passes(),
            "{name} step {r}: exact first passes"
        );
        assert!(
            cuda.core().tau().to_bits() == core.tau().to_bits()
                && cuda.core().calibration_window() == core.calibration_window(),
            "{name} step {r}: the calibration state"
        );
        let telemetry = cuda.tensor_telemetry().expect("telemetry");
        for (k, (c, d)) in auxes.iter().zip(&telemetry).enumerate() {
            assert!(
                c.rho.to_bits() == d.rho.to_bits() && c.home_elements == d.home_elements,
                "{name} step {r} tensor {k}: core {c:?} cuda {d:?}"
            );
        }
        for k in 0..BOUND_SIZES.len() {
            let p = stream.clone_dtoh(&d_params[k]).expect("download");
            let st = stream.clone_dtoh(&d_states[k]).expect("download");
            assert_same(
                &format!("{name} step {r} param {k}"),
                &params[k],
                &p[..params[k].len() * P::DTYPE.size()],
            );
            let len = S::state_bytes(&states[k]).len();
            S::assert_state(&format!("{name} step {r} state {k}"), &states[k], &st[..len]);
        }
        if r == steps / 2 {
            let saved = cuda.save_state().expect("save");
            cuda.load_state(&saved).expect("load");
            core.forget_bound();
        }
    }
    (core.exact_first_passes(), core.step_count())
}

#[test]
fn the_global_bound_decides_on_the_gpu_as_in_the_core() {
    let Some(stream) = gpu() else { return };
    let base = Config {
        beta2: 0.5,
        tau: 1e-7,
        allow_f16_state: true,
        ..Config::new(Rule::HomeAdamW(Switch::Global))
    };
    let calibrated = Config {
        tau_calibration: Some(TauCalibration {
            home_share: 0.3,
            every: 7,
        }),
        ..base
    };
    let trust = Config {
        finite_check: FiniteCheck::Trust,
        rounding: Rounding::Stochastic,
        ..base
    };
    let mut bounded_steps = (0, 0);
    for (i, config) in [base, trust, calibrated].into_iter().enumerate() {
        let seed = 100 + i as u64;
        for (exact, steps) in [
            bounded::<f32, f32, f32>(config, &stream, seed),
            bounded::<bf16, bf16, f32>(config, &stream, seed),
            bounded::<bf16, bf16, bf16>(config, &stream, seed),
            bounded::<f16, f16, f16>(config, &stream, seed),
        ] {
            bounded_steps = (bounded_steps.0 + exact, bounded_steps.1 + steps);
        }
        // q8 state keeps no bound: every applied step runs the exact first pass.
        let (exact, steps) = bounded::<bf16, bf16, Q8Block>(config, &stream, seed);
        assert_eq!(exact, steps, "q8 state: an exact first pass at every step");
    }
    println!(
        "gpu: global bound, {} of {} applied steps ran the exact first pass, as in the core",
        bounded_steps.0, bounded_steps.1
    );
    assert!(bounded_steps.0 < bounded_steps.1, "no bound decided a step");
}
