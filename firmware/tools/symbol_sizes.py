#!/usr/bin/env python3
"""Sums symbol sizes of an ELF by crate: `python3 tools/symbol_sizes.py <elf>`.

Uses `arm-none-eabi-nm --size-sort -S -C`; text/rodata symbols only (no defmt table).
"""
import subprocess
import sys
from collections import Counter

groups = Counter()
out = subprocess.run(["arm-none-eabi-nm", "--size-sort", "-S", "-C", sys.argv[1]],
                     capture_output=True, text=True, check=True).stdout
for line in out.splitlines():
    addr, size, kind, name = line.split(" ", 3)
    if kind in "Nn":
        continue
    if name.startswith("homeadam_core::"):
        key = "homeadam_core (optimizer)"
    elif name.startswith("homeadam_mcu::"):
        key = "homeadam_mcu (trainer, flash, samples, golden)"
    elif "compiler_builtins::float" in name or name.startswith("__aeabi_d") or name.startswith("libm::"):
        key = "soft-float f64 + libm"
    else:
        key = "other"
    groups[key] += int(size, 16)
for key, size in groups.most_common():
    print(f"{size:8d}  {key}")
