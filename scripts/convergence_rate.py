#!/usr/bin/env python3
"""The convergence quantities of the paper, against T: the average of ‖∇f(θ_t)‖ over t ≤ T,
which Theorems 3–4 bound by O(ρ̆⁻¹/T^¼) for Adam(W)-srf and O(1/T^¼) for HomeAdam(W) (with
η = 1/√T), and min over t ≤ T of ‖∇f(θ_t)‖²; f is the mean training loss.

    scripts/convergence_rate.py collect RUN_DIR OUT_CSV
    scripts/convergence_rate.py summary RUNS_CSV FIRST_T [FIGURE_PREFIX]

`collect` reads `RUN_DIR/<optimizer>/seed-<s>/grad_norms.csv` (`homeadam train --seeds K
--grad-norm-every E`) into one CSV, `optimizer,seed,step,grad_norm_sq`.

`summary` prints, for each quantity q(T) (`avg`: the mean of ‖∇f(θ_t)‖ over the recorded t ≤ T,
t = 0 included, an estimate of the theorems' average from every E-th step; `min`: the smallest
recorded ‖∇f(θ_t)‖² with t ≤ T), per optimizer q(T) at T = FIRST_T, 2·FIRST_T, … and the last
T (mean and 95 % interval over the seeds), and the exponent r of q(T) ∝ T^r fitted from
T = FIRST_T on: each seed's least-squares slope of ln q(T) against ln T over every recorded
T ≥ FIRST_T, then the mean and Student-t interval over the seeds (a seed is the unit: one
seed's q(T) is one curve). The bounds' rate is r = −¼ (for `avg`): an interval wholly below −¼
decays faster than the bound, wholly above it slower. r is also set against AdamW-srf's by the
interval rule. With FIGURE_PREFIX, `FIGURE_PREFIX-avg.svg` and `-min.svg`: the mean of q(T)
over the seeds against T on log–log axes, bars the 95 % interval, a dashed C·T^(−¼) line.
"""
import csv
import math
import os
import sys
from collections import defaultdict

from evidence_stats import Estimate, Slope, compare
from run_files import seeded_files
from svg_plot import loglog

REFERENCE = "adamw-srf"
QUANTITIES = {
    "avg": "mean of ‖∇f(θ_t)‖ over t ≤ T",
    "min": "min over t ≤ T of ‖∇f(θ_t)‖²",
}


def collect(run_dir, out):
    rows = []
    for o, seed, path in seeded_files(run_dir, "grad_norms.csv"):
        with open(path) as f:
            rows += [[o, seed, int(r["step"]), r["grad_norm_sq"]] for r in csv.DictReader(f)]
    if not rows:
        sys.exit(f"{run_dir}: no <optimizer>/seed-<s>/grad_norms.csv")
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["optimizer", "seed", "step", "grad_norm_sq"])
        w.writerows(rows)


def curves(path, quantity):
    """optimizer -> seed -> [(T, q(T))] for `quantity` (`avg` or `min`, see the docstring)."""
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity}: avg or min")
    raw = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for r in csv.DictReader(f):
            raw[r["optimizer"]][int(r["seed"])].append((int(r["step"]), float(r["grad_norm_sq"])))
    out = defaultdict(dict)
    for o, seeds in raw.items():
        for s, pts in seeds.items():
            pts.sort()
            low, total, values = math.inf, 0.0, []
            for k, (t, g) in enumerate(pts):
                low, total = min(low, g), total + math.sqrt(g)
                values.append((t, total / (k + 1) if quantity == "avg" else low))
            out[o][s] = values
    return out


def rates(by_seed, first):
    """optimizer -> the estimate over the seeds of the exponent r of q(T) ∝ T^r from T = first."""
    out = {}
    for o, seeds in by_seed.items():
        slopes = []
        for values in seeds.values():
            pts = [(math.log(t), math.log(q)) for t, q in values if t >= first and q > 0]
            slopes.append(Slope([p[0] for p in pts], [p[1] for p in pts]).slope)
        out[o] = Estimate(slopes)
    return out


def rel(a, b):
    return compare(a, b, "below (faster)", "above (slower)")


def summary(path, first, prefix):
    for quantity, what in QUANTITIES.items():
        by_seed = curves(path, quantity)
        fitted = rates(by_seed, first)
        last = min(max(t for t, _ in v) for seeds in by_seed.values() for v in seeds.values())
        marks = []
        t = first
        while t < last:
            marks.append(t)
            t *= 2
        marks.append(last)
        print(f"\n{what} (mean [95 % CI] over the seeds):\n")
        print("| optimizer | " + " | ".join(f"T = {t}" for t in marks) + " | rate r of q(T) ∝ T^r [95 % CI] | "
              "against −¼ | r against adamw-srf's |")
        print("|---|" + "---|" * len(marks) + "---|---|---|")
        series = {}
        for o, seeds in by_seed.items():
            cells, pts = [], []
            for t in marks:
                e = Estimate([q for s, q in v if s <= t][-1] for v in seeds.values())
                cells.append(f"{e.mean:.3g} [{e.low:.3g}, {e.high:.3g}]")
                pts.append((t, e.mean, e.low, e.high))
            series[o] = pts
            r = fitted[o]
            bound = "below (faster)" if r.high < -0.25 else "above (slower)" if r.low > -0.25 else "holds −¼"
            against = rel(r, fitted[REFERENCE]) if REFERENCE in fitted and o != REFERENCE else "–"
            print(f"| {o} | " + " | ".join(cells) + f" | {r.mean:.3f} [{r.low:.3f}, {r.high:.3f}] | {bound} | {against} |")
        if prefix:
            top = max(p[1] for pts in series.values() for p in pts)
            loglog(f"{prefix}-{quantity}.svg", f"{what} against T ({os.path.basename(prefix)})", "T, steps",
                   what, series, references=[("C·T^(−¼)", [(first, top), (last, top * (last / first) ** -0.25)])],
                   note="points: mean over the seeds; bars: 95 % Student-t interval of the mean")


def main(args):
    if len(args) == 3 and args[0] == "collect":
        collect(args[1], args[2])
    elif len(args) in (3, 4) and args[0] == "summary":
        summary(args[1], int(args[2]), args[3] if len(args) == 4 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
