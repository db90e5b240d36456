//! The element math of `kernels/homeadam_math.h`, compiled by g++ (`-ffp-contract=off`, the
//! metadata of `kernels.rs` as `-D` flags), against the core's `Optimizer::step_reference`, bit
//! for bit: every rule and variant (HomeAdam's ρ over the active elements, η_h ≠ η and a
//! calibrated τ included) × every param/grad/state storage type (q8 state too, the tensors' sizes
//! ending in partial 256-element blocks) × both roundings, 8 steps of a model of four tensors in
//! four parameter groups (η scaled or not, λ or none) with random values (denormal, huge, NaN and
//! ±∞ included), plus every storage conversion and the exact
//! sums of `homeadam_exact.h` against the core's `ExactSum`. The first passes the harness
//! mirrors (minima of v_t, the calibration histogram) are checked against the core's
//! `home_first_pass` and `home_calibration_pass`; the update runs with the τ the core's step
//! used. The global rule's bound (u and its chunk, kept by the update; the srf and home proofs)
//! is driven over many steps as the CUDA host drives it and decides as the core's own step.
//! Needs g++ only (no GPU); skipped with a message when g++ is missing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use homeadam_core::backend::{
    goes_home, home_calibration_pass, home_first_pass, mix64, srf_proven_by, Histogram, Outcome,
    SecondMomentMin, StepScalars,
};
use homeadam_core::q8::{self, Map};
use homeadam_core::rules::ElementKernel;
use homeadam_core::{
    bf16, f16, Config, Dtype, ExactSum, FiniteCheck, Group, Optimizer, Q8Block, RhoOver, Rounding, Rule,
    StateStorage, StepReport, Storage, Switch, TauCalibration, Tensor, TensorAux,
};
use homeadam_cuda::kernels::{self, flags};

mod common;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A mixture: ordinary magnitudes, denormals, huge values, zeros and raw bit patterns
    /// (NaN and ±∞ among them).
    fn value(&mut self) -> f32 {
        let r = self.next();
        let sign = (r >> 63) as u32;
        let man = (r >> 8) as u32 & 0x7f_ffff;
        let bits = match r % 20 {
            0..=9 => (sign << 31) | ((100 + (r >> 40) % 35) as u32) << 23 | man,
            10..=11 => (sign << 31) | man,
            12..=13 => (sign << 31) | ((240 + (r >> 40) % 15) as u32) << 23 | man,
            14 => sign << 31,
            15..=17 => (sign << 31) | ((60 + (r >> 40) % 80) as u32) << 23 | man,
            _ => r as u32,
        };
        f32::from_bits(bits)
    }
    /// ±[2^-10, 2^10): gradients and second moments whose v̂ falls on both sides of τ = 1e-6
    /// with the gradient scales of the steps.
    fn moderate(&mut self) -> f32 {
        let r = self.next();
        let exp = (117 + (r >> 40) % 20) as u32;
        f32::from_bits(((r >> 63) as u32) << 31 | exp << 23 | (r >> 8) as u32 & 0x7f_ffff)
    }
    fn finite(&mut self) -> f32 {
        loop {
            let x = self.value();
            if x.is_finite() {
                return x;
            }
        }
    }
}

/// The g++ build of `tests/gxx/harness.cpp`, compiled once per content: its path in cargo's
/// scratch directory is named after a hash of the sources, the defines and the flags, so the
/// tests of one run and later runs share one compile (a third of a minute).
fn harness() -> Option<PathBuf> {
    static HARNESS: OnceLock<Option<PathBuf>> = OnceLock::new();
    HARNESS.get_or_init(compile_harness).clone()
}

fn compile_harness() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // The metadata comes from kernels.rs, not from the generated homeadam_defs.h.
    let defines: Vec<String> = kernels::defines()
        .into_iter()
        .map(|(k, v)| format!("-D{k}={v}"))
        .collect();
    let flags = [
        "-O2",
        "-std=c++14",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-ffp-contract=off",
        "-fno-fast-math",
    ];
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes.iter().chain(&[0xff]) {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut sources: Vec<PathBuf> = std::fs::read_dir(dir.join("kernels"))
        .expect("kernels/")
        .map(|e| e.expect("kernels/ entry").path())
        .collect();
    sources.sort();
    sources.push(dir.join("tests/gxx/harness.cpp"));
    for path in &sources {
        feed(&std::fs::read(path).expect("a kernel source"));
    }
    for arg in flags.iter().map(|f| f.to_string()).chain(defines.iter().cloned()) {
        feed(arg.as_bytes());
    }
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("homeadam_gxx_{hash:016x}"));
    if out.is_file() {
        return Some(out);
    }
    // Written under a name of this process, then renamed: another test process may be
    // compiling the same harness.
    let partial = out.with_extension(format!("{}.partial", std::process::id()));
    let status = Command::new("g++")
        .args(flags)
        .args(&defines)
        .arg("-I")
        .arg(dir.join("kernels"))
        .arg(dir.join("tests/gxx/harness.cpp"))
        .arg("-o")
        .arg(&partial)
        .status();
    match status {
        Ok(s) if s.success() => {
            std::fs::rename(&partial, &out).expect("the harness moves into place");
            Some(out)
        }
        Ok(s) => panic!("g++ failed to compile homeadam_math.h ({s})"),
        Err(e) => {
            eprintln!("SKIPPED parity_gxx: cannot run g++ ({e})");
            None
        }
    }
}

