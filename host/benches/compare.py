#!/usr/bin/env python3
"""The Markdown table of `homeadam bench-train` against `torch_train.py`.

    python3 host/benches/compare.py DIR

DIR holds the JSON files both wrote (`--json`). Rows pair ours with PyTorch's measurement of
the same experiment, batch size and device; ratio = our throughput / PyTorch's. Each side's
phases are milliseconds per step: data, forward, backward, optimizer.
"""

import glob
import json
import os
import sys


def phases(r):
    p = r["phases"]
    return " / ".join(f"{1e3 * p[k] / r['steps']:.1f}" for k in ("data", "forward", "backward", "optimizer"))


def key(r):
    """What pairs two measurements: the experiment, the batch and the kind of device."""
    return r["experiment"], r["batch_size"], r["device"].split(":")[0]


def table(results):
    ours = [r for r in results if r["implementation"] == "homeadam"]
    torch = {key(r): r for r in results if r["implementation"] != "homeadam"}
    lines = ["| model | batch | optimizer | unit | ours /s | PyTorch /s | ratio | ours ms: data / fwd / bwd / opt | PyTorch ms |",
             "|---|---:|---|---|---:|---:|---:|---|---|"]
    for r in sorted(ours, key=lambda r: (r["experiment"], r["batch_size"], r["optimizer"])):
        peer = torch.get(key(r))
        theirs = f"{peer['throughput']:.0f}" if peer else "—"
        ratio = f"{r['throughput'] / peer['throughput']:.3f}" if peer else "—"
        lines.append(f"| {r['experiment']} | {r['batch_size']} | {r['optimizer']} | {r['unit']} | "
                     f"{r['throughput']:.0f} | {theirs} | {ratio} | {phases(r)} | "
                     f"{phases(peer) if peer else '—'} |")
    versions = sorted({r["implementation"] for r in results if r["implementation"] != "homeadam"})
    return "\n".join(lines + ([""] + [f"PyTorch: {v}" for v in versions] if versions else []))


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    results = []
    for path in sorted(glob.glob(os.path.join(argv[0], "*.json"))):
        with open(path) as f:
            results.append(json.load(f))
    if not results:
        print(f"no measurements in {argv[0]}", file=sys.stderr)
        return 1
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
