// Optional pre-step: q, k <- x / sqrt(sum x^2 + 1e-6), rounded back to the I/O type (KDA_SPEC §1.0).
//
// qk_l2norm_kernel: one warp per (token, head) row, lanes stride over the head dimension, a butterfly reduction
// gives the sum of squares (fixed order, so deterministic). blockIdx.y selects q (0) or k (1).
// qk_l2norm_vec_kernel: the same for views that are vector_aligned and D in {64, 128, 256}: each lane moves 8
// elements with one 16-byte load and store, and a warp covers 32 / (D / 8) rows at once.
#pragma once

#include "kda/detail/device_common.hpp"

namespace kda::kernels {

constexpr int kL2NormThreads = 256;

template <typename E>
__global__ void __launch_bounds__(kL2NormThreads)
qk_l2norm_kernel(TensorView q, TensorView k, MutableTensorView q_out, MutableTensorView k_out, int64_t num_tokens,
                 int num_heads, int dim) {
  const TensorView in = blockIdx.y == 0 ? q : k;
  const MutableTensorView out = blockIdx.y == 0 ? q_out : k_out;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t row = int64_t(blockIdx.x) * (kL2NormThreads / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= num_tokens * num_heads) return;  // whole warps exit together
  const int64_t t = row / num_heads;
  const int h = static_cast<int>(row % num_heads);

  float sum_sq = 0.0f;
  for (int d = lane; d < dim; d += kWarpSize) {
    const float x = detail::load_elem<E>(in, t, h, d);
    sum_sq += x * x;
  }
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) sum_sq += shfl_xor(sum_sq, mask);
  const float inv_norm = 1.0f / sqrtf(sum_sq + 1e-6f);
  for (int d = lane; d < dim; d += kWarpSize) {
    detail::store_elem<E>(out, t, h, d, detail::load_elem<E>(in, t, h, d) * inv_norm);
  }
}

template <typename E, int D>
__global__ void __launch_bounds__(kL2NormThreads)
qk_l2norm_vec_kernel(TensorView q, TensorView k, MutableTensorView q_out, MutableTensorView k_out, int64_t num_tokens,
                     int num_heads) {
  constexpr int kLanesPerRow = D / 8;
  static_assert(kLanesPerRow <= kWarpSize && kWarpSize % kLanesPerRow == 0, "a row must fit in one warp");
  constexpr int kRowsPerBlock = kL2NormThreads / kLanesPerRow;
  const TensorView in = blockIdx.y == 0 ? q : k;
  const MutableTensorView out = blockIdx.y == 0 ? q_out : k_out;
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kLanesPerRow;
  const int d = 8 * (threadIdx.x % kLanesPerRow);
  // Rows past the end still join the shuffles (with zeros) so that every lane of the warp takes part.
  const bool valid = row < num_tokens * num_heads;
  const int64_t t = valid ? row / num_heads : 0;
  const int h = valid ? static_cast<int>(row % num_heads) : 0;
  float x[8] = {};
  if (valid) detail::load8<E>(in, t, h, d, x);
  float sum_sq = detail::sum_squares8(x);
  for (int mask = kLanesPerRow / 2; mask > 0; mask /= 2) sum_sq += shfl_xor(sum_sq, mask);
  const float inv_norm = detail::l2_inv_norm(sum_sq);
#pragma unroll
  for (int c = 0; c < 8; ++c) x[c] *= inv_norm;
  if (valid) detail::store16(out, t, h, d, detail::pack8<E>(x));
}

}  // namespace kda::kernels