fn run_harness(exe: &PathBuf, input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("harness starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input).expect("harness reads"));
    let out = child.wait_with_output().expect("harness runs");
    writer.join().expect("writer");
    assert!(out.status.success(), "harness failed");
    out.stdout
}

fn put<T: Storage>(buf: &mut Vec<u8>, xs: &[T]) {
    for x in xs {
        buf.extend_from_slice(&x.to_bits32().to_le_bytes()[..T::DTYPE.size()]);
    }
}

fn code(d: Dtype) -> u32 {
    match d {
        Dtype::F32 => 0,
        Dtype::F16 => 1,
        Dtype::BF16 => 2,
        Dtype::Q8 => 3,
    }
}

/// Equal bits, or both NaN (NaN payloads are not part of the contract).
fn same<T: Storage>(a: T, b_bits: u32) -> bool {
    let b = T::from_bits32(b_bits);
    a.to_bits32() == b_bits || (a.to_f32().is_nan() && b.to_f32().is_nan())
}

/// A state type of the harness: a tensor's initial state, its bytes for the harness, and the
/// check of the harness's bytes against the core's state.
trait HarnessState: StateStorage {
    /// The state of a tensor of `len` elements whose element i of slot k would be `x(k, i)`.
    fn initial(config: &Config, len: usize, x: impl FnMut(usize, usize) -> f32) -> Vec<Self>;
    fn put_state(buf: &mut Vec<u8>, xs: &[Self]);
    fn check(what: &str, core: &[Self], r: &mut Reader<'_>);
}

/// The element types (a blanket impl would overlap Q8Block's).
macro_rules! element_state {
    ($($t:ty),*) => {$(
        impl HarnessState for $t {
            fn initial(config: &Config, len: usize, mut x: impl FnMut(usize, usize) -> f32) -> Vec<Self> {
                (0..config.state_slots() * len)
                    .map(|i| <$t as Storage>::from_f32(x(i / len, i % len)))
                    .collect()
            }
            fn put_state(buf: &mut Vec<u8>, xs: &[Self]) {
                put(buf, xs);
            }
            fn check(what: &str, core: &[Self], r: &mut Reader<'_>) {
                for (i, s) in core.iter().enumerate() {
                    let b = r.bits(<$t as Storage>::DTYPE.size());
                    assert!(
                        same(*s, b),
                        "{what} state[{i}] core {:#x} header {b:#x}",
                        s.to_bits32()
                    );
                }
            }
        }
    )*};
}

element_state!(f32, f16, bf16);

impl HarnessState for Q8Block {
    /// Each slot quantized by the core (its map, an arbitrary key).
    fn initial(config: &Config, len: usize, mut x: impl FnMut(usize, usize) -> f32) -> Vec<Self> {
        let mut out = Vec::new();
        for k in 0..config.state_slots() {
            let values: Vec<f32> = (0..len).map(|i| x(k, i)).collect();
            for (b, chunk) in values.chunks(q8::BLOCK).enumerate() {
                let mut block = Q8Block::ZERO;
                let key = Map::slot_key(0x1234, k);
                q8::quantize(chunk, config.q8_map(k), key, b * q8::BLOCK, &mut block);
                out.push(block);
            }
        }
        out
    }
    fn put_state(buf: &mut Vec<u8>, xs: &[Self]) {
        for b in xs {
            buf.extend_from_slice(&b.to_bytes());
        }
    }
    fn check(what: &str, core: &[Self], r: &mut Reader<'_>) {
        for (i, b) in core.iter().enumerate() {
            let (bytes, rest) = r.0.split_at(q8::BLOCK_BYTES);
            r.0 = rest;
            let got = Q8Block::from_bytes(bytes);
            let scale = |x: f32| {
                if x.is_nan() {
                    f32::NAN.to_bits()
                } else {
                    x.to_bits()
                }
            };
            assert!(
                scale(b.scale) == scale(got.scale) && b.codes == got.codes,
                "{what} q8 block {i}: core {b:?} header {got:?}"
            );
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let (a, b) = self.0.split_at(4);
        self.0 = b;
        u32::from_le_bytes(a.try_into().expect("4 bytes"))
    }
    fn u64(&mut self) -> u64 {
        let (a, b) = self.0.split_at(8);
        self.0 = b;
        u64::from_le_bytes(a.try_into().expect("8 bytes"))
    }
    fn bits(&mut self, width: usize) -> u32 {
        let (a, b) = self.0.split_at(width);
        self.0 = b;
        let mut w = [0u8; 4];
        w[..width].copy_from_slice(a);
        u32::from_le_bytes(w)
    }
}

/// The rule variants: every rule of the core with its options.
fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for rule in homeadam_core::ALL_RULES {
        let mut c = Config::new(rule);
        if rule != Rule::Sgd {
            c.beta2 = 0.9; // AdaBelief's rectification turns on at t = 8
        }
        if rule.switch().is_some() {
            c.tau = 1e-6;
        }
        if rule == Rule::MiAdam {
            (c.kappa, c.switch_step) = (0.9, 3);
        }
        match rule {
            Rule::Sgd => {
                let sgdm = Config { momentum: 0.9, ..c };
                out.push(Config {
                    weight_decay: 0.01,
                    ..c
                });
                out.push(Config {
                    dampening: 0.1,
                    ..sgdm
                });
                out.push(sgdm);
                out.push(Config {
                    nesterov: true,
                    weight_decay: 0.01,
                    ..sgdm
                });
            }
            Rule::Adam | Rule::MiAdam | Rule::Lion => {
                out.push(c);
                out.push(Config {
                    weight_decay: 0.01,
                    ..c
                });
            }
            Rule::AdaBelief => {
                out.push(c);
                out.push(Config {
                    amsgrad: true,
                    weight_decay: 0.01,
                    ..c
                });
                out.push(Config {
                    rectify: false,
                    weight_decouple: false,
                    weight_decay: 0.01,
                    ..c
                });
                out.push(Config {
                    fixed_decay: true,
                    weight_decay: 0.01,
                    ..c
                });
            }
            Rule::Swats => {
                out.push(c);
                // ε = 10 makes the switch test pass at t = 2: the SGD phase runs from t = 3.
                out.push(Config {
                    eps: 10.0,
                    weight_decay: 0.01,
                    nesterov: true,
                    ..c
                });
                out.push(Config {
                    eps: 10.0,
                    weight_decouple: true,
                    weight_decay: 0.01,
                    ..c
                });
            }
            Rule::HomeAdam(switch) | Rule::HomeAdamW(switch) => {
                let calibrated = Config {
                    tau_calibration: Some(TauCalibration {
                        home_share: 0.3,
                        every: 3,
                    }),
                    ..c
                };
                out.extend([
                    c,
                    Config { tau: 1e-30, ..c },
                    Config {
                        home_lr_scale: 0.25,
                        ..c
                    },
                    calibrated,
                ]);
                if switch != Switch::Element {
                    let active = Config {
                        rho_over: RhoOver::Active,
                        ..c
                    };
                    out.extend([
                        active,
                        Config { tau: 1e-30, ..active },
                        Config {
                            rho_over: RhoOver::Active,
                            home_lr_scale: 4.0,
                            ..calibrated
                        },
                    ]);
                }
            }
            _ => out.push(c),
        }
    }
    let mut all = Vec::new();
    for c in out {
        for rounding in [Rounding::Nearest, Rounding::Stochastic] {
            for finite_check in [FiniteCheck::SkipStep, FiniteCheck::Trust] {
                all.push(Config {
                    rounding,
                    finite_check,
                    seed: 7,
                    allow_f16_state: true,
                    ..c
                });
            }
        }
    }
    all
}

/// The model of every case: each tensor's size and parameter group, the groups being the
/// distinct ones in order (the harness's group indices).
fn model(n: usize) -> (Vec<(usize, usize)>, Vec<Group>) {
    let groups = vec![
        Group::DEFAULT,
        Group::NO_DECAY,
        Group {
            lr_scale: 0.25,
            beta1: Some(0.8),
            weight_decay: Some(0.05),
            ..Group::DEFAULT
        },
        Group {
            lr_scale: 3.0,
            decay: false,
            ..Group::DEFAULT
        },
    ];
    (vec![(n / 2, 0), (3, 1), (n / 4, 2), (n / 4 + 1, 3)], groups)
}

/// `group`, or without its λ, ε and β overrides where `config`'s rule refuses them.
fn accepted(config: &Config, group: Group) -> Group {
    match config.check_group(group) {
        Ok(()) => group,
        Err(_) => Group {
            lr_scale: group.lr_scale,
            decay: group.decay,
            ..Group::DEFAULT
        },
    }
}

/// The tensor that carries the non-finite gradient of a bad step.
const BAD_TENSOR: usize = 2;
/// With ρ over the active elements: the tensor whose gradients and v are 0 (never active).
const INACTIVE_TENSOR: usize = 1;

#[derive(Default)]
struct Counts {
    elements: u64,
    steps: u64,
    skipped: u64,
    swats_sgd_steps: u64,
    home: u64,
    /// Home elements with η_h ≠ η.
    home_at_home_lr: u64,
    /// Applied steps that calibrated τ.
    calibrated: u64,
    /// Applied steps where ρ over the active elements decided otherwise than ρ over all would
    /// have (the model, or one tensor).
    active_decided: u64,
}

/// The core's side of one step.
struct Expected<P, S> {
    what: String,
    report: StepReport,
    bc2: f32,
    /// Global / per-layer HomeAdam: each tensor's first-pass minima.
    minima: Option<Vec<SecondMomentMin>>,
    /// Element-wise HomeAdam at a calibration step: the calibration pass's histogram.
    calibration: Option<Histogram>,
    params: Vec<Vec<P>>,
    states: Vec<Vec<S>>,
    auxes: Vec<TensorAux>,
}

fn scalar_bytes(s: &StepScalars) -> &[u8] {
    // SAFETY: StepScalars is repr(C) of f32 and u32 fields, no padding.
    unsafe {
        std::slice::from_raw_parts(
            s as *const StepScalars as *const u8,
            std::mem::size_of::<StepScalars>(),
        )
    }
}

/// The minima the global / per-layer first pass finds in each tensor (the core's
/// `home_first_pass`), else `None`.
fn first_pass<G: Storage, S: StateStorage>(
    config: &Config,
    s: &StepScalars,
    grads: &[Vec<G>],
    states: &[Vec<S>],
) -> Option<Vec<SecondMomentMin>> {
    matches!(config.rule.switch(), Some(Switch::Global | Switch::Layer)).then(|| {
        grads
            .iter()
            .zip(states)
            .map(|(g, state)| {
                let nv = S::slot_len(g.len());
                home_first_pass(g, &state[nv..2 * nv], s).0
            })
            .collect()
    })
}

/// Whether ρ over the active elements decided otherwise than ρ over all would have, for the
/// model (global) or one tensor (per-layer).
fn active_decided(config: &Config, minima: &[SecondMomentMin], bc2: f32, tau: f32) -> bool {
    let differs = |m: &SecondMomentMin| {
        let (all, active) = (m.all / bc2, m.active / bc2);
        goes_home(RhoOver::All.rho(all, active), tau) != goes_home(RhoOver::Active.rho(all, active), tau)
    };
    match config.rule.switch() {
        Some(Switch::Global) => differs(&minima.iter().fold(SecondMomentMin::EMPTY, |a, &b| a.merge(b))),
        _ => minima.iter().any(differs),
    }
}

fn combo<P: Storage, G: Storage, S: HarnessState>(exe: &PathBuf, n: usize, steps: u64, counts: &mut Counts) {
    let mut rng = Rng(0x5eed ^ (code(P::DTYPE) * 9 + code(G::DTYPE) * 3 + code(S::DTYPE)) as u64);
    let (layout, groups) = model(n);
    let mut input = Vec::new();
    let mut expected = Vec::new();
    for config in configs() {
        let groups: Vec<Group> = groups.iter().map(|&g| accepted(&config, g)).collect();
        // ρ over the active elements: one tensor never active, moderate values elsewhere, so
        // that ρ_active falls on both sides of τ while ρ over all is 0.
        let active = config.rho_over == RhoOver::Active;
        let mut params: Vec<Vec<P>> = layout
            .iter()
            .map(|&(len, _)| (0..len).map(|_| P::from_f32(rng.finite())).collect())
            .collect();
        let mut states: Vec<Vec<S>> = layout
            .iter()
            .enumerate()
            .map(|(k, &(len, _))| {
                S::initial(&config, len, |slot, _| {
                    let x = if !active {
                        rng.finite()
                    } else if k == INACTIVE_TENSOR {
                        0.0
                    } else {
                        rng.moderate()
                    };
                    // Second moments are never negative.
                    if config.is_second_moment_slot(slot) {
                        x.abs()
                    } else {
                        x
                    }
                })
            })
            .collect();
        let mut opt = Optimizer::new(config).expect("valid config");
        let mut auxes = vec![TensorAux::default(); layout.len()];
        for _ in 0..steps {
            let grad_scale = [1.0, 65536.0, 0.5, 3.0][rng.below(4) as usize];
            // One step in three carries a non-finite gradient.
            let bad = rng.below(3) == 0;
            let grads: Vec<Vec<G>> = layout
                .iter()
                .enumerate()
                .map(|(k, &(len, _))| {
                    (0..len)
                        .map(|i| {
                            let x = if bad && k == BAD_TENSOR && i == len / 2 {
                                f32::INFINITY
                            } else if !active {
                                rng.value()
                            } else if k == INACTIVE_TENSOR {
                                0.0
                            } else {
                                rng.moderate()
                            };
                            G::from_f32(if !bad && !x.is_finite() { 1.0 } else { x })
                        })
                        .collect()
                })
                .collect();
            // The scalars a backend gets from the core: a step begun and dropped is not counted.
            let (t, pre, mut scalars, calibrates) = {
                let step = opt.begin(grad_scale).expect("grad scale");
                let scalars: Vec<StepScalars> = groups.iter().map(|&g| step.group_scalars(g)).collect();
                (step.t(), *step.scalars(), scalars, step.calibrates())
            };
            let minima = first_pass(&config, &pre, &grads, &states);
            let ew_calibrates = calibrates && config.rule.switch() == Some(Switch::Element);
            let calibration = ew_calibrates.then(|| {
                let mut h = Histogram::new();
                for (g, state) in grads.iter().zip(&states) {
                    let nv = S::slot_len(g.len());
                    home_calibration_pass(g, &state[nv..2 * nv], &pre, &mut h);
                }
                h
            });
            let (kernel, mut f) = kernels::rule_kernel(&config, opt.swats_sgd_lr().is_some());
            counts.swats_sgd_steps += (kernel == ElementKernel::SwatsSgd) as u64;
            if config.rounding == Rounding::Stochastic {
                f |= flags::STOCHASTIC;
            }
            let mut tensors = Vec::new();
            for (k, &(len, group)) in layout.iter().enumerate() {
                tensors.extend_from_slice(&(group as u32).to_le_bytes());
                tensors.extend_from_slice(&(len as u64).to_le_bytes());
                put(&mut tensors, &params[k]);
                put(&mut tensors, &grads[k]);
                S::put_state(&mut tensors, &states[k]);
            }
            let report = {
                let mut model: Vec<Tensor<'_, P, G, S>> = params
                    .iter_mut()
                    .zip(&grads)
                    .zip(states.iter_mut().zip(auxes.iter_mut()))
                    .zip(&layout)
                    .map(|(((p, g), (s, a)), &(_, group))| Tensor::new(p, g, s, a).in_group(groups[group]))
                    .collect();
                opt.step_reference(&mut model, grad_scale).expect("step")
            };
            // The update takes the τ the core's step used (calibrated or not).
            if let Some(tau) = report.tau {
                for s in &mut scalars {
                    s.tau = tau;
                }
            }
            let check = (config.finite_check == FiniteCheck::SkipStep) as u32;
            input.extend_from_slice(&0u32.to_le_bytes());
            for h in [
                kernel as u32,
                code(P::DTYPE),
                code(G::DTYPE),
                code(S::DTYPE),
                f,
                check,
                ew_calibrates as u32,
            ] {
                input.extend_from_slice(&h.to_le_bytes());
            }
            input.extend_from_slice(&kernels::sr_base(config.seed, t).to_le_bytes());
            input.extend_from_slice(&(groups.len() as u32).to_le_bytes());
            input.extend_from_slice(scalar_bytes(&pre));
            for s in &scalars {
                input.extend_from_slice(scalar_bytes(s));
            }
            input.extend_from_slice(&(layout.len() as u32).to_le_bytes());
            input.extend_from_slice(&tensors);
            counts.steps += 1;
            counts.skipped += report.skipped as u64;
            counts.home += report.home_elements;
            if !report.skipped {
                counts.elements += layout.iter().map(|&(len, _)| len as u64).sum::<u64>();
                counts.calibrated += calibrates as u64;
                if config.home_lr_scale != 1.0 {
                    counts.home_at_home_lr += report.home_elements;
                }
                if let (Some(m), Some(tau), true) = (&minima, report.tau, active) {
                    counts.active_decided += active_decided(&config, m, pre.bc2, tau) as u64;
                }
            }
            expected.push(Expected {
                what: format!(
                    "{} {}/{}/{} {config:?} t={t}",
                    config.name(),
                    P::DTYPE.name(),
                    G::DTYPE.name(),
                    S::DTYPE.name()
                ),
                report,
                bc2: pre.bc2,
                minima,
                calibration,
                params: params.clone(),
                states: states.clone(),
                auxes: auxes.clone(),
            });
        }
    }
    let out = run_harness(exe, &input);
    let mut r = Reader(&out);
    let rho_bits = |vmin: u32, bc2: f32| (f32::from_bits(vmin) / bc2).to_bits();
    let min_bits = |m: &SecondMomentMin| (m.all.to_bits(), m.active.to_bits());
    for e in expected {
        let what = &e.what;
        let (skipped, vmin, home) = (r.u32(), r.u32(), r.u32());
        let model_pre = (r.u32(), r.u32());
        assert_eq!(skipped != 0, e.report.skipped, "{what}: skipped");
        assert_eq!(home as u64, e.report.home_elements, "{what}: home elements");
        if let Some(rho) = e.report.rho {
            assert_eq!(rho.to_bits(), rho_bits(vmin, e.bc2), "{what}: rho");
        }
        if let Some(minima) = &e.minima {
            let model = minima.iter().fold(SecondMomentMin::EMPTY, |a, &b| a.merge(b));
            assert_eq!(
                model_pre,
                min_bits(&model),
                "{what}: the model's first-pass minima"
            );
        }
        if let Some(h) = &e.calibration {
            for (b, &c) in h.counts().iter().enumerate() {
                assert_eq!(r.u64(), u64::from(c), "{what}: calibration bucket {b}");
            }
        }
        for (k, aux) in e.auxes.iter().enumerate() {
            let pre = (r.u32(), r.u32());
            if let Some(minima) = &e.minima {
                assert_eq!(pre, min_bits(&minima[k]), "{what}: tensor {k} first-pass minima");
            }
            let (vmin, home) = (r.u32(), r.u32());
            assert_eq!(aux.rho.to_bits(), rho_bits(vmin, e.bc2), "{what}: tensor {k} rho");
            assert_eq!(aux.home_elements, home, "{what}: tensor {k} home elements");
            for (i, p) in e.params[k].iter().enumerate() {
                let b = r.bits(P::DTYPE.size());
                assert!(
                    same(*p, b),
                    "{what}: tensor {k} param[{i}] core {:#x} header {b:#x}",
                    p.to_bits32()
                );
            }
            S::check(&format!("{what}: tensor {k}"), &e.states[k], &mut r);
        }
    }
    assert!(r.0.is_empty(), "harness wrote more than expected");
}

fn combos_p<P: Storage>(exe: &PathBuf, n: usize, steps: u64, counts: &mut Counts) {
    combos_g::<P, f32>(exe, n, steps, counts);
    combos_g::<P, f16>(exe, n, steps, counts);
    combos_g::<P, bf16>(exe, n, steps, counts);
}

fn combos_g<P: Storage, G: Storage>(exe: &PathBuf, n: usize, steps: u64, counts: &mut Counts) {
    combo::<P, G, f32>(exe, n, steps, counts);
    combo::<P, G, f16>(exe, n, steps, counts);
    combo::<P, G, bf16>(exe, n, steps, counts);
}

#[test]
fn element_math_matches_the_core_bit_for_bit() {
    let Some(exe) = harness() else { return };
    let n = if cfg!(homeadam_unoptimized) { 64 } else { 1024 };
    let mut counts = Counts::default();
    combos_p::<f32>(&exe, n, 8, &mut counts);
    combos_p::<f16>(&exe, n, 8, &mut counts);
    combos_p::<bf16>(&exe, n, 8, &mut counts);
    println!(
        "parity_gxx: {} element updates in {} steps ({} skipped steps not counted, {} SWATS SGD-phase steps, {} home elements, {} at η_h ≠ η, {} steps calibrating τ, {} where ρ over the active elements decided otherwise): all bit-identical",
        counts.elements,
        counts.steps,
        counts.skipped,
        counts.swats_sgd_steps,
        counts.home,
        counts.home_at_home_lr,
        counts.calibrated,
        counts.active_decided
    );
    assert!(counts.swats_sgd_steps > 0, "the SWATS SGD phase was not reached");
    assert!(counts.home > 0 && counts.skipped > 0);
    assert!(counts.home_at_home_lr > 0 && counts.calibrated > 0 && counts.active_decided > 0);
}

#[test]
fn q8_state_matches_the_core_bit_for_bit() {
    let Some(exe) = harness() else { return };
    // Tensors of n/2, 3, n/4 and n/4 + 1 elements: partial last blocks, and several blocks.
    let n = if cfg!(homeadam_unoptimized) { 600 } else { 1200 };
    let mut counts = Counts::default();
    for_each_pg::<Q8Block>(&exe, n, 6, &mut counts);
    println!(
        "parity_gxx: q8 state, {} element updates in {} steps ({} skipped, {} SWATS SGD-phase steps, {} home elements, {} steps calibrating τ): all bit-identical",
        counts.elements, counts.steps, counts.skipped, counts.swats_sgd_steps, counts.home, counts.calibrated
    );
    assert!(counts.swats_sgd_steps > 0 && counts.home > 0 && counts.skipped > 0 && counts.calibrated > 0);
}

/// [`combo`] with state S for every parameter and gradient type.
fn for_each_pg<S: HarnessState>(exe: &PathBuf, n: usize, steps: u64, counts: &mut Counts) {
    fn g<P: Storage, S: HarnessState>(exe: &PathBuf, n: usize, steps: u64, counts: &mut Counts) {
        combo::<P, f32, S>(exe, n, steps, counts);
        combo::<P, f16, S>(exe, n, steps, counts);
        combo::<P, bf16, S>(exe, n, steps, counts);
    }
    g::<f32, S>(exe, n, steps, counts);
    g::<f16, S>(exe, n, steps, counts);
    g::<bf16, S>(exe, n, steps, counts);
}

#[test]
fn conversions_match_the_core_bit_for_bit() {
    let Some(exe) = harness() else { return };
    let count: u64 = if cfg!(homeadam_unoptimized) {
        1 << 18
    } else {
        1 << 24
    };
    let mut rng = Rng(42);
    let mut input = Vec::new();
    input.extend_from_slice(&1u32.to_le_bytes());
    input.extend_from_slice(&(count + 65536).to_le_bytes());
    let mut xs = Vec::new();
    // Every 16-bit pattern (for the widening conversions), then random f32 values.
    for i in 0..65536u32 {
        xs.push((i, rng.next() as u32 >> 8));
    }
    for _ in 0..count {
        xs.push((rng.value().to_bits(), rng.next() as u32 >> 8));
    }
    for (x, r) in &xs {
        input.extend_from_slice(&x.to_le_bytes());
        input.extend_from_slice(&r.to_le_bytes());
    }
    let out = run_harness(&exe, &input);
    let mut rd = Reader(&out);
    for &(bits, r24) in &xs {
        let x = f32::from_bits(bits);
        let got: Vec<u32> = (0..4).map(|_| rd.bits(2)).collect();
        let (h32, b32) = (rd.u32(), rd.u32());
        assert!(
            same(<f16 as Storage>::from_f32(x), got[0]),
            "f16 RNE of {bits:#x}"
        );
        assert!(
            same(<bf16 as Storage>::from_f32(x), got[1]),
            "bf16 RNE of {bits:#x}"
        );
        assert!(
            same(f16::from_f32_stochastic(x, r24), got[2]),
            "f16 stochastic of {bits:#x}, {r24:#x}"
        );
        assert!(
            same(bf16::from_f32_stochastic(x, r24), got[3]),
            "bf16 stochastic of {bits:#x}, {r24:#x}"
        );
        assert!(
            same(f16::from_bits(bits as u16).to_f32(), h32),
            "f16 {:#x} to f32",
            bits as u16
        );
        assert!(
            same(bf16::from_bits(bits as u16).to_f32(), b32),
            "bf16 {:#x} to f32",
            bits as u16
        );
    }
    println!(
        "parity_gxx: {} values converted 6 ways (f16/bf16 RNE, stochastic, widening): all bit-identical",
        xs.len()
    );
}

#[test]
fn exact_sums_match_the_core_bit_for_bit() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng(5);
    let mut input = Vec::new();
    let mut expected = Vec::new();
    for case in 0..400u32 {
        let n = 1 + rng.below(300) as usize;
        let pairs: Vec<(f32, f32)> = (0..n)
            .map(|_| {
                // Non-finite values in one case of four only, so that most sums are finite.
                if case % 4 == 0 {
                    (rng.value(), rng.value())
                } else {
                    (rng.finite(), rng.finite())
                }
            })
            .collect();
        input.extend_from_slice(&2u32.to_le_bytes());
        input.extend_from_slice(&(n as u32).to_le_bytes());
        let mut sum = ExactSum::new();
        for &(a, b) in &pairs {
            input.extend_from_slice(&a.to_bits().to_le_bytes());
            input.extend_from_slice(&b.to_bits().to_le_bytes());
            sum.add_product(a, b);
        }
        expected.push(sum);
    }
    check_sums(&run_harness(&exe, &input), &expected, "exact sums");
}

#[test]
fn windowed_squares_match_the_core_bit_for_bit() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng(6);
    let mut input = Vec::new();
    let mut expected = Vec::new();
    let mut case = |values: &[f32], group: u32| {
        input.extend_from_slice(&3u32.to_le_bytes());
        input.extend_from_slice(&(values.len() as u32).to_le_bytes());
        input.extend_from_slice(&group.to_le_bytes());
        let mut sum = ExactSum::new();
        for &x in values {
            input.extend_from_slice(&x.to_bits().to_le_bytes());
            sum.add_square(x);
        }
        expected.push(sum);
    };
    for k in 0..400u32 {
        let n = 1 + rng.below(700) as usize;
        // Non-finite values in one case of four only; one in four mixes in values far below
        // the rest, which miss their group's window.
        let values: Vec<f32> = (0..n)
            .map(|_| match k % 4 {
                0 => rng.value(),
                1 => rng.finite() * 2f32.powi(-(rng.below(60) as i32)),
                _ => rng.finite(),
            })
            .collect();
        case(&values, [1, 32, 37, 2048][k as usize % 4]);
    }
    // A window at its capacity: 2^16 of the largest square.
    case(&vec![f32::MAX; 1 << 16], 1 << 16);
    case(&[f32::MAX, -f32::MAX, f32::from_bits(1), 0.0, -0.0], 5);
    check_sums(&run_harness(&exe, &input), &expected, "windowed sums of squares");
}

