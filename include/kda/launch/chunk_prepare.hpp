// Launcher: intra-chunk matrices, solve_tril and w/u/kg in one kernel (kernels/kda/chunk_prepare_mma.hpp), as
// chunk_kda_fwd runs them. Same contract as launch_intra_chunk (with Tinv) followed by launch_recompute_w_u on that
// Tinv, with the same bits, except that Tinv stays on chip when the fused kernel runs.
#pragma once

#include "kda/chunk_prepare_mma.hpp"
#include "kda/launch/intra_chunk.hpp"
#include "kda/launch/recompute_w_u.hpp"

namespace kda {

// Whether these arguments run the fused kernel: K and V in {64, 128}; q, k (both stages') and w, u, kg
// vector_aligned. Then neither intra.Akk nor a Tinv buffer is needed (Akk is still written if given; Tinv is not).
// Otherwise the two stage launches run, passing Tinv through intra.Tinv, which must then be set (and wu.Tinv be
// the same buffer).
inline bool chunk_prepare_fused(const IntraChunkArgs& intra, const RecomputeWuArgs& wu) {
  return detail::mma_head_dims(wu.geometry.head_dim_k, wu.geometry.head_dim_v) && detail::vector_aligned(intra.q) &&
         detail::vector_aligned(intra.k) && detail::vector_aligned(wu.k) && detail::vector_aligned(wu.w) &&
         detail::vector_aligned(wu.u) && detail::vector_aligned(wu.kg);
}

namespace detail {
// Launches the prepare kernel instantiation for g's dtype, chunk size and (K, V) in {64, 128}^2, one block of
// kIntraMmaWarps warps per (chunk, head): launch(e, bt, k, v, grid) enqueues it with the tag types' values.
template <typename Launch>
inline Status dispatch_prepare_kernel(const StageGeometry& g, const ResolvedChunks& chunks, Launch&& launch) {
  return dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto e, auto bt) -> Status {
    const dim3 grid = prepare_grid(chunks.grid_chunks, g.num_heads);
    dispatch_mma_head_dims(g.head_dim_k, g.head_dim_v, [&](auto k, auto v) { launch(e, bt, k, v, grid); });
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}

// Enqueues the stages on already-resolved chunk tables; no validation (the launcher below and chunk_kda_fwd
// validate).
inline Status enqueue_chunk_prepare(const IntraChunkArgs& intra, const RecomputeWuArgs& wu,
                                    const ResolvedChunks& chunks, hipStream_t stream) {
  if (!chunk_prepare_fused(intra, wu)) {
    KDA_RETURN_IF_ERROR(enqueue_intra_chunk(intra, chunks, stream));
    return enqueue_recompute_w_u(wu, chunks, stream);
  }
  const StageGeometry& g = wu.geometry;
  if (chunks.grid_chunks == 0) return Status();
  const kernels::IntraChunkParams ip = intra_chunk_params(intra, chunks);
  const kernels::RecomputeWuParams wp = recompute_w_u_params(wu, chunks);
  const bool v_vector = vector_aligned(wu.v);
  return dispatch_prepare_kernel(g, chunks, [&](auto e, auto bt, auto k, auto v, dim3 grid) {
    kernels::chunk_prepare_mma_kernel<decltype(e), decltype(bt)::value, decltype(k)::value, decltype(v)::value>
        <<<grid, kernels::kIntraMmaWarps * kWarpSize, 0, stream>>>(ip, wp, v_vector);
  });
}
}  // namespace detail

// `intra` and `wu` must describe the same geometry and the same k; wu.G and wu.beta are the ones intra reads.
inline Status launch_chunk_prepare(const IntraChunkArgs& intra, const RecomputeWuArgs& wu, void* workspace,
                                   size_t workspace_bytes, hipStream_t stream) {
  const bool fused = chunk_prepare_fused(intra, wu);
  KDA_RETURN_IF_ERROR(detail::validate_intra_chunk(intra, /*akk_optional=*/fused));
  KDA_RETURN_IF_ERROR(detail::validate_recompute_w_u(wu, /*tinv_optional=*/fused));
  const StageGeometry& a = intra.geometry;
  const StageGeometry& b = wu.geometry;
  KDA_REQUIRE(a.metadata.total_tokens == b.metadata.total_tokens && a.num_heads == b.num_heads &&
                  a.head_dim_k == b.head_dim_k && a.chunk_size == b.chunk_size && a.dtype == b.dtype,
              "intra/wu: geometries differ");
  KDA_REQUIRE(fused || (intra.Tinv != nullptr && intra.Tinv == wu.Tinv) || b.metadata.total_tokens == 0,
              "Tinv: the two stage launches need one Tinv buffer in intra.Tinv and wu.Tinv");
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(b.metadata, b.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_chunk_prepare(intra, wu, chunks, stream);
}

}  // namespace kda
