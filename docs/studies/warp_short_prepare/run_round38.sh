#!/usr/bin/env bash
# Round 38's device call, from the repository root on the GPU machine with build-pack/bundle.txz (scripts/gpu_bundle
# of the round's build, packed with xz) and build-pack/probe (this study's harness) carried. In one call:
#   1. the GPU suite (the warp-per-item prepare's bit-identity tests among them) and kda check;
#   2. the study's probe (the FMA form of round 38's first sketch against the short-only kernel);
#   3. two interleaved A/B rounds of spec256x8's prepare stage and e2e (builder tables: the bound of 8 tokens is
#      known) with --kda_warp_short=0 (the short-only kernel), 1 (the warp kernel at 128 registers), 2 (at 168);
#   4. memcheck on the tests that run the warp kernel (bounds, the over-the-bound sequence);
#   5. scripts/bench --stages (the launcher's choice: the table for README / performance.md), while time is left.
# Everything comes back as $OUT/r38.txz, packed again after each step. R38_BUDGET_S (default 420): no step starts
# after it.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r38
mkdir -p "$d"
budget=${R38_BUDGET_S:-420}
left() { [ $((SECONDS - start)) -lt $((budget - $1)) ]; }
pack() { tar cJf "$OUT/r38.tmp" -C /tmp r38 && mv "$OUT/r38.tmp" "$OUT/r38.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"
OUT=$d timeout 200 "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
echo "suite rc=$? $((SECONDS-start))s" >> "$log"
pack
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
timeout 30 "$B/bench/kda_bench" --kda_check > "$d/check_default.txt" 2>&1
echo "check default rc=$? $((SECONDS-start))s" >> "$log"
timeout 30 build-pack/probe 256 8 > "$d/probe.txt" 2>&1
echo "probe rc=$? $((SECONDS-start))s" >> "$log"
pack
F='^(stage/prepare_inputs|e2e)/spec256x8/builder/manual_time$'
for r in 1 2; do
  for w in 0 1 2; do
    left 20 || break
    timeout 60 "$B/bench/kda_bench" --benchmark_filter="$F" --kda_warp_short=$w --benchmark_format=json \
      > "$d/ws${w}_$r.json" 2> "$d/ws${w}_$r.err"
    echo "ab warp_short=$w round $r rc=$? $((SECONDS-start))s" >> "$log"
  done
  pack
done
if left 60; then
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/kda_test_gpu_pipeline" \
    --gtest_filter='ChunkKdaShortState.SequenceOverTheWarpShortBoundIsReportedAndSkipped:ChunkKdaShortState.SequenceBoundGivesTheSameBits' \
    > "$d/memcheck_warp_short.txt" 2>&1
  echo "memcheck warp short rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
if left 90; then
  KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout 150 scripts/bench --no-build --stages > "$d/bench_table.txt" 2>&1
  echo "scripts/bench --stages rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
