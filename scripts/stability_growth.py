#!/usr/bin/env python3
"""How ‖θ_T(S) − θ_T(S⁽ⁱ⁾)‖ grows with the number of steps T, per task and optimizer, set
against Theorem 1's ρ̂^(−2T) (ρ̂ = min v̂ + ε), as Markdown tables.

    scripts/stability_growth.py LABEL:RUNS_CSV:PRESET[:STEPS_PER_ROW] ...

RUNS_CSV is the `--csv` output of scripts/stability_summary.py (`seed,replace,optimizer,epoch,
param_distance,…`, with `step` and `min_v_hat` when the runs wrote `stability.json`); PRESET the
preset file the runs read (a sweep's `best.json`), for ε; STEPS_PER_ROW the minibatches per row
for a RUNS_CSV without a `step` column (an epoch's, for rows written after every epoch).

Per optimizer, the mean distance over every (seed, replaced example) at the first row's T, twice
it, four times, … and at the last row; the mean per-step growth of its logarithm from the first
row at which every run's distance is above 0 (every run has read its replaced example: the LM
reads its windows in order) to the last, (ln d̄(T_last) − ln d̄(T₁)) / (T_last − T₁), and its
growth against ln T, the α of d̄ ∝ T^α between the same rows; and the per-step growth of the bound, whose
logarithm grows by 2 ln(1/ρ̂) per step. ρ̂ = min v̂ + ε with min v̂ the smallest ρ the
optimizer's steps reported over all runs (0 when the CSV has none: marked *); rules without a
second moment (SGDM) have no ρ̂.
"""
import csv
import json
import math
import sys
from collections import defaultdict


def task(arg):
    label, path, preset, *rest = arg.split(":")
    per_row = int(rest[0]) if rest else None
    eps = {name: row.get("eps") for name, row in json.load(open(preset))["optimizers"].items()}
    curves = defaultdict(lambda: defaultdict(list))  # optimizer -> step -> distances
    min_v = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            step = r.get("step") or None
            if step is None:
                if per_row is None:
                    sys.exit(f"{path}: no step column; give STEPS_PER_ROW")
                step = int(r["epoch"]) * per_row
            o = r["optimizer"]
            curves[o][int(step)].append(float(r["param_distance"]))
            if r.get("min_v_hat"):
                min_v[o] = min(min_v.get(o, math.inf), float(r["min_v_hat"]))
    print(f"### {label}\n")
    print("| optimizer | d̄ at T = " + " | ".join(
        f"{t}" for t in marks(sorted(next(iter(curves.values()))))) +
        " | from T | per-step growth of ln d̄ | α | ρ̂ = min v̂ + ε | bound's per-step growth 2 ln(1/ρ̂) |")
    print("|---|" + "---:|" * (len(marks(sorted(next(iter(curves.values()))))) + 5))
    for o in sorted(curves):
        steps = sorted(curves[o])
        mean = {t: sum(curves[o][t]) / len(curves[o][t]) for t in steps}
        # From the first row at which every run has seen its replaced example (the LM's windows
        # come in order, so a window late in the epoch is first read late).
        t1 = next((t for t in steps if min(curves[o][t]) > 0), steps[-1])
        tn = steps[-1]
        growth = (math.log(mean[tn]) - math.log(mean[t1])) / (tn - t1) if tn > t1 and mean[t1] > 0 else math.nan
        alpha = (math.log(mean[tn]) - math.log(mean[t1])) / math.log(tn / t1) if tn > t1 and mean[t1] > 0 else math.nan
        e = eps.get(o)
        if e is None or (o not in min_v and o.startswith("sgd")):
            rho, bound = "–", "–"
        else:
            v = min_v.get(o)
            r = (v if v is not None else 0.0) + e
            rho = f"{r:.3g}" + ("" if v is not None else "*")
            bound = f"{2 * math.log(1 / r):.2f}"
        cells = " | ".join(f"{mean[t]:.4g}" for t in marks(steps))
        print(f"| {o} | {cells} | {t1} | {growth:.4f} | {alpha:.2f} | {rho} | {bound} |")
    print()


def marks(steps):
    """T₁, 2T₁, 4T₁, … among the steps, and the last."""
    out, t = [], steps[0]
    while t <= steps[-1]:
        if t in steps:
            out.append(t)
        t *= 2
    if out[-1] != steps[-1]:
        out.append(steps[-1])
    return out


if __name__ == "__main__":
    for a in sys.argv[1:]:
        task(a)
