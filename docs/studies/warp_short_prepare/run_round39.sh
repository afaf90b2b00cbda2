#!/usr/bin/env bash
# Round 39's second device call, from the repository root on the GPU machine with build-pack/bundle.txz carried (the
# build with the warp-per-item prepare on by default, form 2). In one call:
#   1. the GPU suite and kda check;
#   2. memcheck on the tests that run the warp kernel (forced form 1; the launcher's form 2 under the bound of 8);
#   3. two interleaved A/B rounds of spec256x8's prepare stage and e2e (builder tables: the bound of 8 tokens is known)
#      with the launcher's choice (no flag) and --kda_warp_short=0 (the short-only kernel);
#   4. scripts/bench --stages (the table for README / performance.md), while time is left.
# Everything comes back as $OUT/r39.txz, packed again after each step. R39_BUDGET_S (default 480): no step starts
# after it.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r39
mkdir -p "$d"
budget=${R39_BUDGET_S:-480}
left() { [ $((SECONDS - start)) -lt $((budget - $1)) ]; }
pack() { tar cJf "$OUT/r39.tmp" -C /tmp r39 && mv "$OUT/r39.tmp" "$OUT/r39.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"
OUT=$d timeout 200 "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
echo "suite rc=$? $((SECONDS-start))s" >> "$log"
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
timeout 30 "$B/bench/kda_bench" --kda_check > "$d/check_default.txt" 2>&1
echo "check default rc=$? $((SECONDS-start))s" >> "$log"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/kda_test_gpu_pipeline" \
  --gtest_filter='ChunkKdaShortState.SequenceOverTheWarpShortBoundIsReportedAndSkipped:ChunkKdaShortState.SequenceBoundGivesTheSameBits' \
  > "$d/memcheck_warp_short.txt" 2>&1
echo "memcheck warp short rc=$? $((SECONDS-start))s" >> "$log"
pack
F='^(stage/prepare_inputs|e2e)/spec256x8/builder/manual_time$'
for r in 1 2; do
  for w in default 0; do  # default: no flag (the flag takes no -1)
    left 20 || break
    flag=(); [ "$w" = default ] || flag=(--kda_warp_short=$w)
    timeout 60 "$B/bench/kda_bench" --benchmark_filter="$F" "${flag[@]}" --benchmark_format=json \
      > "$d/ws${w}_$r.json" 2> "$d/ws${w}_$r.err"
    echo "ab warp_short=$w round $r rc=$? $((SECONDS-start))s" >> "$log"
  done
done
pack
if left 120; then
  KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout $((budget - (SECONDS - start) - 10)) \
    scripts/bench --no-build --stages > "$d/bench_table.txt" 2>&1
  echo "scripts/bench --stages rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
