#!/usr/bin/env bash
# Round 37's device call, from the repository root on the GPU machine with build-pack/bundle.txz carried (packed as
# in run_round36.sh). The bundle is the committed code with v80 (K split) taken out again: it measured slower than
# K whole in every batch (call GK). In one call:
#   1. the GPU suite and kda check at the launcher's choice and at each forced form (0 = the other kernels; 2, 4, 8);
#   2. scripts/bench --stages (the launcher's choice: the table for README / performance.md);
#   3. two interleaved A/B rounds of the folded state stage and e2e, other kernels against 8 warps;
#   4. racecheck on the stage tests (the register-state kernel at 2, 4, 8 warps among them), while time is left.
# Everything comes back as $OUT/r37.txz, packed again after each step. R37_BUDGET_S (default 420): no step starts
# after it.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r37
mkdir -p "$d"
budget=${R37_BUDGET_S:-420}
left() { [ $((SECONDS - start)) -lt $((budget - $1)) ]; }
pack() { tar cJf "$OUT/r37.tmp" -C /tmp r37 && mv "$OUT/r37.tmp" "$OUT/r37.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"
OUT=$d timeout 150 "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
echo "suite rc=$? $((SECONDS-start))s" >> "$log"
pack
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
timeout 30 "$B/bench/kda_bench" --kda_check > "$d/check_default.txt" 2>&1
echo "check default rc=$? $((SECONDS-start))s" >> "$log"
for w in 0 2 4 8; do
  timeout 30 "$B/bench/kda_bench" --kda_check --kda_state_regs_warps=$w > "$d/check_$w.txt" 2>&1
  echo "check $w rc=$? $((SECONDS-start))s" >> "$log"
done
pack
if left 90; then
  KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout 150 scripts/bench --no-build --stages > "$d/bench_table.txt" 2>&1
  echo "scripts/bench --stages rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
F='^(stage/state_recurrence|e2e)/[a-z0-9]+/builder/manual_time$'
for r in 1 2; do
  for w in 0 8; do
    left 20 || break
    timeout 60 "$B/bench/kda_bench" --benchmark_filter="$F" --kda_state_regs_warps=$w --benchmark_format=json \
      > "$d/w${w}_$r.json" 2> "$d/w${w}_$r.err"
    echo "ab $w round $r rc=$? $((SECONDS-start))s" >> "$log"
  done
  pack
done
if left 80; then
  timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/kda_test_gpu_stages" \
    --gtest_filter='Cases/Stages.EachStageMatchesChunkedReference/0:Cases/Stages.EachStageMatchesChunkedReference/1' \
    > "$d/racecheck_stages.txt" 2>&1
  echo "racecheck stages/0,1 rc=$? $((SECONDS-start))s" >> "$log"
fi
pack
