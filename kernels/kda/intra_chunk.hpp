// Stage 2: intra-chunk matrices (FLA chunk_kda_scaled_dot_kkt / the intra part of chunk_kda_fwd), fp32.
//
//   Akk[i,j] = beta_i * sum_d k_i[d] k_j[d] exp2(G_i[d] - G_j[d])   j <  i
//   Aqk[i,j] = scale  * sum_d q_i[d] k_j[d] exp2(G_i[d] - G_j[d])   j <= i
//
// Every exponent is G_i - G_j with j <= i, which is <= 0 for any non-positive gate: no exp(+x) factor is ever formed,
// so no finite gate can overflow (DESIGN.md, Numerics). Stored token-major as [T,H,BT]: the row of token t holds the
// BT columns of its chunk, zeros above the triangle and past the chunk's valid rows.
//
// One block per (chunk, head), 256 threads, each owning a (BT/16) x (BT/16) tile of (i, j). The head dimension is
// walked in slices of kSlice channels staged in shared memory.
#pragma once

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

constexpr int kIntraThreads = 256;

struct IntraChunkParams {
  detail::ChunkTable chunks;
  TensorView q, k;        // [T,H,K] in the I/O type (already normalised when l2norm is on)
  TensorView beta;        // raw beta [T,H] (head_stride applies, d = 0)
  ScalarType beta_type = ScalarType::kFloat32;
  BetaActivation beta_activation = BetaActivation::kNone;
  const float* G = nullptr;  // [T,H,K] fp32
  float scale = 1.0f;
  int num_heads = 0, head_dim = 0;
  float* Akk = nullptr;   // out [T,H,BT]; may be null in the matrix-unit kernel when Tinv is set
  float* Aqk = nullptr;   // out [T,H,BT]
  float* Tinv = nullptr;  // optional out [T,H,BT]: (I + Akk)^-1, the solve_tril stage fused (matrix-unit kernel only)
  MutableTensorView qg;   // optional out [T,H,K] I/O type, vector_aligned: round(q exp2 G) (matrix-unit kernel only)
  // Optional, matrix-unit kernel only: Aqk as two [T,H,BT] I/O-type matrices hi = round(Aqk), lo = round(Aqk - hi)
  // instead of fp32 (Aqk is then not written): the operands the state kernel with the output folded in multiplies.
  void* aqk_hi = nullptr;
  void* aqk_lo = nullptr;
};

template <typename E, int BT>
__global__ void __launch_bounds__(kIntraThreads) intra_chunk_kernel(IntraChunkParams p) {
  constexpr int kSlice = 32;
  constexpr int kTile = BT / 16;  // rows (and columns) per thread
  __shared__ float q_s[BT][kSlice + 1];
  __shared__ float k_s[BT][kSlice + 1];
  __shared__ float g_s[BT][kSlice + 1];

  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int i0 = (threadIdx.x / 16) * kTile;
  const int j0 = (threadIdx.x % 16) * kTile;
  const bool active = j0 <= i0 + kTile - 1;  // tile touches the lower triangle

  float acc_kk[kTile][kTile] = {};
  float acc_qk[kTile][kTile] = {};
  for (int d0 = 0; d0 < p.head_dim; d0 += kSlice) {
    __syncthreads();
    for (int e = threadIdx.x; e < BT * kSlice; e += kIntraThreads) {
      const int r = e / kSlice, d = e % kSlice;
      const bool valid = r < chunk.length;
      const int64_t t = chunk.start + r;
      q_s[r][d] = valid ? detail::load_elem<E>(p.q, t, h, d0 + d) : 0.0f;
      k_s[r][d] = valid ? detail::load_elem<E>(p.k, t, h, d0 + d) : 0.0f;
      g_s[r][d] = valid ? p.G[(t * p.num_heads + h) * p.head_dim + d0 + d] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    for (int d = 0; d < kSlice; ++d) {
#pragma unroll
      for (int a = 0; a < kTile; ++a) {
#pragma unroll
        for (int b = 0; b < kTile; ++b) {
          const int i = i0 + a, j = j0 + b;
          if (j > i) continue;
          const float decay = exp2f(g_s[i][d] - g_s[j][d]);
          const float kj = k_s[j][d] * decay;
          acc_kk[a][b] += k_s[i][d] * kj;
          acc_qk[a][b] += q_s[i][d] * kj;
        }
      }
    }
  }

#pragma unroll
  for (int a = 0; a < kTile; ++a) {
    const int i = i0 + a;
    if (i >= chunk.length) continue;
    const int64_t t = chunk.start + i;
    const float beta_i = detail::activate_beta(detail::load_scalar(p.beta, p.beta_type, t, h, 0), p.beta_activation);
    float* akk_row = p.Akk + (t * p.num_heads + h) * BT;
    float* aqk_row = p.Aqk + (t * p.num_heads + h) * BT;
#pragma unroll
    for (int b = 0; b < kTile; ++b) {
      const int j = j0 + b;
      const bool in_chunk = j < chunk.length;
      akk_row[j] = in_chunk && j < i ? beta_i * acc_kk[a][b] : 0.0f;
      aqk_row[j] = in_chunk && j <= i ? p.scale * acc_qk[a][b] : 0.0f;
    }
  }
}

}  // namespace kda::kernels
