#!/usr/bin/env python3
"""Golden-vector generator for homeadam-rs.

Records inputs and expected outputs of optimizer update rules, taken from real
peer implementations where one exists (torch.optim, adabelief-pytorch,
pytorch-optimizer, lion-pytorch) and from the float64 NumPy reference in this file
otherwise.  The Rust tests and `homeadam replay` read what it writes.

How to run (from the repository root)
-------------------------------------
    pip install torch==2.15.0 numpy==2.4.6 adabelief-pytorch==0.2.1 pytorch-optimizer==4.1.0 \
        lion-pytorch==0.2.5
    python3 tests/golden/generate.py            # rewrites tests/golden/cases/
    python3 tests/golden/generate.py --out DIR  # writes somewhere else

Versions used to produce the committed files: Python 3.11.7, torch 2.15.0
(the PyPI wheel, reported as 2.15.0+cu132, run on CPU), numpy 2.4.6,
adabelief-pytorch 0.2.1, pytorch-optimizer 4.1.0, lion-pytorch 0.2.5.  Each case's expected.json
records the versions that produced it.  The script is deterministic (fixed
seeds, torch on one CPU thread); other versions print a warning and may change
the last bits of the torch outputs.

Case layout: tests/golden/cases/<case>/
    config.json          replay config (rule + every hyper-parameter it uses)
    input.safetensors    param.<k> [d] f32 (theta_0, representable in param_dtype)
                         grad.<k>  [T, d] f32 (raw gradient of step row r, before
                         unscaling; replay multiplies by 1/grad_scale)
    expected.safetensors param.<k> [d] f32 (theta after all rows) and every state
                         tensor <state>.<k> f32
    expected.json        peer, steps (= number of gradient rows T), tolerance,
                         telemetry (one entry per row), versions (extra key),
                         swats_switch_step (extra key, swats cases: the step t
                         after which SWATS runs SGD, or null)

State names: sgd (momentum > 0) / sgdm: b; adam, adamw, *-srf, homeadam*: m, v;
adabelief: m, s (+ s_max with amsgrad); swats: m, v, b (SGD buffer, zeros
before the switch), lambda ([1], exp_avg2); miadam: m, v, b (buf_exp_avg); lion: m
(exp_avg).
Tensors come from the peer where there is one; telemetry always comes from the
float64 NumPy reference (asserted to agree with the peer within 1e-5).

Tensors (in this order, the file's; tensor_index 0, 1, 2): layer0.bias (7),
layer0.weight (64), layer1.weight (33); q8 cases: layer0.weight (600), and layer1.weight
(256) in sgdm_q8 and adabelief_amsgrad_q8.

Tolerance rule, element by element: for every tensor in expected.safetensors,
with s = max_j |expected_j|,
    |actual_j - expected_j| <= rel * |expected_j| + floor * s
with rel = tolerance.rel from expected.json: 1e-5 when everything is stored in
f32, 5e-3 with f16 storage (param or state), 1.6e-2 with bf16 storage, 1.6e-2 with
stochastic rounding, 1e-4 with q8 state (see the README: the q8 cases are built so that float32
math stores the same codes); and floor = tolerance.floor = rel / 4.  The script checks
each tolerance by re-running the reference with float32 math (as the Rust side
does) and asserting that the float32 run stays within rel/4 * s of the expected
values, which the floor alone admits; and that ignoring the storage rounding
misses some element by more than 1.5 * rel * s, which exceeds that element's
bound (at most 1.25 * rel * s).

Telemetry (one entry per gradient row r = 1..T):
    step           optimizer step counter t after the row; a skipped row
                   (non-finite gradient) leaves it unchanged, i.e. reports the
                   t of the last step taken (0 before any).
    rho            min over all elements of all tensors of
                   v_hat = v_t / (1 - beta2^t), v as computed in this step (before
                   it is rounded to state_dtype); null for sgd/sgdm/adabelief,
                   for swats after it switched to SGD, and for skipped rows.
    rho_active     (only cases with rho_over = "active") min of v_hat over the
                   elements with v_t > 0, all tensors; 0 when there is none;
                   null for skipped rows.
    tau            (only cases with a calibrated tau) the tau the row used, a
                   power of two; null for skipped rows.
    home_elements  number of elements that took the SGDM ("home") branch
                   in homeadam* rules; 0 otherwise and for skipped rows.
    skipped        whether the row was skipped (any NaN/Inf in any gradient).

HomeAdam options (config keys, see the README for the exact rules): rho_over
"active" (the decision min runs over the active elements, v_t > 0); home_lr (the
absolute home-branch learning rate eta_h at lr; decay stays at eta); tau as
{"home_share": q, "every": N} (tau calibrated every N steps from a log2-bucket
histogram of the decision values, as a power of two).

Storage emulation (NumPy reference): raw gradients are rounded to grad_dtype
(round-to-nearest-even) before unscaling; the step math is float64 (float32 in
the tolerance self-check); after each step the parameters are rounded
float64 -> float32 -> param_dtype (nearest-even, or stochastic rounding as
specified in the README) and every state tensor float64 -> float32 ->
state_dtype (nearest-even; stochastic-rounding cases keep f32 state; q8: block-quantized with
stochastic rounding as docs/DESIGN.md specifies (store_q8), then held as the dequantized f32 values).
The stochastic-rounding hash uses t = the step counter of the step being
taken (1-based), tensor_index as above and element_index = flat index.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# The model's tensor order is the order of the param.<k> tensors in the input file (how
# `homeadam replay` numbers tensors for stochastic rounding and SWATS); safetensors writers,
# this one included, store tensors sorted by name.
TENSORS = [("layer0.bias", 7), ("layer0.weight", 64), ("layer1.weight", 33)]
NAMES = [n for n, _ in TENSORS]
TOL = {"f32": 1e-5, "f16": 5e-3, "bf16": 1.6e-2, "stochastic": 1.6e-2, "q8": 1e-4}
# q8 cases: every stochastic decision of the float64 model lies at least this far (relative change
# of u = |x| / scale) from its threshold, so a float32 implementation takes the same decisions.
Q8_MARGIN = 2.0 ** -21
# tolerance.floor = FLOOR * rel: the margin the float32 self-check asserts, so that a float32
# replay passes on the floor alone wherever the element's own rel * |e| is too small.
FLOOR = 0.25
PINNED = {"torch": "2.15.0", "numpy": "2.4.6", "adabelief-pytorch": "0.2.1",
          "pytorch-optimizer": "4.1.0", "lion-pytorch": "0.2.5"}
# lion cases: every element's c = beta1 m + (1 - beta1) g is at least this far from 0, relative
# to |beta1 m| + |(1 - beta1) g|, so that float32 math takes the same sign(c).
LION_MARGIN = 1e-5

# ---------------------------------------------------------------------------
# safetensors (hand-written: 8-byte LE header length, JSON header, raw LE f32)
# ---------------------------------------------------------------------------


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(np.asarray(tensors[name], dtype="<f4"))
        raw = arr.tobytes()
        header[name] = {"dtype": "F32", "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # pad so data is 8-aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[base + a:base + b], dtype="<f4").reshape(info["shape"]).copy()
    return out


# ---------------------------------------------------------------------------
# rounding helpers
# ---------------------------------------------------------------------------


def bf16_rne(x32: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), returned as float32."""
    x32 = np.asarray(x32, dtype=np.float32)
    b = x32.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = r.view(np.float32)
    return np.where(np.isnan(x32), x32, out)


def round_rne(dtype: str, x) -> np.ndarray:
    """any float -> float32 -> storage dtype (nearest even), returned as float32."""
    x32 = np.asarray(x).astype(np.float32)
    if dtype == "f32":
        return x32
    if dtype == "bf16":
        return bf16_rne(x32)
    if dtype == "f16":
        return x32.astype(np.float16).astype(np.float32)
    raise ValueError(dtype)


def mix64(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(30))
        z = z * np.uint64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> np.uint64(27))
        z = z * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z


def sr_uniform(seed: int, t: int, tensor_index: int, n: int) -> np.ndarray:
    """u in [0,1) per element: bits = mix64(mix64(mix64(mix64(seed)^t)^ti)^ei) >> 40."""
    z = mix64(np.array([seed], dtype=np.uint64))
    z = mix64(z ^ np.uint64(t))
    z = mix64(z ^ np.uint64(tensor_index))
    z = mix64(np.repeat(z, n) ^ np.arange(n, dtype=np.uint64))
    bits = z >> np.uint64(40)
    return bits.astype(np.float64) * 2.0 ** -24


def round_stochastic_bf16(x, seed: int, t: int, tensor_index: int) -> np.ndarray:
    x32 = np.asarray(x).astype(np.float32)
    b = x32.view(np.uint32)
    rne = bf16_rne(x32)
    exact = (b & np.uint32(0xFFFF)) == 0
    finite = np.isfinite(x32)
    t0b = (b & np.uint32(0xFFFF0000)).astype(np.uint32)
    nxb = (t0b.astype(np.uint64) + 0x10000).astype(np.uint32)  # magnitude + 1 ulp
    t0 = t0b.view(np.float32)
    nx = nxb.view(np.float32)
    nx_inf = ~np.isfinite(nx)
    ulp = np.abs(nx.astype(np.float64)) - np.abs(t0.astype(np.float64))
    frac = np.abs(x32.astype(np.float64)) - np.abs(t0.astype(np.float64))
    u = sr_uniform(seed, t, tensor_index, x32.size).reshape(x32.shape)
    res = np.where(u * ulp < frac, nx, t0)
    res = np.where(nx_inf, t0, res)
    res = np.where(exact | ~finite, rne, res)
    return res.astype(np.float32)


def store_param(cfg: dict, x, t: int, tensor_index: int) -> np.ndarray:
    dt = cfg.get("param_dtype", "f32")
    if cfg.get("rounding", "nearest") == "stochastic" and dt != "f32":
        if dt != "bf16":
            raise NotImplementedError("stochastic rounding emulated for bf16 only")
        return round_stochastic_bf16(x, int(cfg["seed"]), t, tensor_index)
    return round_rne(dt, x)


# ---------------------------------------------------------------------------
# q8 state: 8-bit codes in blocks of 256 elements, one f32 scale per block
# ---------------------------------------------------------------------------

Q8_BLOCK = 256
Q8_SLOT_SALT = 0x7138_0000_0000_0000
# second-moment slots (Config::is_second_moment_slot) take the unsigned map V, all others M
Q8_UNSIGNED_SLOTS = {"v", "s", "s_max"}


