#!/usr/bin/env bash
# The short form of run_round38.sh for a last device call with little time left: the A/B first (one round of each
# form, then a second while time is left), the warp kernel's own tests, the probe, then the whole GPU suite in what
# remains. Results in $OUT/r38.txz. R38_BUDGET_S (default 200): no step starts after it.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r38
mkdir -p "$d"
budget=${R38_BUDGET_S:-200}
left() { [ $((SECONDS - start)) -lt $((budget - $1)) ]; }
pack() { tar cJf "$OUT/r38.tmp" -C /tmp r38 && mv "$OUT/r38.tmp" "$OUT/r38.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
F='^(stage/prepare_inputs|e2e)/spec256x8/builder/manual_time$'
for r in 1 2; do
  for w in 0 1 2; do
    left 15 || break
    timeout 40 "$B/bench/kda_bench" --benchmark_filter="$F" --kda_warp_short=$w --benchmark_format=json \
      > "$d/ws${w}_$r.json" 2> "$d/ws${w}_$r.err"
    echo "ab warp_short=$w round $r rc=$? $((SECONDS-start))s" >> "$log"
  done
  pack
  [ $r -eq 1 ] && { timeout 90 "$B/kda_test_gpu_pipeline" --gtest_filter='*WarpShort*:*SequenceBound*' \
      > "$d/pipeline_warp.txt" 2>&1; echo "pipeline warp tests rc=$? $((SECONDS-start))s" >> "$log"; pack; }
done
timeout 20 build-pack/probe 256 8 > "$d/probe.txt" 2>&1
echo "probe rc=$? $((SECONDS-start))s" >> "$log"
pack
if left 30; then
  OUT=$d timeout $((budget - (SECONDS - start))) "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
  echo "suite rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
