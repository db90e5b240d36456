//! The CUDA step benchmark (DESIGN §5): for one model of `numel` parameters (default 256 M, in
//! 8 tensors), each rule's step time, its effective bandwidth and that bandwidth as a fraction
//! of a device-to-device copy measured in the same run, next to PyTorch's
//! `torch.optim.AdamW(fused=True)` on the same card (`benches/torch_adamw_cuda.py`, run by this
//! binary when `python3` with torch is there). Prints a Markdown table.
//!
//! `cargo run -p homeadam-cuda --release --example bench [numel]`
//!
//! Bytes per parameter count each input read once and each output written once: θ and the state
//! slots read and written, g read. The non-finite check (`FiniteCheck::SkipStep`, the default)
//! and the global rule's first pass read g (and v) once more; those extra bytes are not counted,
//! so their cost shows as a lower fraction.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};
use homeadam_core::backend::mix64;
use homeadam_core::{bf16, f16, Config, Dtype, FiniteCheck, Rule, Switch};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes};

const TENSORS: usize = 8;
const WARMUP: usize = 3;
const STEPS: usize = 20;

/// `numel` values of type `d` in (−scale, scale), from a counter hash (never zeros: timing on
/// zeros can flatter a kernel), made on every core.
fn random_bytes(numel: usize, d: Dtype, scale: f32, seed: u64) -> Vec<u8> {
    let x = move |i: usize| ((mix64(seed ^ i as u64) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale;
    let encode = move |i: usize, out: &mut [u8]| match d {
        Dtype::F32 => out.copy_from_slice(&x(i).to_le_bytes()),
        Dtype::F16 => out.copy_from_slice(&f16::from_f32(x(i)).to_bits().to_le_bytes()),
        Dtype::BF16 => out.copy_from_slice(&bf16::from_f32(x(i)).to_bits().to_le_bytes()),
        Dtype::Q8 => unreachable!("parameters and gradients are never q8"),
    };
    let mut bytes = vec![0u8; numel * d.size()];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = numel.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        for (t, chunk) in bytes.chunks_mut(per_thread * d.size()).enumerate() {
            scope.spawn(move || {
                for (j, out) in chunk.chunks_exact_mut(d.size()).enumerate() {
                    encode(t * per_thread + j, out);
                }
            });
        }
    });
    bytes
}

struct Row {
    name: String,
    dtypes: String,
    /// Bytes read and written per parameter (q8: its block scales included).
    bytes_per_param: f64,
    ms: f64,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

type Buffers = (CudaSlice<u8>, CudaSlice<u8>, CudaSlice<u8>);

/// The host values of every tensor, by (type, is gradient), made once and
/// reused by every rule: the same numbers for each row of the table.
#[derive(Default)]
struct HostValues(HashMap<(Dtype, bool), Vec<Vec<u8>>>);

impl HostValues {
    fn get(&mut self, d: Dtype, grad: bool, per: usize) -> &[Vec<u8>] {
        self.0.entry((d, grad)).or_insert_with(|| {
            let scale = if grad { 1e-3 } else { 1.0 };
            (0..TENSORS as u64)
                .map(|k| random_bytes(per, d, scale, 2 * k + u64::from(grad)))
                .collect()
        })
    }
}

fn bench_rule(
    stream: &Arc<CudaStream>,
    values: &mut HostValues,
    config: Config,
    dtypes: Dtypes,
    numel: usize,
    label: &str,
) -> Result<Row, Box<dyn std::error::Error>> {
    let (p, g, s) = (dtypes.param, dtypes.grad, dtypes.state);
    let slots = config.state_slots();
    let per = numel / TENSORS;
    let mut buffers: Vec<Buffers> = Vec::new();
    for k in 0..TENSORS {
        let param = stream.clone_htod(&values.get(p, false, per)[k])?;
        let grad = stream.clone_htod(&values.get(g, true, per)[k])?;
        let state = stream.alloc_zeros::<u8>(slots * s.slot_bytes(per))?;
        buffers.push((param, grad, state));
    }
    let tensors: Vec<DeviceTensor> = buffers
        .iter()
        .map(|(param, grad, state)| {
            DeviceTensor::new(
                param.device_ptr(stream).0,
                grad.device_ptr(stream).0,
                state.device_ptr(stream).0,
                per,
            )
        })
        .collect();
    // SAFETY: the buffers live until the end of this function, outliving the optimizer, and
    // have the sizes DeviceTensor states.
    let mut opt = unsafe { CudaOptimizer::new(config, dtypes, &tensors, stream.clone()) }?;
    for _ in 0..WARMUP {
        opt.step(1.0)?;
    }
    let mut times = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        // `step` reads the step's status back: each call ends synchronized.
        let start = Instant::now();
        let report = opt.step(1.0)?;
        times.push(start.elapsed().as_secs_f64());
        if report.skipped {
            return Err(format!("{label}: a step was skipped on finite gradients").into());
        }
    }
    Ok(Row {
        name: label.to_string(),
        dtypes: format!("{}/{}/{}", p.name(), g.name(), s.name()),
        bytes_per_param: (2 * p.size() + g.size()) as f64
            + (2 * slots * s.slot_bytes(per)) as f64 / per as f64,
        ms: median(times) * 1e3,
    })
}

