#!/usr/bin/env python3
"""One row per profiled kernel launch, from `ncu --page raw --csv` files: the figures a per-kernel breakdown needs.

    ncu -k 'regex:chunk|state|derive' --launch-count 4 --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section ComputeWorkloadAnalysis \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \\
        -o prof <binary> <args>
    ncu -i prof.ncu-rep --page raw --csv > batch.raw.csv                                   # on the GPU machine
    scripts/profiling/ncu_kernel_table.py batch.raw.csv [more.raw.csv ...] [--markdown]

Columns: duration (µs, at the clock ncu locks: base clock unless --clock-control none), DRAM throughput and SM
throughput (% of peak, elapsed), tensor pipe (% of peak while active), achieved occupancy (% of the SM's warps),
registers per thread, grid, waves per SM, DRAM MB read / written, instructions per active cycle and SM, the SM
clock during the launch.
The file's base name (before .raw.csv) names the batch.
"""
import argparse
import csv
import os
import re

COLUMNS = [  # (header, metric, scale by unit)
    ('µs', 'gpu__time_duration.sum', 'time'),
    ('DRAM %', 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed', None),
    ('SM %', 'sm__throughput.avg.pct_of_peak_sustained_elapsed', None),
    ('tensor %', 'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active', None),
    ('occupancy %', 'sm__warps_active.avg.pct_of_peak_sustained_active', None),
    ('regs', 'launch__registers_per_thread', None),
    ('grid', 'launch__grid_size', None),
    ('waves', 'launch__waves_per_multiprocessor', None),
    ('MB read', 'dram__bytes_read.sum', 'bytes'),
    ('MB written', 'dram__bytes_write.sum', 'bytes'),
    ('IPC', 'sm__inst_executed.avg.per_cycle_active', None),
    ('SM GHz', 'gpc__cycles_elapsed.avg.per_second', None),
]
TIME_US = {'nsecond': 1e-3, 'ns': 1e-3, 'usecond': 1.0, 'us': 1.0, 'msecond': 1e3, 'ms': 1e3, 'second': 1e6, 's': 1e6}
BYTES_MB = {'byte': 1e-6, 'Kbyte': 1e-3, 'Mbyte': 1.0, 'Gbyte': 1e3, 'KB': 1e-3, 'MB': 1.0, 'GB': 1e3}


def rows_of(path):
    table = list(csv.reader(open(path, newline='')))
    if len(table) < 3:
        return []
    header, units = table[0], table[1]
    where = {name: i for i, name in enumerate(header)}
    batch = os.path.basename(path).split('.raw.csv')[0]
    out = []
    for r in table[2:]:
        kernel = re.sub(r'\(.*', '', r[where['Kernel Name']]).replace('void ', '')
        cells = []
        for _, metric, scale in COLUMNS:
            if metric not in where:
                cells.append('-')
                continue
            text, unit = r[where[metric]].replace(',', ''), units[where[metric]]
            try:
                x = float(text)
            except ValueError:
                cells.append(text or '-')
                continue
            if scale == 'time':
                x *= TIME_US.get(unit, 1.0)
            elif scale == 'bytes':
                x *= BYTES_MB.get(unit, 1e-6)
            cells.append(f'{x:.4g}')
        out.append([batch, kernel] + cells)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('files', nargs='+')
    ap.add_argument('--markdown', action='store_true', help='a Markdown table instead of aligned text')
    args = ap.parse_args()
    header = ['batch', 'kernel'] + [c[0] for c in COLUMNS]
    rows = [r for f in args.files for r in rows_of(f)]
    if args.markdown:
        print('| ' + ' | '.join(header) + ' |')
        print('|' + '---|' * len(header))
        for r in rows:
            print('| ' + ' | '.join(r) + ' |')
        return
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    for r in [header] + rows:
        print('  '.join(x.ljust(w) for x, w in zip(r, widths)))


if __name__ == '__main__':
    main()
