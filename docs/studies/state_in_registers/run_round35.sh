#!/usr/bin/env bash
# Round 35's one device call (the machine was hard to get: one call had to do everything), from the repository root on
# the GPU machine with build-pack/bundle.txz carried (scripts/gpu_bundle's folder, packed: unpacked it is over the
# device tool's 64 MiB). Call GJ's binaries were built with default_on.patch's rule (the register-state kernel at 4
# warps on every folded batch the short-sequence kernel does not take; kStateRegsWarps was 4 then).
#   1. the GPU suite (run_gpu_suite): every test binary, the register-state kernel's own checks among them;
#   2. kda check with the launcher's choice and forced forms (0: the other kernels; 2, 4, 8 warps);
#   3. an interleaved A/B of the folded state stage and chunk_kda_fwd end to end: the other kernels (0) against the
#      register-state kernel at 2, 4 and 8 warps;
#   4. scripts/bench (the README's table) on the launcher's choice;
#   5. a second A/B round while time is left.
# Everything comes back as $OUT/r35.txz, packed again after each step (a call cut short still returns what was done).
# R35_BUDGET_S (default 430): no step starts after it.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r35
mkdir -p "$d"
budget=${R35_BUDGET_S:-430}
pack() { tar cJf "$OUT/r35.tmp" -C /tmp r35 && mv "$OUT/r35.tmp" "$OUT/r35.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"
OUT=$d timeout 150 "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
echo "suite rc=$? $((SECONDS-start))s" >> "$log"
pack
export LD_LIBRARY_PATH=$PWD/$B/bench:${LD_LIBRARY_PATH:-}
for r in -1 0 2 4 8; do
  timeout 30 "$B/bench/kda_bench" --kda_check --kda_state_regs_warps=$r > "$d/check_$r.txt" 2>&1
  echo "check $r rc=$? $((SECONDS-start))s" >> "$log"
done
pack
F="^(stage/state_recurrence|e2e)/(single1k|single8k|single32k|varlen16|mixed64|prefill4x4k)/builder/manual_time$"
ab_round() {
  for r in 0 2 4 8; do
    [ $((SECONDS - start)) -lt "$2" ] || return
    timeout 90 "$B/bench/kda_bench" --benchmark_filter="$F" --kda_state_regs_warps=$r --benchmark_format=json \
      > "$d/ab_${r}_$1.json" 2> "$d/ab_${r}_$1.err"
    echo "ab $r round $1 rc=$? $((SECONDS-start))s" >> "$log"
    pack
  done
}
ab_round 1 $((budget - 150))
if [ $((SECONDS - start)) -lt $((budget - 130)) ]; then
  KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout 150 scripts/bench --no-build > "$d/bench_table.txt" 2>&1
  echo "scripts/bench rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
ab_round 2 "${R35_SECOND_ROUND_UNTIL_S:-0}"
pack
