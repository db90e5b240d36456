"""PyTorch AdamW steps on the GPU over NUMEL parameters in 8 tensors, the baselines of
`examples/bench.rs` (which runs this script in the same run):

- `fused` (the default): torch.optim.AdamW(fused=True), f32 parameters, gradients and state;
- `8bit`: bitsandbytes' AdamW8bit (blockwise 8-bit state), bf16 parameters and gradients, as
  the benchmark's q8 rows; bitsandbytes must be importable (`scripts/gpu-check.sh` puts the
  copy that `cargo xtask gpu-bundle` packs on PYTHONPATH).

Prints one line: `<version> <median ms>` (PyTorch's version for `fused`, bitsandbytes' for
`8bit`), timed with CUDA events, median of 20 steps after 3 warm-ups.

Usage: python3 torch_adamw_cuda.py NUMEL [fused|8bit]
"""

import statistics
import sys

import torch

TENSORS = 8


def optimizer(kind, numel):
    """The optimizer of `kind` over random parameters with random gradients, and its version."""
    dtype = torch.float32 if kind == "fused" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = [
        torch.nn.Parameter((torch.rand(numel // TENSORS, generator=gen, device="cuda") * 2 - 1).to(dtype))
        for _ in range(TENSORS)
    ]
    for p in params:
        p.grad = ((torch.rand(p.shape, generator=gen, device="cuda") * 2 - 1) * 1e-3).to(dtype)
    if kind == "fused":
        return torch.optim.AdamW(params, lr=1e-3, fused=True), torch.__version__
    if kind == "8bit":
        import bitsandbytes

        return bitsandbytes.optim.AdamW8bit(params, lr=1e-3), bitsandbytes.__version__
    sys.exit(f"unknown optimizer {kind!r}: fused or 8bit")


def main() -> None:
    numel = int(sys.argv[1])
    opt, version = optimizer(sys.argv[2] if len(sys.argv) > 2 else "fused", numel)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    print(version, statistics.median(times))


if __name__ == "__main__":
    main()
