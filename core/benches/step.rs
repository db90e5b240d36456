//! One optimizer step over 16 M parameters (8 tensors of 2 M), on one thread (and a few rows on
//! two: `_t2`; and the speed goals' rows with each x86 instruction set, `simd16M`), plus the copy and
//! triad bandwidth of this machine. `cargo xtask bench` runs this next to PyTorch's fused
//! AdamW and writes the table of BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use common::{Model, Path, StateBits};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use homeadam_core::{bf16, f16, Config, FiniteCheck, Optimizer, Q8Block, Rule, Simd, Storage, Switch};

#[path = "../tests/common/mod.rs"]
mod common;

const PARAMS: usize = 16 << 20;
const TENSORS: usize = 8;

/// The bench model: the tests' [`common::Model`] with deterministic values.
fn model<P: Storage, G: Storage, S: StateBits>(opt: &Optimizer) -> Model<P, G, S> {
    let n = PARAMS / TENSORS;
    let values = |offset: usize, scale: f32| -> Vec<Vec<f32>> {
        let tensor: Vec<f32> = (0..n)
            .map(|i| ((i + offset) as f32 * 0.618).sin() * scale)
            .collect();
        vec![tensor; TENSORS]
    };
    let mut model = Model::new(opt, &values(0, 1.0));
    model.set_grads(&values(7, 1e-3));
    model
}

/// Bytes one step moves per parameter: the check pass (or the per-layer rule's first pass; the
/// global rule reads g once as the check does at the steps its bounds decide, every step of
/// this bench's fixed gradients after the first), then the update reading θ, g and the state
/// and writing θ and the state (q8: its 1-byte codes; the block scales add 1.6 %).
fn bytes_per_param(config: &Config, p: usize, g: usize, s: usize) -> usize {
    let first_pass = match config.rule.switch() {
        Some(Switch::Layer) => g + s,
        Some(Switch::Global) => g,
        _ if config.finite_check == FiniteCheck::SkipStep => g,
        _ => 0,
    };
    first_pass + 2 * p + g + 2 * s * config.state_slots()
}

fn bench_rule<P: Storage, G: Storage, S: StateBits>(c: &mut Criterion, name: &str, config: Config) {
    bench_threads::<P, G, S>(c, name, config, 1);
}

/// One row; `threads` > 1 runs the parallel step ([`homeadam_core::Step::with_threads`]).
fn bench_threads<P: Storage, G: Storage, S: StateBits>(
    c: &mut Criterion,
    name: &str,
    config: Config,
    threads: usize,
) {
    bench_path::<P, G, S>(c, "step16M", name, config, Path::Threads(threads));
}

/// One row per x86 instruction set this CPU has, run one after the other (`name_avx2`,
/// `name_avx512`): their ratio is read within one run.
fn bench_simd<P: Storage, G: Storage, S: StateBits>(c: &mut Criterion, name: &str, config: Config) {
    for simd in [Simd::Avx2, Simd::Avx512]
        .into_iter()
        .filter(|s| s.is_available())
    {
        let row = format!("{name}_{}", simd.name());
        bench_path::<P, G, S>(c, "simd16M", &row, config, Path::On(simd));
    }
}

/// One row of `group`, each step taken through `path`.
fn bench_path<P: Storage, G: Storage, S: StateBits>(
    c: &mut Criterion,
    group: &str,
    name: &str,
    config: Config,
    path: Path,
) {
    let mut opt = Optimizer::new(config).unwrap();
    let mut model = model::<P, G, S>(&opt);
    let bytes = bytes_per_param(&config, P::DTYPE.size(), G::DTYPE.size(), S::DTYPE.size());
    let mut group = c.benchmark_group(group);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Bytes((bytes * PARAMS) as u64));
    group.bench_function(BenchmarkId::from_parameter(format!("{name}/{bytes}B")), |b| {
        b.iter(|| black_box(model.step_on(&mut opt, 1.0, path).unwrap()))
    });
    group.finish();
}

fn config(rule: Rule, check: FiniteCheck) -> Config {
    let mut c = Config::new(rule);
    c.tau = 1e-12;
    c.finite_check = check;
    c
}

