//! The CUDA step benchmark (DESIGN §5): for one model of `numel` parameters (default 256 M, in
//! 8 tensors), each rule's step time, its effective bandwidth and that bandwidth as a fraction
//! of a device-to-device copy measured in the same run, next to PyTorch's
//! `torch.optim.AdamW(fused=True)` and bitsandbytes' 8-bit `AdamW8bit` on the same card
//! (`benches/torch_adamw_cuda.py`, run by this binary when `python3` with torch, and
//! bitsandbytes, is there). Prints Markdown tables; one gives each q8 row's step time over the
//! same rule's with `f32` state and over `AdamW8bit`'s.
//!
//! `cargo run -p homeadam-cuda --release --example bench [numel]`
//!
//! Bytes per parameter count each input read once and each output written once: θ and the state
//! slots read and written, g read. The non-finite check (`FiniteCheck::SkipStep`, the default)
//! and the global rule's first pass read g (and v) once more; those extra bytes are not counted,
//! so their cost shows as a lower fraction. The global rule runs its exact first pass only where
//! its bound on ρ_t does not decide: a second table gives its step time over the element-wise
//! rule's on the same storage types, with the timed steps that ran the exact pass.
//!
//! A third table times clipping's norm: the optimizer's exact ‖g‖₂ (`grad_norm`) against a
//! plain `f32` sum of squares of the same gradients (`PLAIN_SQUARES`), each with its read-back.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::compile_ptx;
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
    /// Timed steps that ran the global rule's exact first pass (the bound decided the others).
    exact: u64,
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
    let exact = opt.core().exact_first_passes();
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
        exact: opt.core().exact_first_passes() - exact,
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

