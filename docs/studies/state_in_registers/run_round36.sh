#!/usr/bin/env bash
# Round 36's device call, from the repository root on the GPU machine with build-pack/bundle.txz carried
# (scripts/gpu_bundle's folder, packed). The bundle is v79 + v80: the register-state kernel without its per-row-tile
# length tests (every tile's products in one branch-free block), and its K split over two warps. In one binary:
#   1. the GPU suite (run_gpu_suite) and kda check at the launcher's choice and forced forms;
#   2. interleaved A/B rounds of the folded state stage and chunk_kda_fwd end to end, every batch, builder tables:
#      the other kernels (--kda_state_regs_warps=0) against the register-state kernel at 2, 4 and 8 warps with K
#      whole, and at 2 and 4 warps with K split over two warps per 16 columns (v80: --kda_state_regs_k_split=2);
#   3. scripts/bench (the launcher's choice), racecheck and memcheck on the stage tests, more A/B rounds while time
#      is left.
# Everything comes back as $OUT/r36.txz, packed again after each step. R36_BUDGET_S (default 540): no step starts
# after it. R36_LEAN=1: stop after the first A/B round.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r36
mkdir -p "$d"
budget=${R36_BUDGET_S:-540}
left() { [ $((SECONDS - start)) -lt $((budget - $1)) ]; }
pack() { tar cJf "$OUT/r36.tmp" -C /tmp r36 && mv "$OUT/r36.tmp" "$OUT/r36.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"
OUT=$d timeout 150 "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
echo "suite rc=$? $((SECONDS-start))s" >> "$log"
pack
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
# kda check: the launcher's choice, then forced forms (warps:split; 0 = the other kernels).
timeout 30 "$B/bench/kda_bench" --kda_check > "$d/check_default.txt" 2>&1
echo "check default rc=$? $((SECONDS-start))s" >> "$log"
for f in 0:0 2:1 4:1 8:1 2:2 4:2; do
  timeout 30 "$B/bench/kda_bench" --kda_check --kda_state_regs_warps=${f%:*} --kda_state_regs_k_split=${f#*:} \
    > "$d/check_${f/:/_}.txt" 2>&1
  echo "check $f rc=$? $((SECONDS-start))s" >> "$log"
done
pack
F='^(stage/state_recurrence|e2e)/[a-z0-9]+/builder/manual_time$'
ab_round() {
  for f in 0:0 2:1 4:1 8:1 2:2 4:2; do
    left 20 || return
    timeout 60 "$B/bench/kda_bench" --benchmark_filter="$F" --kda_state_regs_warps=${f%:*} \
      --kda_state_regs_k_split=${f#*:} --benchmark_format=json > "$d/w${f/:/s}_$1.json" 2> "$d/w${f/:/s}_$1.err"
    echo "ab $f round $1 rc=$? $((SECONDS-start))s" >> "$log"
  done
  pack
}
ab_round 1
[ "${R36_LEAN:-0}" = 1 ] && { pack; exit 0; }  # a short call: the suite, kda check and one A/B round only
ab_round 2
if left 60; then
  KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout 100 scripts/bench --no-build > "$d/bench_table.txt" 2>&1
  echo "scripts/bench rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
if left 100; then
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/kda_test_gpu_stages" \
    --gtest_filter='Cases/Stages.EachStageMatchesChunkedReference/0:Cases/Stages.EachStageMatchesChunkedReference/1' \
    > "$d/racecheck_stages.txt" 2>&1
  echo "racecheck stages/0,1 rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
if left 60; then
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/kda_test_gpu_stages" --gtest_filter='Cases/*' \
    > "$d/memcheck_stages.txt" 2>&1
  echo "memcheck stages rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
ab_round 3
pack
