// Launcher: q, k <- x / sqrt(sum x^2 + 1e-6) per (token, head), into caller buffers (contiguous [T,H,K]).
#pragma once

#include "kda/launch/stage_common.hpp"
#include "kda/qk_l2norm.hpp"

namespace kda {

struct QkL2NormArgs {
  StageGeometry geometry;  // metadata.total_tokens, num_heads, head_dim_k, dtype are used
  TensorView q, k;
  MutableTensorView q_out, k_out;  // may alias q, k (each row is read fully before it is written)
};

inline Status launch_qk_l2norm(const QkL2NormArgs& a, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_geometry(g));
  KDA_REQUIRE(detail::view_ok(a.q, g, g.head_dim_k), "q: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.k, g, g.head_dim_k), "k: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.q_out, g, g.head_dim_k), "q_out: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.k_out, g, g.head_dim_k), "k_out: null or overlapping strides");
  const int64_t rows = g.metadata.total_tokens * g.num_heads;
  if (rows == 0) return Status();
  const bool vectorizable = detail::vector_aligned(a.q) && detail::vector_aligned(a.k) &&
                            detail::vector_aligned(a.q_out) && detail::vector_aligned(a.k_out);
  return detail::dispatch_dtype_chunk(g.dtype, 64, [&](auto e, auto) -> Status {
    using E = decltype(e);
    auto launch_vec = [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      constexpr int kRows = kernels::kL2NormThreads / (D / 8);
      const dim3 grid(static_cast<unsigned>((rows + kRows - 1) / kRows), 2);
      kernels::qk_l2norm_vec_kernel<E, D><<<grid, kernels::kL2NormThreads, 0, stream>>>(
          a.q, a.k, a.q_out, a.k_out, g.metadata.total_tokens, g.num_heads);
    };
    if (vectorizable && g.head_dim_k == 64) {
      launch_vec(std::integral_constant<int, 64>{});
    } else if (vectorizable && g.head_dim_k == 128) {
      launch_vec(std::integral_constant<int, 128>{});
    } else if (vectorizable && g.head_dim_k == 256) {
      launch_vec(std::integral_constant<int, 256>{});
    } else {
      constexpr int kRowsPerBlock = kernels::kL2NormThreads / kWarpSize;
      const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), 2);
      kernels::qk_l2norm_kernel<E><<<grid, kernels::kL2NormThreads, 0, stream>>>(
          a.q, a.k, a.q_out, a.k_out, g.metadata.total_tokens, g.num_heads, g.head_dim_k);
    }
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}

}  // namespace kda
