#!/usr/bin/env python3
"""A sweep's `best.json` with weight decay switched off (λ = 0) in the rows named, every other
knob as tuned: Remark 2's comparison of HomeAdamW with HomeAdam (and AdamW with Adam) without
the luck of two separate searches.

    scripts/decay_off_preset.py BEST_JSON OUT_JSON OPTIMIZER[,OPTIMIZER...]

`homeadam train EXPERIMENT --preset OUT_JSON --optimizers …` then retrains the rows with the
seeds of the tuned runs, so each seed's pair differs in λ alone.
"""
import json
import sys


def main(args):
    if len(args) != 3:
        sys.exit(__doc__)
    source, out, names = args
    with open(source) as f:
        preset = json.load(f)
    for name in names.split(","):
        row = preset["optimizers"].get(name)
        if row is None:
            sys.exit(f"{source}: no row {name}")
        if not row.get("weight_decay"):
            sys.exit(f"{source}: {name} has no weight decay to switch off")
        row["source"] = f"{source}'s {name} (λ = {row['weight_decay']}) with λ = 0, every other knob as tuned"
        row["weight_decay"] = 0.0
    with open(out, "w") as f:
        f.write(json.dumps(preset, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
