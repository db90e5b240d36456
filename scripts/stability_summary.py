#!/usr/bin/env python3
"""Summarises many `homeadam stability` runs of the same optimizers, one per (seed, replaced
example), as a Markdown table.

    scripts/stability_summary.py [--csv RUNS_CSV] [--from RUNS_CSV]... RUN_DIR...

A run is a folder holding `<optimizer>/stability.csv`: a RUN_DIR itself (named
`seed<S>-replace<I>`, one replaced example per command) or each of its `replace<I>` folders
(`--replace I,J,…`, the RUN_DIR's path naming `seed<S>`); the seed and the replaced example
are read from the run's `stability.json` when it has one, else from the path. Folders of one
seed and replaced example from commands with other optimizers join into one run. Per run,
two readings: the distance ‖θ(S) − θ(S⁽ⁱ⁾)‖ after the last epoch, and the distance at the
training loss every optimizer of the run reached (the largest of their smallest losses),
interpolated linearly between the two epochs whose losses bracket it (the first epoch's value
when the first epoch is already below it). A seed is the unit of the interval: each seed's
runs are averaged over the replaced examples first, so the interval has (seeds − 1) degrees of
freedom; the replaced examples only make each seed's value less noisy. Each optimizer is also
compared with adamw-srf run by run (same seed and replaced example).

`--csv RUNS_CSV` also writes every run's rows, one line per (seed, replaced example, optimizer,
row): `seed,replace,optimizer,epoch,step,param_distance,travelled,train_loss,min_v_hat`, where
`step` is the minibatches trained when the row was written and `min_v_hat` the smallest ρ =
min v̂ the optimizer's steps on S reported (both from `stability.json`; empty without one).
`--from RUNS_CSV` reads such a file back as runs, so that runs whose folders are gone join
new ones (a seed and replaced example may come from one source only).
"""
import csv
import json
import math
import os
import re
import sys
from collections import defaultdict

from evidence_stats import Estimate

# The paper's baseline, against which each optimizer's runs are also compared one by one.
REFERENCE = "adamw-srf"

# The columns of a stability.csv that the summary and RUNS_CSV keep.
COLUMNS = ["epoch", "param_distance", "travelled", "train_loss"]


def rows(path):
    """The rows of a stability.csv, as written (text)."""
    with open(path) as f:
        return [{k: r[k] for k in COLUMNS} for r in csv.DictReader(f)]


def at_loss(curve, loss):
    """The distance where the training loss first falls to `loss`, interpolated linearly."""
    for k, r in enumerate(curve):
        if r["train_loss"] <= loss:
            if k == 0:
                return r["param_distance"]
            a = curve[k - 1]
            w = (a["train_loss"] - loss) / (a["train_loss"] - r["train_loss"])
            return a["param_distance"] + w * (r["param_distance"] - a["param_distance"])
    return math.nan


def estimate(values):
    e = Estimate(values)
    # A distance is never negative: an interval reaching below 0 is clipped and marked.
    low = f"{max(e.low, 0):.4f}" + ("*" if e.low < 0 else "")
    return f"{e.mean:.4f} ± {e.std:.4f}", f"[{low}, {e.high:.4f}]"


def optimizers(d):
    return [o for o in sorted(os.listdir(d)) if os.path.exists(os.path.join(d, o, "stability.csv"))]


def runs_in(dirs):
    """Every run under the arguments, by (seed, replaced example): each optimizer's
    stability.csv, and what the runs' stability.json say (steps per row, min v̂ per optimizer).
    Folders of the same seed and replaced example from several commands (other optimizers)
    join into one run."""
    found = {}
    for d in dirs:
        runs = [d] if optimizers(d) else [
            os.path.join(d, r) for r in sorted(os.listdir(d)) if re.fullmatch(r"replace\d+", r)
        ]
        if not runs:
            sys.exit(f"{d}: no <optimizer>/stability.csv and no replace<I> folder")
        for r in runs:
            meta_path = os.path.join(r, "stability.json")
            meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
            seed = meta.get("seed", None)
            replace = meta.get("replace", None)
            if seed is None or replace is None:
                seed = int(re.findall(r"seed(\d+)", r)[-1])
                replace = int(re.findall(r"replace(\d+)", r)[-1])
            run = found.setdefault((seed, replace), new_run())
            for o in optimizers(r):
                add(run, o, os.path.join(r, o, "stability.csv"), rows(os.path.join(r, o, "stability.csv")),
                    meta.get("steps_per_row"), meta.get("min_v_hat", {}).get(o))
    return found


