#!/usr/bin/env python3
"""Regenerates EXPERIMENTS.md's verdict table from the committed per-seed CSVs and checks it.

    scripts/verdicts.py [--write] [--root DIR]

DIR is the repository (default: the one holding this script).

The table's text lives in docs/evidence/verdict-table.md with placeholders where a number, an
interval or a verdict word goes; this script fills them from the CSVs under docs/evidence/ and
compares the result with the table between EXPERIMENTS.md's markers. On a difference it prints
each cell that differs (what EXPERIMENTS.md has, what the CSVs give) and exits 1; `--write`
puts the rendered table into EXPERIMENTS.md instead.

A run is named `DIR/OPTIMIZER`: DIR a folder of docs/evidence/ holding `finals.csv`
(scripts/finals_csv.py: a sweep's final seeded runs) or `runs.csv` (scripts/stability_summary.py
--csv: tuned stability runs). Placeholders, `{kind:A}` or `{kind:A B}`:

- `score:A`: the test score's mean and 95 % interval over the seeds: `99.0 % [98.7, 99.3]`
  (accuracy, in %) or `89.0 [88.5, 89.5]` (perplexity); `mean:A` the mean alone.
- `rel:A B`: where A's interval lies against B's: `above` / `below` / `overlap` for an
  accuracy, `below (better)` / `above (worse)` / `overlap` for a perplexity.
- `verdict:A B`: the claim "A beats B" by EXPERIMENTS.md's rule: **supported** when A's
  interval lies wholly on the better side of B's, **not supported** when wholly on the worse
  side, **inconclusive** when they overlap.
- `paired:A B`: the mean of A − B over the seeds both ran, and its 95 % interval (points of
  accuracy, or perplexity).
- `gap:A`, `errgap:A`: the exponent b of the generalization loss (error) gap ∝ N^b, mean and
  95 % interval over the seeds (scripts/generalization_gap.py, DIR holding its `runs.csv`);
  `gapverdict:A B`, `errgapverdict:A B`: the claim "A's gap falls faster than B's" (a lower b);
  `gapvs:A X`, `errgapvs:A X`: where b's interval lies against X: `below`, `above` or `inside`.
- `rate:A T0`: the exponent r of the mean of ‖∇f(θ_t)‖ over t ≤ T ∝ T^r (Theorems 3–4's
  quantity) from T = T0, mean and 95 % interval over the seeds (scripts/convergence_rate.py,
  DIR holding its `grad_norms.csv`); `minrate:A T0` the same of min over t ≤ T of ‖∇f(θ_t)‖²;
  `rateverdict:A B T0` (`minrateverdict`): the claim "A converges faster than B" (a lower r);
  `ratevs:A T0 X` (`minratevs`): where r's interval lies against X.
- `stab:A`: the tuned stability runs' ‖θ(S) − θ(S⁽ⁱ⁾)‖ at the matched training loss (each
  seed's runs averaged over the replaced examples first, scripts/stability_summary.py), mean
  and 95 % interval over the seeds; `closer:A`: in how many of the runs A is closer than
  adamw-srf; `stabverdict:A`: the claim "A is more stable than adamw-srf" (a smaller distance).
"""
import csv
import math
import os
import re
import sys

import convergence_rate
import generalization_gap
from evidence_stats import Estimate
from stability_summary import REFERENCE, readings, runs_from_csv

TEMPLATE = "docs/evidence/verdict-table.md"
EVIDENCE = "docs/evidence"
TARGET = "EXPERIMENTS.md"
BEGIN = "<!-- verdict table: scripts/verdicts.py renders it from docs/evidence/verdict-table.md -->"
END = "<!-- end of the verdict table -->"
PLACEHOLDER = re.compile(r"\{(\w+):([^{}]+)\}")


class Evidence:
    """The per-seed CSVs, read once each."""

    def __init__(self, root):
        self.root = root
        self.finals = {}
        self.stability = {}
        self.exponents = {}

    def seeds(self, ref):
        """(higher is better, {seed: test score}) of run `ref` = DIR/OPTIMIZER."""
        folder, optimizer = split(ref)
        if folder not in self.finals:
            path = os.path.join(self.root, EVIDENCE, folder, "finals.csv")
            if not os.path.exists(path):
                raise Bad(f"{ref}: no {path}")
            with open(path) as f:
                self.finals[folder] = list(csv.DictReader(f))
        rows = [r for r in self.finals[folder] if r["optimizer"] == optimizer]
        if not rows:
            raise Bad(f"{ref}: {folder}/finals.csv has no runs of {optimizer}")
        accuracy = "test_acc" in rows[0]
        column = "test_acc" if accuracy else "test_ppl"
        return accuracy, {int(r["seed"]): float(r[column]) for r in rows}

    def distances(self, ref):
        """(matched-loss distance per seed, (closer, runs) against adamw-srf) of `ref`."""
        folder, optimizer = split(ref)
        if folder not in self.stability:
            path = os.path.join(self.root, EVIDENCE, folder, "runs.csv")
            if not os.path.exists(path):
                raise Bad(f"{ref}: no {path}")
            found = {}
            runs_from_csv(path, found)
            self.stability[folder] = readings(found)
        names, _, matched, losses = self.stability[folder]
        if optimizer not in names or REFERENCE not in names:
            raise Bad(f"{ref}: {folder}/runs.csv has no runs of {optimizer} and {REFERENCE}")
        per_seed = [sum(matched[optimizer][s]) / len(matched[optimizer][s]) for s in sorted(losses)]
        pairs = [(x, y) for s in sorted(losses) for x, y in zip(matched[optimizer][s], matched[REFERENCE][s])]
        return per_seed, (sum(x < y for x, y in pairs), len(pairs))


