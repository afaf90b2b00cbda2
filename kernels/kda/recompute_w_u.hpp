// Stage 4: recompute_w_u (FLA recompute_w_u_fwd): the WY representation of the chunk's delta-rule updates.
//
//   w[i,:]  = round( sum_{j<=i} Tinv[i,j] * round(beta_j * k_j[:] * exp2(G_j[:])) )
//   u[i,:]  = round( sum_{j<=i} Tinv[i,j] * round(beta_j * v_j[:]) )
//   kg[i,:] = round( k_i[:] * exp2(G_last[:] - G_i[:]) )      (G_last: the chunk's last valid row)
//
// G is the chunk-local cumsum (<= 0 for non-positive gates), so every exp2 argument here is <= 0.
// One block per (chunk, head); a slice of kSlice channels of the scaled right-hand side (beta k exp2 G, or beta v)
// is staged in shared memory with Tinv, and each thread produces BT*kSlice/256 outputs of the slice.
#pragma once

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

constexpr int kWuThreads = 256;

struct RecomputeWuParams {
  detail::ChunkTable chunks;
  TensorView k, v;        // [T,H,K], [T,H,V] in the I/O type (k normalised when l2norm is on)
  TensorView beta;        // raw beta [T,H]
  ScalarType beta_type = ScalarType::kFloat32;
  BetaActivation beta_activation = BetaActivation::kNone;
  const float* G = nullptr;     // [T,H,K]
  const float* Tinv = nullptr;  // [T,H,BT]
  int num_heads = 0, head_dim_k = 0, head_dim_v = 0;
  MutableTensorView w, u, kg;   // outputs in the I/O type: [T,H,K], [T,H,V], [T,H,K]
};

template <typename E, int BT>
__global__ void __launch_bounds__(kWuThreads) recompute_w_u_kernel(RecomputeWuParams p) {
  constexpr int kSlice = 32;
  constexpr int kRowsPerPass = kWuThreads / kSlice;
  __shared__ float tinv_s[BT][BT + 1];
  __shared__ float rhs_s[BT][kSlice + 1];
  __shared__ float beta_s[BT];

  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int64_t row0 = chunk.start * p.num_heads + h;  // (t, h) row index of the chunk's first token
  auto g_at = [&](int i, int d) { return p.G[((chunk.start + i) * p.num_heads + h) * p.head_dim_k + d]; };

  for (int e = threadIdx.x; e < BT * BT; e += kWuThreads) {
    const int i = e / BT, j = e % BT;
    tinv_s[i][j] = i < chunk.length ? p.Tinv[(row0 + int64_t(i) * p.num_heads) * BT + j] : 0.0f;
  }
  for (int i = threadIdx.x; i < BT; i += kWuThreads) {
    beta_s[i] = i < chunk.length
                    ? detail::activate_beta(detail::load_scalar(p.beta, p.beta_type, chunk.start + i, h, 0),
                                            p.beta_activation)
                    : 0.0f;
  }

  // Two passes over the same code: pass 0 makes w from k (dim K), pass 1 makes u from v (dim V).
  for (int pass = 0; pass < 2; ++pass) {
    const int dim = pass == 0 ? p.head_dim_k : p.head_dim_v;
    for (int d0 = 0; d0 < dim; d0 += kSlice) {
      __syncthreads();
      for (int e = threadIdx.x; e < BT * kSlice; e += kWuThreads) {
        const int j = e / kSlice, d = e % kSlice;
        float rhs = 0.0f;
        if (j < chunk.length) {
          const int64_t t = chunk.start + j;
          rhs = numeric::round_to<E>(pass == 0
                                         ? beta_s[j] * detail::load_elem<E>(p.k, t, h, d0 + d) * exp2f(g_at(j, d0 + d))
                                         : beta_s[j] * detail::load_elem<E>(p.v, t, h, d0 + d));
        }
        rhs_s[j][d] = rhs;
      }
      __syncthreads();
      const int d = threadIdx.x % kSlice;
      for (int i = threadIdx.x / kSlice; i < chunk.length; i += kRowsPerPass) {
        float acc = 0.0f;
        for (int j = 0; j <= i; ++j) acc += tinv_s[i][j] * rhs_s[j][d];
        detail::store_elem<E>(pass == 0 ? p.w : p.u, chunk.start + i, h, d0 + d, acc);
      }
    }
  }

  // kg: the keys decayed to the end of the chunk, used by the state update.
  const int last = chunk.length - 1;
  for (int e = threadIdx.x; e < chunk.length * p.head_dim_k; e += kWuThreads) {
    const int i = e / p.head_dim_k, d = e % p.head_dim_k;
    const float decay = exp2f(g_at(last, d) - g_at(i, d));
    detail::store_elem<E>(p.kg, chunk.start + i, h, d, detail::load_elem<E>(p.k, chunk.start + i, h, d) * decay);
  }
}

}  // namespace kda::kernels
