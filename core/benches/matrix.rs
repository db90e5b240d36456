//! Every rule × storage layout × finite check: one step over 16 M parameters (8 tensors of 2 M),
//! one thread, each step's time over that of the plain f32 AdamW loop (`plain/mod.rs`)
//! on tensors of the same size, the two alternated step by step, so that a slower machine or a
//! busy neighbour slows both alike. `cargo xtask bench` runs it for each vector instruction set
//! the CPU has, prints the tables of BENCHMARKS.md ("Every rule × layout over a plain loop")
//! and names the cells that got slower than the tables there record.
//!
//! `cargo bench -p homeadam-core --bench matrix -- [--simd NAME|best|vector] [--rounds N]
//! [--only PREFIX] [--out PATH]` prints one line per row (and writes them to PATH),
//! tab-separated: the instruction set, the config name, the check, the layout, and the ratio
//! of each round (the median of [`STEPS`] steps of the core over the median of the plain
//! loop's steps between them). `best` (the default) is what a step uses, [`Simd::detect`];
//! `vector` is every vector instruction set the CPU has (the portable code where it has none).

use std::hint::black_box;
use std::time::Instant;

use common::{Model, Path, StateBits};
use homeadam_core::{bf16, f16, Config, FiniteCheck, Optimizer, Q8Block, Simd, Storage};

#[path = "../tests/common/mod.rs"]
mod common;
mod plain;

use plain::plain;

const PARAMS: usize = 16 << 20;
const TENSORS: usize = 8;
/// Timed steps per round of a row.
const STEPS: usize = 9;
/// Steps of a row not timed: the first touch of the state and the first bias corrections.
const WARM_UP: usize = 2;

/// The layouts, θ / g / state: f32 training, pure bf16 and f16 training (a half θ has a
/// gradient of its own type, as PyTorch gives it), and f32 training with 16- and 8-bit state.
const LAYOUTS: [&str; 5] = [
    "f32/f32/f32",
    "bf16/bf16/bf16",
    "f16/f16/f16",
    "f32/f32/bf16",
    "f32/f32/q8",
];

/// The plain loop ([`plain`]) over tensors of the bench's size, compiled for `simd`'s
/// instructions.
struct Plain {
    simd: Simd,
    params: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    moments: Vec<(Vec<f32>, Vec<f32>)>,
}

impl Plain {
    fn new(simd: Simd, values: &Values) -> Self {
        let zeros = || vec![0.0f32; values.params[0].len()];
        Plain {
            simd,
            params: values.params.clone(),
            grads: values.grads.clone(),
            moments: (0..TENSORS).map(|_| (zeros(), zeros())).collect(),
        }
    }

    /// One step; its time in ms.
    fn step(&mut self) -> f64 {
        let start = Instant::now();
        for ((p, g), (m, v)) in self.params.iter_mut().zip(&self.grads).zip(&mut self.moments) {
            plain(self.simd, p, g, m, v);
        }
        black_box(&self.params);
        start.elapsed().as_secs_f64() * 1e3
    }
}

/// The bench's θ and g values, made once.
struct Values {
    params: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
}

impl Values {
    fn new() -> Self {
        let n = PARAMS / TENSORS;
        let tensor = |offset: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i + offset) as f32 * 0.618).sin() * scale)
                .collect()
        };
        Values {
            params: vec![tensor(0, 1.0); TENSORS],
            grads: vec![tensor(7, 1e-3); TENSORS],
        }
    }
}

/// The median of `times`.
fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// One row's rounds on one model: in each, the median core step over the median plain step
/// between them.
fn ratios<P: Storage, G: Storage, S: StateBits>(
    config: Config,
    values: &Values,
    plain: &mut Plain,
    rounds: usize,
) -> Result<Vec<f64>, homeadam_core::Error> {
    let mut opt = Optimizer::new(config)?;
    let mut model = Model::<P, G, S>::new(&opt, &values.params);
    model.set_grads(&values.grads);
    let mut step = || -> Result<(f64, f64), homeadam_core::Error> {
        let start = Instant::now();
        black_box(model.step_on(&mut opt, 1.0, Path::On(plain.simd))?);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        Ok((ms, plain.step()))
    };
    for _ in 0..WARM_UP {
        step()?;
    }
    let mut out = Vec::new();
    for _ in 0..rounds {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..STEPS {
            let (core, plain) = step()?;
            ours.push(core);
            theirs.push(plain);
        }
        out.push(median(&mut ours) / median(&mut theirs));
    }
    Ok(out)
}