def q8_table(top: int, k: int) -> np.ndarray:
    """T[0] = 0, T[j] = 2^(-n/k) with n = top - j = k q + r (j = 1..top), built as the exact f32
    product f32(2^(-r/k)) * 2^-q: only the k constants are rounded."""
    from decimal import Decimal, getcontext
    getcontext().prec = 40
    consts = []
    for r in range(k):
        c = np.float32(2.0 ** (-r / k))
        exact = Decimal(2) ** (Decimal(-r) / Decimal(k))
        err = abs(Decimal(float(c)) - exact)
        for nb in (np.nextafter(c, np.float32(0)), np.nextafter(c, np.float32(2))):
            assert err < abs(Decimal(float(nb)) - exact), (k, r)  # the f32 nearest to 2^(-r/k)
        consts.append(c)
    table = np.zeros(top + 1, np.float32)
    for j in range(1, top + 1):
        q, r = divmod(top - j, k)
        table[j] = consts[r] * np.float32(2.0 ** -q)
        assert table[j] == np.float32(2.0 ** (-(top - j) / k)), (k, j)
    assert table[top] == 1 and np.all(np.diff(table) > 0)
    return table


Q8_V = q8_table(255, 12)  # unsigned: 21 octaves, 12 codes per octave (v, s, s_max)
Q8_M = q8_table(127, 8)  # signed magnitudes: 15.75 octaves, 8 codes per octave


def q8_bits(seed: int, t: int, tensor_index: int, slot: int, n: int) -> np.ndarray:
    """24 random bits per element e, 32-bit wrapping arithmetic: x = (e mod 2^32) ^ k0;
    x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15; x ^= k1; x *= 0x846CA68B; x ^= x >> 16; r = x >> 8,
    with k0 = ks mod 2^32, k1 = (ks >> 32) ^ (e >> 32), ks = mix64(key ^ SALT ^ slot),
    key = mix64(mix64(mix64(seed) ^ t) ^ tensor_index) (the parameter rounding's tensor key)."""
    key = mix64(mix64(mix64(np.array([seed], np.uint64)) ^ np.uint64(t)) ^ np.uint64(tensor_index))
    ks = int(mix64(key ^ np.uint64(Q8_SLOT_SALT) ^ np.uint64(slot))[0])
    e = np.arange(n, dtype=np.uint64)
    k0 = np.uint32(ks & 0xFFFFFFFF)
    k1 = (np.uint64(ks >> 32) ^ (e >> np.uint64(32))).astype(np.uint32)
    with np.errstate(over="ignore"):
        x = (e & np.uint64(0xFFFFFFFF)).astype(np.uint32) ^ k0
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x7FEB352D)
        x = x ^ (x >> np.uint32(15))
        x = x ^ k1
        x = x * np.uint32(0x846CA68B)
        x = x ^ (x >> np.uint32(16))
    return (x >> np.uint32(8)).astype(np.uint64)


def q8_quotient(ax: np.ndarray, a: np.float32) -> np.ndarray:
    """u = |x| / a without a division per element, in f32: u = (|x| * s) * i with s = 2^(127 - E),
    E = a's biased exponent clamped to [1, 253], i = 1 / (a * s); u = 1 where |x| = a."""
    e = min(max(int(np.float32(a).view(np.uint32)) >> 23, 1), 253)
    s = np.float32(2.0 ** (127 - e))
    i = np.float32(1) / (np.float32(a) * s)
    return np.where(ax == a, np.float32(1), (ax * s) * i).astype(np.float32)


def q8_quantize_block(x: np.ndarray, unsigned: bool, bits: np.ndarray) -> tuple[np.float32, np.ndarray, float]:
    """One block (f32 values x, len <= 256) -> (scale, codes, margin), every operation in f32.
    margin: min over the stochastic decisions of |(r 2^-24)(hi - lo) - (u - lo)| / u (in f64),
    the relative change of u that would flip one (inf when there is none)."""
    codes = np.zeros(Q8_BLOCK, np.uint8)  # codes past the tensor's end stay 0
    if not np.all(np.isfinite(x)):
        return np.float32(np.nan), codes, math.inf  # a poisoned block
    a = np.max(np.abs(x))
    if a == 0:
        return np.float32(0), codes, math.inf
    table = Q8_V if unsigned else Q8_M
    u = q8_quotient(np.abs(x), a)  # 0 <= u <= 1
    j = np.searchsorted(table, u, side="right") - 1  # largest j with T[j] <= u
    between = table[j] < u  # (then j < top)
    lo = table[j]
    hi = table[np.minimum(j + 1, len(table) - 1)]
    r = bits.astype(np.float32) * np.float32(2.0 ** -24)  # exact: 24 bits
    thr, frac = r * (hi - lo), u - lo
    j = j + (between & (thr < frac))
    gap = np.abs(thr.astype(np.float64) - frac.astype(np.float64))[between] / u[between]
    margin = float(np.min(gap)) if gap.size else math.inf
    if unsigned:
        j = np.where((j == 0) & (x != 0), 1, j)  # a positive second moment never becomes 0
        c = j
    else:
        c = np.where((j > 0) & (x < 0), j | 0x80, j)
    codes[:x.size] = c
    return a, codes, margin


def q8_dequantize_block(scale: np.float32, codes: np.ndarray, unsigned: bool, n: int) -> np.ndarray:
    """x = T[j] * scale (one f32 multiply), negated when bit 7 is set (signed map)."""
    c = codes[:n].astype(np.int64)
    if unsigned:
        return Q8_V[c] * scale
    mag = Q8_M[c & 0x7F] * scale
    return np.where(c & 0x80 != 0, -mag, mag)


