#!/usr/bin/env bash
# Round 40's second device call: what pass 3 and pass 1 of the chunk-parallel state scan (performance.md, "Sketch for
# the next round") would cost on single32k, measured with today's state kernels on problems of the same shape:
#   single32k, H=32:   the serial chain the scan would replace (128 blocks of one 512-chunk chain each);
#   single1k, H=1024:  pass 3 with 32 segments of 1,024 tokens (1,024 chains of 16 chunks: the same tokens x heads);
#   single1k, H=2048:  pass 1's work (each segment also carries its K = 128 transition columns: twice the columns);
#   single8k, H=128:   pass 3 with 4 segments of 8,192 tokens.
# The stage benchmark of the folded state recurrence, builder tables, with the launcher's kernel and with the
# register-state kernel forced (8 warps), R40_SCAN_ROUNDS rounds (default 2). Everything comes back as $OUT/scan.txz.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/scan40
mkdir -p "$d"
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > "$d/log.txt"
run() {  # name batch heads [flags...]
  local name=$1 batch=$2 heads=$3
  shift 3
  timeout 90 "$B/bench/kda_bench" --benchmark_filter="^stage/state_recurrence/$batch/builder/manual_time\$" \
    --kda_heads="$heads" "$@" --benchmark_format=json > "$d/$name.json" 2> "$d/$name.err"
  echo "$name rc=$? $((SECONDS - start))s" >> "$d/log.txt"
}
for r in $(seq 1 "${R40_SCAN_ROUNDS:-2}"); do
  run "serial32k_r$r" single32k 32
  run "pass3_32seg_r$r" single1k 1024
  run "pass3_32seg_regs8_r$r" single1k 1024 --kda_state_regs_warps=8
  run "pass1_32seg_r$r" single1k 2048
  run "pass1_32seg_regs8_r$r" single1k 2048 --kda_state_regs_warps=8
  run "pass3_4seg_r$r" single8k 128
  run "pass3_4seg_regs8_r$r" single8k 128 --kda_state_regs_warps=8
done
tar cJf "$OUT/scan.txz" -C /tmp scan40
