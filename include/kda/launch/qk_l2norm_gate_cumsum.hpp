// Launcher: the q/k l2norm and the gate + chunk cumsum in one kernel (kernels/kda/qk_l2norm_gate_cumsum.hpp), as
// chunk_kda_fwd runs them. Same contract as launch_qk_l2norm followed by launch_gate_cumsum, with the same bits; the
// l2norm covers the rows of the chunks, which are all T rows for valid metadata.
#pragma once

#include "kda/launch/gate_cumsum.hpp"
#include "kda/launch/qk_l2norm.hpp"
#include "kda/qk_l2norm_gate_cumsum.hpp"

namespace kda {

namespace detail {
// Enqueues both stages on already-resolved chunk tables: one launch when the l2norm can move 16-byte vectors,
// otherwise the two stage kernels. No validation (the launcher below and chunk_kda_fwd validate).
inline Status enqueue_qk_l2norm_gate_cumsum(const QkL2NormArgs& n, const GateCumsumArgs& a,
                                            const ResolvedChunks& chunks, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (!qk_l2norm_vectorizable(n)) {
    KDA_RETURN_IF_ERROR(launch_qk_l2norm(n, stream));
    return enqueue_gate_cumsum(a, chunks, stream);
  }
  if (chunks.grid_chunks == 0) return Status();
  const kernels::GateCumsumParams p = gate_cumsum_params(a, chunks);
  return dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto e, auto bt) -> Status {
    using E = decltype(e);
    constexpr int BT = decltype(bt)::value;
    auto launch = [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      const dim3 grid = chunk_grid(chunks.grid_chunks, g.num_heads, kernels::L2NormGateGrid<BT, D>::kRoles);
      kernels::qk_l2norm_gate_cumsum_kernel<E, BT, D><<<grid, D, 0, stream>>>(p, n.q, n.k, n.q_out, n.k_out);
    };
    switch (g.head_dim_k) {
      case 64: launch(std::integral_constant<int, 64>{}); break;
      case 128: launch(std::integral_constant<int, 128>{}); break;
      default: launch(std::integral_constant<int, 256>{}); break;  // validated: 64, 128 or 256
    }
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}
}  // namespace detail

// `l2norm` and `gate` must describe the same geometry (the gate's is used for the chunk tables).
inline Status launch_qk_l2norm_gate_cumsum(const QkL2NormArgs& l2norm, const GateCumsumArgs& gate, void* workspace,
                                           size_t workspace_bytes, hipStream_t stream) {
  KDA_RETURN_IF_ERROR(detail::validate_qk_l2norm(l2norm));
  KDA_RETURN_IF_ERROR(detail::validate_gate_cumsum(gate));
  const StageGeometry& a = l2norm.geometry;
  const StageGeometry& b = gate.geometry;
  KDA_REQUIRE(a.metadata.total_tokens == b.metadata.total_tokens && a.num_heads == b.num_heads &&
                  a.head_dim_k == b.head_dim_k && a.dtype == b.dtype,
              "l2norm/gate: geometries differ");
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(
      detail::resolve_chunks(b.metadata, b.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_qk_l2norm_gate_cumsum(l2norm, gate, chunks, stream);
}

}  // namespace kda
