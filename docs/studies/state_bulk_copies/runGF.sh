#!/usr/bin/env bash
# Call GF (round 34): v78 (bulk copies in the long-sequence state kernel) against main: the same-call A/B
# (device_ab.sh), then the GPU suite, racecheck, synccheck and memcheck on v78's bundle. Everything in $OUT/gf.txz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$OUT/gf"
trap 'tar cJf "$OUT/gf.txz" -C "$OUT" gf; rm -rf "$OUT/gf"' EXIT
log=$OUT/gf/steps.txt
start=$SECONDS
(cd "$root" && tar xJf "$here/suite.txz")  # build-gpu-run: v78's bundle (scripts/gpu_bundle build-dev)
# The A/B pack: main's kda_bench from base.txz, v78's from the bundle.
cd "$here" && tar xJf base.txz && cp "$root/build-gpu-run/bench/kda_bench" abpack/kda_bench_v78 && tar cJf ab.txz abpack
echo "packed $((SECONDS-start))s" >> "$log"
export AB_FILTER='^(e2e/(single1k|single8k|single32k|varlen16|mixed64|spec256x8|chunked2k|prefill4x4k)/builder/manual_time|e2e/single8k/builder/gate_lb/manual_time|e2e/single8k/derived/manual_time|stage/state_recurrence/(single1k|single8k|single32k|varlen16|mixed64)/builder/manual_time)$'
AB_ROUNDS=3 AB_BUDGET_S=150 AB_KERNEL=state_recurrence_mma_kernelINS_6bf16_tELi64ELi128ELi32ELi8ELb1ELi8E AB_DIR=$here \
  bash "$root/scripts/profiling/device_ab.sh" base v78 >> "$log" 2>&1
echo "ab rc=$? $((SECONDS-start))s" >> "$log"
tar xJf "$OUT/ab.txz" -C "$OUT/gf" && rm -f "$OUT/ab.txz"
# The GPU suite and the sanitizers on v78.
suite=$root/build-gpu-run
OUT=$OUT/gf timeout 110 "$suite/run_gpu_suite" >> "$log" 2>&1; echo "suite rc=$? $((SECONDS-start))s" >> "$log"
cd "$suite"
for tool in racecheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 ./kda_test_gpu_stages --gtest_filter='Cases/Stages.*' \
    > "$OUT/gf/${tool}_stages.log" 2>&1; echo "$tool stages rc=$? $((SECONDS-start))s" >> "$log"
done
KDA_PIPELINE_FILTER='*BitIdentity*:*Graph*:*Robust*:*ShortState*:*Unaligned*' OUT=$OUT/gf timeout 120 ./run_gpu_suite memcheck >> "$log" 2>&1
echo "memcheck rc=$? $((SECONDS-start))s" >> "$log"
