"""PyTorch's fused AdamW on the CPU, one thread, over the same 16 M parameters (8 tensors of 2 M)
as `benches/step.rs`. Prints one JSON line: the median and best step time in milliseconds.

Run by `cargo xtask bench` right after the Rust benches, so both are measured in one run.
Needs `pip install torch`.
"""

import json
import statistics
import time

import torch

PARAMS = 16 << 20
TENSORS = 8


def main() -> None:
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(PARAMS // TENSORS, generator=gen)) for _ in range(TENSORS)]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(15):
        start = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"torch": torch.__version__, "median_ms": statistics.median(times), "min_ms": min(times)}))


if __name__ == "__main__":
    main()