/// The harness's sums (`ExactSum::WORDS` words each, little-endian) against the core's.
fn check_sums(out: &[u8], expected: &[ExactSum], what: &str) {
    let words: Vec<u64> = out
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    assert_eq!(words.len(), expected.len() * ExactSum::WORDS);
    for (k, (sum, got)) in expected
        .iter()
        .zip(words.chunks_exact(ExactSum::WORDS))
        .enumerate()
    {
        assert_eq!(&sum.to_words()[..], got, "{what}: sum {k}");
    }
    println!(
        "parity_gxx: {} {what} (ExactSum's words) bit-identical",
        expected.len()
    );
}

/// The steps of the global rule's bound ([`flags::BOUND`]) and how each was decided.
#[derive(Default)]
struct BoundCounts {
    steps: u64,
    skipped: u64,
    /// Applied steps where u proved the srf branch.
    srf: u64,
    /// Applied steps where the bound's chunk proved the home branch.
    home: u64,
    /// Applied steps that needed the exact first pass (the bound's chunk tried first in
    /// `straddled` of them).
    exact: u64,
    straddled: u64,
    calibrated: u64,
    home_elements: u64,
}

/// The sizes of the bounded models: several chunks of the bound, partial ones, an empty tensor.
const BOUND_SIZES: [usize; 6] = [300, 0, 1000, 257, 64, 512];

