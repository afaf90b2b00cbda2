#!/usr/bin/env python3
"""Same-call A/B of kda_bench binaries: the mean of one counter per benchmark over each label's runs.

    scripts/profiling/bench_ab.py DIR base,new[,...] [counter]

DIR holds Google Benchmark JSON files named <label>_<run>.json (run: digits), e.g. written on the GPU machine by
running each binary in turn, several rounds interleaved so that clock and machine drift fall on every label alike:

    for i in 1 2; do for v in base new; do
      ./kda_bench_$v --benchmark_filter='^e2e/' --benchmark_format=json > DIR/${v}_$i.json; done; done

(scripts/profiling/device_ab.sh does this on the GPU machine, with `kda check` and the binaries' spills.)

counter: a user counter of kda_bench (gpu_ms by default; host_us, workspace_vs_target, ...). The last column is the
last label's mean over the first's. Every A/B in docs/validation.md since round 10 was read this way.
"""
import glob
import json
import os
import re
import sys
from collections import defaultdict


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip())
        return 2
    directory, labels = argv[1], argv[2].split(',')
    counter = argv[3] if len(argv) > 3 else 'gpu_ms'
    values = defaultdict(lambda: defaultdict(list))
    for label in labels:
        # <label>_<digits>.json exactly, so that label "new" does not also read "new_variant_1.json".
        pattern = re.compile(re.escape(label) + r'_[0-9]+\.json$')
        for path in sorted(glob.glob(os.path.join(directory, label + '_*.json'))):
            if not pattern.fullmatch(os.path.basename(path)):
                continue
            try:
                runs = json.load(open(path))
            except (OSError, ValueError) as e:
                print(f'unreadable: {path}: {e}')
                continue
            for b in runs.get('benchmarks', []):
                if counter in b:
                    values[b['name']][label].append(float(b[counter]))
    print('%-70s ' % 'benchmark' + ' '.join('%12s' % l for l in labels) + '   last/first   runs')
    for name in sorted(values):
        means = [sum(values[name][l]) / len(values[name][l]) if values[name][l] else float('nan') for l in labels]
        ratio = means[-1] / means[0] if means[0] else float('nan')
        runs = '/'.join(str(len(values[name][l])) for l in labels)
        print('%-70s ' % name + ' '.join('%12.4f' % m for m in means) + '   %10.4f   %s' % (ratio, runs))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