def store_q8(x, seed: int, t: int, tensor_index: int, slot: int,
             unsigned: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """Quantizes one slot of one tensor block by block; returns the dequantized f32 values
    (what the next step loads), the codes of every block (concatenated) and the min margin."""
    x32 = np.asarray(x).astype(np.float32)
    bits = q8_bits(seed, t, tensor_index, slot, x32.size)
    out = np.empty(x32.size, np.float32)
    codes = []
    margin = math.inf
    for b0 in range(0, x32.size, Q8_BLOCK):
        blk = x32[b0:b0 + Q8_BLOCK]
        scale, c, mg = q8_quantize_block(blk, unsigned, bits[b0:b0 + Q8_BLOCK])
        out[b0:b0 + blk.size] = q8_dequantize_block(scale, c, unsigned, blk.size)
        codes.append(c)
        margin = min(margin, mg)
    return out, np.concatenate(codes), margin


def q8_self_check() -> None:
    """Spec facts the model must satisfy: exact round trips of table values, the unsigned
    floor, the non-finite and all-zero rules, and E[stored] = x."""
    bits = np.arange(Q8_BLOCK, dtype=np.uint64) * np.uint64(65537)
    for unsigned, table in ((True, Q8_V), (False, Q8_M)):
        x = table[np.arange(Q8_BLOCK) % len(table)] * np.float32(4.0)
        x = x if unsigned else np.where(np.arange(Q8_BLOCK) % 2 == 1, -x, x)
        s, c, _ = q8_quantize_block(x, unsigned, bits)
        assert s == np.max(np.abs(x)) and np.array_equal(q8_dequantize_block(s, c, unsigned, x.size), x)
        assert np.all(c[x == 0] == 0)
        s, c, _ = q8_quantize_block(np.float32([1.0, -2.0, np.inf]), unsigned, bits[:3])
        assert np.isnan(s) and not c.any()
        s, c, _ = q8_quantize_block(np.float32([0.0, -0.0]), unsigned, bits[:2])
        assert s == 0 and not c.any()
    s, c, _ = q8_quantize_block(np.float32([1.0, 1e-12]), True, np.zeros(2, np.uint64) + np.uint64(2**24 - 1))
    assert c[1] == 1, "unsigned floor"
    x = np.float32([1.0, 0.3, -0.7, 1e-6, -4e-6])
    for unsigned in (True, False):
        xs = np.abs(x) if unsigned else x
        mean = np.mean([store_q8(xs, 1, t, 0, 0, unsigned)[0] for t in range(1, 4001)], axis=0)
        assert np.allclose(mean, xs, rtol=0.01, atol=3e-7), (unsigned, mean)


def store_state(cfg: dict, x, t: int, tensor_index: int, slot: int,
                name: str) -> tuple[np.ndarray, tuple | None]:
    """The f32 values the next step loads, and for q8 (codes, margin) (None for other dtypes)."""
    dt = cfg.get("state_dtype", "f32")
    if dt == "q8":
        unsigned = name in Q8_UNSIGNED_SLOTS
        x, codes, margin = store_q8(x, int(cfg.get("seed", 0)), t, tensor_index, slot, unsigned)
        return x, (codes, margin)
    return round_rne(dt, x), None


# ---------------------------------------------------------------------------
# NumPy reference implementations (math dtype float64; float32 for self-check)
# ---------------------------------------------------------------------------

SECOND_MOMENT_RULES = {"adam", "adamw", "adam-srf", "adamw-srf", "homeadam", "homeadamw",
                       "homeadam-layer", "homeadamw-layer", "homeadam-ew", "homeadamw-ew",
                       "swats", "miadam"}
HOME_RULES = {"homeadam", "homeadamw", "homeadam-layer", "homeadamw-layer", "homeadam-ew",
              "homeadamw-ew"}


def state_names(cfg: dict) -> list[str]:
    r = cfg["rule"]
    if r in ("sgd", "sgdm"):
        return ["b"] if cfg.get("momentum", 0.0) != 0.0 else []
    if r == "adabelief":
        return ["m", "s"] + (["s_max"] if cfg.get("amsgrad", False) else [])
    if r == "swats":
        return ["m", "v", "b", "lambda"]
    if r == "miadam":
        return ["m", "v", "b"]
    if r == "lion":
        return ["m"]
    return ["m", "v"]


N_BUCKETS = 128


def f32_bucket(x: float) -> int | None:
    """bucket(x) = min(bits(f32 x) >> 23, 127) for x >= 0; None for NaN (not counted).
    Bucket 0 holds 0 and every x < 2^-126, bucket b in 1..=126 holds [2^(b-127), 2^(b-126)),
    bucket 127 holds x >= 1."""
    x32 = np.float32(x)
    if np.isnan(x32):
        return None
    assert not np.signbit(x32), x
    return min(int(x32.view(np.uint32)) >> 23, N_BUCKETS - 1)


class TauCalibration:
    """Calibrated tau {"home_share": q, "every": N}: a log2-bucket histogram H of the decision
    values; at the calibration steps t = 1, 1 + N, 1 + 2N, ... tau = 2^(k* - 127) with k* the
    largest k in 1..=127 such that below(k) = sum_{b<k} H[b] <= q * n (n = sum H; q * n in f64),
    or 1 if none; tau is unchanged when n = 0. H is cleared after calibrating."""

    def __init__(self, spec: dict):
        self.q = float(spec["home_share"])
        self.every = int(spec["every"])
        assert 0.0 < self.q < 1.0 and self.every >= 1, spec
        self.hist = np.zeros(N_BUCKETS, np.int64)
        self.tau: float | None = None
        self.bucketed: list[float] = []  # every counted value (for the bucket-edge check)
        self.log: list[dict] = []  # one entry per calibration step

    def is_step(self, t: int) -> bool:
        return (t - 1) % self.every == 0

    def add(self, values) -> None:
        for x in np.asarray(values, np.float64).ravel().tolist():
            b = f32_bucket(x)
            if b is not None:
                self.hist[b] += 1
                self.bucketed.append(x)

    def calibrate(self, t: int) -> float:
        n = int(self.hist.sum())
        if n > 0:
            qn = self.q * n
            below = np.concatenate(([0], np.cumsum(self.hist)))  # below[k] = sum_{b<k} H[b]
            ks = [k for k in range(1, N_BUCKETS) if below[k] <= qn]
            k_star = max(ks) if ks else 1
            self.tau = 2.0 ** (k_star - 127)
            gap = min(abs(float(below[k]) - qn) for k in range(1, N_BUCKETS))
            self.log.append({"t": t, "n": n, "qn": qn, "k": k_star, "tau": self.tau, "gap": gap})
        self.hist[:] = 0
        assert self.tau is not None, "no value counted at the first calibration"
        return self.tau


def reference(cfg: dict, theta0: dict, raw_grads: dict, math_dtype=np.float64) -> dict:
    """Replays every gradient row; returns params, states, telemetry and extras."""
    M = math_dtype
    rule = cfg["rule"]
    T = raw_grads[NAMES[0]].shape[0]
    gd = cfg.get("grad_dtype", "f32")
    inv_scale = 1.0 / float(cfg.get("grad_scale", 1.0))
    lr = float(cfg.get("lr", 0.0))
    b1, b2 = cfg.get("betas", [0.9, 0.999])
    eps = float(cfg.get("eps", 0.0))
    wd = float(cfg.get("weight_decay", 0.0))
    params = {k: theta0[k].astype(M) for k in NAMES}
    st = {k: {s: (np.zeros(1, M) if s == "lambda" else np.zeros(theta0[k].size, M)) for s in state_names(cfg)}
          for k in NAMES}
    if cfg.get("state_dtype") == "q8" and rule == "swats":
        raise NotImplementedError("q8 state of swats (its per-tensor lambda) is not modelled")
    has_b = {k: False for k in NAMES}  # torch SGD: first buffer = d
    t = 0
    tele = []
    extra = {"swats_switch_step": None, "swats_switch_lr": None, "swats_gap": [],
             "home_margin": [], "srf_rows": 0, "home_rows": 0,
             "layer_decisions": [], "nsma": [], "q8_codes": [],
             "q8_margin": math.inf, "lion_margin": math.inf}
    phase, cur_lr = "adam", lr  # swats
    # HomeAdam extensions: rho over the active elements (v_t > 0), home learning rate
    # eta_h = home_scale * eta, calibrated tau
    over_active = cfg.get("rho_over", "all") == "active"
    home_scale = float(cfg["home_lr"]) / lr if "home_lr" in cfg else 1.0
    tau_cfg = cfg.get("tau", 0.0)
    cal = TauCalibration(tau_cfg) if isinstance(tau_cfg, dict) else None
    tau = None if cal is not None else float(tau_cfg)
    extra["calibration"] = cal

    def entry(step, rho, rho_act, home, skipped):
        e = {"step": step, "rho": rho}
        if over_active:
            e["rho_active"] = rho_act
        if cal is not None:
            e["tau"] = None if skipped else tau
        e.update(home_elements=home, skipped=skipped)
        return e

    for row in range(T):
        raw = {k: round_rne(gd, raw_grads[k][row]) for k in NAMES}
        if not all(np.all(np.isfinite(raw[k])) for k in NAMES):
            tele.append(entry(t, None, None, 0, True))
            continue
        t += 1
        g = {k: raw[k].astype(M) * M(inv_scale) for k in NAMES}
        bc1 = 1.0 - b1 ** t
        bc2 = 1.0 - b2 ** t
        rho = rho_act = None
        home = 0
        new = {}
        if rule in ("sgd", "sgdm"):
            mu = float(cfg.get("momentum", 0.0))
            damp = float(cfg.get("dampening", 0.0))
            for k in NAMES:
                d = g[k] + wd * params[k] if wd != 0 else g[k]
                if mu != 0:
                    if not has_b[k]:
                        buf = d.copy()
                        has_b[k] = True
                    else:
                        buf = mu * st[k]["b"] + (1 - damp) * d
                    st[k]["b"] = buf
                    d = d + mu * buf if cfg.get("nesterov", False) else buf
                new[k] = params[k] - lr * d
        elif rule in ("adam", "adamw"):
            vmin = math.inf
            for k in NAMES:
                p = params[k]
                gk = g[k]
                if rule == "adam" and wd != 0:
                    gk = gk + wd * p
                if rule == "adamw":
                    p = p * (1 - lr * wd)
                m = b1 * st[k]["m"] + (1 - b1) * gk
                v = b2 * st[k]["v"] + (1 - b2) * gk * gk
                st[k]["m"], st[k]["v"] = m, v
                vmin = min(vmin, float(np.min(v / M(bc2))))
                denom = np.sqrt(v) / M(math.sqrt(bc2)) + eps
                new[k] = p - (lr / bc1) * m / denom
            rho = vmin
        elif rule in ("adam-srf", "adamw-srf") or rule in HOME_RULES:
            lam = wd if rule in ("adamw-srf", "homeadamw", "homeadamw-layer", "homeadamw-ew") else 0.0
            mh, vh, act = {}, {}, {}
            for k in NAMES:
                m = b1 * st[k]["m"] + (1 - b1) * g[k]
                v = b2 * st[k]["v"] + (1 - b2) * g[k] * g[k]
                st[k]["m"], st[k]["v"] = m, v
                mh[k] = m / M(bc1)
                vh[k] = v / M(bc2)
                act[k] = v > 0  # a non-zero gradient at some step so far (NaN excluded)
            rho = min(float(np.min(vh[k])) for k in NAMES)
            # rho_active: min of v_hat over the active elements (per tensor), 0 when there is none
            rho_act_k = {k: float(np.min(vh[k][act[k]])) if np.any(act[k]) else 0.0 for k in NAMES}
            rho_act = min((rho_act_k[k] for k in NAMES if np.any(act[k])), default=0.0)
            calibrating = cal is not None and cal.is_step(t)
            if rule in ("adam-srf", "adamw-srf"):
                srf = {k: np.ones(vh[k].shape, bool) for k in NAMES}
            elif rule in ("homeadam", "homeadamw"):
                d = rho_act if over_active else rho
                if cal is not None:
                    cal.add([d])
                    if calibrating:
                        tau = cal.calibrate(t)
                ok = d >= tau
                srf = {k: np.full(vh[k].shape, ok) for k in NAMES}
                extra["home_margin"].append(d / tau)
                extra["srf_rows" if ok else "home_rows"] += 1
            elif rule in ("homeadam-layer", "homeadamw-layer"):
                dk = {k: rho_act_k[k] if over_active else float(np.min(vh[k])) for k in NAMES}
                if cal is not None:
                    cal.add([dk[k] for k in NAMES])
                    if calibrating:
                        tau = cal.calibrate(t)
                srf = {}
                dec = []
                for k in NAMES:
                    mn = dk[k]
                    srf[k] = np.full(vh[k].shape, mn >= tau)
                    extra["home_margin"].append(mn / tau)
                    dec.append("srf" if mn >= tau else "home")
                extra["layer_decisions"].append(dec)
            else:  # ew
                if calibrating:
                    cal.add(np.concatenate([vh[k][act[k]].astype(np.float64) for k in NAMES]))
                    tau = cal.calibrate(t)
                srf = {k: vh[k] >= tau for k in NAMES}
                for k in NAMES:
                    extra["home_margin"].extend((vh[k].astype(np.float64) / tau).tolist())
                if calibrating:
                    n_act = sum(int(np.sum(act[k])) for k in NAMES)
                    n_home = sum(int(np.sum(act[k] & ~srf[k])) for k in NAMES)
                    cal.log[-1]["home_active_share"] = n_home / n_act
            for k in NAMES:
                p = params[k]
                # home: theta (1 - eta lambda) - eta_h m_hat, with eta_h = home_scale * eta
                upd = np.where(srf[k], mh[k] / (vh[k] + eps), M(home_scale) * mh[k])
                new[k] = p - lr * (upd + lam * p)
                home += int(np.sum(~srf[k]))
        elif rule == "adabelief":
            decouple = cfg.get("weight_decouple", True)
            fixed = cfg.get("fixed_decay", False)
            rectify = cfg.get("rectify", True)
            ams = cfg.get("amsgrad", False)
            n_max = 2.0 / (1.0 - b2) - 1.0
            b2t = b2 ** t
            n_sma = n_max - 2.0 * t * b2t / (1.0 - b2t)
            extra["nsma"].append(n_sma)
            if n_sma >= 5:
                step_size = math.sqrt((1 - b2t) * (n_sma - 4) / (n_max - 4) * (n_sma - 2) / n_sma
                                      * n_max / (n_max - 2)) / (1 - b1 ** t)
            else:
                step_size = 1.0 / (1 - b1 ** t)  # degenerated_to_sgd=True
            for k in NAMES:
                p = params[k]
                gk = g[k]
                if decouple:
                    p = p * (1.0 - (wd if fixed else lr * wd))
                elif wd != 0:
                    gk = gk + wd * p
                m = b1 * st[k]["m"] + (1 - b1) * gk
                r = gk - m
                s = b2 * st[k]["s"] + (1 - b2) * r * r
                s = s + eps  # the peer adds eps to exp_avg_var in place every step
                st[k]["m"], st[k]["s"] = m, s
                if ams:
                    smax = np.maximum(st[k]["s_max"], s)
                    st[k]["s_max"] = smax
                    denom = np.sqrt(smax) / M(math.sqrt(bc2)) + eps
                else:
                    denom = np.sqrt(s) / M(math.sqrt(bc2)) + eps
                if not rectify:
                    new[k] = p - (lr / bc1) * m / denom
                elif n_sma >= 5:
                    new[k] = p - (step_size * lr) * m / (np.sqrt(s) + eps)
                else:
                    new[k] = p - (step_size * lr) * m
        elif rule == "swats":
            nesterov = cfg.get("nesterov", False)
            step_size = cur_lr * math.sqrt(bc2) / bc1
            next_lr = None
            vmin = math.inf
            gaps = []
            for k in NAMES:
                p = params[k]
                gk = g[k] + wd * p if wd > 0 else g[k]
                if phase == "sgd":
                    buf = b1 * st[k]["b"] + gk
                    st[k]["b"] = buf
                    upd = (1.0 - b1) * buf
                    if nesterov:
                        upd = upd + b1 * buf
                    new[k] = p - cur_lr * upd
                    continue
                m = st[k]["m"] + (1 - b1) * (gk - st[k]["m"])
                v = b2 * st[k]["v"] + (1 - b2) * gk * gk
                st[k]["m"], st[k]["v"] = m, v
                vmin = min(vmin, float(np.min(v / M(bc2))))
                denom = np.sqrt(v + 1e-15) + eps
                perturb = -M(step_size) * (m / denom)
                new[k] = p + perturb
                pg = np.dot(perturb, gk)
                if pg != 0:
                    scaling = np.dot(perturb, perturb) / (-pg)
                    lamb = st[k]["lambda"] + (1 - b2) * (scaling - st[k]["lambda"])
                    st[k]["lambda"] = lamb
                    corr = float(lamb[0] / M(bc2))
                    scaling = float(scaling)
                    gap = abs(corr - scaling) / (1e-8 + eps * abs(scaling))
                    gaps.append((k, gap, corr > 0, (scaling - corr) / scaling))
                    if t > 1 and corr > 0.0 and gap <= 1.0:
                        next_lr = corr
            if phase == "adam":
                rho = vmin
                extra["swats_gap"].append((t, gaps))
            if next_lr is not None:
                phase, cur_lr = "sgd", next_lr
                extra["swats_switch_step"] = t
                extra["swats_switch_lr"] = next_lr
        elif rule == "miadam":
            kappa = float(cfg["kappa"])
            sw = int(cfg["switch_step"])
            vmin = math.inf
            for k in NAMES:
                p = params[k]
                gk = g[k] + wd * p if wd != 0 else g[k]
                m = b1 * st[k]["m"] + (1 - b1) * gk
                v = b2 * st[k]["v"] + (1 - b2) * gk * gk
                st[k]["m"], st[k]["v"] = m, v
                vmin = min(vmin, float(np.min(v / M(bc2))))
                denom = np.sqrt(v) / M(math.sqrt(bc2)) + eps
                if t <= sw:
                    buf = kappa * st[k]["b"] + m
                    st[k]["b"] = buf
                    new[k] = p - (lr * lr / bc1) * buf / denom
                else:
                    new[k] = p - (lr / bc1) * m / denom
            rho = vmin
        elif rule == "lion":
            for k in NAMES:
                p = params[k] * (1 - lr * wd)
                mom, grad = b1 * st[k]["m"], (1 - b1) * g[k]
                c = mom + grad
                scale = np.abs(mom) + np.abs(grad)
                live = scale > 0
                if np.any(live):
                    extra["lion_margin"] = min(extra["lion_margin"],
                                               float(np.min(np.abs(c[live]) / scale[live])))
                st[k]["m"] = b2 * st[k]["m"] + (1 - b2) * g[k]
                new[k] = p - lr * np.sign(c)
        else:
            raise ValueError(rule)
        # storage rounding (q8: the codes of every tensor and slot, and the decision margin)
        codes = {}
        for i, k in enumerate(NAMES):
            params[k] = store_param(cfg, new[k], t, i).astype(M)
            for slot, s in enumerate(st[k]):
                x, q8 = store_state(cfg, st[k][s], t, i, slot, s)
                st[k][s] = x.astype(M)
                if q8 is not None:
                    codes[k, s] = q8[0]
                    extra["q8_margin"] = min(extra["q8_margin"], q8[1])
        extra["q8_codes"].append(codes)
        tele.append(entry(t, rho, rho_act, home, False))
    out = {"params": {k: params[k].astype(np.float32) for k in NAMES},
           "states": {k: {s: st[k][s].astype(np.float32) for s in st[k]} for k in NAMES},
           "telemetry": tele, "extra": extra, "t": t}
    return out


# ---------------------------------------------------------------------------
# peers
# ---------------------------------------------------------------------------


def versions() -> dict:
    import importlib.metadata as md
    v = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        import torch
        v["torch"] = torch.__version__
    except ImportError:
        v["torch"] = None
    for pkg in ("adabelief-pytorch", "pytorch-optimizer", "lion-pytorch"):
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            v[pkg] = None
    return v


def peer_name(peer: str | None, V: dict) -> str:
    if peer is None:
        return "numpy float64 reference (generate.py)"
    tv = V["torch"]
    return {
        "sgd": f"torch.optim.SGD (torch {tv})",
        "adam": f"torch.optim.Adam (torch {tv})",
        "adamw": f"torch.optim.AdamW (torch {tv})",
        "adabelief": f"adabelief_pytorch.AdaBelief (adabelief-pytorch {V['adabelief-pytorch']}, torch {tv})",
        "swats": f"pytorch_optimizer.SWATS (pytorch-optimizer {V['pytorch-optimizer']}, torch {tv}, CPU, foreach=False)",
        "lion": f"lion_pytorch.Lion (lion-pytorch {V['lion-pytorch']}, torch {tv})",
    }[peer]


def run_peer(peer: str, cfg: dict, theta0: dict, raw_grads: dict) -> dict:
    import torch
    T = raw_grads[NAMES[0]].shape[0]
    inv = np.float32(1.0 / float(cfg.get("grad_scale", 1.0)))
    ps = [torch.nn.Parameter(torch.tensor(theta0[k].astype(np.float32))) for k in NAMES]
    b = tuple(cfg.get("betas", [0.9, 0.999]))
    if peer == "sgd":
        opt = torch.optim.SGD(ps, lr=cfg["lr"], momentum=cfg["momentum"], dampening=cfg["dampening"],
                              nesterov=cfg["nesterov"], weight_decay=cfg["weight_decay"], foreach=False)
    elif peer == "adam":
        opt = torch.optim.Adam(ps, lr=cfg["lr"], betas=b, eps=cfg["eps"],
                               weight_decay=cfg["weight_decay"], foreach=False)
    elif peer == "adamw":
        opt = torch.optim.AdamW(ps, lr=cfg["lr"], betas=b, eps=cfg["eps"],
                                weight_decay=cfg["weight_decay"], foreach=False)
    elif peer == "adabelief":
        from adabelief_pytorch import AdaBelief
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its settings
            opt = AdaBelief(ps, lr=cfg["lr"], betas=b, eps=cfg["eps"], weight_decay=cfg["weight_decay"],
                            amsgrad=cfg["amsgrad"], weight_decouple=cfg["weight_decouple"],
                            fixed_decay=cfg["fixed_decay"], rectify=cfg["rectify"],
                            degenerated_to_sgd=True, print_change_log=False)
    elif peer == "swats":
        from pytorch_optimizer import SWATS
        opt = SWATS(ps, lr=cfg["lr"], betas=b, weight_decay=cfg["weight_decay"], nesterov=cfg["nesterov"],
                    eps=cfg["eps"], foreach=False)
    elif peer == "lion":
        from lion_pytorch import Lion
        opt = Lion(ps, lr=cfg["lr"], betas=b, weight_decay=cfg["weight_decay"])
    else:
        raise ValueError(peer)
    switch = None
    t = 0
    for row in range(T):
        rows = [raw_grads[k][row] for k in NAMES]
        if not all(np.all(np.isfinite(r)) for r in rows):
            continue  # skipped step: do not call step()
        t += 1
        for p, r in zip(ps, rows):
            p.grad = torch.tensor((r.astype(np.float32) * inv).astype(np.float32))
        opt.step()
        if peer == "swats" and switch is None and opt.param_groups[0]["phase"] == "sgd":
            switch = (t, float(opt.param_groups[0]["lr"]))
    params = {k: p.detach().numpy().astype(np.float32).copy() for k, p in zip(NAMES, ps)}
    states = {}
    key = {"sgd": {"b": "momentum_buffer"},
           "adam": {"m": "exp_avg", "v": "exp_avg_sq"},
           "adamw": {"m": "exp_avg", "v": "exp_avg_sq"},
           "adabelief": {"m": "exp_avg", "s": "exp_avg_var", "s_max": "max_exp_avg_var"},
           "swats": {"m": "exp_avg", "v": "exp_avg_sq", "b": "momentum_buffer", "lambda": "exp_avg2"},
           "lion": {"m": "exp_avg"}}[peer]
    for k, p in zip(NAMES, ps):
        s = opt.state[p]
        states[k] = {}
        for name in state_names(cfg):
            tk = key[name]
            if tk in s:
                states[k][name] = s[tk].detach().numpy().astype(np.float32).reshape(-1).copy()
            elif name == "b" and peer == "swats":
                states[k][name] = np.zeros(p.numel(), np.float32)
            else:
                raise KeyError(f"peer state {tk} missing")
    return {"params": params, "states": states, "switch": switch}


# ---------------------------------------------------------------------------
# gradient designs
# ---------------------------------------------------------------------------


def generic_grads(seed: int, T: int, scales=(1.0, 0.1, 3.0), big: bool = False,
                  sizes=None, flips: bool = False) -> tuple[dict, dict]:
    """theta0 ~ N(0, 0.5) (big: +-[2, 6], where bf16/f16 rounding swallows small updates);
    sizes: the tensors' element counts (default TENSORS');
    g = s_k * w(t) * (c + 0.5 z), |c| in [1, 1.5], z clipped to [-1.5, 1.5], so g keeps
    the sign of c and |g| >= 0.25 s_k w(t); flips: c changes sign every 7 steps from a random
    phase per element, so that a momentum crosses zero (Lion's sign(c) changes)."""
    rng = np.random.default_rng(seed)
    theta0, grads = {}, {}
    for k, d, s in zip(NAMES, sizes or [d for _, d in TENSORS], scales):
        theta0[k] = (0.5 * rng.standard_normal(d)).astype(np.float32)
        if big:
            theta0[k] = (np.sign(theta0[k]) * (2.0 + 4.0 * rng.random(d))).astype(np.float32)
        c = rng.choice([-1.0, 1.0], d) * (1.0 + 0.5 * rng.random(d))
        z = np.clip(rng.standard_normal((T, d)), -1.5, 1.5)
        if flips:
            phase = rng.integers(0, 7, d)
            c = c[None, :] * np.where((np.arange(T)[:, None] + phase[None, :]) // 7 % 2 == 0, 1.0, -1.0)
        w = 1.0 + 0.5 * np.sin(2 * np.pi * np.arange(1, T + 1) / 25.0)
        grads[k] = (s * w[:, None] * (c + 0.5 * z)).astype(np.float32)
    return theta0, grads


def home_grads(seed: int, T: int, small: float, large: float, big: bool = False,
               dead=(), sizes=None) -> tuple[dict, dict]:
    """Gradients that make HomeAdam switch branches (rows are 1-based steps t):
    layer0.weight: |g| ~ large; elements 0..3 exactly 0 for t <= 10, and a few
                   scattered exact zeros later;
    layer0.bias:   |g| ~ small for t <= 30, ~ large afterwards;
    layer1.weight: elements 0..15 ~ small for t < 60, ~ large from t = 60; the
                   rest ~ large always (with some exact zeros);
    dead:          (tensor, index) elements that are exactly 0 at every row (never active)."""
    theta0, base = generic_grads(seed, T, scales=(1.0, 1.0, 1.0), big=big, sizes=sizes)
    rng = np.random.default_rng(seed + 1)
    tt = np.arange(1, T + 1)[:, None]
    g0 = large * base["layer0.weight"].astype(np.float64)
    g0[:10, :4] = 0.0
    zmask = (rng.random(g0.shape) < 0.03) & (tt > 10)
    g0[zmask] = 0.0
    g1 = base["layer0.bias"].astype(np.float64) * np.where(tt <= 30, small, large)
    g2 = base["layer1.weight"].astype(np.float64)
    col = np.arange(g2.shape[1])[None, :]
    g2 = g2 * np.where((col < 16) & (tt < 60), small, large)
    zmask = (rng.random(g2.shape) < 0.03) & (col >= 16) & (tt > 5)
    g2[zmask] = 0.0
    grads = {"layer0.weight": g0.astype(np.float32), "layer0.bias": g1.astype(np.float32),
             "layer1.weight": g2.astype(np.float32)}
    for k, j in dead:
        grads[k][:, j] = 0.0
    return theta0, grads


# Gradient of the row after a dip, and of a constant element's last "low" row: v_hat then stays
# >= (1 - beta2) beta2^99 JUMP^2 / (1 - beta2^100) > 0.15 (far above every tau) for the whole run.
JUMP = 4.0


def calibrated_grads(seed: int, T: int, beta2: float, plan: dict, big: bool = False) -> tuple[dict, dict]:
    """Gradients whose decision values (rho, or v_hat per element) sit at chosen levels, all
    half an octave away from any power of two (rows are 1-based steps t; beta2 as configured).
    Every element not named in the plan is generic (scale 1): |g| >= 0.125, so v_hat, a weighted
    average of g^2, stays >= 2^-6.
    plan["dead"]:       (tensor, j): exactly 0 at every row (never active).
    plan["zero_until"]: (tensor, r): the whole tensor is 0 for t <= r (no active element).
    plan["const"]:      (tensor, j, level, start, jump): g = +-sqrt(level), alternating sign, from
                        row start (0 before); v_hat = level exactly when start = 1, and
                        level (1 - beta2^(t-start+1)) / (1 - beta2^t) (rising) otherwise. At row
                        jump (if not None) g = JUMP, generic afterwards.
    plan["steady"]:     (tensor, j, level): g = sqrt(level) with a fixed sign at every row, so
                        v_hat = level and m_hat = g exactly (a steady push that the srf step
                        would amplify to eta / g; only the home step moves it sensibly).
    plan["dips"]:       (tensor, j, r, level): 0 before row r (a fresh element: an unseen
                        embedding row); at row r the gradient a with (1 - beta2) a^2 / bc2_r =
                        level, so v_hat_r = level; g = JUMP at row r + 1, generic afterwards."""
    theta0, grads = generic_grads(seed, T, scales=(1.0, 1.0, 1.0), big=big)
    g = {k: grads[k].astype(np.float64) for k in NAMES}
    rng = np.random.default_rng(seed + 1)
    tt = np.arange(1, T + 1)
    for k, r in plan.get("zero_until", []):
        g[k][:r] = 0.0
    for k, j in plan.get("dead", []):
        g[k][:, j] = 0.0
    for k, j, level, start, jump in plan.get("const", []):
        sign = rng.choice([-1.0, 1.0])
        col = math.sqrt(level) * sign * np.where(tt % 2 == 0, 1.0, -1.0)
        col[:start - 1] = 0.0
        if jump is not None:
            col[jump - 1] = JUMP * sign
            col[jump:] = g[k][jump:, j]
        g[k][:, j] = col
    for k, j, level in plan.get("steady", []):
        g[k][:, j] = rng.choice([-1.0, 1.0]) * math.sqrt(level)
    for k, j, r, level in plan.get("dips", []):
        sign = rng.choice([-1.0, 1.0])
        g[k][:r - 1, j] = 0.0
        g[k][r - 1, j] = sign * math.sqrt(level * (1.0 - beta2 ** r) / (1.0 - beta2))
        if r < T:
            g[k][r, j] = JUMP * sign
    return theta0, {k: g[k].astype(np.float32) for k in NAMES}


def swats_switch_grads(cfg: dict, seed: int, T: int, K: int) -> tuple[dict, dict]:
    """layer0.bias gets g_t = c_t * u (u = +-1 fixed), with c_t growing 5% per step for t < K;
    c_K is solved (float64 bisection) so that the SWATS scaling of that tensor at step K
    equals the bias-corrected average of the previous steps: |corrected - scaling| = 0 up
    to rounding at K, while every earlier step is kept far from eligibility (checked).
    The other tensors get noisy gradients whose magnitude grows 8% per step, so
    their scaling keeps falling below its running average (never eligible)."""
    rng = np.random.default_rng(seed)
    theta0, grads = {}, {}
    tt = np.arange(1, T + 1)
    trend = np.exp(0.08 * np.minimum(tt, K))[:, None]
    for k, d in TENSORS:
        theta0[k] = (0.5 * rng.standard_normal(d)).astype(np.float32)
        u = rng.choice([-1.0, 1.0], d)
        if k == "layer0.bias":
            c = np.exp(0.05 * tt)
            c[K:] = 1.0 + 0.3 * rng.random(T - K)  # after the switch: anything
            g = c[:, None] * u[None, :]
        else:
            z = np.clip(rng.standard_normal((T, d)), -1.5, 1.5)
            g = trend * (u[None, :] * (1.0 + 0.5 * rng.random(d))[None, :] + 0.15 * z)
        grads[k] = g.astype(np.float32)

    def signed(cK: float) -> float:
        """(scaling - corrected) / scaling of layer0.bias at step K, float64."""
        gr = {k: grads[k][:K].copy() for k in NAMES}
        gr["layer0.bias"][K - 1] = (np.float32(cK) * np.sign(grads["layer0.bias"][0])).astype(np.float32)
        tK, gaps = reference(cfg, theta0, gr)["extra"]["swats_gap"][-1]
        assert tK == K
        return [sg for kk, _, _, sg in gaps if kk == "layer0.bias"][0]

    lo, hi = 1e-3, 1e3
    flo, fhi = signed(lo), signed(hi)
    assert flo * fhi < 0, (flo, fhi)
    for _ in range(200):
        if hi / lo - 1.0 < 1e-14:
            break
        mid = math.sqrt(lo * hi)
        fm = signed(mid)
        if fm == 0:
            lo = hi = mid
            break
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi, fhi = mid, fm
    # pick the f32 value of c_K closest to the root
    cands = np.float32(lo) + np.arange(-4, 5) * np.spacing(np.float32(lo))
    best = min(cands, key=lambda c: abs(signed(float(c))))
    grads["layer0.bias"][K - 1] = (np.float32(best) * np.sign(grads["layer0.bias"][0])).astype(np.float32)
    return theta0, grads


# ---------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------


def base_cfg(rule: str, **kw) -> dict:
    cfg = {"rule": rule}
    cfg.update(kw)
    return cfg


def storage(param="f32", state="f32", grad="f32", rounding="nearest", seed=None, grad_scale=1.0,
            allow_f16_state=None) -> dict:
    d = {"param_dtype": param, "grad_dtype": grad, "state_dtype": state, "rounding": rounding,
         "grad_scale": grad_scale}
    if seed is not None:
        d["seed"] = seed
    if allow_f16_state is not None:
        d["allow_f16_state"] = allow_f16_state
    return d


ADAM_H = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8}
SRF_H = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8}
HOME_TINY = {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0, "tau": 1e-11}
HOME_MOD = {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 1e-2, "tau": 1e-4}
SGDM_H = {"lr": 1e-2, "momentum": 0.9, "dampening": 0.0, "nesterov": False, "weight_decay": 5e-4}
ADABELIEF_AMS = {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-16, "weight_decay": 1e-2,
                 "weight_decouple": True, "fixed_decay": False, "rectify": False, "amsgrad": True}
