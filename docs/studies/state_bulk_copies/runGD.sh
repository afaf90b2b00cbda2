#!/usr/bin/env bash
# Call GD (round 34): ncu source counters of chunk_kda_fwd's own long-sequence state kernel (output folded in, 32-column
# tiles, 8 chain + 8 output warps) on stage/state_recurrence/single8k, base binary (call GC profiled the first
# state launch, which was the kSeparate form's kernel), with its SASS listing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
tar xJf ab.txz
export LD_LIBRARY_PATH=$here/abpack:${LD_LIBRARY_PATH:-}
rm -rf st x; mkdir -p st x
K=state_recurrence_mma_kernelINS_6bf16_tELi64ELi128ELi32ELi8ELb1ELi8E
B='^stage/state_recurrence/single8k/builder/manual_time$'
start=$SECONDS
timeout 300 ncu --kernel-name-base mangled -k "regex:$K" --launch-skip 3 --launch-count 1 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --import-source no -o st/prof abpack/kda_bench_base --benchmark_filter="$B" > st/ncu_run.txt 2>&1
echo "ncu rc=$? $((SECONDS-start))s" >> st/ncu_run.txt
ncu -i st/prof.ncu-rep --page source --csv --print-source sass > st/prof.csv 2>> st/ncu_run.txt
ncu -i st/prof.ncu-rep --page details > st/details.txt 2>> st/ncu_run.txt
(cd x && cuobjdump -xelf all ../abpack/kda_bench_base > /dev/null 2>&1
 for c in *.cubin; do nvdisasm -gi -c "$c" > "$c.sass" 2>/dev/null || continue
   grep -q "$K" "$c.sass" && cp "$c.sass" ../st/state.sass; done)
echo "done $((SECONDS-start))s" >> st/ncu_run.txt
rm -f st/prof.ncu-rep
tar cJf "$OUT/st.txz" st
