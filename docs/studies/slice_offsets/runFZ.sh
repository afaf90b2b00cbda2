#!/usr/bin/env bash
# Round 33, call FZ: ncu on the long-only fused prepare (bf16, K = V = 128, stage/prepare_inputs/single8k) of base
# (9e70763) and v75 (vector-aligned q, k, g assumed at compile time: 544 SASS instructions fewer, spills outside the
# loop only, yet +0.8 to +1.5 % in call FY): executed instructions, issue activity and warp stall reasons of each.
set -u
cd "$(dirname "$0")"
here=$PWD
start=$SECONDS
tar xJf ab.txz
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/ncu
M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for s in short_scoreboard long_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle no_instruction not_selected selected dispatch_stall branch_resolving membar sleeping drain tex_throttle imc_miss misc; do
  M=$M,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
for v in base v75; do
  timeout 200 ncu --metrics $M -k regex:chunk_prepare_inputs_mma_kernel --launch-skip 3 -c 1 \
    abpack/kda_bench_$v --benchmark_filter='^stage/prepare_inputs/single8k/builder/manual_time$' \
    > $OUT/ncu/$v.txt 2>&1
  echo "ncu $v rc=$? $((SECONDS-start))s" >> $OUT/ncu/log.txt
done
tar cJf $OUT/ncu.txz -C $OUT ncu && rm -rf $OUT/ncu
