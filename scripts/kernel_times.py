#!/usr/bin/env python3
"""Where a GPU's time goes, per kernel, from Nsight Compute's raw CSV.

    python3 scripts/kernel_times.py NCU_CSV STEPS [TOP]

NCU_CSV is the output of `ncu --metrics gpu__time_duration.sum --csv --page raw COMMAND`;
STEPS the training steps COMMAND ran (every figure is divided by it). Prints the kernel time
and the kernels per step, then the TOP (default 15) kernels by time: their share of the kernel
time, launches per step and milliseconds per step.
"""

import csv
import sys
from collections import defaultdict


def kernel_times(path):
    """{kernel name: [launches, nanoseconds]} over every row of the CSV."""
    totals = defaultdict(lambda: [0, 0.0])
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    names = rows[header]
    name_col, time_col = names.index("Kernel Name"), names.index("gpu__time_duration.sum")
    unit = rows[header + 1][time_col] if len(rows) > header + 1 else "nsecond"
    scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit)
    start = header + 1 if scale is None else header + 2
    scale = scale or 1.0
    for r in rows[start:]:
        if len(r) <= max(name_col, time_col):
            continue
        try:
            t = float(r[time_col].replace(",", "")) * scale
        except ValueError:
            continue
        name = r[name_col].split("(")[0].strip()
        totals[name][0] += 1
        totals[name][1] += t
    return totals


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    steps = int(argv[1])
    top = int(argv[2]) if len(argv) == 3 else 15
    totals = kernel_times(argv[0])
    if not totals:
        print(f"no kernels in {argv[0]}", file=sys.stderr)
        return 1
    launches = sum(n for n, _ in totals.values())
    time = sum(t for _, t in totals.values())
    print(f"kernel time per step {time / steps / 1e6:.2f} ms, {launches / steps:.0f} kernels per step")
    print("| kernel | share | launches per step | ms per step |")
    print("|---|---:|---:|---:|")
    for name, (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| `{name[:60]}` | {100 * t / time:.1f} % | {n / steps:.1f} | {t / steps / 1e6:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
