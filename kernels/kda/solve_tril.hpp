// Stage 3: solve_tril, Tinv = (I + A)^-1 per chunk for a strictly lower triangular A (FLA solve_tril), fp32.
//
// Forward substitution, Tinv[i,:] = e_i - sum_{m<i} A[i,m] Tinv[m,:]. Thread j owns column j: column j of Tinv
// depends only on column j, so the threads never wait on one another once A is in shared memory. Chunk sizes 16, 32
// and 64. Input and output are token-major [T,H,BT] (the layout intra_chunk writes).
#pragma once

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

struct SolveTrilParams {
  detail::ChunkTable chunks;
  const float* A = nullptr;  // [T,H,BT], strictly lower inside each chunk
  int num_heads = 0;
  float* Tinv = nullptr;     // out [T,H,BT], unit lower triangular; may not alias A
};

template <int BT>
__global__ void __launch_bounds__(BT) solve_tril_kernel(SolveTrilParams p) {
  __shared__ float a_s[BT][BT + 1];
  __shared__ float t_s[BT][BT + 1];
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int j = threadIdx.x;

  for (int i = 0; i < BT; ++i) {
    a_s[i][j] = i < chunk.length ? p.A[((chunk.start + i) * p.num_heads + h) * BT + j] : 0.0f;
  }
  __syncthreads();

  for (int i = 0; i < chunk.length; ++i) {
    float x = i == j ? 1.0f : 0.0f;
    for (int m = j; m < i; ++m) x -= a_s[i][m] * t_s[m][j];
    t_s[i][j] = i >= j ? x : 0.0f;
    p.Tinv[((chunk.start + i) * p.num_heads + h) * BT + j] = j < chunk.length ? t_s[i][j] : 0.0f;
  }
}

}  // namespace kda::kernels
