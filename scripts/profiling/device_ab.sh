#!/usr/bin/env bash
# Same-call A/B of kda_bench binaries on the GPU machine, the driver of docs/validation.md's A/B calls since round 33.
#
#   scripts/profiling/device_ab.sh [--ncu] LABEL...
#
# AB_DIR (default: the folder of this script) holds ab.txz: an archive of abpack/ with kda_bench_<LABEL> for each label (built on the
# development machine), the libbenchmark shared library they link (/lib/x86_64-linux-gnu/libbenchmark.so.1debian) and
# scripts/profiling/sass_spills.py. Everything the call measures comes back as one archive, $OUT/ab.txz (a device call
# returns at most eight files).
#
# Without --ncu: `kda check` of each binary, then AB_ROUNDS rounds (default 4) of every binary in turn on the
# benchmarks matching AB_FILTER (default: the long batches end to end and the fused prepare alone), stopping after the
# round that passes AB_BUDGET_S seconds (default 300); then each binary's register use and the spill stores and
# reloads per loop depth of the kernel named by AB_KERNEL (default: the bf16 K = V = 128 long-only fused prepare),
# read from the binary itself (cuobjdump -xelf, nvdisasm, sass_spills.py), so they are those of the code timed.
# Read the runs with scripts/profiling/bench_ab.py DIR LABEL,LABEL,...
#
# With --ncu: executed warp instructions, issue activity and stall cycles per issued instruction of AB_KERNEL on
# AB_NCU_BENCH (default stage/prepare_inputs/single8k, builder tables), one launch after three, per binary: seconds
# per binary, and the count a candidate must lower (round 33: a kernel 544 instructions shorter executed 4.6 % more).
set -u
cd "${AB_DIR:-$(dirname "$0")}" || exit 2  # where ab.txz is: AB_DIR, else beside a copy of this script
here=$PWD
start=$SECONDS
ncu_mode=0
if [ "${1:-}" = "--ncu" ]; then ncu_mode=1; shift; fi
labels=("$@")
[ ${#labels[@]} -gt 0 ] || { echo "usage: device_ab.sh [--ncu] LABEL..." >&2; exit 2; }
kernel=${AB_KERNEL:-chunk_prepare_inputs_mma_kernelINS_6bf16_tELi64ELi128ELi128E}
tar xJf ab.txz
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT/ab"
log=$OUT/ab/checks.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$log"

if [ $ncu_mode = 1 ]; then
  M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
  M=$M,sm__warps_active.avg.pct_of_peak_sustained_active
  for s in short_scoreboard long_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle no_instruction \
           not_selected selected dispatch_stall branch_resolving membar sleeping drain tex_throttle imc_miss misc; do
    M=$M,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
  done
  bench=${AB_NCU_BENCH:-^stage/prepare_inputs/single8k/builder/manual_time$}
  for v in "${labels[@]}"; do
    timeout 200 ncu --metrics $M -k "regex:${kernel%%INS_*}" --launch-skip 3 -c 1 \
      "abpack/kda_bench_$v" --benchmark_filter="$bench" > "$OUT/ab/ncu_$v.txt" 2>&1
    echo "ncu $v rc=$? $((SECONDS-start))s" >> "$log"
  done
else
  for v in "${labels[@]}"; do
    timeout 60 "abpack/kda_bench_$v" --kda_check > "$OUT/ab/check_$v.txt" 2>&1
    echo "check $v rc=$? $((SECONDS-start))s" >> "$log"
  done
  F=${AB_FILTER:-'^(e2e/(single1k|single8k|single32k|varlen16|mixed64|chunked2k|prefill4x4k)/builder/manual_time|e2e/single8k/builder/gate_lb/manual_time|stage/prepare_inputs/(single8k|single32k|varlen16|mixed64)/builder/manual_time)$'}
  for i in $(seq 1 "${AB_ROUNDS:-4}"); do
    for v in "${labels[@]}"; do
      timeout 100 "abpack/kda_bench_$v" --benchmark_filter="$F" --benchmark_format=json > "$OUT/ab/${v}_$i.json" \
        2> "$OUT/ab/${v}_$i.err"
      echo "run $v $i rc=$? $((SECONDS-start))s" >> "$log"
    done
    [ $((SECONDS - start)) -gt "${AB_BUDGET_S:-300}" ] && break
  done
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> "$log"
  for v in "${labels[@]}"; do
    cuobjdump -res-usage "abpack/kda_bench_$v" 2>&1 | grep -A1 "${kernel%%INS_*}" > "$OUT/ab/res_$v.txt"
    mkdir -p "x_$v" && (cd "x_$v" && cuobjdump -xelf all "../abpack/kda_bench_$v" > /dev/null 2>&1)
    for c in "x_$v"/*.cubin; do
      nvdisasm -g -c "$c" > "$c.sass" 2>/dev/null || continue
      grep -q "$kernel" "$c.sass" || continue
      python3 abpack/sass_spills.py "$c.sass" "$kernel" > "$OUT/ab/spills_$v.txt" 2>&1
    done
  done
fi
echo "done $((SECONDS-start))s" >> "$log"
tar cJf "$OUT/ab.txz" -C "$OUT" ab && rm -rf "$OUT/ab"
