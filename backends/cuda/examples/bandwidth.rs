//! Step time and effective bandwidth of [`CudaOptimizer`] on one large tensor, next to a
//! device-to-device copy of the same bytes (the target: DESIGN §5). Needs a GPU:
//! `cargo run -p homeadam-cuda --release --example bandwidth [numel]`.

use std::time::Instant;

use cudarc::driver::{CudaContext, DevicePtr};
use homeadam_core::{Config, Dtype, Rule, Switch};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let numel: usize = std::env::args().nth(1).map_or(Ok(1 << 26), |s| s.parse())?;
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    println!(
        "{numel} elements, compute capability {:?}",
        ctx.compute_capability()?
    );
    for (rule, p, g, s) in [
        (Rule::AdamW, Dtype::F32, Dtype::F32, Dtype::F32),
        (
            Rule::HomeAdamW(Switch::Global),
            Dtype::F32,
            Dtype::F32,
            Dtype::F32,
        ),
        (
            Rule::HomeAdamW(Switch::Element),
            Dtype::BF16,
            Dtype::BF16,
            Dtype::F32,
        ),
        (Rule::AdamWSrf, Dtype::BF16, Dtype::BF16, Dtype::BF16),
    ] {
        let config = Config::new(rule);
        let bytes = numel * (p.size() + g.size() + config.state_slots() * s.size());
        let param = stream.alloc_zeros::<u8>(numel * p.size())?;
        let grad = stream.alloc_zeros::<u8>(numel * g.size())?;
        let state = stream.alloc_zeros::<u8>(numel * config.state_slots() * s.size())?;
        let tensor = DeviceTensor {
            param: param.device_ptr(&stream).0,
            grad: grad.device_ptr(&stream).0,
            state: state.device_ptr(&stream).0,
            numel,
        };
        let dtypes = Dtypes {
            param: p,
            grad: g,
            state: s,
        };
        // SAFETY: the buffers outlive the optimizer and have the stated sizes.
        let mut opt = unsafe { CudaOptimizer::new(config, dtypes, &[tensor], stream.clone()) }?;
        opt.step(1.0)?;
        let steps = 20;
        let start = Instant::now();
        for _ in 0..steps {
            opt.step(1.0)?;
        }
        let dt = start.elapsed().as_secs_f64() / steps as f64;
        // Every byte is read once and (but the gradient) written once.
        let traffic = (2 * bytes - numel * g.size()) as f64;
        println!(
            "{:<16} {}/{}/{}: {:8.3} ms/step, {:7.1} GB/s",
            rule.name(),
            p.name(),
            g.name(),
            s.name(),
            dt * 1e3,
            traffic / dt / 1e9
        );
    }
    let src = stream.alloc_zeros::<u8>(numel * 16)?;
    let mut dst = stream.alloc_zeros::<u8>(numel * 16)?;
    stream.memcpy_dtod(&src, &mut dst)?;
    stream.synchronize()?;
    let start = Instant::now();
    for _ in 0..20 {
        stream.memcpy_dtod(&src, &mut dst)?;
    }
    stream.synchronize()?;
    let dt = start.elapsed().as_secs_f64() / 20.0;
    println!(
        "copy {} MiB: {:8.3} ms, {:7.1} GB/s",
        (numel * 16) >> 20,
        dt * 1e3,
        2.0 * (numel * 16) as f64 / dt / 1e9
    );
    Ok(())
}
