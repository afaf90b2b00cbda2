// What chunk_prepare_inputs_mma_kernel forms from chunk_kda_fwd's raw inputs itself, in place of the l2norm and
// gate stages (and of the output stage's q exp2 G): the parameters, and the row-norm pre-pass.
//
// Every value is the one the stage pipeline makes, bit for bit: the row norms use qk_l2norm_vec_kernel's arithmetic
// (detail::sum_squares8, the same butterfly, detail::l2_inv_norm), G is summed row after row per channel as the gate
// stage does (detail::gate_cumsum_add), and qg, kg and w's right-hand side are the expressions the output and w/u
// stages evaluate.
#pragma once

#include "kda/detail/chunk_table.hpp"
#include "kda/detail/device_common.hpp"

namespace kda::kernels {

struct PrepareInputsParams {
  bool qk_l2norm = false;  // normalise the q and k rows (and round them to the I/O type) before anything else
  bool qk_vector = false;  // q, k vector_aligned: 16-byte loads, else per element
  TensorView g;            // raw gate [T,H,K]
  ScalarType g_type = ScalarType::kFloat32;
  bool g_vector = false;   // g loads 16 bytes at a time (scalar_vector_aligned)
  const float* A_log = nullptr;    // [H] or null
  const float* dt_bias = nullptr;  // [H*K] or null
  GateKind gate = GateKind::kPrecomputed;
  float lower_bound = -5.0f;
  MutableTensorView qg;            // out [T,H,K] I/O type: round(q exp2 G), the output stage's left operand
  float* G_last = nullptr;         // out [grid chunks,H,K] fp32: G of each chunk's last row (the state's decay)
};

// Floats of shared memory the fused prepare keeps for these values (intra_chunk_mma_block's inputs_s): inverse row
// norms of q and k, G of the chunk's last row, dt_bias, and the gate sum's segment totals.
template <int BT, int K>
struct PrepareInputsShared {
  static constexpr int kFloats = 2 * BT + 2 * K + (BT / detail::kGateSumSegment) * 16;
};

// 1 / |row| for the chunk's BT q rows (inv_s[0, BT)) and BT k rows (inv_s[BT, 2 BT)), exactly as
// qk_l2norm_vec_kernel<E, K> forms it. Passes whose rows all lie past the chunk are skipped (their entries are left
// as they are: those rows are zeros and never read); the rest read zeros past it. kThreads threads take part; the
// caller syncs before reading inv_s.
//
// The butterfly leaves a row's sum of squares in all kLanes lanes of its group, so pass x's norm is formed by the
// group's lane x after the last pass: one l2_inv_norm (a square root and a division, ~40 instructions) per lane
// instead of one per pass (see docs/performance.md, "Row norms").
template <typename E, int BT, int K, int kThreads>
__device__ inline void qk_row_inv_norms(TensorView q, TensorView k, bool vector, const detail::ChunkCoords& chunk,
                                        int h, float* inv_s) {
  constexpr int kLanes = K / 8, kRowsPerPass = kThreads / kLanes, kPasses = 2 * BT / kRowsPerPass;
  static_assert(kThreads % kLanes == 0 && (2 * BT) % kRowsPerPass == 0 && kWarpSize % kLanes == 0,
                "whole rows per pass, each inside one warp");
  static_assert(kPasses <= kLanes, "a lane of the row's group per pass");
  // Loads issued together: all of them (16 x 16 bytes at K = 128, BT = 64). Nothing else is live this early, and the
  // block's first global loads then wait once instead of four times (see docs/performance.md, "Row norms").
  constexpr int kGroup = kPasses;
  const int part = threadIdx.x % kLanes;
  auto pass_used = [&](int pass) { return (pass * kRowsPerPass) % BT < chunk.length; };  // uniform per pass
  float own_sum_sq = 0.0f;  // the sum of squares of pass `part`'s row in this group
#pragma unroll
  for (int p0 = 0; p0 < kPasses; p0 += kGroup) {
    uint4 raw[kGroup];
#pragma unroll
    for (int x = 0; x < kGroup; ++x) {
      const int r = (p0 + x) * kRowsPerPass + threadIdx.x / kLanes, i = r % BT;
      raw[x] = i < chunk.length ? detail::load16_any(r < BT ? q : k, vector, chunk.start + i, h, 8 * part)
                                : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int x = 0; x < kGroup; ++x) {
      if (!pass_used(p0 + x)) continue;
      float v[8];
      detail::unpack8<E>(raw[x], v);
      float sum_sq = detail::sum_squares8(v);
      for (int mask = kLanes / 2; mask > 0; mask /= 2) sum_sq += shfl_xor(sum_sq, mask);
      if (part == p0 + x) own_sum_sq = sum_sq;
    }
  }
  if (part < kPasses && pass_used(part))
    inv_s[part * kRowsPerPass + threadIdx.x / kLanes] = detail::l2_inv_norm(own_sum_sq);
}

}  // namespace kda::kernels
