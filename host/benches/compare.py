#!/usr/bin/env python3
"""The Markdown table of `homeadam bench-train` against `torch_train.py`.

    python3 host/benches/compare.py DIR

DIR holds the JSON files both wrote (`--json`). Rows pair ours with PyTorch's measurement of
the same experiment, batch size and device; ratio = our throughput / PyTorch's. Each side's
phases are milliseconds per step: data, forward, backward, optimizer. Where a side was measured
more than once (`ROUNDS` in scripts/gpu-check.sh), its best run is compared and the range of
its runs shown: the machine's load slows either side between runs, and the best run is the
least disturbed one. A second table gives each phase's time on the host beside its time on the
device (the same runs; on the CPU the two are one clock): on a GPU, a phase whose host time
reaches its device time is bound by the host's launches, not by the kernels. A third table
splits our host time into what the models' own CUDA ops took and the rest (candle's graph,
gradient sums and allocations), with the largest ops.
"""

import glob
import json
import os
import sys


PHASES = ("data", "forward", "backward", "optimizer")


def phases(r, which="phases"):
    p = r[which]
    return " / ".join(f"{1e3 * p[k] / r['steps']:.1f}" for k in PHASES)


def key(r):
    """What pairs two measurements: the experiment, the batch and the kind of device."""
    return r["experiment"], r["batch_size"], r["device"].split(":")[0]


def best(runs):
    """The run of the highest throughput."""
    return max(runs, key=lambda r: r["throughput"])


def spread(runs):
    """The throughputs' range over several runs, or a dash for one."""
    t = [r["throughput"] for r in runs]
    return f"{min(t):.0f}–{max(t):.0f}" if len(t) > 1 else "—"


def paired(results):
    """One row per experiment, batch, device and optimizer of ours, in order: our runs, PyTorch's
    runs of the same experiment, batch and device, and each side's best (None for no run)."""
    ours, torch = {}, {}
    for r in results:
        if r["implementation"] == "homeadam":
            ours.setdefault(key(r) + (r["optimizer"],), []).append(r)
        else:
            torch.setdefault(key(r), []).append(r)
    for k in sorted(ours, key=lambda k: (k[0], k[1], k[3])):
        peers = torch.get(k[:3], [])
        yield ours[k], peers, best(ours[k]), best(peers) if peers else None


def speed_table(rows):
    lines = ["| model | batch | optimizer | unit | ours /s | PyTorch /s | ratio | ours ms: data / fwd / bwd / opt "
             "| PyTorch ms | runs: ours / PyTorch | range /s: ours / PyTorch |",
             "|---|---:|---|---|---:|---:|---:|---|---|---:|---|"]
    for runs, peers, r, peer in rows:
        theirs = f"{peer['throughput']:.0f}" if peer else "—"
        ratio = f"{r['throughput'] / peer['throughput']:.3f}" if peer else "—"
        lines.append(f"| {r['experiment']} | {r['batch_size']} | {r['optimizer']} | {r['unit']} | "
                     f"{r['throughput']:.0f} | {theirs} | {ratio} | {phases(r)} | "
                     f"{phases(peer) if peer else '—'} | {len(runs)} / {len(peers)} | "
                     f"{spread(runs)} / {spread(peers) if peers else '—'} |")
    return lines


def host_table(rows):
    """Each phase's host time beside its device time, for the rows where both sides timed it."""
    lines = ["", "Host time per step, ms: data / fwd / bwd / opt (the same runs)", "",
             "| model | batch | optimizer | ours on the host | ours on the device | PyTorch on the host "
             "| PyTorch on the device |", "|---|---:|---|---|---|---|---|"]
    for _, _, r, peer in rows:
        if "host_phases" not in r or peer is None or "host_phases" not in peer:
            continue
        lines.append(f"| {r['experiment']} | {r['batch_size']} | {r['optimizer']} | "
                     f"{phases(r, 'host_phases')} | {phases(r)} | {phases(peer, 'host_phases')} | "
                     f"{phases(peer)} |")
    return lines if len(lines) > 5 else []


def ops_table(rows):
    """Our best runs' host time inside the models' own CUDA ops, per step, by phase; the rest
    of a phase's host time is candle's."""
    lines = ["", "Host time per step inside our CUDA ops (ms; calls per step × µs per call), the rest "
             "candle's", "", "| model | batch | optimizer | phase | host | our ops | the rest | largest |",
             "|---|---:|---|---|---:|---:|---:|---|"]
    for _, _, r, _ in rows:
        steps = r["steps"]
        for phase in PHASES:
            ops = sorted((o for o in r.get("host_ops", []) if o["phase"] == phase),
                         key=lambda o: -o["seconds"])
            if not ops:
                continue
            mine = sum(o["seconds"] for o in ops)
            host = r["host_phases"][phase]
            largest = ", ".join(f"{o['op']} {o['calls'] / steps:.0f} × {1e6 * o['seconds'] / o['calls']:.0f}"
                                for o in ops[:4])
            lines.append(f"| {r['experiment']} | {r['batch_size']} | {r['optimizer']} | {phase} | "
                         f"{1e3 * host / steps:.2f} | {1e3 * mine / steps:.2f} | "
                         f"{1e3 * (host - mine) / steps:.2f} | {largest} |")
    return lines if len(lines) > 5 else []


def table(results):
    every = list(paired(results))
    lines = speed_table(every) + host_table(every) + ops_table(every)
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
