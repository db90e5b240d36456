"""A model sharded across two processes (gloo) steps to the bits of one process over the whole
model (every rank's parameters in rank order): the non-finite skip, the clipping norm, the
global rule's ρ, a calibrated τ and the random draws of q8 state are the model's."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, List

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import homeadam.torch as ht

SIZES = [(40, 9), (300,), (5,), (17, 3), (64,), (2, 2)]
STEPS = 8

CONFIGS: Dict[str, Callable[[List[torch.nn.Parameter], Any], ht._CoreOptimizer]] = {
    "homeadamw-global-clipped": lambda p, pg: ht.HomeAdamW(p, lr=1e-2, tau=1e-5, max_grad_norm=0.5, process_group=pg),
    "homeadamw-layer-calibrated": lambda p, pg: ht.HomeAdamW(
        p, lr=1e-2, switch="layer", tau_calibration=(0.3, 3), process_group=pg
    ),
    "homeadamw-ew-calibrated": lambda p, pg: ht.HomeAdamW(
        p, lr=1e-2, switch="element", tau_calibration=(0.3, 2), process_group=pg
    ),
    "adamw-clipped-q8": lambda p, pg: ht.AdamW(p, lr=1e-2, max_grad_norm=0.1, state_dtype="q8", process_group=pg),
}


def params(device: str = "cpu") -> List[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in SIZES]


def set_grads(ps: List[torch.nn.Parameter], owned: List[int], step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for k, p in enumerate(ps):
        grad = torch.randn(p.shape, generator=g) * 10.0 ** -(k % 4)
        if k == 1 and step < 3:
            grad[:4] = 0.0  # v̂ = 0: the global rule goes home
        if k == 4 and step == 5:
            grad[7] = float("inf")  # one process's non-finite gradient skips every process
        if k in owned:
            p.grad = grad.to(p.device)


def train(config: str, owned: List[int], pg: Any, device: str = "cpu") -> List[torch.Tensor]:
    ps = params(device)
    opt = CONFIGS[config]([ps[k] for k in owned], pg)
    skipped = 0
    for t in range(STEPS):
        set_grads(ps, owned, t)
        opt.step()
        assert opt.last_report is not None
        skipped += bool(opt.last_report["skipped"])
    assert skipped == 1
    return [ps[k].detach().clone() for k in owned]


def worker(rank: int, world: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        owned = list(range(rank, len(SIZES), world))
        torch.save({c: train(c, owned, dist.group.WORLD) for c in CONFIGS}, f"{out}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not built in")
def test_two_gloo_processes_give_one_process_bits() -> None:
    # Both processes run here: gloo over the loopback interface, whatever the host name resolves to.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(2, init, tmp), nprocs=2, join=True)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
    in_rank_order = [k for rank in range(2) for k in range(rank, len(SIZES), 2)]
    for config in CONFIGS:
        whole = dict(zip(in_rank_order, train(config, in_rank_order, None)))
        for rank, shard in enumerate(ranks):
            for k, tensor in zip(range(rank, len(SIZES), 2), shard[config]):
                assert torch.equal(tensor, whole[k]), (config, rank, k)


def test_clipping_scales_to_the_maximum_norm() -> None:
    """One step of SGD clipped to c moves θ by η c g / ‖g‖₂, and reports ‖g‖₂."""
    p = torch.nn.Parameter(torch.zeros(4))
    opt = ht.SGD([p], lr=1.0, max_grad_norm=1.0)
    p.grad = torch.tensor([3.0, 4.0, 0.0, 0.0])
    opt.step()
    assert opt.last_report is not None and opt.last_report["grad_norm"] == 5.0
    torch.testing.assert_close(p.detach(), torch.tensor([-0.6, -0.8, 0.0, 0.0]))


def test_swats_refuses_a_process_group() -> None:
    with pytest.raises(ValueError, match="SWATS"):
        ht.SWATS([torch.nn.Parameter(torch.zeros(2))], process_group=object())
