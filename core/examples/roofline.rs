//! The core's f32 step against a plain AdamW loop over the same 16 M parameters (8 tensors), in
//! one process, interleaved step by step: how far the fast path is from what the compiler's
//! streaming loop reaches on this machine, a ratio that other tenants of a shared machine
//! slow alike. `cargo run --release -p homeadam-core --features std --example roofline --
//! [adamw|ew|global] [trust|skip]` prints the minimum and median ms of each path.
//!
//! The plain loop is `benches/plain/mod.rs`'s, which `benches/matrix.rs` runs beside every
//! rule and layout.

use std::time::Instant;

use homeadam_core::{Config, FiniteCheck, Optimizer, Rule, Simd, Switch, Tensor, TensorAux};

#[path = "../benches/plain/mod.rs"]
mod plain;

use plain::plain;

const PARAMS: usize = 16 << 20;
const TENSORS: usize = 8;
const STEPS: usize = 25;
/// Steps not timed: the first touch of the buffers and the first bias corrections.
const WARM_UP: usize = 3;

/// One timed path.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    Core(Simd),
    Plain(Simd),
}

impl Path {
    fn name(self) -> String {
        match self {
            Path::Core(simd) => format!("core {}", simd.name()),
            Path::Plain(simd) => format!("plain AdamW {}", simd.name()),
        }
    }
}

/// The paths this CPU runs: the core's with each instruction set it has, and the plain loop
/// (on x86-64 compiled for each of AVX2 and AVX-512 it has; elsewhere once, as the compiler
/// vectorizes it).
fn paths() -> Vec<Path> {
    let simds: Vec<Simd> = Simd::ALL.into_iter().filter(|s| s.is_available()).collect();
    let plain = if cfg!(target_arch = "x86_64") {
        simds.iter().copied().filter(|&s| s != Simd::Portable).collect()
    } else {
        vec![Simd::Portable]
    };
    let core = simds.into_iter().map(Path::Core);
    core.chain(plain.into_iter().map(Path::Plain)).collect()
}

fn config(args: &[String]) -> Result<Config, String> {
    let rule = match args.first().map(String::as_str) {
        None | Some("adamw") => Rule::AdamW,
        Some("ew") => Rule::HomeAdamW(Switch::Element),
        Some("global") => Rule::HomeAdamW(Switch::Global),
        Some(other) => return Err(format!("unknown rule {other:?}: adamw, ew or global")),
    };
    let mut config = Config::new(rule);
    config.tau = 1e-12;
    config.finite_check = match args.get(1).map(String::as_str) {
        None | Some("trust") => FiniteCheck::Trust,
        Some("skip") => FiniteCheck::SkipStep,
        Some(other) => return Err(format!("unknown check {other:?}: trust or skip")),
    };
    Ok(config)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = config(&args).unwrap_or_else(|e| {
        eprintln!("roofline: {e}");
        std::process::exit(2)
    });
    let mut opt = Optimizer::new(config).expect("a valid config");
    let n = PARAMS / TENSORS;
    let values = |offset: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i + offset) as f32 * 0.618).sin() * scale)
            .collect()
    };
    let mut params: Vec<Vec<f32>> = (0..TENSORS).map(|_| values(0, 1.0)).collect();
    let grads: Vec<Vec<f32>> = (0..TENSORS).map(|_| values(7, 1e-3)).collect();
    let mut states: Vec<Vec<f32>> = (0..TENSORS).map(|_| vec![0.0; opt.state_len(n)]).collect();
    let mut aux: Vec<TensorAux> = (0..TENSORS).map(|_| TensorAux::default()).collect();
    let paths = paths();
    let mut times = vec![Vec::new(); paths.len()];
    for step in 0..STEPS {
        for (k, &path) in paths.iter().enumerate() {
            let start = Instant::now();
            match path {
                Path::Core(simd) => {
                    let mut tensors: Vec<Tensor<'_, f32, f32, f32>> = params
                        .iter_mut()
                        .zip(&grads)
                        .zip(states.iter_mut().zip(aux.iter_mut()))
                        .map(|((p, g), (s, a))| Tensor::new(p, g, s, a))
                        .collect();
                    let mut step = opt.begin(1.0).expect("a step");
                    step.check(&mut tensors).expect("finite gradients");
                    let mut updates = step.decide().expect("a decision");
                    updates.update_on(&mut tensors, simd).expect("an update");
                    updates.finish().expect("a step");
                }
                Path::Plain(simd) => {
                    for ((p, g), s) in params.iter_mut().zip(&grads).zip(states.iter_mut()) {
                        let (m, v) = s.split_at_mut(n);
                        plain(simd, p, g, m, &mut v[..n]);
                    }
                }
            }
            if step >= WARM_UP {
                times[k].push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    for (path, t) in paths.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        println!(
            "{:24} min {:6.2} ms  median {:6.2} ms",
            path.name(),
            t[0],
            t[t.len() / 2]
        );
    }
}
