// Stage 6: the output (FLA chunk_gla_fwd_o_gk).
//
//   o[i,:] = round( scale * sum_d round(q_i[d] exp2(G_i[d])) h[chunk][d,:]  +  sum_{j<=i} Aqk[i,j] v_new[j,:] )
//
// The inter-chunk part uses the pre-chunk state h; the intra-chunk part the Aqk matrix (scale already inside) and
// the corrected values v_new. Reads q, G, h, Aqk and v_new only — never v — so `o` may alias `v` (vLLM passes o=v):
// v is consumed by recompute_w_u, which runs before this stage on the same stream.
// One block per (chunk, head, V-tile of kOutputTileV columns); d is walked in slices staged in shared memory.
#pragma once

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

constexpr int kOutputThreads = 256;
constexpr int kOutputTileV = 32;

struct ChunkOutputParams {
  detail::ChunkTable chunks;
  TensorView q;              // [T,H,K] I/O type (normalised when l2norm is on)
  const float* G = nullptr;  // [T,H,K]; unused when q_gated
  bool q_gated = false;      // q already holds round(q exp2 G) (the fused prepare's qg)
  const void* h = nullptr;   // [NT,H,K,V] I/O type
  const float* Aqk = nullptr;  // [T,H,BT]
  const void* v_new = nullptr; // [T,H,V] I/O type
  float scale = 1.0f;
  int num_heads = 0, head_dim_k = 0, head_dim_v = 0;
  MutableTensorView o;       // out [T,H,V] I/O type
};

template <typename E, int BT>
__global__ void __launch_bounds__(kOutputThreads) chunk_output_kernel(ChunkOutputParams p) {
  constexpr int kSlice = 32;
  constexpr int kRowsPerPass = kOutputThreads / kOutputTileV;
  constexpr int kRowsPerThread = BT / kRowsPerPass;
  __shared__ float qg_s[BT][kSlice + 1];
  __shared__ float h_s[kSlice][kOutputTileV + 1];
  __shared__ float a_s[BT][BT + 1];
  __shared__ float vn_s[BT][kOutputTileV + 1];

  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int v0 = blockIdx.z * kOutputTileV;
  const int K = p.head_dim_k, V = p.head_dim_v;
  const E* h_in = static_cast<const E*>(p.h);
  const E* vn_in = static_cast<const E*>(p.v_new);
  const int64_t gid = blockIdx.x;
  const int v = threadIdx.x % kOutputTileV;
  const int i0 = threadIdx.x / kOutputTileV;

  float inter[kRowsPerThread] = {};
  for (int d0 = 0; d0 < K; d0 += kSlice) {
    __syncthreads();
    for (int e = threadIdx.x; e < BT * kSlice; e += kOutputThreads) {
      const int i = e / kSlice, d = e % kSlice;
      float qg = 0.0f;
      if (i < chunk.length) {
        const int64_t t = chunk.start + i;
        qg = p.q_gated ? detail::load_elem<E>(p.q, t, h, d0 + d)
                       : numeric::round_to<E>(detail::load_elem<E>(p.q, t, h, d0 + d) *
                                              exp2f(p.G[(t * p.num_heads + h) * K + d0 + d]));
      }
      qg_s[i][d] = qg;
    }
    for (int e = threadIdx.x; e < kSlice * kOutputTileV; e += kOutputThreads) {
      const int d = e / kOutputTileV, vv = e % kOutputTileV;
      h_s[d][vv] = numeric::to_float(h_in[((gid * p.num_heads + h) * K + d0 + d) * V + v0 + vv]);
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int i = i0 + r * kRowsPerPass;
      for (int d = 0; d < kSlice; ++d) inter[r] += qg_s[i][d] * h_s[d][v];
    }
  }

  for (int e = threadIdx.x; e < BT * BT; e += kOutputThreads) {
    const int i = e / BT, j = e % BT;
    a_s[i][j] = i < chunk.length ? p.Aqk[((chunk.start + i) * p.num_heads + h) * BT + j] : 0.0f;
  }
  for (int e = threadIdx.x; e < BT * kOutputTileV; e += kOutputThreads) {
    const int j = e / kOutputTileV, vv = e % kOutputTileV;
    vn_s[j][vv] = j < chunk.length
                      ? numeric::to_float(vn_in[((chunk.start + j) * p.num_heads + h) * V + v0 + vv])
                      : 0.0f;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = i0 + r * kRowsPerPass;
    if (i >= chunk.length) continue;
    float intra = 0.0f;
    for (int j = 0; j <= i; ++j) intra += a_s[i][j] * vn_s[j][v];
    detail::store_elem<E>(p.o, chunk.start + i, h, v0 + v, p.scale * inter[r] + intra);
  }
}

}  // namespace kda::kernels
