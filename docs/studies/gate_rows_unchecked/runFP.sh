#!/usr/bin/env bash
# Round 31, call FP (run from build-gpu-carry/ with abpack/ holding both binaries): kda check and a same-call A/B of kda_bench v68b (8fe84b6, main) against v69 (v68b plus the
# long-only fused prepare's gate sum without per-row length checks: the running sums add every row, and whole
# segments form G without store_gate's checks), four runs each, interleaved.
set -u
cd "$(dirname "$0")"
here=$PWD
start=$SECONDS
tar xJf ab.txz
mkdir -p $OUT/ab
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $OUT/ab/checks.txt
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
for v in v68b v69; do timeout 60 abpack/kda_bench_$v --kda_check > $OUT/ab/check_$v.txt 2>&1; echo "check $v rc=$? $((SECONDS-start))s" >> $OUT/ab/checks.txt; done
F='^(e2e/(single1k|single8k|single32k|varlen16|mixed64|chunked2k)/builder/manual_time|e2e/single8k/builder/gate_lb/manual_time|stage/prepare_inputs/(single8k|single32k|varlen16|mixed64)/builder/manual_time)$'
for i in 1 2 3 4; do for v in v68b v69; do
  timeout 100 abpack/kda_bench_$v --benchmark_filter="$F" --benchmark_format=json > $OUT/ab/${v}_$i.json 2>$OUT/ab/${v}_$i.err
  echo "run $v $i rc=$? $((SECONDS-start))s" >> $OUT/ab/checks.txt
done; [ $((SECONDS-start)) -gt 200 ] && break; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> $OUT/ab/checks.txt
tar cJf $OUT/ab.txz -C $OUT ab && rm -rf $OUT/ab