LION_H = {"lr": 1e-3, "betas": [0.9, 0.99]}
MIADAM_H = {"lr": 0.05, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 5e-4, "kappa": 0.98,
            "switch_step": 50}
# q8 cases: layer0.weight spans blocks 256 + 256 + 88 (a partial last block); with
# Q8_SIZES_FULL, layer1.weight is exactly one full block
Q8_SIZES = (7, 600, 33)
Q8_SIZES_FULL = (7, 600, 256)


# Calibrated-tau designs (see calibrated_grads). Levels are 2^(e + 1/2): mid-bucket, a factor
# sqrt(2) from every power of two, so no f32 rounding moves a value across a bucket edge or tau.
L0B, L0W, L1W = NAMES
NEVER_ACTIVE = [(L1W, j) for j in (30, 31, 32)]


def global_calibrated_plan(seed: int) -> dict:
    """rho_active is the floor layer0.bias[0] (2^-9.5), except at a dip row, where a fresh
    layer0.weight element sets it to D1 = 2^-12.5 or D2 = 2^-14.5. Windows of N = 10 steps with
    at most 2 dips calibrate tau = 2^-10 (the floor's bucket: every dip goes home); with >= 4
    dips the 3rd and 4th smallest values are dips, so tau = 2^-13 (only D2 goes home) or 2^-15
    (none). q n = 3, and no bucket edge splits the 3rd and 4th smallest (asserted)."""
    d1, d2 = 2.0 ** -12.5, 2.0 ** -14.5
    windows = [[d1] * 4, [d2, d1], [d1, d1], [d2] * 5, [d1, d2], [d1] * 4 + [d2], [d2],
               [d1, d1, d2, d2], [d1, d2], [d1, d2]]
    rng = np.random.default_rng(seed + 2)
    dips = []
    for i, levels in enumerate(windows):
        rows = np.arange(2 + 10 * i, min(12 + 10 * i, 101))  # window i + 1: steps 2 + 10i ..= 11 + 10i
        for r, level in zip(sorted(rng.choice(rows, len(levels), replace=False)), rng.permutation(levels)):
            dips.append((L0W, len(dips), int(r), float(level)))
    return {"dead": NEVER_ACTIVE, "const": [(L0B, 0, 2.0 ** -9.5, 1, None)], "dips": dips}


