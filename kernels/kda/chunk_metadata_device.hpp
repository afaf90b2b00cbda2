// Device derivation of the chunk tables from device-resident cu_seqlens, for callers that pass none.
//
// No host round trip: NT stays on the device (written to *num_chunks) and the tables are sized by the host-known
// bound NT_max = ceil(T/BT) + N. Two small kernels:
//   1. one block scans the per-sequence chunk counts into chunk_offsets [N+1] and NT;
//   2. a grid over NT_max rows fills chunk_indices [NT_max,2] by binary search in chunk_offsets
//      (rows >= NT get (-1,-1), which every stage treats as "nothing to do").
// A malformed cu_seqlens (decreasing, outside [0, T]) is clamped through ChunkTable::sequence_range, which also
// sets kDeviceStatusBadCuSeqlens, and NT is capped at NT_max, so no table entry or chunk id can leave the buffers.
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
// first chunk; the thread then writes its run's offsets.
// (The kernels are templates on their block size so that a header included from several translation units defines
// no strong kernel symbol twice.)
template <int kThreads = kOffsetsScanThreads>
__global__ void __launch_bounds__(kThreads)
derive_chunk_offsets_kernel(detail::ChunkTable table, int chunk_size, int64_t max_chunks, int32_t* chunk_offsets,
                            int32_t* num_chunks) {
  constexpr int kOffsetsScanThreads = kThreads;
  const int64_t num_sequences = table.num_sequences;
  __shared__ int64_t run_total[kOffsetsScanThreads];
  const int tid = threadIdx.x;
  const int64_t per_thread = (num_sequences + kOffsetsScanThreads - 1) / kOffsetsScanThreads;
  const int64_t first = tid * per_thread;
  const int64_t last = first + per_thread < num_sequences ? first + per_thread : num_sequences;

  int64_t total = 0;
  for (int64_t n = first; n < last; ++n) total += chunk_count_of(table, n, chunk_size);
  run_total[tid] = total;
  __syncthreads();
  // Hillis-Steele inclusive scan over the run totals.
  for (int stride = 1; stride < kOffsetsScanThreads; stride *= 2) {
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
  if (tid == kOffsetsScanThreads - 1) {
    chunk_offsets[num_sequences] = capped(run_total[tid]);
    *num_chunks = capped(run_total[tid]);
  }
}

// One thread per table row g < max_chunks: finds n with offsets[n] <= g < offsets[n+1] (the last such n, so empty
// sequences, whose offsets repeat, are skipped) and writes (n, g - offsets[n]).
template <int kThreads = 256>
__global__ void __launch_bounds__(kThreads)
derive_chunk_indices_kernel(const int32_t* chunk_offsets, int64_t num_sequences, int64_t max_chunks,
                            int32_t* chunk_indices) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= max_chunks) return;
  const int64_t nt = chunk_offsets[num_sequences];
  if (g >= nt) {
    chunk_indices[2 * g] = -1;
    chunk_indices[2 * g + 1] = -1;
    return;
  }
  int64_t lo = 0, hi = num_sequences - 1;  // invariant: offsets[lo] <= g < offsets[hi+1]
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (chunk_offsets[mid] <= g) lo = mid; else hi = mid - 1;
  }
  chunk_indices[2 * g] = static_cast<int32_t>(lo);
  chunk_indices[2 * g + 1] = static_cast<int32_t>(g - chunk_offsets[lo]);
}

}  // namespace kda::kernels
