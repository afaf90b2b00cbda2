#!/usr/bin/env python3
"""Spill stores (STL) and reloads (LDL) of one kernel, per source line and loop depth.

Input: an `nvdisasm -g -c` listing of a cubin built with -lineinfo, e.g.
    nvcc -std=c++17 -O3 -arch=sm_90a -cubin -lineinfo -Iinclude -Ikernels instantiations.cu -o k.cubin
    nvdisasm -g -c k.cubin > k.sass
    scripts/profiling/sass_spills.py k.sass chunk_prepare_inputs_mma_kernel
The loop depth of an instruction is the number of backward branches whose range holds it; a reload at depth >= 1
runs on every trip of a loop (docs/performance.md, "Slice loop at the register cap": the same bytes of spills cost
nothing before the prepare's slice loop and ~3 % inside it). The kernel is the first section whose mangled name contains the
given substring.
"""
import collections
import re
import sys


def kernel_instructions(listing, name_part):
    section, insts, labels, loc = None, [], {}, None
    for line in open(listing):
        m = re.match(r'^\s*\.text\.(\S+):', line)
        if m:
            if insts:
                break  # the first matching kernel only
            section = m.group(1)
            continue
        if section is None or name_part not in section:
            continue
        m = re.match(r'^\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            loc = (m.group(1).split('/')[-1], int(m.group(2)))
            continue
        m = re.match(r'^(\.L_x_\d+):', line)
        if m:
            labels[m.group(1)] = len(insts)
            continue
        m = re.match(r'^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;', line)
        if m:
            insts.append((m.group(1), loc))
    return insts, labels


def loop_depths(insts, labels):
    depth = [0] * len(insts)
    for i, (op, _) in enumerate(insts):
        m = re.search(r'\bBRA\b.*?(\.L_x_\d+)', op)
        if m and labels.get(m.group(1), i + 1) <= i:
            for j in range(labels[m.group(1)], i + 1):
                depth[j] += 1
    return depth


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    insts, labels = kernel_instructions(sys.argv[1], sys.argv[2])
    if not insts:
        sys.exit(f"no kernel matching {sys.argv[2]!r}")
    depth = loop_depths(insts, labels)
    rows = collections.defaultdict(lambda: [0, 0])
    for (op, loc), d in zip(insts, depth):
        if re.search(r'\bSTL\b', op):
            rows[(loc, d)][0] += 1
        elif re.search(r'\bLDL\b', op):
            rows[(loc, d)][1] += 1
    print(f"{len(insts)} instructions, deepest loop {max(depth)}")
    for (loc, d), (st, ld) in sorted(rows.items(), key=lambda r: (-r[0][1], str(r[0][0]))):
        where = f"{loc[0]}:{loc[1]}" if loc else "?"
        print(f"depth {d}  {where:40s} STL {st:3d}  LDL {ld:3d}")


if __name__ == '__main__':
    main()
