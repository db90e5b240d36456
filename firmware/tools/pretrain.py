#!/usr/bin/env python3
"""Deterministic host pretraining for the firmware's digits classifier.

Reads data/digits/digits.csv.gz (64 pixels 0..16, label last), splits it by row index
(row % 6 == 0: held-out; row % 6 in {1, 2}: fine-tuning; the rest: pretraining), and trains a
softmax regression (10 x 64 weights + 10 biases on pixels / 16) with plain full-batch gradient
descent in float64 -- deliberately partial: only the first PRETRAIN_ROWS pretraining rows and
a few epochs, so on-device fine-tuning has something to gain.

Writes, into firmware/generated/:
  weights.bin   650 little-endian f32: W row-major (class-major), then b
  finetune.bin  65-byte records: 64 pixels, label
  heldout.bin   65-byte records: 64 pixels, label
Usage: python3 firmware/tools/pretrain.py  (from the repository root)
"""
import gzip
import pathlib

import numpy as np

PRETRAIN_ROWS = 60
EPOCHS = 15
LR = 0.5

root = pathlib.Path(__file__).resolve().parents[2]
rows = np.loadtxt(gzip.open(root / "data/digits/digits.csv.gz", "rt"), delimiter=",", dtype=np.int64)
index = np.arange(len(rows))
held = rows[index % 6 == 0]
fine = rows[(index % 6 == 1) | (index % 6 == 2)]
pre = rows[index % 6 >= 3][:PRETRAIN_ROWS]

x = pre[:, :64] / 16.0
y = np.eye(10)[pre[:, 64]]
w = np.zeros((10, 64))
b = np.zeros(10)
for _ in range(EPOCHS):
    z = x @ w.T + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d = (p - y) / len(x)
    w -= LR * d.T @ x
    b -= LR * d.sum(axis=0)


def accuracy(data):
    return float(((data[:, :64] / 16.0 @ w.T + b).argmax(axis=1) == data[:, 64]).mean())


out = root / "firmware/generated"
out.mkdir(exist_ok=True)
np.concatenate([w.ravel(), b]).astype("<f4").tofile(out / "weights.bin")
fine.astype(np.uint8).tofile(out / "finetune.bin")
held.astype(np.uint8).tofile(out / "heldout.bin")
print(f"pretrain rows {len(pre)}, fine-tune {len(fine)}, held-out {len(held)}; "
      f"host held-out accuracy {accuracy(held):.3f}")