fn steps(c: &mut Criterion) {
    use FiniteCheck::{SkipStep, Trust};
    let ew = Rule::HomeAdamW(Switch::Element);
    bench_rule::<f32, f32, f32>(c, "adamw_f32", config(Rule::AdamW, SkipStep));
    bench_rule::<f32, f32, f32>(c, "adamw_f32_trust", config(Rule::AdamW, Trust));
    bench_rule::<f32, f32, f32>(c, "homeadamw_ew_f32", config(ew, SkipStep));
    bench_rule::<f32, f32, f32>(c, "homeadamw_ew_f32_trust", config(ew, Trust));
    bench_rule::<f32, f32, f32>(
        c,
        "homeadamw_global_f32",
        config(Rule::HomeAdamW(Switch::Global), SkipStep),
    );
    bench_rule::<bf16, bf16, f32>(c, "homeadamw_ew_bf16p_f32s", config(ew, SkipStep));
    bench_rule::<bf16, bf16, bf16>(c, "homeadamw_ew_bf16p_bf16s", config(ew, SkipStep));
    bench_rule::<bf16, bf16, bf16>(c, "adamw_bf16p_bf16s", config(Rule::AdamW, SkipStep));
    // The half-precision rows: f32 gradients (as mixed-precision training keeps them).
    bench_rule::<bf16, f32, bf16>(c, "homeadamw_ew_bf16p_bf16s_g32", config(ew, SkipStep));
    bench_rule::<bf16, f32, f32>(c, "adamw_bf16p_f32s_g32", config(Rule::AdamW, SkipStep));
    bench_rule::<f16, f16, f32>(c, "homeadamw_ew_f16p_f32s", config(ew, SkipStep));
    // 8-bit state: the ratio to the f32-state rows above is its price.
    bench_rule::<f32, f32, Q8Block>(c, "adamw_q8s", config(Rule::AdamW, SkipStep));
    bench_rule::<f32, f32, Q8Block>(c, "homeadamw_ew_q8s", config(ew, SkipStep));
    // The parallel step on 2 threads (the rows above are its 1-thread baseline).
    bench_threads::<f32, f32, f32>(c, "adamw_f32_trust_t2", config(Rule::AdamW, Trust), 2);
    bench_threads::<f32, f32, f32>(c, "homeadamw_ew_f32_t2", config(ew, SkipStep), 2);
    bench_threads::<bf16, f32, bf16>(c, "homeadamw_ew_bf16p_bf16s_g32_t2", config(ew, SkipStep), 2);
}

/// The speed goals' rows with AVX2 and with AVX-512.
fn simd(c: &mut Criterion) {
    use FiniteCheck::{SkipStep, Trust};
    let ew = Rule::HomeAdamW(Switch::Element);
    bench_simd::<f32, f32, f32>(c, "adamw_f32_trust", config(Rule::AdamW, Trust));
    bench_simd::<f32, f32, f32>(c, "homeadamw_ew_f32_trust", config(ew, Trust));
    bench_simd::<f32, f32, f32>(c, "homeadamw_ew_f32", config(ew, SkipStep));
    bench_simd::<f32, f32, f32>(
        c,
        "homeadamw_global_f32",
        config(Rule::HomeAdamW(Switch::Global), SkipStep),
    );
    bench_simd::<bf16, f32, bf16>(c, "homeadamw_ew_bf16p_bf16s_g32", config(ew, SkipStep));
    bench_simd::<bf16, f32, f32>(c, "adamw_bf16p_f32s_g32", config(Rule::AdamW, SkipStep));
}

fn bandwidth(c: &mut Criterion) {
    let src = vec![1.0f32; PARAMS];
    let other = vec![2.0f32; PARAMS];
    let mut dst = vec![0.0f32; PARAMS];
    let mut group = c.benchmark_group("bandwidth16M");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Bytes((8 * PARAMS) as u64));
    group.bench_function("copy/8B", |b| b.iter(|| dst.copy_from_slice(black_box(&src))));
    group.throughput(Throughput::Bytes((12 * PARAMS) as u64));
    group.bench_function("triad/12B", |b| {
        b.iter(|| {
            for ((d, &x), &y) in dst.iter_mut().zip(black_box(&src)).zip(&other) {
                *d = x + 3.0 * y;
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bandwidth, steps, simd);
criterion_main!(benches);
