#!/usr/bin/env bash
# Round 33, call FX (run from build-gpu-ab/ with abpack/ holding the binaries): kda check and a same-call A/B of
# kda_bench base (9e70763) against v74 (the long-only fused prepare's slice copies of q, k, g and slice outputs qg, w's
# right-hand side, kg addressed by 32-bit element offsets) and v74b (v74 plus the w/u part's w and u stores by 32-bit
# offsets), four runs each, interleaved; then the spills of the bf16 K = V = 128 long-only prepare per loop depth.
set -u
cd "$(dirname "$0")"
here=$PWD
start=$SECONDS
tar xJf ab.txz
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
mkdir -p $OUT/ab
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > $OUT/ab/checks.txt
for v in base v74 v74b; do timeout 60 abpack/kda_bench_$v --kda_check > $OUT/ab/check_$v.txt 2>&1; echo "check $v rc=$? $((SECONDS-start))s" >> $OUT/ab/checks.txt; done
F='^(e2e/(single1k|single8k|single32k|varlen16|mixed64|chunked2k|prefill4x4k)/builder/manual_time|e2e/single8k/builder/gate_lb/manual_time|stage/prepare_inputs/(single8k|single32k|varlen16|mixed64)/builder/manual_time)$'
for i in 1 2 3 4; do for v in base v74 v74b; do
  timeout 100 abpack/kda_bench_$v --benchmark_filter="$F" --benchmark_format=json > $OUT/ab/${v}_$i.json 2>$OUT/ab/${v}_$i.err
  echo "run $v $i rc=$? $((SECONDS-start))s" >> $OUT/ab/checks.txt
done; [ $((SECONDS-start)) -gt 300 ] && break; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> $OUT/ab/checks.txt
# The kernels' code from each binary itself (cuobjdump -xelf), so the spills are those of the binaries timed.
for v in base v74 v74b; do
  cuobjdump -res-usage abpack/kda_bench_$v 2>&1 | grep -A1 'chunk_prepare_inputs_mma_kernel' > $OUT/ab/res_$v.txt
  mkdir -p x_$v && (cd x_$v && cuobjdump -xelf all ../abpack/kda_bench_$v > /dev/null 2>&1)
  for c in x_$v/*.cubin; do
    nvdisasm -g -c $c > $c.sass 2>/dev/null || continue
    grep -q 'chunk_prepare_inputs_mma_kernelINS_6bf16_tELi64ELi128ELi128E' $c.sass || continue
    python3 abpack/sass_spills.py $c.sass chunk_prepare_inputs_mma_kernelINS_6bf16_tELi64ELi128ELi128E > $OUT/ab/spills_$v.txt 2>&1
  done
done
echo "done $((SECONDS-start))s" >> $OUT/ab/checks.txt
tar cJf $OUT/ab.txz -C $OUT ab && rm -rf $OUT/ab
