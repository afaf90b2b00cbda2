// Stage 3: solve_tril, Tinv = (I + A)^-1 per chunk for a strictly lower triangular A (FLA solve_tril), fp32.
//
// One block of kSolveThreads threads per (chunk, head): A is staged in shared memory and inverted by
// detail::tril_inverse (16 x 16 tiles: diagonal tiles by substitution, the rest as tile products), the same function
// the intra-chunk kernel calls when it produces Tinv itself. Chunk sizes 16, 32 and 64. Input and output are
// token-major [T,H,BT] (the layout intra_chunk writes).
#pragma once

#include "kda/detail/chunk_table.hpp"
#include "kda/detail/tril_inverse.hpp"

namespace kda::kernels {

struct SolveTrilParams {
  detail::ChunkTable chunks;
  const float* A = nullptr;  // [T,H,BT], strictly lower inside each chunk
  int num_heads = 0;
  float* Tinv = nullptr;     // out [T,H,BT], unit lower triangular; may not alias A
};

constexpr int kSolveThreads = 128;

template <int BT>
__global__ void __launch_bounds__(kSolveThreads) solve_tril_kernel(SolveTrilParams p) {
  constexpr int kLd = BT + 4;  // rows 16-byte aligned, as tril_inverse needs
  __shared__ __align__(16) float a_s[BT * kLd];
  __shared__ __align__(16) float t_s[BT * kLd];
  __shared__ __align__(16) float scratch[detail::tril_inverse_scratch_floats<BT>()];
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;

  for (int e = threadIdx.x; e < BT * BT; e += kSolveThreads) {
    const int i = e / BT, j = e % BT;
    a_s[i * kLd + j] = i < chunk.length ? p.A[((chunk.start + i) * p.num_heads + h) * BT + j] : 0.0f;
  }
  __syncthreads();
  detail::tril_inverse<BT, kSolveThreads>(a_s, t_s, scratch, kLd, chunk.length);
  for (int e = threadIdx.x; e < chunk.length * BT; e += kSolveThreads) {
    const int i = e / BT, j = e % BT;
    p.Tinv[((chunk.start + i) * p.num_heads + h) * BT + j] = j < chunk.length ? t_s[i * kLd + j] : 0.0f;
  }
}

}  // namespace kda::kernels