class Bad(Exception):
    """A placeholder that names no data, or data that cannot be read."""


def split(ref):
    folder, _, optimizer = ref.partition("/")
    if not folder or not optimizer:
        raise Bad(f"{ref}: a run is named DIR/OPTIMIZER")
    return folder, optimizer


def signed(x, decimals):
    return ("+" if x >= 0 else "−") + f"{abs(x):.{decimals}f}"


def interval_text(accuracy, e):
    if accuracy:
        clipped = "*" if e.high > 1 else ""
        return f"{100 * e.mean:.1f} % [{100 * e.low:.1f}, {100 * min(e.high, 1):.1f}]{clipped}"
    return f"{e.mean:.1f} [{e.low:.1f}, {e.high:.1f}]"


def side(a, b, higher_is_better):
    """+1 when interval a lies wholly on the better side of b, −1 on the worse, 0 overlapping."""
    if a.low > b.high:
        return 1 if higher_is_better else -1
    if a.high < b.low:
        return -1 if higher_is_better else 1
    return 0


VERDICT = {1: "**supported**", -1: "**not supported**", 0: "**inconclusive**"}


def three_digits(x):
    """Decimals that show `x` to three significant digits."""
    return max(0, 2 - math.floor(math.log10(abs(x)))) if x else 3


def exponent(ev, kind, ref, first):
    """The estimate of a fitted exponent (`gap`, `errgap` or `rate` kinds) of run `ref`."""
    folder, optimizer = split(ref)
    key = (kind, folder, first)
    if key not in ev.exponents:
        if kind in ("rate", "minrate"):
            path = os.path.join(ev.root, EVIDENCE, folder, "grad_norms.csv")
            if not os.path.exists(path):
                raise Bad(f"{ref}: no {path}")
            quantity = "avg" if kind == "rate" else "min"
            ev.exponents[key] = convergence_rate.rates(convergence_rate.curves(path, quantity), first)
        else:
            path = os.path.join(ev.root, EVIDENCE, folder, "runs.csv")
            if not os.path.exists(path):
                raise Bad(f"{ref}: no {path}")
            k = 1 if kind == "gap" else 2
            ev.exponents[key] = {o: generalization_gap.fit(by_n, k)[0]
                                 for o, by_n in generalization_gap.gaps(path).items()}
    if optimizer not in ev.exponents[key]:
        raise Bad(f"{ref}: {folder} has no runs of {optimizer}")
    return ev.exponents[key][optimizer]


def exponent_kind(kind):
    """The quantity a placeholder kind names, without its `verdict` or `vs` ending (written
    out, as CI's python3 may predate str.removesuffix)."""
    for end in ("verdict", "vs"):
        if kind.endswith(end):
            return kind[: -len(end)]
    return kind


def render_exponent(ev, kind, refs):
    base = exponent_kind(kind)
    target = None
    if kind.endswith("vs"):
        target, refs = parse_number(refs[-1], kind), refs[:-1]
    first = 0
    if base in ("rate", "minrate"):
        if not refs[-1].isdigit():
            raise Bad(f"{kind}: the last argument is T0, the first step of the fit")
        first, refs = int(refs[-1]), refs[:-1]
    if len(refs) != (2 if kind.endswith("verdict") else 1):
        raise Bad(f"{kind}: {' '.join(refs)}: the wrong number of runs")
    estimates = [exponent(ev, base, r, first) for r in refs]
    if target is not None:
        e = estimates[0]
        return "below" if e.high < target else "above" if e.low > target else "inside"
    if len(estimates) == 2:
        return VERDICT[side(estimates[0], estimates[1], False)]
    e = estimates[0]
    d = 3 if base in ("rate", "minrate") else 2
    return f"{signed(e.mean, d)} [{signed(e.low, d)}, {signed(e.high, d)}]"


def parse_number(text, kind):
    try:
        return float(text.replace("−", "-"))
    except ValueError:
        raise Bad(f"{kind}: {text} is not a number")


