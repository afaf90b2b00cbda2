#!/usr/bin/env python3
"""Compares the machine code of two cubins kernel by kernel: each `.text.<kernel>` section's size in SASS
instructions and whether its bytes are identical. Needs only binutils' readelf (no nvdisasm), so it runs on the
development machine.

    scripts/profiling/cubin_compare.py A.cubin B.cubin [regex]

Build each tree's cubin the same way, e.g. from the repository root:

    nvcc -Itests -Ibench -Iinclude -Ikernels -O3 -DNDEBUG -arch=sm_90a -std=c++17 -x cu -cubin -o A.cubin \\
        bench/kda_bench.cu

Why: two equivalent sources can compile to kernels a few instructions apart that time ~2 % apart (docs/performance.md,
"Gate sum"); before landing a rewrite of a measured change, check that the kernel you timed is the
kernel you commit. Kernels whose own source did not change can still differ in instruction order (same size,
different bytes) when the template text around them moved.
"""
import re
import subprocess
import sys


def text_sections(path):
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    data = open(path, "rb").read()
    sections = {}
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\.text\.\S+)\s+PROGBITS\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            offset, size = int(m.group(2), 16), int(m.group(3), 16)
            sections[m.group(1)[len(".text."):]] = data[offset:offset + size]
    return sections


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = text_sections(sys.argv[1]), text_sections(sys.argv[2])
    pattern = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".")
    counts = {"same": 0, "different": 0, "only in one": 0}
    for name in sorted(set(a) | set(b)):
        if not pattern.search(name):
            continue
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            verdict = "only in one"
            print(f"{'-' if x is None else len(x) // 16:>7} {'-' if y is None else len(y) // 16:>7}  {verdict:<9}  {name}")
        else:
            verdict = "same" if x == y else "different"
            print(f"{len(x) // 16:>7} {len(y) // 16:>7}  {verdict:<9}  {name}")
        counts[verdict] += 1
    print(", ".join(f"{v} {k}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
