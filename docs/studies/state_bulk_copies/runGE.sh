#!/usr/bin/env bash
# Call GE (round 34): the probe build's clock64() timeline of block 0's chunk steps in the long-sequence state kernel
# (KDA_STATE_PROBE; printed at the fifth launch of each process), on the stage launch and end to end.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
tar xJf probe.txz
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
for f in stage/state_recurrence/single8k stage/state_recurrence/single32k e2e/single8k e2e/single32k; do
  timeout 100 abpack/kda_bench_probe --benchmark_filter="^$f/builder/manual_time\$" > "$OUT/probe_${f//\//_}.txt" 2>&1
  echo "$f rc=$?"
done
