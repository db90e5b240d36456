"""Step time of homeadam.torch against PyTorch's fused AdamW and a plain-PyTorch HomeAdamW, on
the CPU (one thread) or a CUDA device (256 M parameters; each step timed to the end of its
work on the device), every contender alternated in one run; prints a Markdown table of ratios.
Our default finite check reads the gradients once more than torch's fused AdamW, which checks
nothing without a GradScaler: the `trust` row is the like-for-like one.

    python backends/torch/benches/step.py [--rounds 15] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List, Sequence

import torch

import homeadam.torch as ht


def plain_homeadamw(params: Sequence[torch.Tensor], lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-3,
                    weight_decay: float = 1e-2, tau: float = 1e-12) -> Callable[[], None]:
    """HomeAdamW (global switch) as a peer writes it in PyTorch: foreach ops and one global min."""
    ms = [torch.zeros_like(p) for p in params]
    vs = [torch.zeros_like(p) for p in params]
    b1, b2 = betas
    t = 0

    @torch.no_grad()
    def step() -> None:
        nonlocal t
        t += 1
        grads = [p.grad for p in params if p.grad is not None]
        torch._foreach_lerp_(ms, grads, 1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        rho = torch.stack([v.min() for v in vs]).min().item() / bc2
        torch._foreach_mul_(list(params), 1 - lr * weight_decay)
        if rho < tau:
            torch._foreach_add_(list(params), ms, alpha=-lr / bc1)
        else:
            denom = torch._foreach_div(vs, bc2)
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(list(params), ms, denom, value=-lr / bc1)

    return step


def model(sizes: List[int], device: str) -> List[torch.nn.Parameter]:
    params = [torch.nn.Parameter(torch.randn(n, device=device)) for n in sizes]
    for p in params:
        p.grad = torch.randn(p.numel(), device=device) * 1e-2
    return params


def time_steps(steps: Dict[str, Callable[[], None]], rounds: int, device: str) -> Dict[str, float]:
    # On a GPU a step is timed until its work on the device is done (torch's fused AdamW returns
    # before; ours waits for the status it reads back).
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: Dict[str, List[float]] = {name: [] for name in steps}
    for step in steps.values():
        step()
    for _ in range(rounds):
        for name, step in steps.items():
            sync()
            start = time.perf_counter()
            step()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def contenders(sizes: List[int], device: str) -> Dict[str, Callable[[], None]]:
    def ours(factory: Callable[..., torch.optim.Optimizer], **kw: object) -> Callable[[], None]:
        return factory(model(sizes, device), **kw).step

    return {
        "torch AdamW (fused)": torch.optim.AdamW(model(sizes, device), lr=1e-3, fused=True).step,
        "ours AdamW": ours(ht.AdamW, lr=1e-3),
        "ours AdamW, finite_check=trust": ours(ht.AdamW, lr=1e-3, finite_check="trust"),
        "ours HomeAdamW (global)": ours(ht.HomeAdamW, lr=1e-3),
        "plain-PyTorch HomeAdamW (global)": plain_homeadamw(model(sizes, device)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("no CUDA device: the CUDA rows are not measured")
            return
        where = torch.cuda.get_device_name()
        shapes = [("16 × 16 M (256 M)", [16 << 20] * 16)]
    else:
        torch.set_num_threads(1)
        where = "1 thread"
        shapes = [("8 × 2 M (16 M)", [2 << 20] * 8), ("200 × 4 k (per-call overhead)", [4096] * 200)]
    print(f"torch {torch.__version__}, {where}, median of {args.rounds} steps\n")
    print("| tensors | contender | ms | torch fused AdamW time / ours | plain-PyTorch HomeAdamW / ours |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, sizes in shapes:
        ms = time_steps(contenders(sizes, args.device), args.rounds, args.device)
        torch_ms, plain_ms = ms["torch AdamW (fused)"], ms["plain-PyTorch HomeAdamW (global)"]
        for name, t in ms.items():
            vs_torch = f"{torch_ms / t:.2f}" if name.startswith("ours") else ""
            vs_plain = f"{plain_ms / t:.2f}" if name == "ours HomeAdamW (global)" else ""
            print(f"| {label} | {name} | {t:.3f} | {vs_torch} | {vs_plain} |")


if __name__ == "__main__":
    main()