def layer_calibrated_plan() -> dict:
    """Per-tensor rho_active (q = 0.25, N = 20: q n = 15 of the 60 values of a window):
    layer0.bias: no active element for t <= 3 (rho_active = 0, so tau_1 = 2^-126 by the k* = 1
                 rule), generic afterwards;
    layer0.weight: floor 2^-9.5 until its jump at t = 55; dips;
    layer1.weight: floor 2^-11.5 until its jump at t = 30, a second floor 2^-8.5 always, and an
                 element first active at t = 65 with g^2 = 2^-7, whose v_hat rises from 2^-13
                 and stays below tau = 2^-9 up to t = 80 (the whole tensor goes home);
                 3 never-active elements.
    The windows calibrate tau = 2^-12, 2^-10, 2^-9, 2^-10 at t = 21, 41, 61, 81."""
    c = 2.0 ** -13.5
    return {"zero_until": [(L0B, 3)], "dead": NEVER_ACTIVE,
            "const": [(L0W, 0, 2.0 ** -9.5, 1, 55), (L1W, 0, 2.0 ** -11.5, 1, 30),
                      (L1W, 1, 2.0 ** -8.5, 1, None), (L1W, 2, 2.0 ** -7, 65, None)],
            "dips": [(L0W, 1, 8, c), (L1W, 3, 15, c), (L0W, 2, 24, c), (L1W, 4, 33, c), (L0W, 3, 38, c),
                     (L0W, 4, 45, 2.0 ** -11.5), (L0W, 5, 70, 2.0 ** -12.5), (L0W, 6, 86, 2.0 ** -10.5),
                     (L1W, 5, 93, 2.0 ** -10.5)]}


