#!/usr/bin/env python3
"""Collects the last epoch of every seeded run under a run directory into one CSV.

    scripts/finals_csv.py RUN_DIR OUT_CSV

RUN_DIR is what `homeadam train --seeds K` writes (`<optimizer>/seed-<s>/metrics.csv`), or a
sweep's `final/` folder, which has the same layout. One line per (optimizer, seed), sorted:
`optimizer,seed,epochs,train_loss,train_<q>,test_loss,test_<q>,home_share`, `<q>` being `acc`
or `ppl` as in `metrics.csv`, every value the text `metrics.csv` holds, so that the file is a
function of the runs alone. `scripts/verdicts.py` reads these files.
"""
import csv
import sys

from run_files import seeded_files


def last_rows(run_dir):
    """(optimizer, seed, quality column, last row) of every seeded run under `run_dir`."""
    found = []
    for o, seed, path in seeded_files(run_dir, "metrics.csv"):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"{path}: no epoch finished")
        q = "acc" if "test_acc" in rows[-1] else "ppl"
        found.append((o, seed, q, rows[-1]))
    return found


def main(args):
    if len(args) != 2:
        sys.exit(__doc__)
    run_dir, out = args
    found = last_rows(run_dir)
    if not found:
        sys.exit(f"{run_dir}: no <optimizer>/seed-<s>/metrics.csv")
    qs = {q for _, _, q, _ in found}
    if len(qs) != 1:
        sys.exit(f"{run_dir}: runs of both tasks (accuracy and perplexity)")
    q = qs.pop()
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["optimizer", "seed", "epochs", "train_loss", f"train_{q}", "test_loss", f"test_{q}", "home_share"])
        for o, seed, _, r in found:
            w.writerow([o, seed, r["epoch"], r["train_loss"], r[f"train_{q}"], r["test_loss"], r[f"test_{q}"],
                        r["home_share"]])


if __name__ == "__main__":
    main(sys.argv[1:])
