"""Every rule × storage: the step on PyTorch's tensors is the core's scalar reference, bit for
bit, and the optimizer-wide decision covers every param group."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch

import homeadam.torch as ht

Factory = Callable[..., ht._CoreOptimizer]

RULES: List[Tuple[str, Factory, Dict[str, Any]]] = [
    ("sgd", ht.SGD, {"lr": 1e-2}),
    ("sgdm", ht.SGD, {"lr": 1e-2, "momentum": 0.9, "weight_decay": 1e-3}),
    ("sgd-nesterov", ht.SGD, {"lr": 1e-2, "momentum": 0.9, "nesterov": True}),
    ("adam", ht.Adam, {"weight_decay": 1e-2}),
    ("adamw", ht.AdamW, {}),
    ("adam-srf", ht.AdamSrf, {}),
    ("adamw-srf", ht.AdamWSrf, {}),
    ("homeadam", ht.HomeAdam, {"tau": 1e-3}),
    ("homeadamw", ht.HomeAdamW, {"tau": 1e-3}),
    ("homeadamw-layer", ht.HomeAdamW, {"tau": 1e-3, "switch": "layer"}),
    ("homeadamw-ew", ht.HomeAdamW, {"tau": 1e-3, "switch": "element"}),
    ("homeadamw-calibrated", ht.HomeAdamW, {"tau_calibration": (0.25, 3)}),
    ("adabelief", ht.AdaBelief, {"weight_decay": 1e-2}),
    ("swats", ht.SWATS, {}),
    ("miadam", ht.MIAdam, {"kappa": 0.5, "switch_step": 3}),
    ("lion", ht.Lion, {"weight_decay": 1e-2}),
]

STORAGE = [
    (torch.float32, torch.float32),
    (torch.float32, torch.bfloat16),
    (torch.float32, "q8"),
    (torch.bfloat16, torch.float32),
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float32),
]

SHAPES = [(7, 33), (300,), (1,), (2, 3, 5)]


def model(dtype: torch.dtype, seed: int, device: str = "cpu") -> List[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype).to(device)) for s in SHAPES]


def grads(params: List[torch.nn.Parameter], step: int) -> None:
    g = torch.Generator().manual_seed(1000 + step)
    for k, p in enumerate(params):
        grad = torch.randn(p.shape, generator=g) * (10.0 ** -(k + step % 3))
        if k == 0:
            grad[0] = 0.0  # an element whose v̂ is 0: the home branch
        p.grad = grad.to(p.dtype).to(p.device)


def run(factory: Factory, kwargs: Dict[str, Any], dtype: torch.dtype, state: Any, reference: bool,
        steps: int = 6, device: str = "cpu") -> Tuple[List[torch.Tensor], List[torch.Tensor], ht._CoreOptimizer]:
    params = model(dtype, 0, device)
    groups = [{"params": params[:2]}, {"params": params[2:], "lr": kwargs.get("lr", 1e-3) / 2}]
    extra = {"rounding": "stochastic", "seed": 7} if dtype != torch.float32 else {}
    opt = factory(groups, state_dtype=state, **extra, **kwargs)
    opt._native.reference = reference
    for t in range(steps):
        grads(params, t)
        opt.step()
    return [p.detach().clone() for p in params], [opt.state[p]["state"].clone() for p in params], opt


@pytest.mark.parametrize("name,factory,kwargs", RULES, ids=[r[0] for r in RULES])
@pytest.mark.parametrize("dtype,state", STORAGE, ids=[f"{d}-{s}".replace("torch.", "") for d, s in STORAGE])
def test_fast_path_is_the_reference(name: str, factory: Factory, kwargs: Dict[str, Any],
                                    dtype: torch.dtype, state: Any) -> None:
    fast, fast_state, opt = run(factory, kwargs, dtype, state, reference=False)
    ref, ref_state, _ = run(factory, kwargs, dtype, state, reference=True)
    for a, b in zip(fast + fast_state, ref + ref_state):
        assert torch.equal(a.view(torch.uint8) if a.dtype != torch.uint8 else a,
                           b.view(torch.uint8) if b.dtype != torch.uint8 else b)
    assert opt.step_count == 6
    assert all(torch.isfinite(p.float()).all() for p in fast)


def test_global_decision_spans_every_group() -> None:
    """The global rule takes one decision over every group: two groups step as one."""
    def train(split: bool) -> List[torch.Tensor]:
        params = model(torch.float32, 0)
        groups: Any = [{"params": params[:2]}, {"params": params[2:]}] if split else params
        opt = ht.HomeAdamW(groups, tau=1e-3)
        homes = []
        for t in range(5):
            grads(params, t)
            opt.step()
            assert opt.last_report is not None
            homes.append(opt.last_report["home_elements"])
        assert any(homes), "the zero gradient sends the model home"
        return [p.detach().clone() for p in params]

    for a, b in zip(train(True), train(False)):
        assert torch.equal(a, b)


def test_threads_give_the_same_bits() -> None:
    params = [torch.nn.Parameter(torch.randn(100_000)) for _ in range(2)]
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    one, four = ht.HomeAdamW(params, tau=1e-9), ht.HomeAdamW(copies, tau=1e-9, threads=4)
    for t in range(3):
        for p, q in zip(params, copies):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        one.step()
        four.step()
    for p, q in zip(params, copies):
        assert torch.equal(p, q)
