//! One optimizer step over 16 M parameters (8 tensors of 2 M), single thread, plus the copy and
//! triad bandwidth of this machine. `cargo xtask bench` runs this next to PyTorch's fused
//! AdamW and writes the table of BENCHMARKS.md.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use homeadam_core::{bf16, Config, FiniteCheck, Optimizer, Rule, Storage, Switch, Tensor, TensorAux};

const PARAMS: usize = 16 << 20;
const TENSORS: usize = 8;

struct Model<P, G, S> {
    params: Vec<Vec<P>>,
    grads: Vec<Vec<G>>,
    states: Vec<Vec<S>>,
    aux: Vec<TensorAux>,
}

impl<P: Storage, G: Storage, S: Storage> Model<P, G, S> {
    fn new(opt: &Optimizer) -> Self {
        let n = PARAMS / TENSORS;
        let value = |i: usize, scale: f32| ((i as f32) * 0.618).sin() * scale;
        Model {
            params: (0..TENSORS)
                .map(|_| (0..n).map(|i| P::from_f32(value(i, 1.0))).collect())
                .collect(),
            grads: (0..TENSORS)
                .map(|_| (0..n).map(|i| G::from_f32(value(i + 7, 1e-3))).collect())
                .collect(),
            states: (0..TENSORS)
                .map(|_| vec![S::default(); opt.state_len(n)])
                .collect(),
            aux: vec![TensorAux::default(); TENSORS],
        }
    }

    fn step(&mut self, opt: &mut Optimizer) {
        let mut tensors: Vec<Tensor<'_, P, G, S>> = self
            .params
            .iter_mut()
            .zip(&self.grads)
            .zip(self.states.iter_mut())
            .zip(self.aux.iter_mut())
            .map(|(((p, g), s), a)| Tensor::new(p, g, s, a))
            .collect();
        black_box(opt.step(&mut tensors, 1.0).unwrap());
    }
}

/// Bytes one step moves per parameter: the check pass (or the global rule's first pass), then
/// the update reading θ, g and the state and writing θ and the state.
fn bytes_per_param(config: &Config, p: usize, g: usize, s: usize) -> usize {
    let first_pass = match config.rule.switch() {
        Some(Switch::Global | Switch::Layer) => g + s,
        _ if config.finite_check == FiniteCheck::SkipStep => g,
        _ => 0,
    };
    first_pass + 2 * p + g + 2 * s * config.state_slots()
}

fn bench_rule<P: Storage, G: Storage, S: Storage>(c: &mut Criterion, name: &str, config: Config) {
    let mut opt = Optimizer::new(config).unwrap();
    let mut model = Model::<P, G, S>::new(&opt);
    let bytes = bytes_per_param(&config, P::DTYPE.size(), G::DTYPE.size(), S::DTYPE.size());
    let mut group = c.benchmark_group("step16M");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Bytes((bytes * PARAMS) as u64));
    group.bench_function(BenchmarkId::from_parameter(format!("{name}/{bytes}B")), |b| {
        b.iter(|| model.step(&mut opt))
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

criterion_group!(benches, bandwidth, steps);
criterion_main!(benches);
