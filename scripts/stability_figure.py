#!/usr/bin/env python3
"""The figure of stability (d): ‖θ_T(S) − θ_T(S⁽ⁱ⁾)‖ against T on log–log axes, per optimizer.

    scripts/stability_figure.py RUNS_CSV FIGURE TITLE [STEPS_PER_ROW]

RUNS_CSV is the `--csv` output of scripts/stability_summary.py; STEPS_PER_ROW the minibatches
per row where the file has no `step` column. A point is the mean over the seeds of each seed's
mean distance over its replaced examples, its bar the 95 % Student-t interval of that mean
(seeds − 1 degrees of freedom), drawn to the axis' bottom where it reaches below 0. Rows at
which some replaced example is not read yet (distance 0) are left out.
"""
import csv
import sys
from collections import defaultdict

from evidence_stats import Estimate
from svg_plot import loglog


def main(args):
    if len(args) not in (3, 4):
        sys.exit(__doc__)
    path, figure, title = args[:3]
    per_row = int(args[3]) if len(args) == 4 else None
    table = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # optimizer, step, seed
    with open(path) as f:
        for r in csv.DictReader(f):
            if r.get("step"):
                step = int(r["step"])
            elif per_row:
                step = int(r["epoch"]) * per_row
            else:
                sys.exit(f"{path}: no step column; give STEPS_PER_ROW")
            table[r["optimizer"]][step][int(r["seed"])].append(float(r["param_distance"]))
    series = {}
    for o, by_step in sorted(table.items()):
        pts = []
        for step, by_seed in sorted(by_step.items()):
            if any(d <= 0 for ds in by_seed.values() for d in ds):
                continue
            e = Estimate(sum(ds) / len(ds) for ds in by_seed.values())
            pts.append((step, e.mean, e.low, e.high))
        series[o] = pts
    loglog(figure, title, "T, steps", "‖θ_T(S) − θ_T(S⁽ⁱ⁾)‖", series,
           note="points: mean over the seeds of each seed's mean over its replaced examples; "
                "bars: 95 % Student-t interval over the seeds")


if __name__ == "__main__":
    main(sys.argv[1:])
