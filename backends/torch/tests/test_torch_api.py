"""What a PyTorch user relies on: the peers' numbers, groups, schedulers, closures, AMP,
``state_dict`` through ``torch.save`` and the core's byte format."""

from __future__ import annotations

import io
from typing import Any, Callable, List

import pytest
import torch

import homeadam.torch as ht


def net(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batch(step: int) -> Any:
    g = torch.Generator().manual_seed(step)
    return torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g)


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: range,
          sched: Any = None, device: str = "cpu") -> List[float]:
    losses = []
    for t in steps:
        x, y = batch(t)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    "ours,theirs",
    [
        (lambda p: ht.AdamW(p, lr=1e-2, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1)),
        (lambda p: ht.Adam(p, lr=1e-2, weight_decay=0.1), lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1)),
        (lambda p: ht.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True),
         lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3, nesterov=True)),
    ],
    ids=["adamw", "adam", "sgd-nesterov"],
)
def test_matches_torch_optim(ours: Callable[..., Any], theirs: Callable[..., Any]) -> None:
    a, b = net(), net()
    train(a, ours(a.parameters()), range(200))
    train(b, theirs(b.parameters()), range(200))
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def assert_scheduled_groups_are_torchs_adamw(device: str = "cpu", **theirs: Any) -> None:
    """Per-group lr and weight decay (the biases at their own rate without decay), and a
    scheduler writing group["lr"], as torch's AdamW with the arguments ``theirs``."""
    def groups(m: torch.nn.Sequential) -> Any:
        return [
            {"params": [m[0].weight, m[2].weight]},
            {"params": [m[0].bias, m[2].bias], "lr": 3e-3, "weight_decay": 0.0},
        ]

    a, b = net().to(device), net().to(device)
    oa, ob = ht.AdamW(groups(a), lr=1e-2), torch.optim.AdamW(groups(b), lr=1e-2, **theirs)
    sa = torch.optim.lr_scheduler.OneCycleLR(oa, max_lr=[2e-2, 5e-3], total_steps=100)
    sb = torch.optim.lr_scheduler.OneCycleLR(ob, max_lr=[2e-2, 5e-3], total_steps=100)
    train(a, oa, range(100), sa, device)
    train(b, ob, range(100), sb, device)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_param_groups_and_schedulers() -> None:
    assert_scheduled_groups_are_torchs_adamw()


def test_closure_and_parameters_without_gradients() -> None:
    model = net()
    frozen = torch.nn.Parameter(torch.ones(4))
    opt = ht.HomeAdamW([*model.parameters(), frozen], lr=1e-2)
    x, y = batch(0)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    first = opt.step(closure).item()
    for _ in range(20):
        last = opt.step(closure).item()
    assert last < first
    assert torch.equal(frozen, torch.ones(4)) and frozen not in opt.state


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, "q8"])
@pytest.mark.parametrize("factory", [lambda p, s: ht.HomeAdamW(p, lr=1e-2, state_dtype=s),
                                     lambda p, s: ht.SWATS(p, lr=1e-2, state_dtype=s)], ids=["homeadamw", "swats"])
def test_state_dict_resumes_to_the_same_bits(state_dtype: Any, factory: Callable[..., Any]) -> None:
    whole = net()
    train(whole, factory(whole.parameters(), state_dtype), range(60))

    first = net()
    opt = factory(first.parameters(), state_dtype)
    train(first, opt, range(30))
    saved = io.BytesIO()
    torch.save({"model": first.state_dict(), "opt": opt.state_dict()}, saved)
    saved.seek(0)
    loaded = torch.load(saved)
    second = net(seed=1)
    second.load_state_dict(loaded["model"])
    resumed = factory(second.parameters(), state_dtype)
    resumed.load_state_dict(loaded["opt"])
    assert resumed.step_count == 30
    train(second, resumed, range(30, 60))
    for p, q in zip(whole.parameters(), second.parameters()):
        assert torch.equal(p, q)


def test_state_holds_the_moments_as_views() -> None:
    p = torch.nn.Parameter(torch.zeros(3, 4))
    opt = ht.AdamW([p])
    p.grad = torch.ones(3, 4)
    opt.step()
    state = opt.state[p]
    assert state["m"].shape == p.shape and state["v"].shape == p.shape
    torch.testing.assert_close(state["m"], torch.full((3, 4), 0.1))
    assert state["m"].data_ptr() == state["state"].data_ptr()


def test_load_refuses_another_state_dtype() -> None:
    model = net()
    opt = ht.AdamW(model.parameters())
    train(model, opt, range(2))
    other = ht.AdamW(model.parameters(), state_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="dtype"):
        other.load_state_dict(opt.state_dict())


def test_export_then_the_core_continues_to_the_same_bits() -> None:
    """50 steps here, the core's checkpoint bytes, 50 more from them = 100 in one run."""
    whole = net()
    train(whole, ht.HomeAdamW(whole.parameters(), lr=1e-2, switch="element", tau=1e-6), range(100))

    first = net()
    opt = ht.HomeAdamW(first.parameters(), lr=1e-2, switch="element", tau=1e-6)
    train(first, opt, range(50))
    data = opt.export_state()
    assert data[:8] == b"HOMEADAM"
    second = net(seed=3)
    second.load_state_dict(first.state_dict())
    fresh = ht.HomeAdamW(second.parameters(), lr=1e-2, switch="element", tau=1e-6)
    fresh.import_state(data)
    assert fresh.step_count == 50
    train(second, fresh, range(50, 100))
    for p, q in zip(whole.parameters(), second.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError):
        ht.AdamW(second.parameters()).import_state(data)


def test_grad_scaler_unscales_and_skips_non_finite_steps() -> None:
    a, b = net(), net()
    oa, ob = ht.AdamW(a.parameters(), lr=1e-2), ht.AdamW(b.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1000)
    for t in range(10):
        x, y = batch(t)
        oa.zero_grad()
        scaler.scale(torch.nn.functional.cross_entropy(a(x), y)).backward()
        scaler.step(oa)
        scaler.update()
    train(b, ob, range(10))
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)

    before = [p.detach().clone() for p in a.parameters()]
    oa.zero_grad()
    x, y = batch(0)
    scaler.scale(torch.nn.functional.cross_entropy(a(x), y) * float("inf")).backward()
    scaler.step(oa)
    scaler.update()
    assert oa.last_report is not None and oa.last_report["skipped"]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), before))
    assert oa.step_count == 10