def ew_calibrated_plan() -> dict:
    """Element-wise (q = 0.2, N = 25: calibrations at t = 1, 26, 51, 76):
    A: layer1.weight[0..8]    2^-13.5, steady (always home: moved by eta_h m_hat = eta_h g);
    C: layer1.weight[8..22]   2^-9.5, jumps at t = 30, 32, ..., 56;
    B: layer0.weight[0..16]   2^-11.5, jumps at t = 5..=20;
    D: layer0.weight[16..29]  2^-7.5, always;
    F: layer0.weight[29..39]  fresh, dip 2^-16.5 at one of t = 2..=25;
    G: layer0.weight[39..52]  fresh, all at t = 76 with dip 2^-11.5 (a batch of unseen rows);
    never active: layer1.weight[30..33]; the rest generic.
    Active elements n = 78, 88, 88, 101 at the calibrations (q n never an integer); the
    (floor(q n) + 1)-th smallest v_hat lies in B, C, D, G: tau = 2^-12, 2^-10, 2^-8, 2^-12."""
    const = [(L1W, 8 + i, 2.0 ** -9.5, 1, 30 + 2 * i) for i in range(14)]
    const += [(L0W, i, 2.0 ** -11.5, 1, 5 + i) for i in range(16)]
    const += [(L0W, 16 + i, 2.0 ** -7.5, 1, None) for i in range(13)]
    dips = [(L0W, 29 + i, 2 + 2 * i + (i % 2), 2.0 ** -16.5) for i in range(10)]
    dips += [(L0W, 39 + i, 76, 2.0 ** -11.5) for i in range(13)]
    return {"dead": NEVER_ACTIVE, "steady": [(L1W, j, 2.0 ** -13.5) for j in range(8)], "const": const,
            "dips": dips}


def build_cases(T: int = 100) -> list[dict]:
    C = []

    def add(name, cfg, design, peer=None, nonfinite=(), seed=0):
        C.append({"name": name, "cfg": cfg, "design": design, "peer": peer, "nonfinite": list(nonfinite),
                  "seed": seed, "T": T})

    G = "generic"
    # --- f32, peers -------------------------------------------------------
    add("sgd_wd_f32", base_cfg("sgd", lr=1e-2, momentum=0.0, dampening=0.0, nesterov=False,
                               weight_decay=1e-2, **storage()), G, "sgd", seed=1)
    add("sgd_momentum_dampening_f32", base_cfg("sgd", lr=1e-2, momentum=0.9, dampening=0.1, nesterov=False,
                                               weight_decay=0.0, **storage()), G, "sgd", seed=2)
    add("sgdm_f32", base_cfg("sgdm", **SGDM_H, **storage()), G, "sgd", seed=3)
    add("sgdm_nesterov_f32", base_cfg("sgdm", lr=1e-2, momentum=0.9, dampening=0.0, nesterov=True,
                                      weight_decay=1e-3, **storage()), G, "sgd", seed=4)
    add("adam_f32", base_cfg("adam", **ADAM_H, weight_decay=0.0, **storage()), G, "adam", seed=5)
    add("adam_wd_f32", base_cfg("adam", **ADAM_H, weight_decay=1e-2, **storage()), G, "adam", seed=6)
    add("adamw_f32", base_cfg("adamw", **ADAM_H, weight_decay=1e-2, **storage()), G, "adamw", seed=7)
    add("adamw_nonfinite", base_cfg("adamw", **ADAM_H, weight_decay=1e-2, **storage()), G, "adamw",
        nonfinite=[(37, "layer1.weight", 5, float("nan")), (61, "layer0.bias", 2, float("inf"))], seed=8)
    add("adamw_grad_scale", base_cfg("adamw", **ADAM_H, weight_decay=1e-2, **storage(grad_scale=1024.0)),
        G, "adamw", seed=9)
    add("adabelief_f32", base_cfg("adabelief", lr=1e-3, betas=[0.9, 0.999], eps=1e-16, weight_decay=1e-2,
                                  weight_decouple=True, fixed_decay=False, rectify=True, amsgrad=False,
                                  **storage()), G, "adabelief", seed=10)
    add("adabelief_norectify_f32", base_cfg("adabelief", lr=1e-3, betas=[0.9, 0.999], eps=1e-16,
                                            weight_decay=0.0, weight_decouple=True, fixed_decay=False,
                                            rectify=False, amsgrad=False, **storage()), G, "adabelief", seed=11)
    add("adabelief_amsgrad_coupled_f32", base_cfg("adabelief", lr=1e-3, betas=[0.9, 0.999], eps=1e-16,
                                                  weight_decay=1e-2, weight_decouple=False, fixed_decay=False,
                                                  rectify=False, amsgrad=True, **storage()),
        G, "adabelief", seed=12)
    add("adabelief_fixed_decay_f32", base_cfg("adabelief", lr=1e-3, betas=[0.9, 0.999], eps=1e-16,
                                              weight_decay=1e-3, weight_decouple=True, fixed_decay=True,
                                              rectify=True, amsgrad=False, **storage()), G, "adabelief", seed=13)
    swats_sw = dict(lr=1e-3, betas=[0.9, 0.999], eps=1e-3, weight_decay=0.0)
    add("swats_switch_f32", base_cfg("swats", **swats_sw, nesterov=False, **storage()),
        ("swats_switch", 40), "swats", seed=14)
    add("swats_switch_nesterov_f32", base_cfg("swats", **swats_sw, nesterov=True, **storage()),
        ("swats_switch", 25), "swats", seed=15)
    add("swats_noswitch_f32", base_cfg("swats", lr=1e-3, betas=[0.9, 0.999], eps=1e-6, weight_decay=1e-2,
                                       nesterov=False, **storage()), G, "swats", seed=16)
    # --- f32, numpy reference ----------------------------------------------
    add("adam_srf_f32", base_cfg("adam-srf", **SRF_H, weight_decay=0.0, **storage()), G, seed=17)
    add("adamw_srf_f32", base_cfg("adamw-srf", **SRF_H, weight_decay=1e-2, **storage()), G, seed=18)
    for rule, nm, hh, sd in [("homeadam", "homeadam_f32", HOME_TINY, 19),
                             ("homeadam-layer", "homeadam_layer_f32", HOME_TINY, 20),
                             ("homeadam-ew", "homeadam_ew_f32", HOME_TINY, 21),
                             ("homeadamw", "homeadamw_f32", HOME_MOD, 22),
                             ("homeadamw-layer", "homeadamw_layer_f32", HOME_MOD, 23),
                             ("homeadamw-ew", "homeadamw_ew_f32", HOME_MOD, 24)]:
        add(nm, base_cfg(rule, **hh, **storage()), "home_tiny" if hh is HOME_TINY else "home_mod", seed=sd)
    add("miadam_f32", base_cfg("miadam", lr=0.05, betas=[0.9, 0.999], eps=1e-8, weight_decay=5e-4,
                               kappa=0.98, switch_step=50, **storage()), G, seed=25)
    flips = ("generic", {"flips": True})
    add("lion_f32", base_cfg("lion", **LION_H, weight_decay=0.0, **storage()), flips, "lion", seed=26)
    add("lion_wd_f32", base_cfg("lion", **LION_H, weight_decay=0.1, **storage()), flips, "lion", seed=27)
    # --- storage cases (numpy reference) -----------------------------------
    # Hyper-parameters / theta0 magnitudes are chosen so that the storage rounding
    # changes the result by more than the tolerance (checked in main()).
    adamw_s = dict(**ADAM_H, weight_decay=1e-2)
    srf_s = dict(**SRF_H, weight_decay=1e-2)
    sgdm_s = dict(SGDM_H, lr=1e-3)
    lion_s = dict(LION_H, lr=3e-3, weight_decay=0.1)
    big = ("generic", {"big": True})
    big_flips = ("generic", {"big": True, "flips": True})
    sd = 30
    for rule, prefix, hh_bf16, hh_f16, design in [
            ("adamw", "adamw", adamw_s, adamw_s, G),
            ("homeadamw-ew", "homeadamw_ew", HOME_MOD, dict(HOME_MOD, lr=3e-3), "home_mod_big"),
            ("homeadamw", "homeadamw", HOME_MOD, dict(HOME_MOD, lr=3e-3), "home_mod_big"),
            ("adamw-srf", "adamw_srf", srf_s, srf_s, big),
            ("sgdm", "sgdm", sgdm_s, sgdm_s, big),
            ("lion", "lion", lion_s, lion_s, big_flips)]:
        for suffix, pd, sdt in [("bf16_f32state", "bf16", "f32"), ("bf16_bf16state", "bf16", "bf16"),
                                ("f16_f32state", "f16", "f32")]:
            sd += 1
            hh = hh_bf16 if pd == "bf16" else hh_f16
            add(f"{prefix}_{suffix}", base_cfg(rule, **hh, **storage(param=pd, state=sdt)), design, seed=sd)
    add("adamw_bf16grad_f32", base_cfg("adamw", **adamw_s, **storage(grad="bf16")), G, seed=50)
    add("adamw_f16grad_scaled_f32", base_cfg("adamw", **adamw_s, **storage(grad="f16", grad_scale=1024.0)),
        G, seed=51)
    # bias gradients ~1e-2 put its v in the f16 subnormal range
    add("adamw_f32_f16state", base_cfg("adamw", **adamw_s, **storage(state="f16", allow_f16_state=True)),
        ("generic", {"scales": (1.0, 0.01, 3.0)}), seed=52)
    # same inputs and hyper-parameters as adamw_bf16_f32state / homeadamw_ew_bf16_f32state
    add("adamw_bf16_sr", base_cfg("adamw", **adamw_s, **storage(param="bf16", rounding="stochastic", seed=42)),
        G, seed=31)
    add("homeadamw_ew_bf16_sr", base_cfg("homeadamw-ew", **HOME_MOD,
                                         **storage(param="bf16", rounding="stochastic", seed=42)),
        "home_mod_big", seed=34)
    # --- rho_over, home_lr, calibrated tau (numpy reference) ---------------
    active = dict(HOME_MOD, rho_over="active")
    dead = ("home_mod", {"dead": NEVER_ACTIVE})
    add("homeadamw_active_f32", base_cfg("homeadamw", **active, **storage()), dead, seed=60)
    add("homeadamw_layer_active_f32", base_cfg("homeadamw-layer", **active, **storage()), dead, seed=61)
    add("homeadamw_home_lr_f32", base_cfg("homeadamw", **HOME_MOD, home_lr=1.0, **storage()), "home_mod",
        seed=62)

    def calibrated(q, every, **kw):
        return dict(HOME_MOD, tau={"home_share": q, "every": every}, **kw)

    add("homeadamw_calibrated_f32",
        base_cfg("homeadamw", **calibrated(0.3, 10, rho_over="active", home_lr=0.05), **storage()),
        ("calibrated", {"plan": global_calibrated_plan(63)}), seed=63)
    add("homeadamw_layer_calibrated_f32",
        base_cfg("homeadamw-layer", **calibrated(0.25, 20, rho_over="active"), **storage()),
        ("calibrated", {"plan": layer_calibrated_plan()}), seed=64)
    ew_cal = calibrated(0.2, 25, home_lr=1.0)
    add("homeadamw_ew_calibrated_f32", base_cfg("homeadamw-ew", **ew_cal, **storage()),
        ("calibrated", {"plan": ew_calibrated_plan()}), seed=65)
    add("homeadamw_ew_calibrated_bf16_bf16state",
        base_cfg("homeadamw-ew", **ew_cal, **storage(param="bf16", state="bf16")),
        ("calibrated", {"plan": ew_calibrated_plan(), "big": True}), seed=66)
    # --- q8 state (numpy reference): more than one block per tensor, a partial last block ---
    # (config seeds chosen so that every stochastic decision has the margin Q8_MARGIN)
    for rule, nm, hh, design, sizes, sd, q8_seed in [
            ("adamw", "adamw_q8", adamw_s, "generic", Q8_SIZES, 70, 14),
            ("homeadamw-ew", "homeadamw_ew_q8", HOME_MOD, "home_mod", Q8_SIZES, 71, 9),
            ("homeadamw", "homeadamw_q8", HOME_MOD, "home_mod", Q8_SIZES, 72, 4),
            ("homeadamw-layer", "homeadamw_layer_q8", HOME_MOD, "home_mod", Q8_SIZES, 73, 4),
            ("sgdm", "sgdm_q8", SGDM_H, "generic", Q8_SIZES_FULL, 74, 5),
            ("adabelief", "adabelief_amsgrad_q8", ADABELIEF_AMS, "generic", Q8_SIZES_FULL, 75, 16),
            ("miadam", "miadam_q8", MIADAM_H, "generic", Q8_SIZES, 76, 11)]:
        add(nm, base_cfg(rule, **hh, **storage(state="q8", seed=q8_seed)), (design, {"sizes": sizes}), seed=sd)
    return C