fn copy_gbps(stream: &Arc<CudaStream>, bytes: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let src = stream.clone_htod(&random_bytes(bytes / 4, Dtype::F32, 1.0, 99))?;
    let mut dst = stream.alloc_zeros::<u8>(bytes)?;
    let mut times = Vec::new();
    for i in 0..WARMUP + STEPS {
        stream.synchronize()?;
        let start = Instant::now();
        stream.memcpy_dtod(&src, &mut dst)?;
        stream.synchronize()?;
        if i >= WARMUP {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    Ok(2.0 * bytes as f64 / median(times) / 1e9)
}

/// PyTorch's fused AdamW on the same card, or `None` (with the reason on stderr).
fn torch_row(numel: usize) -> Option<Row> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/torch_adamw_cuda.py");
    let script = if std::path::Path::new(script).exists() {
        script
    } else {
        "backends/cuda/benches/torch_adamw_cuda.py"
    };
    let out = match Command::new("python3")
        .arg(script)
        .arg(numel.to_string())
        .output()
    {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            eprintln!("torch baseline failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        Err(e) => {
            eprintln!("torch baseline not run: {e}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.lines().last()?.split_whitespace();
    let version = words.next()?;
    let ms: f64 = words.next()?.parse().ok()?;
    Some(Row {
        name: format!("torch {version} AdamW(fused=True)"),
        dtypes: "f32/f32/f32".into(),
        bytes_per_param: 28.0,
        ms,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let numel: usize = std::env::args().nth(1).map_or(Ok(256 << 20), |s| s.parse())?;
    let numel = numel / TENSORS * TENSORS;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let (major, minor) = ctx.compute_capability()?;
    let copy = copy_gbps(&stream, numel * 16)?;
    println!(
        "{numel} parameters ({TENSORS} tensors), sm_{major}{minor}, device-to-device copy of {} MiB: \
         {copy:.0} GB/s (bytes read + written); median of {STEPS} steps\n",
        (numel * 16) >> 20
    );
    let all = |d: Dtype| Dtypes {
        param: d,
        grad: d,
        state: d,
    };
    let bf16_f32 = Dtypes {
        param: Dtype::BF16,
        grad: Dtype::BF16,
        state: Dtype::F32,
    };
    let q8 = Dtypes {
        state: Dtype::Q8,
        ..bf16_f32
    };
    let trust = |mut c: Config| {
        c.finite_check = FiniteCheck::Trust;
        c
    };
    let (global, layer, ew) = (
        Rule::HomeAdamW(Switch::Global),
        Rule::HomeAdamW(Switch::Layer),
        Rule::HomeAdamW(Switch::Element),
    );
    let f32s = all(Dtype::F32);
    let sgdm = Config {
        momentum: 0.9,
        ..Config::new(Rule::Sgd)
    };
    let runs: Vec<(&str, Config, Dtypes)> = vec![
        ("sgd", Config::new(Rule::Sgd), f32s),
        ("sgdm", sgdm, f32s),
        ("adam", Config::new(Rule::Adam), f32s),
        ("adamw", Config::new(Rule::AdamW), f32s),
        ("adamw (Trust)", trust(Config::new(Rule::AdamW)), f32s),
        ("adabelief", Config::new(Rule::AdaBelief), f32s),
        ("miadam", Config::new(Rule::MiAdam), f32s),
        ("adamw-srf", Config::new(Rule::AdamWSrf), f32s),
        ("homeadamw global", Config::new(global), f32s),
        ("homeadamw layer", Config::new(layer), f32s),
        ("homeadamw-ew", Config::new(ew), f32s),
        ("homeadamw-ew (Trust)", trust(Config::new(ew)), f32s),
        ("adamw", Config::new(Rule::AdamW), bf16_f32),
        ("adamw (Trust)", trust(Config::new(Rule::AdamW)), bf16_f32),
        ("homeadamw global", Config::new(global), bf16_f32),
        ("homeadamw-ew", Config::new(ew), bf16_f32),
        ("homeadamw-ew", Config::new(ew), all(Dtype::BF16)),
        ("adamw", Config::new(Rule::AdamW), q8),
        ("homeadamw-ew", Config::new(ew), q8),
    ];
    let mut values = HostValues::default();
    let mut rows = Vec::new();
    for (label, config, dtypes) in runs {
        rows.push(bench_rule(&stream, &mut values, config, dtypes, numel, label)?);
    }
    rows.extend(torch_row(numel));
    println!("| rule | θ/g/state | B/param | ms/step | GB/s | of copy |");
    println!("|---|---|---:|---:|---:|---:|");
    for r in &rows {
        let gbps = r.bytes_per_param * numel as f64 / (r.ms * 1e-3) / 1e9;
        println!(
            "| {} | {} | {:.2} | {:.3} | {:.0} | {:.0} % |",
            r.name,
            r.dtypes,
            r.bytes_per_param,
            r.ms,
            gbps,
            100.0 * gbps / copy
        );
    }
    Ok(())
}
