#!/usr/bin/env bash
# Round 39's third device call (call GN): ncu on spec256x8's two launches under the launcher's own choice (builder
# tables, bound 8: the warp-per-item prepare, form 2, then the short-only state kernel), one chunk_kda_fwd call after
# two, from the repository root with build-pack/bundle.txz (scripts/gpu_bundle of 4ab835d's build, xz) carried.
# Question: how far is the state stage from the GPU's copy rate, and what holds it back (bytes in flight, occupancy,
# stalls)? Everything comes back as $OUT/ncu.txz.
set -u
start=$SECONDS
tar xJf build-pack/bundle.txz
B=build-gpu-run
d=/tmp/ncu39
mkdir -p "$d"
export LD_LIBRARY_PATH=$PWD/$B/bench:$PWD/$B/capi:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem --format=csv > "$d/gpu.txt"
F='^e2e/spec256x8/builder/manual_time$'
timeout 240 ncu -k 'regex:warp_short|state_short' --launch-skip 4 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum \
  -o "$d/prof" "$B/bench/kda_bench" --benchmark_filter="$F" --kda_calls=2 --kda_warmup=1 > "$d/ncu_run.txt" 2>&1
echo "ncu rc=$? $((SECONDS-start))s" >> "$d/ncu_run.txt"
ncu -i "$d/prof.ncu-rep" --page details > "$d/details.txt" 2>> "$d/ncu_run.txt"
ncu -i "$d/prof.ncu-rep" --page raw --csv > "$d/raw.csv" 2>> "$d/ncu_run.txt"
rm -f "$d/prof.ncu-rep"
echo "done $((SECONDS-start))s" >> "$d/ncu_run.txt"
tar cJf "$OUT/ncu.txz" -C /tmp ncu39