def case_tolerance(cfg: dict) -> float:
    if cfg.get("state_dtype") == "q8":
        return TOL["q8"]
    if cfg.get("rounding", "nearest") == "stochastic" and cfg.get("param_dtype", "f32") != "f32":
        return TOL["stochastic"]
    dts = {cfg.get("param_dtype", "f32"), cfg.get("state_dtype", "f32")}
    if "bf16" in dts:
        return TOL["bf16"]
    if "f16" in dts:
        return TOL["f16"]
    return TOL["f32"]


def make_inputs(case: dict) -> tuple[dict, dict]:
    """Returns theta0 (rounded to param dtype) and the RAW gradient rows (f32)."""
    cfg, T, seed, design = case["cfg"], case["T"], case["seed"], case["design"]
    if design == "generic":
        theta0, gtrue = generic_grads(seed, T)
    elif isinstance(design, tuple) and design[0] == "generic":
        theta0, gtrue = generic_grads(seed, T, **design[1])
    elif design == "home_tiny":
        theta0, gtrue = home_grads(seed, T, small=1e-7, large=1e-3)
    elif design == "home_mod":
        theta0, gtrue = home_grads(seed, T, small=1e-4, large=1.0)
    elif design == "home_mod_big":
        theta0, gtrue = home_grads(seed, T, small=1e-4, large=1.0, big=True)
    elif isinstance(design, tuple) and design[0] == "home_mod":
        theta0, gtrue = home_grads(seed, T, small=1e-4, large=1.0, **design[1])
    elif isinstance(design, tuple) and design[0] == "calibrated":
        theta0, gtrue = calibrated_grads(seed, T, cfg["betas"][1], **design[1])
    elif isinstance(design, tuple) and design[0] == "swats_switch":
        theta0, gtrue = swats_switch_grads(cfg, seed, T, design[1])
    else:
        raise ValueError(design)
    theta0 = {k: round_rne(cfg.get("param_dtype", "f32"), theta0[k]) for k in NAMES}
    gs = np.float32(cfg.get("grad_scale", 1.0))
    raw = {k: (gtrue[k].astype(np.float32) * gs).astype(np.float32) for k in NAMES}
    for (row, k, j, val) in case["nonfinite"]:
        raw[k][row - 1, j] = np.float32(val)
    return theta0, raw


