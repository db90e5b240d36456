"""PyTorch's torch.optim.AdamW(fused=True) on the GPU over NUMEL f32 parameters in 8 tensors, the
baseline of `examples/bench.rs` (which runs this script in the same run). Prints one line:
`<torch version> <median ms>`, timed with CUDA events, median of 20 steps after 3 warm-ups.

Usage: python3 torch_adamw_cuda.py NUMEL
"""

import statistics
import sys

import torch

TENSORS = 8


def main() -> None:
    numel = int(sys.argv[1])
    gen = torch.Generator(device="cuda").manual_seed(0)
    params = [
        torch.nn.Parameter(torch.rand(numel // TENSORS, generator=gen, device="cuda") * 2 - 1)
        for _ in range(TENSORS)
    ]
    for p in params:
        p.grad = (torch.rand(p.shape, generator=gen, device="cuda") * 2 - 1) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
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
    print(torch.__version__, statistics.median(times))


if __name__ == "__main__":
    main()
