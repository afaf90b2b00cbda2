#!/usr/bin/env bash
# Round 29, call FH: same-call A/B of kda_bench base (20e3cc4), v65b (call FF's build: the gate sum from the raw gates
# in both fused prepare kernels) and v65c (call FG's: in the long-only kernel only), up to three runs each, interleaved,
# prepare_inputs and e2e only: did v65b's gain in call FF and v65c's loss in call FG come from the code or the machine?
set -u
cd "$(dirname "$0")"
here=$PWD
start=$SECONDS
tar xJf ab.txz
mkdir -p $OUT/ab
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
F='^(e2e/(single8k|single32k|mixed64)/builder/manual_time|stage/prepare_inputs/(single8k|single32k|varlen16|mixed64)/builder/manual_time)$'
for i in 1 2 3; do for v in base v65b v65c; do
  timeout 100 abpack/kda_bench_$v --benchmark_filter="$F" --benchmark_format=json > $OUT/ab/${v}_$i.json 2>$OUT/ab/${v}_$i.err
  echo "run $v $i rc=$? $((SECONDS-start))s" >> $OUT/ab/checks.txt
  [ $((SECONDS-start)) -gt 110 ] && break 2
done; done
tar cJf $OUT/ab.txz -C $OUT ab && rm -rf $OUT/ab
