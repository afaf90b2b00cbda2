// Launcher: w, u and kg (kernels/kda/recompute_w_u.hpp), outputs in the I/O type.
#pragma once

#include "kda/launch/stage_common.hpp"
#include "kda/recompute_w_u.hpp"
#include "kda/recompute_w_u_mma.hpp"

namespace kda {

struct RecomputeWuArgs {
  StageGeometry geometry;
  TensorView k, v;                   // [T,H,K], [T,H,V] I/O type (k normalised if l2norm is wanted)
  TensorView beta;                   // raw beta [T,H]
  ScalarType beta_type = ScalarType::kFloat32;
  BetaActivation beta_activation = BetaActivation::kNone;
  const float* G = nullptr;          // [T,H,K]
  const float* Tinv = nullptr;       // [T,H,BT] from solve_tril
  MutableTensorView w, u, kg;        // out [T,H,K], [T,H,V], [T,H,K]
};

inline size_t recompute_w_u_workspace_size(const RecomputeWuArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {
inline kernels::RecomputeWuParams recompute_w_u_params(const RecomputeWuArgs& a, const ResolvedChunks& chunks) {
  const StageGeometry& g = a.geometry;
  kernels::RecomputeWuParams p;
  p.chunks = chunks.table;
  p.k = a.k;
  p.v = a.v;
  p.beta = a.beta;
  p.beta_type = a.beta_type;
  p.beta_activation = a.beta_activation;
  p.G = a.G;
  p.Tinv = a.Tinv;
  p.num_heads = g.num_heads;
  p.head_dim_k = g.head_dim_k;
  p.head_dim_v = g.head_dim_v;
  p.w = a.w;
  p.u = a.u;
  p.kg = a.kg;
  return p;
}

// Enqueues the stage on already-resolved chunk tables; no validation (launch_recompute_w_u and chunk_kda_fwd validate).
inline Status enqueue_recompute_w_u(const RecomputeWuArgs& a, const ResolvedChunks& chunks, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (chunks.grid_chunks == 0) return Status();
  const kernels::RecomputeWuParams p = recompute_w_u_params(a, chunks);
  // K, V in {64, 128} with 16-byte-aligned k, v, w, u and kg: the matrix-unit kernel; otherwise the scalar one (same
  // contract).
  return detail::dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto e, auto bt) -> Status {
    using E = decltype(e);
    constexpr int BT = decltype(bt)::value;
    const dim3 grid = detail::chunk_grid(chunks.grid_chunks, g.num_heads);
    const bool vectorizable = detail::vector_aligned(a.k) && detail::vector_aligned(a.v) &&
                              detail::vector_aligned(a.w) && detail::vector_aligned(a.u) && detail::vector_aligned(a.kg);
    Status opt_in;
    const bool mma = vectorizable && detail::dispatch_mma_head_dims(g.head_dim_k, g.head_dim_v, [&](auto k, auto v) {
      constexpr int K = decltype(k)::value, V = decltype(v)::value;
      constexpr auto kKernel = kernels::recompute_w_u_mma_kernel<E, BT, K, V>;
      constexpr size_t kShared = kernels::recompute_w_u_mma_shared_bytes<BT, K, V>();
      opt_in = allow_dynamic_shared<kKernel>(kShared);
      if (!opt_in.is_ok()) return;
      kKernel<<<grid, kernels::kWuMmaWarps * kWarpSize, kShared, stream>>>(p);
    });
    KDA_RETURN_IF_ERROR(opt_in);
    if (!mma) kernels::recompute_w_u_kernel<E, BT><<<grid, kernels::kWuThreads, 0, stream>>>(p);
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}
}  // namespace detail

namespace detail {
// tinv_optional: the caller runs the fused prepare kernel, which makes Tinv on chip.
inline Status validate_recompute_w_u(const RecomputeWuArgs& a, bool tinv_optional) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_geometry(g));
  KDA_REQUIRE(detail::view_ok(a.k, g, g.head_dim_k), "k: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.v, g, g.head_dim_v), "v: null or overlapping strides");
  KDA_REQUIRE(detail::scalar_view_ok(a.beta, g), "beta: null or overlapping strides");
  KDA_REQUIRE(detail::scalar_type_ok(a.beta_type), "beta_type: unknown ScalarType");
  KDA_REQUIRE(detail::beta_activation_ok(a.beta_activation), "beta_activation: unknown BetaActivation");
  KDA_REQUIRE(detail::view_ok(a.w, g, g.head_dim_k), "w: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.u, g, g.head_dim_v), "u: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.kg, g, g.head_dim_k), "kg: null or overlapping strides");
  KDA_REQUIRE((a.G != nullptr && (a.Tinv != nullptr || tinv_optional)) || g.metadata.total_tokens == 0,
              "G/Tinv: null");
  KDA_REQUIRE(detail::intermediates_aligned(a.G, a.Tinv), "G/Tinv: not 16-byte aligned");
  return Status();
}
}  // namespace detail

inline Status launch_recompute_w_u(const RecomputeWuArgs& a, void* workspace, size_t workspace_bytes,
                                   hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_recompute_w_u(a, /*tinv_optional=*/false));
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_recompute_w_u(a, chunks, stream);
}

}  // namespace kda
