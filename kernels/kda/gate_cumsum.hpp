// Stage 1: fused gate + chunk-local cumsum (FLA kda_gate_chunk_cumsum / chunk_local_cumsum).
//
// G[t,h,d] = RCP_LN2 * sum_{rows r <= i of t's chunk} gate(g_raw[r,h,d] + dt_bias[h*K+d]), fp32, so later stages use
// exp2(G) == exp(sum of natural-log gates). The sum restarts at every chunk (and so at every sequence start).
// One block per (chunk, head); thread d owns channel d and walks the chunk's rows in order, summing in the segmented
// order of detail::kGateSumSegment (the fused prepare kernel's, so both give the same bits; the CPU reference sums
// row after row, which differs only by rounding). Coalesced: consecutive threads read consecutive channels of one
// row.
#pragma once

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

struct GateCumsumParams {
  detail::ChunkTable chunks;
  TensorView g;                 // raw gate [T,H,K]
  ScalarType g_type = ScalarType::kFloat32;
  const float* A_log = nullptr;    // [H] or null
  const float* dt_bias = nullptr;  // [H*K] or null
  GateKind gate = GateKind::kPrecomputed;
  float lower_bound = -5.0f;
  int num_heads = 0, head_dim = 0;
  float* G = nullptr;           // out [T,H,K], fp32
};

template <int BT>
__global__ void gate_chunk_cumsum_kernel(GateCumsumParams p) {
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const float a_log_exp = p.A_log != nullptr ? expf(p.A_log[h]) : 1.0f;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    const float bias = p.dt_bias != nullptr ? p.dt_bias[int64_t(h) * p.head_dim + d] : 0.0f;
    float base = 0.0f;  // the earlier segments' totals
    // Tokens in groups of kGroup (whole segments) whose loads are all issued before the first store: G may alias
    // nothing, but the compiler cannot know that, and one load at a time would put a memory round trip on every token.
    constexpr int kSeg = detail::kGateSumSegment, kGroup = 2 * kSeg;
    for (int i0 = 0; i0 < chunk.length; i0 += kGroup) {
      float x[kGroup];
#pragma unroll
      for (int i = 0; i < kGroup; ++i)
        x[i] = i0 + i < chunk.length ? detail::load_scalar(p.g, p.g_type, chunk.start + i0 + i, h, d) : 0.0f;
#pragma unroll
      for (int s = 0; s < kGroup; s += kSeg) {
        float local = 0.0f;
#pragma unroll
        for (int i = s; i < s + kSeg; ++i) {
          if (i0 + i >= chunk.length) break;
          const int64_t t = chunk.start + i0 + i;
          local = detail::gate_cumsum_add(local, detail::gate_value(x[i] + bias, p.gate, a_log_exp, p.lower_bound));
          p.G[(t * p.num_heads + h) * p.head_dim + d] = detail::gate_cumsum_add(base, local) * kRcpLn2;
        }
        base = detail::gate_cumsum_add(base, local);
      }
    }
  }
}

}  // namespace kda::kernels