/// [`ratios`] of `layout`.
fn ratios_of(
    layout: &str,
    config: Config,
    values: &Values,
    plain: &mut Plain,
    rounds: usize,
) -> Result<Vec<f64>, homeadam_core::Error> {
    match layout {
        "f32/f32/f32" => ratios::<f32, f32, f32>(config, values, plain, rounds),
        "bf16/bf16/bf16" => ratios::<bf16, bf16, bf16>(config, values, plain, rounds),
        "f16/f16/f16" => ratios::<f16, f16, f16>(config, values, plain, rounds),
        "f32/f32/bf16" => ratios::<f32, f32, bf16>(config, values, plain, rounds),
        "f32/f32/q8" => ratios::<f32, f32, Q8Block>(config, values, plain, rounds),
        other => unreachable!("no layout {other}"),
    }
}

/// The command line (cargo's own `--bench` is ignored).
struct Args {
    simds: Vec<Simd>,
    rounds: usize,
    only: Option<String>,
    out: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut parsed = Args {
        simds: vec![Simd::detect()],
        rounds: 5,
        only: None,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} takes a value"));
        match arg.as_str() {
            "--simd" => parsed.simds = simds(&value()?)?,
            "--rounds" => {
                parsed.rounds = value()?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or("--rounds takes a positive count")?
            }
            "--only" => parsed.only = Some(value()?),
            "--out" => parsed.out = Some(value()?),
            "--bench" => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(parsed)
}

/// The instruction sets `name` stands for (see the module's documentation).
fn simds(name: &str) -> Result<Vec<Simd>, String> {
    let available = Simd::ALL.into_iter().filter(|s| s.is_available());
    let vector: Vec<Simd> = available.clone().filter(|&s| s != Simd::Portable).collect();
    match name {
        "best" => Ok(vec![Simd::detect()]),
        "vector" if vector.is_empty() => Ok(vec![Simd::Portable]),
        "vector" => Ok(vector),
        _ => available
            .into_iter()
            .find(|s| s.name() == name)
            .map(|s| vec![s])
            .ok_or(format!("no instruction set {name:?} on this CPU")),
    }
}

/// The rows: every config name at its defaults (τ = 1e-12, as the step benches), with each check.
fn rows() -> Vec<(Config, FiniteCheck)> {
    let mut rows = Vec::new();
    for name in Config::NAMES {
        for check in [FiniteCheck::Trust, FiniteCheck::SkipStep] {
            let mut config = Config::named(name).expect("a config name");
            config.tau = 1e-12;
            config.allow_f16_state = true;
            config.finite_check = check;
            rows.push((config, check));
        }
    }
    rows
}

fn check_name(check: FiniteCheck) -> &'static str {
    match check {
        FiniteCheck::Trust => "trust",
        _ => "skip",
    }
}

fn main() {
    let args = args().unwrap_or_else(|e| {
        eprintln!("matrix: {e}");
        std::process::exit(2)
    });
    let values = Values::new();
    let mut lines = Vec::new();
    for simd in args.simds {
        let mut plain = Plain::new(simd, &values);
        for (config, check) in rows() {
            for layout in LAYOUTS {
                let row = format!("{}\t{}\t{layout}", config.name(), check_name(check));
                if args
                    .only
                    .as_ref()
                    .is_some_and(|only| !row.starts_with(only.as_str()))
                {
                    continue;
                }
                let line = format!(
                    "{}\t{row}\t{}",
                    simd.name(),
                    ratios_row(layout, config, &values, &mut plain, args.rounds)
                );
                println!("{line}");
                lines.push(line);
            }
        }
    }
    let Some(path) = args.out else { return };
    if let Err(e) = std::fs::write(&path, lines.join("\n") + "\n") {
        eprintln!("matrix: cannot write {path}: {e}");
        std::process::exit(1)
    }
}

/// One row's ratio in each of `rounds` rounds, tab-separated; exits on an error of the step.
fn ratios_row(layout: &str, config: Config, values: &Values, plain: &mut Plain, rounds: usize) -> String {
    match ratios_of(layout, config, values, plain, rounds) {
        Ok(ratios) => ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join("\t"),
        Err(e) => {
            eprintln!("matrix: {} {layout}: {e}", config.name());
            std::process::exit(1)
        }
    }
}