def dump_expected_json(ej: dict) -> str:
    """Pretty JSON with one telemetry entry per line."""
    head = {k: v for k, v in ej.items() if k != "telemetry"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    lines.append('  "telemetry": [')
    tl = [json.dumps(e) for e in ej["telemetry"]]
    lines.extend("    " + e + ("," if i + 1 < len(tl) else "") for i, e in enumerate(tl))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def max_rel(a: np.ndarray, e: np.ndarray) -> float:
    a = np.asarray(a, np.float64)
    e = np.asarray(e, np.float64)
    return float(np.max(np.abs(a - e)) / max(float(np.max(np.abs(e))), 1e-30))


def compare(actual: dict, expected: dict) -> tuple[float, str]:
    worst, where = 0.0, ""
    for k in NAMES:
        r = max_rel(actual["params"][k], expected["params"][k])
        if r > worst:
            worst, where = r, f"param.{k}"
        for s in expected["states"][k]:
            r = max_rel(actual["states"][k][s], expected["states"][k][s])
            if r > worst:
                worst, where = r, f"{s}.{k}"
    return worst, where


def check_home_features(name: str, cfg: dict, theta0: dict, raw: dict, ref: dict, tol: float) -> str:
    """Asserts what the rho_over / home_lr / calibrated-tau cases are designed to show; returns
    the facts for the summary table ("" for a case with none of them)."""
    tele, ex = ref["telemetry"], ref["extra"]
    rule, T = cfg["rule"], len(tele)
    n_el = sum(theta0[k].size for k in NAMES)
    notes = []
    if cfg.get("rho_over") == "active":
        # under rho_over "all", every tensor with a never-active element goes home at every row
        dead = [i for i, k in enumerate(NAMES) if np.any(np.all(raw[k] == 0, axis=0))]
        assert dead, name
        over_all = reference({k: v for k, v in cfg.items() if k != "rho_over"}, theta0, raw)
        if rule in ("homeadam", "homeadamw"):
            assert all(e["home_elements"] == n_el for e in over_all["telemetry"]), name
        else:
            dec_all = np.array(over_all["extra"]["layer_decisions"])
            dec = np.array(ex["layer_decisions"])
            assert all(np.all(dec_all[:, i] == "home") for i in dead), name
            switched = [NAMES[i] for i in dead if 0 < np.sum(dec[:, i] == "home") < T]
            assert switched, f"{name}: no tensor with a never-active element changes branch"
            notes.append(f"switching with never-active elements: {', '.join(switched)}")
        notes.append("rho_over all: home at every row")
    if "home_lr" in cfg:
        eta = compare(reference({k: v for k, v in cfg.items() if k != "home_lr"}, theta0, raw), ref)[0]
        assert eta > 1.5 * tol, f"{name}: home_lr changes only {eta:.3g} (tol {tol})"
        notes.append(f"home_lr = eta misses by {eta / tol:.3g}x")
    cal = ex["calibration"]
    if cal is not None:
        # q n is never decided by rounding; no counted value is near a bucket edge
        assert all(c["gap"] > 1e-9 for c in cal.log), (name, cal.log)
        x = np.array([v for v in cal.bucketed if v > 0])
        m = np.frexp(x)[0]  # x = m 2^e, m in [0.5, 1): distance to 2^(e-1) and 2^e
        edge = float(np.min(np.minimum(2.0 * m - 1.0, 1.0 - m)))
        assert edge >= 1e-4, f"{name}: a bucketed value is within {edge:.2g} of a bucket edge"
        assert cal.log[0]["t"] == 1 and len(cal.log) == (T - 1) // cal.every + 1, name
        taus = ", ".join(f"2^{c['k'] - 127}@{c['t']}" for c in cal.log)
        notes.append(f"tau {taus}; nearest bucket edge {edge:.2g} rel")
        if rule in ("homeadam", "homeadamw"):
            share = sum(1 for e in tele if e["home_elements"] > 0) / T
            assert 0.05 <= share <= 0.6, (name, share)
            notes.append(f"home share of rows {share:.2f}")
        if rule.endswith("-ew"):
            shares = [c["home_active_share"] for c in cal.log]
            assert all(0 < sh <= cal.q for sh in shares), (name, shares)
            notes.append("home share of active elements at calibrations "
                         + ", ".join(f"{sh:.3f}" for sh in shares))
    return "".join("; " + n for n in notes)


def check_q8(name: str, cfg: dict, theta0: dict, raw: dict, ref: dict, ref32: dict, expected: dict,
             tol: float) -> str:
    """q8 cases: every stochastic decision of the float64 model has a relative margin >= Q8_MARGIN
    in u, and the float32 replay takes the same decisions (identical codes at every step); other
    random bits (seed + 1) miss by more than 1.5 x the tolerance. Returns the summary's note."""
    margin = ref["extra"]["q8_margin"]
    assert margin >= Q8_MARGIN, f"{name}: a q8 decision {margin:.3g} (relative) from its threshold"
    n = 0
    for a, b in zip(ref["extra"]["q8_codes"], ref32["extra"]["q8_codes"]):
        assert all(np.array_equal(a[key], b[key]) for key in a), f"{name}: float32 math changes a q8 code"
        n += sum(theta0[k].size for k, _ in a)
    e_seed = compare(reference(dict(cfg, seed=cfg["seed"] + 1), theta0, raw), expected)[0]
    assert e_seed > 1.5 * tol, f"{name}: other random bits change only {e_seed:.3g} (tol {tol})"
    sizes = "/".join(str(theta0[k].size) for k in NAMES)
    return (f"sizes {sizes}; {n} quantized elements, same codes in f32; margin 2^{math.log2(margin):.2f}; "
            f"seed + 1 misses by {e_seed / tol:.0f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "cases"))
    ap.add_argument("--only", metavar="REGEX",
                    help="rewrite only the cases whose name matches (fully); the others stay as they are")
    args = ap.parse_args()

    cases = build_cases()
    if args.only is not None:
        cases = [c for c in cases if re.fullmatch(args.only, c["name"])]
    if any(c["peer"] is not None for c in cases):
        import torch
        torch.set_num_threads(1)
        torch.manual_seed(0)
    V = versions()
    for pkg, want in PINNED.items():
        have = V.get(pkg)
        if have is None or not str(have).startswith(want):
            print(f"WARNING: {pkg} {have} differs from the pinned {want}", file=sys.stderr)

    q8_self_check()
    if args.only is None and os.path.isdir(args.out):
        shutil.rmtree(args.out)
    for case in cases:
        d = os.path.join(args.out, case["name"])
        if os.path.isdir(d):
            shutil.rmtree(d)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    peer_err: dict[str, float] = {}
    for case in cases:
        name, cfg = case["name"], case["cfg"]
        theta0, raw = make_inputs(case)
        ref = reference(cfg, theta0, raw, np.float64)
        ref32 = reference(cfg, theta0, raw, np.float32)
        tol = case_tolerance(cfg)
        ex = ref["extra"]
        if case["peer"] is not None:
            pr = run_peer(case["peer"], cfg, theta0, raw)
            expected = {"params": pr["params"], "states": pr["states"]}
            err, where = compare(ref, expected)
            peer_err[cfg["rule"]] = max(peer_err.get(cfg["rule"], 0.0), err)
            assert err <= 1e-5, f"{name}: numpy reference vs peer {err:.3g} at {where}"
            if cfg["rule"] == "swats":
                ps = pr["switch"][0] if pr["switch"] else None
                assert ps == ex["swats_switch_step"], (name, ps, ex["swats_switch_step"])
                if ps is not None:
                    lr_peer, lr_ref = pr["switch"][1], ex["swats_switch_lr"]
                    assert abs(lr_peer - lr_ref) <= 1e-5 * abs(lr_ref), (name, lr_peer, lr_ref)
        else:
            expected = {"params": ref["params"], "states": ref["states"]}
            err, where = 0.0, ""
        err32, where32 = compare(ref32, expected)
        assert err32 <= tol * FLOOR, f"{name}: float32-math replay off by {err32:.3g} at {where32} (tol {tol})"
        # decisions must not depend on float32 vs float64 math
        for a, b in zip(ref["telemetry"], ref32["telemetry"]):
            assert a["home_elements"] == b["home_elements"] and a["skipped"] == b["skipped"], name
            assert (a["rho"] is None) == (b["rho"] is None), name
            if a["rho"] is not None and a["rho"] > 0:
                assert abs(a["rho"] - b["rho"]) <= 1e-4 * abs(a["rho"]), (name, a, b)
            if a.get("rho_active"):
                assert abs(a["rho_active"] - b["rho_active"]) <= 1e-4 * a["rho_active"], (name, a, b)
            assert a.get("tau") == b.get("tau"), (name, a, b)
        # storage emulation must matter by more than the tolerance
        disc = ""
        low = any(cfg.get(x, "f32") != "f32" for x in ("param_dtype", "state_dtype", "grad_dtype"))
        if low:
            plain = dict(cfg, param_dtype="f32", state_dtype="f32", grad_dtype="f32", rounding="nearest")
            e_plain = compare(reference(plain, theta0, raw), expected)[0]
            # (stochastic rounding tracks the f32 run by design: only RNE vs SR must differ)
            assert e_plain > 1.5 * tol or cfg.get("rounding") == "stochastic", \
                f"{name}: storage rounding changes only {e_plain:.3g} (tol {tol})"
            disc = f"{e_plain / tol:.1f}x"
            if cfg.get("rounding") == "stochastic":
                rne = dict(cfg, rounding="nearest")
                e_rne = compare(reference(rne, theta0, raw), expected)[0]
                assert e_rne > 1.5 * tol, f"{name}: SR differs from RNE by only {e_rne:.3g}"
                disc += f" ({e_rne / tol:.1f}x vs RNE)"
        note = ""
        rule = cfg["rule"]
        if rule in HOME_RULES:
            hm = np.array(ex["home_margin"])
            hm = hm[hm > 0]
            closest = float(np.min(np.abs(np.log10(hm)))) if hm.size else math.inf
            if ex["calibration"] is None:
                assert closest >= 1.0, f"{name}: a home decision is within 10x of tau"
            else:  # tau is a power of two near the values by construction: f32 decisions need 1.001
                assert closest >= math.log10(1.001), f"{name}: a decision value is within 1.001x of tau"
            home_rows = sum(1 for e in ref["telemetry"] if e["home_elements"] > 0)
            total = sum(e["home_elements"] for e in ref["telemetry"])
            n_el = sum(theta0[k].size for k in NAMES)
            full = sum(1 for e in ref["telemetry"] if e["home_elements"] == n_el)
            # (-ew: never-active elements are home at every row; some element must switch)
            assert 0 < home_rows and (home_rows < len(ref["telemetry"]) or rule.endswith("-ew")), \
                f"{name}: no switch between branches"
            if rule.endswith("-ew"):
                mixed_rows = sum(1 for e in ref["telemetry"] if 0 < e["home_elements"] < n_el)
                assert mixed_rows > 0 and len({e["home_elements"] for e in ref["telemetry"]}) > 1
                note = (f"home elements {total} of {n_el * len(ref['telemetry'])}; rows with any home "
                        f"{home_rows}, mixed rows {mixed_rows}")
            elif rule.endswith("-layer"):
                dec = np.array(ex["layer_decisions"])
                per = {k: int(np.sum(dec[:, i] == "home")) for i, k in enumerate(NAMES)}
                distinct = {tuple(r) for r in dec.tolist()}
                assert len(distinct) >= 3 and len({v for v in per.values()}) == 3
                note = f"home rows per tensor {per}; home elements {total}"
            else:
                assert full == home_rows
                note = f"home rows {home_rows} / srf rows {len(ref['telemetry']) - home_rows}; home elements {total}"
            note += f"; min |log10(v_hat/tau)| = {closest:.2f}"
            note += check_home_features(name, cfg, theta0, raw, ref, tol)
        if rule == "swats":
            sw = ex["swats_switch_step"]
            # margin: every eligibility test other than the switch is > 10x away
            worst_other, at_switch = math.inf, None
            for t, gaps in ex["swats_gap"]:
                for k, gap, pos, _ in gaps:
                    if t == 1:
                        continue
                    if sw is not None and t == sw and k == "layer0.bias":
                        at_switch = gap
                    elif pos:
                        worst_other = min(worst_other, gap)
            assert worst_other > 10.0, (name, worst_other)
            if isinstance(case["design"], tuple):
                assert sw == case["design"][1], (name, sw)
                assert at_switch is not None and at_switch < 0.01, (name, at_switch)
                note = (f"switch at step {sw} to lr {ex['swats_switch_lr']:.6g}; |corr-scaling|/(atol+rtol|s|)"
                        f" = {at_switch:.2g} at the switch, >= {worst_other:.3g} elsewhere")
            else:
                assert sw is None
                note = f"no switch; closest eligibility ratio {worst_other:.3g} (needs <= 1)"
        if rule == "adabelief" and cfg["rectify"]:
            ns = np.array(ex["nsma"])
            note = (f"N_sma: {int(np.sum(ns < 5))} SGD steps, min |N_sma-5| = {float(np.min(np.abs(ns - 5))):.4g}")
        if rule == "miadam":
            note = f"phase 1 for t <= {cfg['switch_step']}"
        if rule == "lion":
            lm = min(ex["lion_margin"], ref32["extra"]["lion_margin"])
            assert lm >= LION_MARGIN, f"{name}: a sign(c) is within {lm:.3g} of flipping"
            note = f"min |c| / (|b1 m| + |(1-b1) g|) = {lm:.3g}"
        if cfg.get("state_dtype") == "q8":
            note += ("; " if note else "") + check_q8(name, cfg, theta0, raw, ref, ref32, expected, tol)
        if case["nonfinite"]:
            note = "skipped rows " + ", ".join(str(r) for r, *_ in case["nonfinite"]) + f"; final t = {ref['t']}"

        # ---- write -----------------------------------------------------------
        d = os.path.join(args.out, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        inp = {}
        for k in NAMES:
            inp[f"param.{k}"] = theta0[k]
            inp[f"grad.{k}"] = raw[k]
        write_safetensors(os.path.join(d, "input.safetensors"), inp)
        exp_t = {}
        for k in NAMES:
            exp_t[f"param.{k}"] = expected["params"][k]
            for s, a in expected["states"][k].items():
                exp_t[f"{s}.{k}"] = a
        write_safetensors(os.path.join(d, "expected.safetensors"), exp_t)
        ej = {"peer": peer_name(case["peer"], V), "steps": case["T"],
              "tolerance": {"rel": tol, "floor": tol * FLOOR},
              "telemetry": ref["telemetry"], "versions": V}
        if rule == "swats":
            ej["swats_switch_step"] = ex["swats_switch_step"]
        with open(os.path.join(d, "expected.json"), "w") as f:
            f.write(dump_expected_json(ej))
        # read back
        back = read_safetensors(os.path.join(d, "expected.safetensors"))
        for kk, a in exp_t.items():
            assert np.array_equal(back[kk], np.asarray(a, np.float32).reshape(back[kk].shape), equal_nan=True)
        dts = f"{cfg.get('param_dtype')}/{cfg.get('grad_dtype')}/{cfg.get('state_dtype')}"
        if cfg.get("rounding") == "stochastic":
            dts += " SR"
        rows.append((name, rule, dts, case["peer"] or "numpy", tol, err, err32, disc, note))

    print(f"{'case':30s} {'rule':15s} {'p/g/s dtype':15s} {'peer':9s} {'tol':>5s} "
          f"{'ref-vs-peer':>11s} {'f32-vs-exp':>10s} {'storage':>8s}  notes")
    for name, rule, dts, peer, tol, err, err32, disc, note in rows:
        print(f"{name:30s} {rule:15s} {dts:15s} {peer:9s} {tol:5.0e} {err:11.2e} {err32:10.2e} {disc:>8s}  {note}")
    print("\nref-vs-peer: float64 NumPy reference vs the peer's f32 result (max over tensors of the"
          " tolerance metric);\nf32-vs-exp: NumPy reference run with float32 math vs expected;"
          " storage: how far the all-f32 replay\n(no storage rounding) is from expected, in units of the"
          " tolerance (must exceed 1.5; for SR cases the\nround-to-nearest replay must).")
    print("\nmax relative error, float64 numpy reference vs peer (f32 cases):")
    for r, e in sorted(peer_err.items()):
        print(f"  {r:10s} {e:.3e}")
    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"\n{len(rows)} cases written to {args.out} ({total / 1e6:.2f} MB)")
    print("versions:", json.dumps(V))
    return 0


if __name__ == "__main__":
    sys.exit(main())
