"""Step time of homeadam.torch against PyTorch's fused AdamW and a plain-PyTorch HomeAdamW, on
the CPU (one thread) or a CUDA device (256 M parameters; each step timed to the end of its
work on the device), every contender alternated in one run; prints a Markdown table of ratios.
Our default finite check reads the gradients once more than torch's fused AdamW, which checks
nothing without a GradScaler: the `trust` row is the like-for-like one.

Each row also gives the arrays of the model's size that the contender moves per step (an array
read or written once counts one) and the rate that makes: where every contender runs at the
memory's speed, the ratios of times are the ratios of these counts. The global rule takes the
home branch on the first model (gradients near 0, as a real model's never-touched elements) and
the srf branch where every |g| ≥ 10⁻², where the plain-PyTorch step moves the most and
allocates its denominators (`_foreach_div`) at every step.

    python backends/torch/benches/step.py [--rounds 15] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List, Sequence, Tuple

import torch

import homeadam.torch as ht

PLAIN = "plain-PyTorch HomeAdamW (global)"


def plain_homeadamw(params: Sequence[torch.Tensor], branches: List[str], lr: float = 1e-3,
                    betas: Tuple[float, float] = (0.9, 0.999),
                    eps: float = 1e-3, weight_decay: float = 1e-2, tau: float = 1e-12) -> Callable[[], None]:
    """HomeAdamW (global switch) as a peer writes it in PyTorch: foreach ops and one global min.
    Each step appends the branch it took to ``branches``."""
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
        branches.append("home" if rho < tau else "srf")
        if rho < tau:
            torch._foreach_add_(list(params), ms, alpha=-lr / bc1)
        else:
            denom = torch._foreach_div(vs, bc2)
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(list(params), ms, denom, value=-lr / bc1)

    return step


def model(sizes: List[int], device: str, srf: bool) -> List[torch.nn.Parameter]:
    """Parameters of ``sizes`` with gradients ~ N(0, 10⁻⁴), or with |g| ≥ 10⁻² (``srf``)."""
    params = [torch.nn.Parameter(torch.randn(n, device=device)) for n in sizes]
    for p in params:
        g = torch.randn(p.numel(), device=device) * 1e-2
        p.grad = torch.copysign(g.abs() + 1e-2, g) if srf else g
    return params


# Arrays of the model's size moved per step: torch's fused AdamW and our update read θ, g, m, v
# and write θ, m, v; our finite check reads g once more (the global rule's check too, where its
# bound decides). The plain-PyTorch step: lerp 3, mul 2, addcmul 3, min 1, the decay's mul 2,
# then the home branch's add 3, or the srf branch's div 2, add 2, addcdiv 4.
ARRAYS = {
    "torch AdamW (fused)": 7,
    "ours AdamW": 8,
    "ours AdamW, finite_check=trust": 7,
    "ours HomeAdamW (global)": 8,
}
PLAIN_ARRAYS = {"home": 14, "srf": 19}


def time_steps(steps: Dict[str, Callable[[], None]], rounds: int, device: str) -> Dict[str, float]:
    # On a GPU a step is timed until its work on the device is done (torch's fused AdamW returns
    # before; ours waits for the status it reads back).
    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

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


def contenders(
    sizes: List[int], device: str, srf: bool, branches: List[str]
) -> Tuple[Dict[str, Callable[[], None]], ht.HomeAdamW]:
    """The contenders' steps, and our HomeAdamW (whose last report says its branch)."""

    def ours(factory: Callable[..., torch.optim.Optimizer], **kw: object) -> torch.optim.Optimizer:
        return factory(model(sizes, device, srf), **kw)

    home = ht.HomeAdamW(model(sizes, device, srf), lr=1e-3)
    steps: Dict[str, Callable[[], None]] = {
        "torch AdamW (fused)": torch.optim.AdamW(model(sizes, device, srf), lr=1e-3, fused=True).step,
        "ours AdamW": ours(ht.AdamW, lr=1e-3).step,
        "ours AdamW, finite_check=trust": ours(ht.AdamW, lr=1e-3, finite_check="trust").step,
        "ours HomeAdamW (global)": home.step,
        PLAIN: plain_homeadamw(model(sizes, device, srf), branches),
    }
    return steps, home


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
        shapes = [("16 × 16 M (256 M)", [16 << 20] * 16, False), ("16 × 16 M (256 M), srf branch", [16 << 20] * 16, True)]
    else:
        torch.set_num_threads(1)
        where = "1 thread"
        shapes = [
            ("8 × 2 M (16 M)", [2 << 20] * 8, False),
            ("8 × 2 M (16 M), srf branch", [2 << 20] * 8, True),
            ("200 × 4 k (per-call overhead)", [4096] * 200, False),
            ("200 × 4 k, srf branch", [4096] * 200, True),
        ]
    print(f"torch {torch.__version__}, {where}, median of {args.rounds} steps\n")
    print(
        "| tensors | contender | ms | arrays moved | GB/s | torch fused AdamW time / ours "
        "| plain-PyTorch HomeAdamW / ours |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, sizes, srf in shapes:
        branches: List[str] = []
        steps, home = contenders(sizes, args.device, srf, branches)
        ms = time_steps(steps, args.rounds, args.device)
        report = home.last_report or {}
        ours_branch = "home" if report.get("home_elements", 0) > 0 else "srf"
        if set(branches) != {ours_branch}:
            raise SystemExit(f"the plain-PyTorch step took {sorted(set(branches))}, ours the {ours_branch} branch")
        arrays = dict(ARRAYS, **{PLAIN: PLAIN_ARRAYS[branches[0]]})
        array_bytes = sum(sizes) * 4
        torch_ms, plain_ms = ms["torch AdamW (fused)"], ms[PLAIN]
        for name, t in ms.items():
            rate = arrays[name] * array_bytes / (t * 1e-3) / 1e9
            vs_torch = f"{torch_ms / t:.2f}" if name.startswith("ours") else ""
            vs_plain = f"{plain_ms / t:.2f}" if name == "ours HomeAdamW (global)" else ""
            shown = f"{name} ({branches[0]} branch)" if name == PLAIN else name
            print(f"| {label} | {shown} | {t:.3f} | {arrays[name]} | {rate:.1f} | {vs_torch} | {vs_plain} |")
        # One model's contenders at a time: a 24 GiB card holds one 256 M set, not two.
        del steps, home


if __name__ == "__main__":
    main()
