"""CUDA parameters, skipped without a CUDA device: the step on PyTorch's stream is the CPU step
bit for bit for every rule × storage (homeadam-cuda's kernels are the core's), AdamW is torch's
fused AdamW to the peers' tolerance, state dicts round-trip and move to the parameters' device
as torch's do, GradScaler's unscale and skip are the CPU's, one NCCL process steps as no
process group, and bad input is refused before any launch. Without a driver, a CUDA step is a
Python exception."""

from __future__ import annotations

import ctypes.util
import io
import os
import tempfile
from typing import Any, Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist

import homeadam.torch as ht
from homeadam import _native
from homeadam._optimizer import _nvrtc_library
from test_bits import RULES, STORAGE, Factory, grads, model, run
from test_sharded import CONFIGS, SIZES
from test_sharded import train as train_sharded
from test_torch_api import assert_scheduled_groups_are_torchs_adamw, net, train

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def raw(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, on the CPU."""
    return (t if t.dtype == torch.uint8 else t.view(torch.uint8)).cpu()


@cuda
@pytest.mark.parametrize("name,factory,kwargs", RULES, ids=[r[0] for r in RULES])
@pytest.mark.parametrize("dtype,state", STORAGE, ids=[f"{d}-{s}".replace("torch.", "") for d, s in STORAGE])
def test_cuda_step_is_the_cpu_step(name: str, factory: Factory, kwargs: Dict[str, Any],
                                   dtype: torch.dtype, state: Any) -> None:
    on_cpu, cpu_state, a = run(factory, kwargs, dtype, state, reference=False)
    on_cuda, cuda_state, b = run(factory, kwargs, dtype, state, reference=False, device="cuda")
    for k, (x, y) in enumerate(zip(on_cpu + cpu_state, on_cuda + cuda_state)):
        assert x.device.type == "cpu" and y.device.type == "cuda"
        assert torch.equal(raw(x), raw(y)), (name, k)
    assert a.last_report is not None and b.last_report is not None
    assert (a.step_count, a.last_report["skipped"]) == (b.step_count, b.last_report["skipped"])
    if name == "swats":
        assert [a.state[p]["swats_lambda"] for p in a._params_in_order()] == [
            b.state[p]["swats_lambda"] for p in b._params_in_order()
        ]


@cuda
def test_cuda_steps_under_a_scheduler_of_two_groups_are_the_cpus() -> None:
    """A scheduler sets each group's rate at every step (the groups' ratio moves by ulps): the
    CUDA steps keep their tables and give the CPU's bits."""
    def train(device: str) -> List[torch.Tensor]:
        params = model(torch.float32, 0, device)
        groups = [{"params": params[:2]}, {"params": params[2:], "lr": 3e-3, "weight_decay": 0.0}]
        opt = ht.HomeAdamW(groups, lr=1e-2, tau=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[2e-2, 7e-3], total_steps=12)
        for t in range(12):
            grads(params, t)
            opt.step()
            sched.step()
        return [p.detach() for p in params]

    for p, q in zip(train("cpu"), train("cuda")):
        assert torch.equal(raw(p), raw(q))


@cuda
def test_cuda_adamw_is_torch_fused_adamw() -> None:
    """200 steps, then per-group rates under a scheduler (which rescales a group against the
    other at every step), to the tolerance of the CPU peer tests."""
    a, b = net().cuda(), net().cuda()
    train(a, ht.AdamW(a.parameters(), lr=1e-2, weight_decay=0.1), range(200), device="cuda")
    train(b, torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1, fused=True), range(200), device="cuda")
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert_scheduled_groups_are_torchs_adamw("cuda", fused=True)


@cuda
def test_cuda_state_dict_round_trips_and_moves_to_the_parameters_device() -> None:
    """Three steps, the state dict through torch.save, three more: the bits of six in one, on
    CUDA and, loaded into CPU parameters, on the CPU; the core's byte format is the CPU run's."""
    def make(device: str) -> Tuple[List[torch.nn.Parameter], ht._CoreOptimizer]:
        params = model(torch.float32, 0, device)
        return params, ht.HomeAdamW(params, lr=1e-2, switch="layer", tau_calibration=(0.25, 2))

    def steps(params: List[torch.nn.Parameter], opt: ht._CoreOptimizer, ts: range) -> None:
        for t in ts:
            grads(params, t)
            opt.step()

    whole, opt = make("cuda")
    steps(whole, opt, range(6))
    on_cpu, cpu_opt = make("cpu")
    steps(on_cpu, cpu_opt, range(6))
    assert opt.export_state() == cpu_opt.export_state()

    first, opt = make("cuda")
    steps(first, opt, range(3))
    saved = io.BytesIO()
    torch.save(opt.state_dict(), saved)
    for device in ("cuda", "cpu"):
        saved.seek(0)
        params, resumed = make(device)
        with torch.no_grad():
            for p, q in zip(params, first):
                p.copy_(q)
        resumed.load_state_dict(torch.load(saved, map_location="cpu" if device == "cuda" else "cuda"))
        assert all(resumed.state[p]["state"].device == p.device for p in params)
        steps(params, resumed, range(3, 6))
        assert resumed.step_count == 6
        for p, q in zip(params, whole):
            assert torch.equal(raw(p), raw(q)), device