def new_run():
    return {"source": {}, "rows": {}, "per_row": {}, "min_v_hat": {}}


def add(run, o, source, curve, per_row, min_v_hat):
    if o in run["source"]:
        sys.exit(f"{source}: {o} is also in {run['source'][o]} for the same seed and example")
    run["source"][o] = source
    run["rows"][o] = curve
    run["per_row"][o] = per_row
    run["min_v_hat"][o] = min_v_hat


def runs_from_csv(path, found):
    """The runs of a RUNS_CSV (as `--csv` writes it) added to `found`."""
    with open(path) as f:
        for r in csv.DictReader(f):
            run = found.setdefault((int(r["seed"]), int(r["replace"])), new_run())
            o = r["optimizer"]
            if o not in run["rows"]:
                add(run, o, path, [], None, float(r["min_v_hat"]) if r.get("min_v_hat") else None)
            elif run["source"][o] != path:
                sys.exit(f"{path}: {o} of seed {r['seed']}, example {r['replace']} is also in {run['source'][o]}")
            run["rows"][o].append({k: r[k] for k in COLUMNS})
            if r.get("step"):
                run["per_row"][o] = int(r["step"]) // int(r["epoch"])


def write_runs(path, runs):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seed", "replace", "optimizer", "epoch", "step", "param_distance", "travelled",
                    "train_loss", "min_v_hat"])
        for (seed, replace), run in sorted(runs.items()):
            for o, curve in sorted(run["rows"].items()):
                per_row, v = run["per_row"][o], run["min_v_hat"][o]
                for r in curve:
                    epoch = int(r["epoch"])
                    w.writerow([seed, replace, o, epoch, "" if per_row is None else epoch * per_row,
                                r["param_distance"], r["travelled"], r["train_loss"],
                                "" if v is None else f"{v:.6g}"])


def readings(found):
    """The optimizers (in the first run's order) and, per optimizer and seed, each run's
    distance after the last row and at the matched training loss, and each seed's matched
    losses: (names, last, matched, losses), the tables indexed [optimizer][seed] (a list over
    the replaced examples) and losses[seed]."""
    last = defaultdict(lambda: defaultdict(list))
    matched = defaultdict(lambda: defaultdict(list))
    losses = defaultdict(list)
    names = []
    for (seed, _), run in sorted(found.items()):
        curves = {o: [{k: float(v) for k, v in r.items()} for r in c] for o, c in sorted(run["rows"].items())}
        names = names or list(curves)
        if list(curves) != names:
            sys.exit(f"seed {seed}: optimizers {list(curves)}, not {names} as the first run")
        loss = max(min(r["train_loss"] for r in c) for c in curves.values())
        losses[seed].append(loss)
        for o, c in curves.items():
            last[o][seed].append(c[-1]["param_distance"])
            matched[o][seed].append(at_loss(c, loss))
    return names, last, matched, losses


def main(args):
    csv_out, sources = None, []
    while args[:1] in (["--csv"], ["--from"]):
        if args[0] == "--csv":
            csv_out = args[1]
        else:
            sources.append(args[1])
        args = args[2:]
    found = runs_in(args)
    for path in sources:
        runs_from_csv(path, found)
    if csv_out:
        write_runs(csv_out, found)
    names, last, matched, losses = readings(found)
    seeds = sorted(losses)
    runs = sum(len(v) for v in losses.values())
    print(f"{runs} runs, seeds {seeds}; matched training loss {min(min(v) for v in losses.values()):.4f}"
          f"–{max(max(v) for v in losses.values()):.4f}\n")
    print("| optimizer | after the last epoch: mean ± std | 95 % CI | at the matched loss: mean ± std | 95 % CI |")
    print("|---|---:|---|---:|---|")
    for o in names:
        per_seed = lambda table: [sum(table[o][s]) / len(table[o][s]) for s in seeds]
        a, b = estimate(per_seed(last)), estimate(per_seed(matched))
        print(f"| {o} | {a[0]} | {a[1]} | {b[0]} | {b[1]} |")
    if REFERENCE in names:
        print()
        for o in (n for n in names if n != REFERENCE):
            pairs = [(x, y) for s in seeds for x, y in zip(matched[o][s], matched[REFERENCE][s])]
            closer = sum(x < y for x, y in pairs)
            print(f"- at the matched loss, {o} closer than {REFERENCE} in {closer} of {len(pairs)} runs")


if __name__ == "__main__":
    main(sys.argv[1:])
