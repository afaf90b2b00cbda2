#!/usr/bin/env bash
# Round 40's device call: the close-out figures of issue 5 on the code of c598144 (4ab835d's kernels; the bundle is
# scripts/gpu_bundle of that build, xz-packed as build-pack/bundle.txz and carried). From the repository root:
#   1. scripts/bench --stages: the end-to-end table (both gates, both metadata modes) and every stage alone;
#   2. ncu on one chunk_kda_fwd call of each batch (builder tables, softplus gate): duration, DRAM and SM throughput,
#      tensor-pipe use, occupancy, per kernel: the per-kernel breakdown the issue asks for;
#   3. the GPU suite and kda check, while time is left.
# Everything comes back as $OUT/r40.txz, packed again after each step. R40_BUDGET_S (default 540): no step starts
# after it.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/r40
mkdir -p "$d/ncu"
budget=${R40_BUDGET_S:-540}
left() { [ $((SECONDS - start)) -lt $((budget - $1)) ]; }
pack() { tar cJf "$OUT/r40.tmp" -C /tmp r40 && mv "$OUT/r40.tmp" "$OUT/r40.txz"; }
log=$d/log.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,temperature.gpu,power.limit \
  --format=csv > "$log"
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
KDA_BUILD_DIR=$B KDA_BENCH_OUT=$d/bench.json timeout 260 scripts/bench --no-build --stages > "$d/bench_table.txt" 2>&1
echo "scripts/bench --stages rc=$? $((SECONDS-start))s" >> "$log"
pack
# One call, no warm-up: ncu flushes the caches before every kernel anyway. The filter leaves out fill_random_kernel.
for b in single1k single8k single32k varlen16 mixed64 spec256x8 prefill4x4k chunked2k; do
  left 40 || break
  timeout 60 ncu -k 'regex:chunk|state|derive' --launch-count 4 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    -o "$d/ncu/$b" "$B/bench/kda_bench" --benchmark_filter="^e2e/$b/builder/manual_time\$" --kda_calls=1 \
    --kda_warmup=0 > "$d/ncu/$b.run.txt" 2>&1
  echo "ncu $b rc=$? $((SECONDS-start))s" >> "$log"
  ncu -i "$d/ncu/$b.ncu-rep" --page raw --csv > "$d/ncu/$b.raw.csv" 2>> "$d/ncu/$b.run.txt"
  ncu -i "$d/ncu/$b.ncu-rep" --page details > "$d/ncu/$b.details.txt" 2>> "$d/ncu/$b.run.txt"
  rm -f "$d/ncu/$b.ncu-rep"
done
pack
if left 150; then
  OUT=$d timeout 200 "$B/run_gpu_suite" > "$d/suite.txt" 2>&1
  echo "suite rc=$? $((SECONDS-start))s" >> "$log"
  timeout 30 "$B/bench/kda_bench" --kda_check > "$d/check.txt" 2>&1
  echo "check rc=$? $((SECONDS-start))s" >> "$log"
  pack
fi
echo "done $((SECONDS-start))s" >> "$log"
pack