/// Global HomeAdam(W) with its bound, as `CudaOptimizer::step` runs it: the harness mirrors the
/// device's passes (`ha_check` where u proves srf, else `ha_home_bound` over the bound's chunk,
/// then the exact first pass where that proves nothing) and the update's keys; the host keeps u
/// and the chunk from them and drives a second core optimizer through `finish_external`. Every
/// step is compared with the core's own `Optimizer::step` (which bounds ρ_t itself) on the same
/// values: parameters and state bit for bit, the report, whether the exact first pass ran, and
/// `exact_first_passes`.
fn bounded_global<P: Storage, G: Storage, S: HarnessState>(
    exe: &PathBuf,
    config: Config,
    steps: u64,
    counts: &mut BoundCounts,
) {
    let what = |t: u64| {
        format!(
            "bound {}/{}/{} {config:?} t={t}",
            P::DTYPE.name(),
            G::DTYPE.name(),
            S::DTYPE.name()
        )
    };
    let mut rng = Rng(0xb0 ^ (code(P::DTYPE) * 9 + code(G::DTYPE) * 3 + code(S::DTYPE)) as u64);
    let mut reference = Optimizer::new(config).expect("config");
    let mut backend = Optimizer::new(config).expect("config");
    let mut params: Vec<Vec<P>> = BOUND_SIZES
        .iter()
        .map(|&n| (0..n).map(|_| P::from_f32(rng.moderate())).collect())
        .collect();
    let mut states: Vec<Vec<S>> = BOUND_SIZES
        .iter()
        .map(|&n| S::initial(&config, n, |_, _| 0.0))
        .collect();
    let mut auxes = vec![TensorAux::default(); BOUND_SIZES.len()];
    let (kernel, mut f) = kernels::rule_kernel(&config, false);
    f |= flags::BOUND;
    if config.rounding == Rounding::Stochastic {
        f |= flags::STOCHASTIC;
    }
    // u, the tensor and the chunk of the bound the last update left.
    let mut bound: Option<(f32, u32, u32)> = None;
    for _ in 0..steps {
        let grads: Vec<Vec<G>> = common::bound_grads(&BOUND_SIZES, &mut || rng.next())
            .iter()
            .map(|g| g.iter().map(|&x| G::from_f32(x)).collect())
            .collect();
        let grad_scale = [1.0, 4.0][rng.below(2) as usize];
        let mut step = backend.begin(grad_scale).expect("grad scale");
        let (t, pre, calibrates) = (step.t(), *step.scalars(), step.calibrates());
        let current = bound.take().filter(|_| !calibrates);
        let decision = match current {
            None => 0u32,
            Some((u, _, _)) if srf_proven_by(u, &pre) => 1,
            Some(_) => 2,
        };
        if calibrates {
            let minima = first_pass(&config, &pre, &grads, &states).expect("global");
            let model = minima.iter().fold(SecondMomentMin::EMPTY, |a, &b| a.merge(b));
            let mut values = Histogram::new();
            values.add(model.rho(config.rho_over, pre.bc2));
            step.calibrate_external(&values).expect("calibrates");
        }
        let scalars = step.group_scalars(Group::DEFAULT);
        let mut input = Vec::new();
        for h in [
            0u32,
            kernel as u32,
            code(P::DTYPE),
            code(G::DTYPE),
            code(S::DTYPE),
            f,
            (config.finite_check == FiniteCheck::SkipStep) as u32,
            0,
        ] {
            input.extend_from_slice(&h.to_le_bytes());
        }
        input.extend_from_slice(&kernels::sr_base(config.seed, t).to_le_bytes());
        input.extend_from_slice(&1u32.to_le_bytes());
        input.extend_from_slice(scalar_bytes(&pre));
        input.extend_from_slice(scalar_bytes(&scalars));
        input.extend_from_slice(&(BOUND_SIZES.len() as u32).to_le_bytes());
        for (k, &n) in BOUND_SIZES.iter().enumerate() {
            input.extend_from_slice(&0u32.to_le_bytes());
            input.extend_from_slice(&(n as u64).to_le_bytes());
            put(&mut input, &params[k]);
            put(&mut input, &grads[k]);
            S::put_state(&mut input, &states[k]);
        }
        let (tensor, chunk) = current.map_or((0, 0), |(_, k, c)| (k, c));
        for h in [decision, tensor, chunk] {
            input.extend_from_slice(&h.to_le_bytes());
        }
        let exact_before = reference.exact_first_passes();
        let expected = common::core_step(
            &mut reference,
            &mut params,
            &grads,
            &mut states,
            &mut auxes,
            grad_scale,
        );
        let out = run_harness(exe, &input);
        let mut r = Reader(&out);
        let what = what(t);
        let (skipped, vmin, home) = (r.u32() != 0, r.u32(), r.u32());
        let _model_pre = (r.u32(), r.u32());
        let (decided, model_bound, active) = (r.u32() != 0, r.u64(), r.u32());
        let mut keys = Vec::new();
        for (k, aux) in auxes.iter().enumerate() {
            let _pre = (r.u32(), r.u32());
            let (tensor_vmin, tensor_home) = (r.u32(), r.u32());
            keys.push(r.u64());
            if !skipped {
                assert_eq!(
                    aux.rho.to_bits(),
                    (f32::from_bits(tensor_vmin) / scalars.bc2).to_bits(),
                    "{what}: tensor {k} rho"
                );
                assert_eq!(aux.home_elements, tensor_home, "{what}: tensor {k} home elements");
            }
            for (i, p) in params[k].iter().enumerate() {
                let b = r.bits(P::DTYPE.size());
                assert!(
                    same(*p, b),
                    "{what}: tensor {k} param[{i}] core {:#x} header {b:#x}",
                    p.to_bits32()
                );
            }
            S::check(&format!("{what}: tensor {k}"), &states[k], &mut r);
        }
        assert!(r.0.is_empty(), "harness wrote more than expected");
        let exact = decision == 0 || (decision == 2 && !decided);
        let model = SecondMomentMin {
            all: f32::from_bits(vmin),
            active: f32::from_bits(active),
        };
        let window = config.tau_calibration.is_some() && !calibrates;
        let outcome = Outcome {
            skipped,
            v_min: Some(model.all),
            v_min_active: Some(model.active),
            decisions: {
                let mut values = Histogram::new();
                if window {
                    values.add(model.rho(config.rho_over, pre.bc2));
                }
                values
            },
            home_elements: u64::from(home),
            nonfinite_applied: false,
            exact_pass: exact,
        };
        let got = step.finish_external(outcome).expect("finish");
        let bits = |x: Option<f32>| x.map(f32::to_bits);
        assert!(
            (
                got.skipped,
                got.step,
                got.home_elements,
                bits(got.rho),
                bits(got.rho_active),
                bits(got.tau)
            ) == (
                expected.skipped,
                expected.step,
                expected.home_elements,
                bits(expected.rho),
                bits(expected.rho_active),
                bits(expected.tau)
            ),
            "{what}: core {expected:?} host {got:?}"
        );
        assert_eq!(
            reference.exact_first_passes() - exact_before,
            u64::from(exact && !skipped),
            "{what}: the exact first pass (decision {decision}, decided {decided})"
        );
        assert_eq!(
            backend.exact_first_passes(),
            reference.exact_first_passes(),
            "{what}"
        );
        assert_eq!(
            backend.calibration_window(),
            reference.calibration_window(),
            "{what}"
        );
        bound = if skipped {
            current
        } else {
            let tensor = model_bound as u32;
            let chunk = keys.get(tensor as usize).map_or(0, |&k| k as u32);
            Some((f32::from_bits((model_bound >> 32) as u32), tensor, chunk))
        };
        counts.steps += 1;
        if skipped {
            counts.skipped += 1;
            continue;
        }
        counts.srf += u64::from(decision == 1);
        counts.home += u64::from(decided);
        counts.exact += u64::from(exact);
        counts.straddled += u64::from(decision == 2 && !decided);
        counts.calibrated += u64::from(calibrates);
        counts.home_elements += expected.home_elements;
    }
}

