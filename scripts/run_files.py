"""The files of a run directory that `homeadam train --seeds K` writes, one per optimizer and
seed: `RUN_DIR/<optimizer>/seed-<s>/<name>`."""
import os
import re


def seeded_files(run_dir, name):
    """(optimizer, seed, path) of every `<optimizer>/seed-<s>/<name>` under `run_dir` that
    exists, sorted by optimizer and seed."""
    found = []
    for o in sorted(os.listdir(run_dir)):
        folder = os.path.join(run_dir, o)
        if not os.path.isdir(folder):
            continue
        for sd in os.listdir(folder):
            m = re.fullmatch(r"seed-(\d+)", sd)
            path = os.path.join(folder, sd, name)
            if m and os.path.exists(path):
                found.append((o, int(m.group(1)), path))
    return sorted(found)