@cuda
def test_grad_scaler_on_cuda_is_the_cpus() -> None:
    """GradScaler's scale enters the step (unscaled inside it) and a non-finite step is skipped,
    to the CPU's bits and the same scale afterwards."""
    def train(device: str) -> Tuple[List[torch.Tensor], int, float]:
        params = model(torch.float32, 0, device)
        opt = ht.AdamW(params, lr=1e-2)
        scaler = torch.amp.GradScaler(device, init_scale=1024.0, growth_interval=3)
        for t in range(8):
            opt.zero_grad()
            g = torch.Generator().manual_seed(t)
            loss = sum((p * torch.randn(p.shape, generator=g).to(device)).sum() for p in params)
            scaler.scale(loss * float("inf") if t == 4 else loss).backward()
            scaler.step(opt)
            scaler.update()
        return [p.detach() for p in params], opt.step_count, scaler.get_scale()

    (on_cpu, cpu_steps, cpu_scale), (on_cuda, cuda_steps, cuda_scale) = train("cpu"), train("cuda")
    assert cpu_steps == cuda_steps == 7
    assert cpu_scale == cuda_scale
    for p, q in zip(on_cpu, on_cuda):
        assert torch.equal(raw(p), raw(q))


@cuda
@pytest.mark.skipif(not dist.is_available() or not dist.is_nccl_available(), reason="no NCCL")
def test_one_nccl_process_steps_as_no_process_group() -> None:
    """The sharded path's collectives on NCCL (on the device): one process of a group is the
    whole model, for CPU and CUDA parameters."""
    everything = list(range(len(SIZES)))
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        dist.init_process_group("nccl", init_method=init, rank=0, world_size=1)
        try:
            for config in CONFIGS:
                for device in ("cpu", "cuda"):
                    grouped = train_sharded(config, everything, dist.group.WORLD, device)
                    alone = train_sharded(config, everything, None, device)
                    for k, (p, q) in enumerate(zip(grouped, alone)):
                        assert torch.equal(raw(p), raw(q)), (config, device, k)
        finally:
            dist.destroy_process_group()


@cuda
def test_bad_cuda_input_is_a_value_error() -> None:
    """Parameters on two devices, CUDA parameters of two dtypes, a gradient on another device,
    state left behind by a parameter that moved: refused before any launch."""
    def one(device: str, dtype: torch.dtype = torch.float32) -> torch.nn.Parameter:
        p = torch.nn.Parameter(torch.zeros(3, dtype=dtype, device=device))
        p.grad = torch.ones_like(p)
        return p

    cases = [
        (ht.AdamW([{"params": [one("cpu")]}, {"params": [one("cuda")]}]), "one device"),
        (ht.AdamW([one("cuda"), one("cuda", torch.bfloat16)]), "one dtype"),
    ]
    for opt, match in cases:
        with pytest.raises(ValueError, match=match):
            opt.step()
    p = one("cpu")
    opt = ht.AdamW([p])
    p.grad = torch.ones(3, device="cuda")
    with pytest.raises(ValueError, match="gradient on"):
        opt.step()
    p.grad = torch.ones(3)
    opt.step()
    p.data = p.data.cuda()
    p.grad = torch.ones(3, device="cuda")
    with pytest.raises(ValueError, match="moved"):
        opt.step()


def bind(core: Any, dtypes: List[str]) -> None:
    """``cuda_bind`` over tensors at made-up addresses (nothing reads them before the driver)."""
    n, stride = 4, 1 << 12
    tensors = [
        (stride * (3 * k + 1), stride * (3 * k + 2), stride * (3 * k + 3), n, core.state_bytes(n), d, 0, 0.0)
        for k, d in enumerate(dtypes)
    ]
    core.cuda_bind(tensors, [(1.0, True, None, None, None, None)], 0, 0, _nvrtc_library())


@pytest.mark.skipif(not _native.CUDA_BUILT, reason="built without CUDA")
def test_cuda_tensors_of_two_dtypes_are_refused() -> None:
    with pytest.raises(ValueError, match="one dtype"):
        bind(_native.Core("adamw", [], "skip_step", "f32", False), ["f32", "bf16"])


@pytest.mark.skipif(
    not _native.CUDA_BUILT or torch.cuda.is_available() or ctypes.util.find_library("cuda") is not None,
    reason="built without CUDA, or a CUDA driver is present",
)
def test_without_a_driver_a_cuda_step_is_a_python_exception() -> None:
    with pytest.raises(RuntimeError, match="libcuda"):
        bind(_native.Core("adamw", [], "skip_step", "f32", False), ["f32"])


def test_nvrtc_is_pytorchs() -> None:
    """The NVRTC of PyTorch's CUDA version: the file its wheels installed, else the soname."""
    major = (torch.version.cuda or "12").split(".")[0]
    assert os.path.basename(_nvrtc_library()) == f"libnvrtc.so.{major}"
