#!/usr/bin/env bash
# Round 39's last device call: only where the machine is an H200 (the issue's targets are H200 figures, and rounds
# 35-39 have none), `scripts/bench` (end to end only, to fit what device time is left) on 4ab835d's bundle
# (build-pack/bundle.txz), then ncu's DRAM figures of spec256x8's two launches (as run_round39_ncu.sh); on any other
# GPU it stops at once. Output: $OUT/h200.txz.
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "$name"
case "$name" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/h200
mkdir -p "$d"
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout 150 scripts/bench --no-build > "$d/bench_table.txt" 2>&1
echo "scripts/bench rc=$? $((SECONDS-start))s" >> "$d/log.txt"
tar cJf "$OUT/h200.txz" -C /tmp h200
timeout 40 ncu -k 'regex:warp_short|state_short' --launch-skip 4 --launch-count 2 --section SpeedOfLight \
  --section Occupancy --section WarpStateStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
  "$B/bench/kda_bench" --benchmark_filter='^e2e/spec256x8/builder/manual_time$' --kda_calls=2 --kda_warmup=1 \
  > "$d/ncu.txt" 2>&1
echo "ncu rc=$? $((SECONDS-start))s" >> "$d/log.txt"
tar cJf "$OUT/h200.txz" -C /tmp h200
