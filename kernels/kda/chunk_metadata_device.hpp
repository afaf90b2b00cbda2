// Device derivation of the chunk tables from device-resident cu_seqlens, for callers that pass none.
//
// No host round trip: NT stays on the device (written to *num_chunks) and the tables are sized by the host-known
// bound NT_max = ceil(T/BT) + N. One launch of one block (every launch costs the caller 3-5 us of host time; see
// docs/performance.md, "Host time"):
//   1. the block scans the per-sequence chunk counts into chunk_offsets [N+1] and NT;
//   2. it fills chunk_indices [NT_max,2], each row g by binary search, first over the scan's per-thread run totals
//      (shared memory), then inside the one run that holds g (rows >= NT get (-1,-1), which every stage treats as
//      "nothing to do").
// A malformed cu_seqlens (decreasing, outside [0, T]) is clamped through ChunkTable::sequence_range, which also
// sets kDeviceStatusBadCuSeqlens, and NT is capped at NT_max, so no table entry or chunk id can leave the buffers.
// One block does all of it, so its cost grows with N and NT_max (a few microseconds of GPU time at engine batch
// sizes: NT_max ~ 1,000 rows is one pass of the block).
#pragma once

#include <cstdint>

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

constexpr int kOffsetsScanThreads = 1024;

// Chunk count of sequence n after clamping its range into [0, T].
__device__ inline int64_t chunk_count_of(const detail::ChunkTable& t, int64_t n, int chunk_size) {
  int64_t bos, eos;
  t.sequence_range(n, &bos, &eos);
  return (eos - bos + chunk_size - 1) / chunk_size;
}

// One block. Each thread owns a contiguous run of sequences; a block-wide scan of the run totals gives each run's
// first chunk; the thread then writes its run's offsets. Then every thread fills rows of chunk_indices: row g
// belongs to the last sequence n with offsets[n] <= g (so empty sequences, whose offsets repeat, are skipped) and
// holds (n, g - offsets[n]). The block first zeroes clear_words words from table.device_status on (chunk_kda_fwd's
// status word for this call and the state stage's item counter after it; this kernel is the call's first, so
// nothing else has reported yet) and only then reports.
// (The kernel is a template on its block size so that a header included from several translation units defines no
// strong kernel symbol twice.)
template <int kThreads = kOffsetsScanThreads>
__global__ void __launch_bounds__(kThreads)
derive_chunk_tables_kernel(detail::ChunkTable table, int chunk_size, int64_t max_chunks, int32_t* chunk_offsets,
                           int32_t* num_chunks, int32_t* chunk_indices, int clear_words) {
  const int64_t num_sequences = table.num_sequences;
  __shared__ int64_t run_total[kThreads];
  const int tid = threadIdx.x;
  if (tid < clear_words && table.device_status != nullptr) atomicExch(table.device_status + tid, 0u);
  if (clear_words > 0) __syncthreads();  // uniform: the clear is ordered before every report below
  const int64_t per_thread = (num_sequences + kThreads - 1) / kThreads;
  const int64_t first = tid * per_thread;
  const int64_t last = first + per_thread < num_sequences ? first + per_thread : num_sequences;

  int64_t total = 0;
  for (int64_t n = first; n < last; ++n) total += chunk_count_of(table, n, chunk_size);
  run_total[tid] = total;
  __syncthreads();
  // Hillis-Steele inclusive scan over the run totals.
  for (int stride = 1; stride < kThreads; stride *= 2) {
    const int64_t add = tid >= stride ? run_total[tid - stride] : 0;
    __syncthreads();
    run_total[tid] += add;
    __syncthreads();
  }
  // Offsets are capped at NT_max: only a malformed cu_seqlens (reported above) can reach the cap.
  auto capped = [&](int64_t x) { return static_cast<int32_t>(x < max_chunks ? x : max_chunks); };
  int64_t offset = run_total[tid] - total;  // exclusive prefix
  for (int64_t n = first; n < last; ++n) {
    chunk_offsets[n] = capped(offset);
    offset += chunk_count_of(table, n, chunk_size);
  }
  const int32_t nt = capped(run_total[kThreads - 1]);
  if (tid == kThreads - 1) {
    chunk_offsets[num_sequences] = nt;
    *num_chunks = nt;
  }
  __syncthreads();  // every offset is written and visible to the block

  for (int64_t g = tid; g < max_chunks; g += kThreads) {
    if (g >= nt) {
      chunk_indices[2 * g] = -1;
      chunk_indices[2 * g + 1] = -1;
      continue;
    }
    // The run r that holds row g: the first with run_total[r] > g (exists, since g < nt <= run_total[last]).
    int lo = 0, hi = kThreads - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (run_total[mid] > g) hi = mid; else lo = mid + 1;
    }
    // Inside run lo: the last n with offsets[n] <= g. offsets[first of the run] <= g (its exclusive prefix, or
    // the cap, is at most g), and every later run starts past g, so this is the last such n overall.
    int64_t n_lo = lo * per_thread, n_hi = n_lo + per_thread - 1;
    if (n_hi > num_sequences - 1) n_hi = num_sequences - 1;
    while (n_lo < n_hi) {
      const int64_t mid = (n_lo + n_hi + 1) / 2;
      if (chunk_offsets[mid] <= g) n_lo = mid; else n_hi = mid - 1;
    }
    chunk_indices[2 * g] = static_cast<int32_t>(n_lo);
    chunk_indices[2 * g + 1] = static_cast<int32_t>(g - chunk_offsets[n_lo]);
  }
}

}  // namespace kda::kernels
