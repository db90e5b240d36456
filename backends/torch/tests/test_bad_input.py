"""Bad input is a Python exception naming what is wrong, never a crash."""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, List

import pytest
import torch

import homeadam.torch as ht


def param(*shape: int, dtype: torch.dtype = torch.float32) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(*shape).to(dtype))


def two_groups(second: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [{"params": [param(3)]}, dict(second, params=[param(3)])]


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: ht.AdamW([param(3)], lr=-1.0), "lr"),
        (lambda: ht.AdamW([param(3)], lr=float("nan")), "lr"),
        (lambda: ht.AdamW([param(3)], betas=(0.9, 1.0)), "beta2"),
        (lambda: ht.AdamW([param(3)], eps=-1e-8), "eps"),
        (lambda: ht.HomeAdamW([param(3)], tau=0.0), "tau"),
        (lambda: ht.HomeAdamW([param(3)], switch="row"), "switch"),
        (lambda: ht.AdamW([param(3)], lr=10.0, weight_decay=0.5), "decay"),
        (lambda: ht.AdamW([param(3)], state_dtype=torch.float64), "state_dtype"),
        (lambda: ht.AdamW([param(3)], state_dtype=torch.float16), "f16|second moment|allow_f16_state"),
        (lambda: ht.AdamW([param(3)], finite_check="never"), "finite_check"),
        (lambda: ht.AdamW([param(3)], threads=0), "threads"),
        (lambda: ht.AdamW([param(3)], rounding="up"), "rounding"),
        (lambda: ht.AdamSrf([param(3)], weight_decay=0.1), "weight_decay"),
        (lambda: ht.AdamW([torch.zeros(3, dtype=torch.complex64)]), "dtype"),
        (lambda: ht.AdamW([torch.zeros(3, dtype=torch.int32)]), "dtype"),
        (lambda: ht.AdamW([torch.zeros(3, dtype=torch.float64)]), "dtype"),
        (lambda: ht.AdamW([torch.zeros(4, 4).t()]), "contiguous"),
        (lambda: ht.AdamW([torch.zeros(3, device="meta")]), "CPU"),
        (lambda: ht.AdamW([torch.zeros(3), torch.zeros(3, device="meta")]), "CPU|device"),
        (lambda: ht.AdamW([{"params": [param(3)], "tau": 1.0}]), "tau"),
        (lambda: ht.HomeAdamW(two_groups({"tau": 1.0})), "tau"),
        (lambda: ht.HomeAdamW(two_groups({"betas": (0.9, 0.9)})), "beta2"),
    ],
)
def test_bad_settings_are_value_errors(make: Callable[[], Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_gradients_are_value_errors() -> None:
    p = param(4)
    opt = ht.AdamW([p])
    cases = [
        (torch.zeros(4).to_sparse(), "sparse"),
        (torch.zeros(8)[::2], "contiguous"),
    ]
    for grad, match in cases:
        p.grad = None
        p.grad = grad
        with pytest.raises(ValueError, match=match):
            opt.step()
    p.grad = torch.zeros(4)
    p.data = torch.zeros(8)[::2]
    with pytest.raises(ValueError, match="contiguous|shape"):
        opt.step()


def test_a_scheduler_writing_a_bad_lr_is_refused_at_the_step() -> None:
    p = param(4)
    opt = ht.AdamW([p])
    p.grad = torch.ones(4)
    opt.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match="lr"):
        opt.step()
    opt.param_groups[0]["lr"] = 1e-3
    opt.param_groups[0]["eps"] = -1.0
    with pytest.raises(ValueError, match="eps"):
        opt.step()


def test_the_same_memory_twice_is_refused() -> None:
    base = torch.nn.Parameter(torch.zeros(10))
    views = [base[:6].detach().requires_grad_(), base[4:].detach().requires_grad_()]
    opt = ht.AdamW(views)
    for v in views:
        v.grad = torch.ones(v.shape)
    with pytest.raises(ValueError, match="overlaps"):
        opt.step()


def test_a_bad_state_dict_is_refused() -> None:
    opt = ht.AdamW([param(3)])
    with pytest.raises(ValueError, match="homeadam"):
        opt.load_state_dict(torch.optim.AdamW([param(3)]).state_dict())
    state = ht.HomeAdamW([param(3)]).state_dict()
    with pytest.raises(ValueError):
        opt.load_state_dict(state)
    with pytest.raises(ValueError, match="another optimizer"):
        ht.HomeAdamW([param(3)]).load_state_dict(opt.state_dict())
    with pytest.raises(ValueError):
        opt.import_state(b"not a checkpoint")


def test_random_odd_inputs_never_crash() -> None:
    """Odd shapes, dtypes, layouts, hyper-parameters and gradients: each step either runs,
    leaving finite parameters or reporting a skip, or raises ValueError."""
    rng = random.Random(0)
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64]
    factories = [ht.AdamW, ht.HomeAdamW, ht.SGD, ht.Lion, ht.AdaBelief, ht.AdamWSrf]
    values = [0.0, 1e-30, 1e-8, 1e-3, 0.5, 0.999, 1.0, 2.0, -1.0, float("inf"), float("nan")]
    stepped = skipped = 0
    for case in range(300):
        shapes = [tuple(rng.randint(0, 5) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 3))]
        dtype = rng.choice(dtypes)
        params = [torch.nn.Parameter(torch.randn(s).to(dtype), requires_grad=dtype.is_floating_point) for s in shapes]
        factory = rng.choice(factories)
        kwargs = {"lr": rng.choice(values)}
        if factory is not ht.SGD:
            kwargs["weight_decay"] = rng.choice(values)
        try:
            opt = factory(params, **kwargs)
        except ValueError:
            continue
        for p in params:
            kind = rng.randint(0, 5)
            if kind == 0:
                p.grad = None
            elif kind == 1:
                p.grad = torch.full(p.shape, float(rng.choice(values))).to(p.dtype)
            elif kind == 2 and p.dim() > 1:
                p.grad = torch.randn(p.shape[::-1]).to(p.dtype).transpose(0, -1)
            else:
                p.grad = torch.randn(p.shape).to(p.dtype)
        try:
            opt.step()
        except ValueError:
            continue
        report = opt.last_report
        assert report is not None, case
        stepped += 1
        skipped += bool(report["skipped"])
        finite_grads = all(p.grad is None or torch.isfinite(p.grad.float()).all() for p in params)
        if finite_grads and not report["skipped"]:
            for p in params:
                assert torch.isfinite(p.float()).all(), (case, factory.__name__, kwargs)
    # Enough cases get through the checks to test the step, both its outcomes among them.
    assert stepped >= 50 and skipped >= 1, (stepped, skipped)