def render_one(ev, kind, arg):
    refs = arg.split()
    if exponent_kind(kind) in ("gap", "errgap", "rate", "minrate"):
        return render_exponent(ev, kind, refs)
    want = 2 if kind in ("rel", "verdict", "paired") else 1
    if len(refs) != want:
        raise Bad(f"{{{kind}:{arg}}}: {kind} takes {want} run(s)")
    if kind in ("score", "mean", "rel", "verdict", "paired"):
        scores = [ev.seeds(r) for r in refs]
        accuracy = scores[0][0]
        if any(a != accuracy for a, _ in scores):
            raise Bad(f"{{{kind}:{arg}}}: an accuracy against a perplexity")
        estimates = [Estimate(s.values()) for _, s in scores]
        if kind == "score":
            return interval_text(accuracy, estimates[0])
        if kind == "mean":
            return f"{100 * estimates[0].mean:.1f} %" if accuracy else f"{estimates[0].mean:.1f}"
        if kind == "paired":
            (_, a), (_, b) = scores
            common = sorted(set(a) & set(b))
            scale = 100 if accuracy else 1
            e = Estimate(scale * (a[s] - b[s]) for s in common)
            return f"{signed(e.mean, 2)} [{signed(e.low, 2)}, {signed(e.high, 2)}]"
        s = side(estimates[0], estimates[1], accuracy)
        if kind == "verdict":
            return VERDICT[s]
        if accuracy:
            return {1: "above", -1: "below", 0: "overlap"}[s]
        return {1: "below (better)", -1: "above (worse)", 0: "overlap"}[s]
    if kind in ("stab", "closer", "stabverdict"):
        per_seed, (closer, runs) = ev.distances(refs[0])
        if kind == "closer":
            return f"{closer} of {runs}"
        e = Estimate(per_seed)
        if kind == "stab":
            d = three_digits(e.mean)
            low = f"{max(e.low, 0):.{d}f}" + ("*" if e.low < 0 else "")
            return f"{e.mean:.{d}f} [{low}, {e.high:.{d}f}]"
        reference = Estimate(ev.distances(refs[0].split("/")[0] + "/" + REFERENCE)[0])
        return VERDICT[side(e, reference, False)]
    raise Bad(f"{{{kind}:{arg}}}: unknown placeholder kind {kind}")


def render(root):
    ev = Evidence(root)
    with open(os.path.join(root, TEMPLATE)) as f:
        template = f.read()
    return PLACEHOLDER.sub(lambda m: render_one(ev, m.group(1), m.group(2)), template)


def table_bounds(lines):
    try:
        begin = lines.index(BEGIN)
        end = lines.index(END, begin)
    except ValueError:
        raise Bad(f"{TARGET}: the markers {BEGIN!r} and {END!r} are missing")
    return begin + 1, end


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def compare(found, wanted):
    """The differences between the table in EXPERIMENTS.md and the rendered one, as messages."""
    problems = []
    if len(found) != len(wanted):
        problems.append(f"{TARGET}'s table has {len(found)} lines, the rendered one {len(wanted)}")
    for i, (a, b) in enumerate(zip(found, wanted)):
        if a == b:
            continue
        ca, cb = cells(a), cells(b)
        if len(ca) != len(cb):
            problems.append(f"line {i + 1}: {len(ca)} cells, the rendered line {len(cb)}:\n  has:  {a}\n  want: {b}")
            continue
        for j, (x, y) in enumerate(zip(ca, cb)):
            if x != y:
                problems.append(f"row {i + 1} ({cb[0][:60]}), column {j + 1}:\n  {TARGET} has: {x}\n"
                                f"  the CSVs give: {y}")
    return problems


def main(args):
    write, root = False, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while args:
        if args[0] == "--write":
            write, args = True, args[1:]
        elif args[0] == "--root" and len(args) > 1:
            root, args = args[1], args[2:]
        else:
            sys.exit(__doc__)
    try:
        wanted = render(root).rstrip("\n").split("\n")
        path = os.path.join(root, TARGET)
        with open(path) as f:
            lines = f.read().split("\n")
        begin, end = table_bounds(lines)
    except (Bad, OSError, ValueError, KeyError) as e:
        sys.exit(f"verdicts.py: {e}")
    if write:
        lines[begin:end] = wanted
        with open(path, "w") as f:
            f.write("\n".join(lines))
        print(f"{TARGET}: the verdict table rendered from {TEMPLATE}")
        return
    problems = compare(lines[begin:end], wanted)
    if problems:
        print(f"{TARGET}'s verdict table disagrees with the CSVs (scripts/verdicts.py --write renders it):")
        print("\n".join(problems))
        sys.exit(1)
    print(f"{TARGET}: the verdict table matches the CSVs ({len(wanted)} lines)")


if __name__ == "__main__":
    main(sys.argv[1:])
