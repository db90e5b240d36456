#!/usr/bin/env python3
"""The generalization gap against the training set's size N (Theorems 1–2 bound it by O(1/N)
for HomeAdam(W), by O(ρ̂^(−2T)/N) for Adam(W)): per-seed CSV, fitted exponents, a figure.

    scripts/generalization_gap.py collect RUN_ROOT OUT_CSV
    scripts/generalization_gap.py summary RUNS_CSV [FIGURE_PREFIX]

`collect` reads `RUN_ROOT/n<N>/seed-<s>/<optimizer>/metrics.csv`, each a `homeadam train
--train-subset N --subset-seed s --seed s --eval-train` run, and writes one line per (optimizer,
N, seed) from its last epoch: `optimizer,n,seed,epochs,train_loss,train_acc,test_loss,test_acc`,
the training columns being the clean pass over the N examples after the last epoch.

`summary` prints, per optimizer and N, the mean training and test loss, the loss gap (test loss − training loss) and the error
gap (training accuracy − test accuracy, in points) over the seeds, mean and 95 % Student-t
interval; then per optimizer the least-squares exponent b of gap ∝ N^b (each seed's least-squares slope of ln gap against ln N
over its nested subsets, then the mean and Student-t interval over the seeds; a seed with a gap
that is not positive has no logarithm and is left out, counted), whether b's interval holds −1 (a gap falling like 1/N),
and b against AdamW's by the interval rule. With FIGURE_PREFIX it writes
`FIGURE_PREFIX-loss.svg` and `-error.svg`: mean gap against N on log–log axes, bars the 95 %
interval of the mean over the seeds, a dashed C/N line for the slope of 1/N.
"""
import csv
import math
import os
import re
import sys
from collections import defaultdict

from evidence_stats import Estimate, Slope, compare
from svg_plot import loglog

REFERENCE = "adamw"
COLUMNS = ["optimizer", "n", "seed", "epochs", "train_loss", "train_acc", "test_loss", "test_acc"]


def collect(root, out):
    rows = []
    for nd in os.listdir(root):
        m = re.fullmatch(r"n(\d+)", nd)
        if not m:
            continue
        for sd in os.listdir(os.path.join(root, nd)):
            s = re.fullmatch(r"seed-(\d+)", sd)
            if not s:
                continue
            for o in os.listdir(os.path.join(root, nd, sd)):
                path = os.path.join(root, nd, sd, o, "metrics.csv")
                if not os.path.exists(path):
                    continue
                with open(path) as f:
                    last = list(csv.DictReader(f))[-1]
                if not last.get("clean_train_loss"):
                    sys.exit(f"{path}: no clean_train_* columns (run with --eval-train)")
                rows.append([o, int(m.group(1)), int(s.group(1)), last["epoch"], last["clean_train_loss"],
                             last["clean_train_acc"], last["test_loss"], last["test_acc"]])
    if not rows:
        sys.exit(f"{root}: no n<N>/seed-<s>/<optimizer>/metrics.csv")
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows(rows)


def gaps(path):
    """optimizer -> N -> [(seed, loss gap, error gap in points)], in the file's order."""
    table = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for r in csv.DictReader(f):
            loss = float(r["test_loss"]) - float(r["train_loss"])
            error = 100 * (float(r["train_acc"]) - float(r["test_acc"]))
            table[r["optimizer"]][int(r["n"])].append((int(r["seed"]), loss, error))
    return table


def fit(by_n, k):
    """The exponent's estimate over the seeds: each seed's least-squares slope of ln gap against
    ln N (its nested subsets make one seed's points one curve), then their mean and interval;
    a seed with a gap that is not positive has no logarithm and is left out (counted)."""
    by_seed = defaultdict(list)
    for n, runs in by_n.items():
        for seed, *g in runs:
            by_seed[seed].append((n, g[k - 1]))
    slopes = [Slope([math.log(n) for n, _ in pts], [math.log(g) for _, g in pts]).slope
              for pts in by_seed.values() if all(g > 0 for _, g in pts)]
    return Estimate(slopes), len(by_seed) - len(slopes)


def rel(a, b):
    return compare(a, b, "below (falls faster)", "above (falls slower)")


def losses(path):
    """optimizer -> N -> ([training losses], [test losses]) over the seeds."""
    table = defaultdict(lambda: defaultdict(lambda: ([], [])))
    with open(path) as f:
        for r in csv.DictReader(f):
            train, test = table[r["optimizer"]][int(r["n"])]
            train.append(float(r["train_loss"]))
            test.append(float(r["test_loss"]))
    return table


def summary(path, prefix):
    table = gaps(path)
    levels = losses(path)
    ns = sorted({n for by_n in levels.values() for n in by_n})
    print("training loss / test loss after the last epoch, mean over the seeds:\n")
    print("| optimizer | " + " | ".join(f"N = {n}" for n in ns) + " |")
    print("|---|" + "---|" * len(ns))
    for o, by_n in levels.items():
        cells = [f"{sum(a) / len(a):.4f} / {sum(b) / len(b):.4f}" for a, b in (by_n[n] for n in ns)]
        print(f"| {o} | " + " | ".join(cells) + " |")
    for k, what in ((1, "loss gap (test − training loss)"), (2, "error gap (training − test accuracy, points)")):
        print(f"\n{what}, mean [95 % CI] over the seeds:\n")
        ns = sorted({n for by_n in table.values() for n in by_n})
        print("| optimizer | " + " | ".join(f"N = {n}" for n in ns) + " | exponent b of gap ∝ N^b [95 % CI] | "
              "1/N (b = −1) in the interval | b against adamw's |")
        print("|---|" + "---|" * len(ns) + "---|---|---|")
        slopes = {o: fit(by_n, k) for o, by_n in table.items()}
        series = {}
        for o, by_n in table.items():
            cells, pts = [], []
            for n in ns:
                e = Estimate(g[k] for g in by_n[n])
                cells.append(f"{e.mean:.4f} [{e.low:.4f}, {e.high:.4f}]" if k == 1 else
                             f"{e.mean:.2f} [{e.low:.2f}, {e.high:.2f}]")
                pts.append((n, e.mean, e.low, e.high))
            series[o] = pts
            s, left = slopes[o]
            dropped = f" ({left} seeds with a gap ≤ 0 left out)" if left else ""
            holds = "yes" if s.low <= -1 <= s.high else "no"
            against = rel(s, slopes[REFERENCE][0]) if REFERENCE in slopes and o != REFERENCE else "–"
            print(f"| {o} | " + " | ".join(cells) + f" | {s.mean:.2f} [{s.low:.2f}, {s.high:.2f}]{dropped} | "
                  f"{holds} | {against} |")
        if prefix:
            name = "loss" if k == 1 else "error"
            positive = [p[1] for pts in series.values() for p in pts if p[1] > 0]
            anchor = math.exp(sum(math.log(v) for v in positive) / len(positive)) * math.sqrt(ns[0] * ns[-1])
            loglog(f"{prefix}-{name}.svg", f"Generalization {name} gap against N ({os.path.basename(prefix)})",
                   "N, training examples", what, series,
                   references=[("C / N", [(ns[0], anchor / ns[0]), (ns[-1], anchor / ns[-1])])],
                   note="points: mean over the seeds; bars: 95 % Student-t interval of the mean", xticks=ns)


def main(args):
    if len(args) == 3 and args[0] == "collect":
        collect(args[1], args[2])
    elif len(args) in (2, 3) and args[0] == "summary":
        summary(args[1], args[2] if len(args) == 3 else None)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
