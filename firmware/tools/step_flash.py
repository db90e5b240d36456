#!/usr/bin/env python3
"""Code bytes of a firmware by the source file they were compiled from, as its DWARF line
table says (inlined code counts where it was written, so the core's step counts as the core's
even when inlined into the firmware): `python3 tools/step_flash.py <elf>`.

Prints the bytes of each file of the optimizer (homeadam-core's `core/src`), then the totals of
the optimizer, the rest of the workspace, the Rust library (inlined `core` code: slice indexing,
iterators, formatting), and the soft-float and libm routines. Needs `llvm-objdump` (rustup's
llvm-tools or the distribution's LLVM) and a build with debug info (the firmware's profile).
"""
import re
import subprocess
import sys
from collections import Counter

out = subprocess.run(
    ["llvm-objdump", "-d", "-l", "--no-show-raw-insn", sys.argv[1]], capture_output=True, text=True, check=True
).stdout
source, instructions = "?", []
for line in out.splitlines():
    located = re.match(r"; (.*):\d+", line)
    if located:
        source = located.group(1)
        continue
    at = re.match(r"\s*([0-9a-f]+):\s", line)
    if at:
        instructions.append((int(at.group(1), 16), source))
    elif re.match(r"[0-9a-f]+ <", line):
        instructions.append((None, None))


def group(path):
    if "compiler_builtins" in path or "/libm" in path:
        return "soft float and libm"
    if "library/" in path or "/rustc/" in path:
        return "Rust library (inlined)"
    if "/core/src/" in path:
        return "optimizer: core/src/" + path.split("/core/src/")[1]
    return "other (firmware, homeadam-mcu, defmt, runtime)"


sizes = Counter()
for (here, path), (nxt, _) in zip(instructions, instructions[1:]):
    if here is not None and nxt is not None and 0 < nxt - here <= 8:
        sizes[group(path)] += nxt - here
optimizer = sum(v for k, v in sizes.items() if k.startswith("optimizer"))
for key, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
    if key.startswith("optimizer"):
        print(f"{size:8d}  {key}")
print(f"{optimizer:8d}  optimizer in all")
for key, size in sizes.most_common():
    if not key.startswith("optimizer"):
        print(f"{size:8d}  {key}")