#[test]
fn the_global_bound_decides_as_the_core() {
    let Some(exe) = harness() else { return };
    let steps = if cfg!(homeadam_unoptimized) { 24 } else { 60 };
    let base = Config {
        beta2: 0.5,
        tau: 1e-7,
        allow_f16_state: true,
        ..Config::new(Rule::HomeAdamW(Switch::Global))
    };
    let configs = [
        base,
        Config {
            finite_check: FiniteCheck::Trust,
            rounding: Rounding::Stochastic,
            ..base
        },
        Config {
            tau_calibration: Some(TauCalibration {
                home_share: 0.3,
                every: 7,
            }),
            ..base
        },
    ];
    let mut counts = BoundCounts::default();
    for config in configs {
        bounded_global::<f32, f32, f32>(&exe, config, steps, &mut counts);
        bounded_global::<bf16, bf16, f32>(&exe, config, steps, &mut counts);
        bounded_global::<f32, bf16, bf16>(&exe, config, steps, &mut counts);
        bounded_global::<f16, f16, f16>(&exe, config, steps, &mut counts);
        bounded_global::<bf16, f32, f16>(&exe, config, steps, &mut counts);
    }
    println!(
        "parity_gxx: global bound, {} steps ({} skipped): {} proven srf, {} proven home by the bound's chunk, {} exact first passes ({} after the chunk proved nothing), {} calibrating τ, {} home elements: all bit-identical, decided as the core",
        counts.steps, counts.skipped, counts.srf, counts.home, counts.exact, counts.straddled, counts.calibrated, counts.home_elements
    );
    assert!(
        counts.srf > 0
            && counts.home > 0
            && counts.straddled > 0
            && counts.skipped > 0
            && counts.calibrated > 0
    );
}
