#!/usr/bin/env python3
"""Executed instructions and stall samples of one kernel per source line, from ncu's per-instruction counters.

Inputs, both from the same binary (built with -lineinfo, e.g. CMAKE_CUDA_FLAGS=-lineinfo):
    ncu -k regex:<kernel> --launch-count 1 --section SourceCounters --section WarpStateStats --import-source no \\
        -o prof <binary> <args>
    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof.csv        # on the GPU machine
    cuobjdump -xelf <name>.sm_90a.cubin <binary>; nvdisasm -gi -c <name>.sm_90a.cubin > bin.sass
    scripts/profiling/ncu_by_line.py bin.sass prof.csv [--files a.hpp,b.hpp] [--top N] [--columns 'stall_wait;...']
The CSV lists the kernel's instructions in order; the listing section with the same count and opcodes is taken,
and each instruction is charged to the innermost frame of its inlining chain whose file is in --files (so a
helper's instructions count where it is called from), else to its innermost frame.
"""
import argparse
import collections
import csv
import re


def opcode(text):
    text = re.sub(r'^@!?U?P\w+\s+', '', text.strip())
    return text.split()[0] if text else ''


def listing_sections(path, files):
    sections, section, chain, fresh = {}, None, [], False
    for line in open(path):
        m = re.match(r'^\s*\.text\.(\S+):', line)
        if m:
            section, chain = m.group(1), []
            sections[section] = []
            continue
        if section is None:
            continue
        m = re.match(r'^\s*//## File "([^"]+)", line (\d+)', line)
        if m:
            if not fresh:
                chain, fresh = [], True
            chain.append((m.group(1).split('/')[-1], int(m.group(2))))
            continue
        m = re.match(r'^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;', line)
        if m:
            fresh = False
            frame = next((c for c in chain if c[0] in files), chain[0] if chain else ('?', 0))
            sections[section].append((m.group(1), frame))
    return sections


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('listing')
    ap.add_argument('csv')
    ap.add_argument('--files', default='', help='comma list of files to charge inlined code to')
    ap.add_argument('--top', type=int, default=40)
    ap.add_argument('--columns', default='', help="extra CSV columns to sum, ';'-separated (e.g. stall_short_sb)")
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    header, data = rows[1], rows[2:]
    col = {h: i for i, h in enumerate(header)}
    ops = [opcode(r[col['Source']]) for r in data]
    files = set(f for f in args.files.split(',') if f)
    candidates = [s for s in listing_sections(args.listing, files).values() if len(s) == len(ops)]
    if not candidates:
        raise SystemExit(f"no kernel in the listing has {len(ops)} instructions")
    best = max(candidates, key=lambda s: sum(a == opcode(b[0]) for a, b in zip(ops, s)))
    matched = sum(a == opcode(b[0]) for a, b in zip(ops, best))
    extra = [c for c in args.columns.split(';') if c]
    names = ['Instructions Executed', 'Warp Stall Sampling (All Samples)'] + extra
    sums = collections.defaultdict(lambda: [0.0] * len(names))
    for r, (_, frame) in zip(data, best):
        for k, n in enumerate(names):
            try:
                sums[frame][k] += float(r[col[n]] or 0)
            except ValueError:
                pass
    totals = [sum(v[k] for v in sums.values()) for k in range(len(names))]
    print(f"{len(ops)} instructions ({matched} opcodes matched), {totals[0]:.0f} executed, {totals[1]:.0f} samples")
    print('  instr %  samples %  ' + ''.join(f'{n[:14]:>16s}' for n in extra) + '  line')
    for frame, v in sorted(sums.items(), key=lambda kv: -kv[1][0])[:args.top]:
        shares = f"{100 * v[0] / max(totals[0], 1):8.1f}  {100 * v[1] / max(totals[1], 1):9.1f}  "
        print(shares + ''.join(f'{x:16.0f}' for x in v[2:]) + f"  {frame[0]}:{frame[1]}")


if __name__ == '__main__':
    main()
