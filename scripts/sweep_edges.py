#!/usr/bin/env python3
"""The chosen values of committed sweeps that lie in the outer 10 % of their knob's log range,
for the sweeps run before `homeadam sweep` listed them itself (its `summary.md` now does, by
host/src/sweep/space.rs's `edges`, the rule this script applies to the files).

    scripts/sweep_edges.py SWEEP_DIR...

Each SWEEP_DIR holds `sweep.json` (the experiment and the ranges) and `sweep.csv` (the chosen
trials); a range given as a factor is centred on the entry's value in the experiment's preset
(`host/presets/`; `home_lr` on the entry's `home_lr`, else its `lr`, as the sweep reads it).
"""
import csv
import json
import math
import os
import sys

PRESETS = {"digits-mlp": "digits_quick", "digits-cnn": "digits_quick", "wikitext2-quick": "wikitext2_quick"}
KNOBS = ["lr", "eps", "weight_decay", "tau", "home_share", "home_lr"]
EDGE = 0.1


def centre(entry, knob):
    if knob == "home_lr":
        return entry.get("home_lr", entry["lr"])
    if knob == "home_share":
        return entry["tau"]["home_share"]
    return entry[knob]


def edges(sweep_dir, root):
    with open(os.path.join(sweep_dir, "sweep.json")) as f:
        sweep = json.load(f)
    with open(os.path.join(root, "host", "presets", PRESETS[sweep["experiment"]] + ".json")) as f:
        preset = json.load(f)
    ranges = sweep["space"]["ranges"]
    found = []
    with open(os.path.join(sweep_dir, "sweep.csv")) as f:
        for r in (r for r in csv.DictReader(f) if r["chosen"] == "1"):
            entry = preset["optimizers"][r["optimizer"]]
            for k in (k for k in KNOBS if r[k]):
                value, rg = float(r[k]), ranges[k]
                if "factor" in rg:
                    c = centre(entry, k)
                    low, high = c / rg["factor"], c * rg["factor"]
                else:
                    low, high = rg["low"], rg["high"]
                p = (math.log(value) - math.log(low)) / (math.log(high) - math.log(low))
                if not EDGE <= p <= 1 - EDGE:
                    found.append(f"{r['optimizer']} {k} = {value:g} at {100 * p:.0f} % of {low:g}–{high:g}")
    return found


def main(args):
    if not args:
        sys.exit(__doc__)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for d in args:
        found = edges(d, root)
        print(f"- `{os.path.basename(os.path.normpath(d))}`: " + ("; ".join(found) if found else "none"))


if __name__ == "__main__":
    main(sys.argv[1:])