/// A PyTorch baseline on the same card (`fused`: `torch.optim.AdamW(fused=True)`, `8bit`:
/// bitsandbytes' `AdamW8bit`), or `None` (with the reason on stderr).
fn torch_row(numel: usize, kind: &str) -> Option<Row> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/torch_adamw_cuda.py");
    let script = if std::path::Path::new(script).exists() {
        script
    } else {
        "backends/cuda/benches/torch_adamw_cuda.py"
    };
    let out = match Command::new("python3")
        .arg(script)
        .arg(numel.to_string())
        .arg(kind)
        .output()
    {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            eprintln!(
                "torch baseline {kind} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        Err(e) => {
            eprintln!("torch baseline {kind} not run: {e}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.lines().last()?.split_whitespace();
    let version = words.next()?;
    let ms: f64 = words.next()?.parse().ok()?;
    // Bytes as this benchmark counts ours: θ read and written, g read, each state slot read and
    // written (AdamW8bit: one byte an element and an f32 scale per 256-element block).
    let (name, dtypes, bytes_per_param) = match kind {
        "8bit" => (
            format!("bitsandbytes {version} AdamW8bit"),
            "bf16/bf16/8-bit",
            2.0 * 2.0 + 2.0 + 2.0 * 2.0 * (1.0 + 4.0 / 256.0),
        ),
        _ => (format!("torch {version} AdamW(fused=True)"), "f32/f32/f32", 28.0),
    };
    Some(Row {
        name,
        dtypes: dtypes.into(),
        bytes_per_param,
        ms,
        exact: 0,
    })
}

/// Σg² of `f32` gradients the plain way, for the clipping row: 16-byte loads, one `f32` sum per
/// thread, a warp's sums by shuffles, one `f32` atomic per warp; `blockIdx.y` picks the tensor.
const PLAIN_SQUARES: &str = r#"
extern "C" __global__ void plain_squares(const unsigned long long* grads, unsigned long long per, float* out) {
    const float* g = (const float*)grads[blockIdx.y];
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < per / 4; i += stride) {
        float4 x = ((const float4*)g)[i];
        acc += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
    }
    for (unsigned long long i = per / 4 * 4 + blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < per; i += stride) {
        acc += g[i] * g[i];
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
"#;

/// The median time of `f` (which ends synchronized) over `STEPS` calls after `WARMUP`.
fn time_ms(
    mut f: impl FnMut() -> Result<f64, Box<dyn std::error::Error>>,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let mut value = 0.0;
    let mut times = Vec::with_capacity(STEPS);
    for i in 0..WARMUP + STEPS {
        let start = Instant::now();
        value = f()?;
        if i >= WARMUP {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    Ok((median(times) * 1e3, value))
}

/// Clipping's norm over `numel` `f32` gradients: the exact ‖g‖₂ of [`CudaOptimizer::grad_norm`]
/// and the plain `f32` one, in ms, each launch with its read-back; the two norms must agree.
fn norm_times(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    values: &mut HostValues,
    numel: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let per = numel / TENSORS;
    let f32s = Dtypes {
        param: Dtype::F32,
        grad: Dtype::F32,
        state: Dtype::F32,
    };
    let config = Config::new(Rule::Sgd);
    let mut buffers: Vec<Buffers> = Vec::new();
    for k in 0..TENSORS {
        let param = stream.alloc_zeros::<u8>(per * 4)?;
        let grad = stream.clone_htod(&values.get(Dtype::F32, true, per)[k])?;
        let state = stream.alloc_zeros::<u8>(config.state_slots().max(1) * per * 4)?;
        buffers.push((param, grad, state));
    }
    let grads: Vec<u64> = buffers.iter().map(|(_, g, _)| g.device_ptr(stream).0).collect();
    let tensors: Vec<DeviceTensor> = buffers
        .iter()
        .zip(&grads)
        .map(|((p, _, s), &g)| DeviceTensor::new(p.device_ptr(stream).0, g, s.device_ptr(stream).0, per))
        .collect();
    // SAFETY: the buffers live until the end of this function, outliving the optimizer, and
    // have the sizes DeviceTensor states.
    let mut opt = unsafe { CudaOptimizer::new(config, f32s, &tensors, stream.clone()) }?;
    let (exact_ms, exact) = time_ms(|| Ok(opt.grad_norm()?))?;
    let module = ctx.load_module(compile_ptx(PLAIN_SQUARES)?)?;
    let plain = module.load_function("plain_squares")?;
    let table = stream.clone_htod(&grads)?;
    let mut out = stream.alloc_zeros::<f32>(1)?;
    let per64 = per as u64;
    let (plain_ms, plain_norm) = time_ms(|| {
        stream.memset_zeros(&mut out)?;
        let mut b = stream.launch_builder(&plain);
        b.arg(&table).arg(&per64).arg(&mut out);
        let config = LaunchConfig {
            grid_dim: (1024, TENSORS as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: plain_squares(const u64*, u64, float*): TENSORS pointers to `per` f32 each.
        unsafe { b.launch(config) }?;
        let sum = stream.clone_dtoh(&out)?;
        stream.synchronize()?;
        Ok(f64::from(sum[0]).sqrt())
    })?;
    if (exact - plain_norm).abs() > 1e-3 * exact {
        return Err(format!("clipping norms differ: exact {exact}, plain {plain_norm}").into());
    }
    Ok((exact_ms, plain_ms))
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
    let (exact_ms, plain_ms) = norm_times(&ctx, &stream, &mut values, numel)?;
    rows.extend(torch_row(numel, "fused"));
    let eight_bit = torch_row(numel, "8bit");
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
    println!("\n| global / element-wise HomeAdamW | θ/g/state | step time ratio | exact first passes |");
    println!("|---|---|---:|---:|");
    for global in rows.iter().filter(|r| r.name == "homeadamw global") {
        if let Some(ew) = rows
            .iter()
            .find(|r| r.name == "homeadamw-ew" && r.dtypes == global.dtypes)
        {
            println!(
                "| {} / {} | {} | {:.3} | {} of {STEPS} |",
                global.name,
                ew.name,
                global.dtypes,
                global.ms / ew.ms,
                global.exact
            );
        }
    }
    println!("\n| q8 state | θ/g/state | / the same rule's f32 state | / AdamW8bit |");
    println!("|---|---|---:|---:|");
    for q8 in rows.iter().filter(|r| r.dtypes.ends_with("/q8")) {
        let f32_dtypes = q8.dtypes.replace("/q8", "/f32");
        let over = |base: Option<&Row>| base.map_or("–".to_string(), |b| format!("{:.3}", q8.ms / b.ms));
        let f32_state = rows.iter().find(|r| r.name == q8.name && r.dtypes == f32_dtypes);
        let bnb = eight_bit.as_ref().filter(|_| q8.name == "adamw");
        println!(
            "| {} | {} | {} | {} |",
            q8.name,
            q8.dtypes,
            over(f32_state),
            over(bnb)
        );
    }
    if let Some(b) = &eight_bit {
        println!(
            "\n{}: {:.3} ms/step ({} θ/g/state, {:.2} B/param)",
            b.name, b.ms, b.dtypes, b.bytes_per_param
        );
    }
    println!("\n| clipping's Σg² over {numel} f32 gradients | ms | GB/s | exact / plain |");
    println!("|---|---:|---:|---:|");
    for (name, ms) in [("exact (`grad_norm`)", exact_ms), ("plain f32 sum", plain_ms)] {
        println!(
            "| {name} | {ms:.3} | {:.0} | {:.2} |",
            4.0 * numel as f64 / (ms * 1e-3) / 1e9,
            ms / plain_ms
        );
    }
    Ok(())
}
