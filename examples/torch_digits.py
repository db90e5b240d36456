"""The digits MLP (64-64-10 on the 1,797 shipped 8x8 digits) trained by HomeAdamW from PyTorch,
with the digits_quick preset's setting (host/presets/digits_quick.json): η = 5e-2, ε = 1e-3,
τ = 1e-12, λ = 1e-2, batches of 32.

    pip install ./backends/torch
    python examples/torch_digits.py [--epochs 20]
"""

from __future__ import annotations

import argparse
import csv
import gzip
from pathlib import Path
from typing import Tuple

import torch

from homeadam.torch import HomeAdamW

DATA = Path(__file__).resolve().parents[1] / "data" / "digits" / "digits.csv.gz"


def load() -> Tuple[torch.Tensor, torch.Tensor]:
    with gzip.open(DATA, "rt") as f:
        rows = [[int(v) for v in row] for row in csv.reader(f)]
    table = torch.tensor(rows)
    return table[:, :64].float() / 16.0, table[:, 64]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    x, y = load()
    order = torch.randperm(len(y))
    train, test = order[:1500], order[1500:]
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = HomeAdamW(model.parameters(), lr=5e-2, eps=1e-3, weight_decay=1e-2, tau=1e-12)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total, home = 0.0, 0
        for batch in train[torch.randperm(len(train))].split(32):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
            total += loss.item() * len(batch)
            home += bool(opt.last_report and opt.last_report["home_elements"])
        model.eval()
        with torch.no_grad():
            accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
        steps = -(-len(train) // 32)
        print(
            f"epoch {epoch:2d}  train loss {total / len(train):.4f}  test accuracy {accuracy:.3f}  "
            f"home steps {home}/{steps}"
        )


if __name__ == "__main__":
    main()
