// Launcher: o = scale (q ⊙ exp G) h + Aqk v_new (kernels/kda/chunk_output.hpp). `o` may alias the caller's v.
#pragma once

#include "kda/chunk_output.hpp"
#include "kda/chunk_output_mma.hpp"
#include "kda/launch/intra_chunk.hpp"
#include "kda/launch/stage_common.hpp"

namespace kda {

struct ChunkOutputArgs {
  StageGeometry geometry;
  TensorView q;                 // [T,H,K] I/O type (normalised if l2norm is wanted)
  const float* G = nullptr;     // [T,H,K]
  const void* h = nullptr;      // [NT_grid,H,K,V] from state_recurrence
  const float* Aqk = nullptr;   // [T,H,BT] from intra_chunk
  const void* v_new = nullptr;  // [T,H,V] from state_recurrence
  float scale = 0.0f;           // 0 = K^-0.5
  MutableTensorView o;          // out [T,H,V]
  bool q_gated = false;         // q already holds round(q exp2 G) (chunk_prepare_inputs' qg): G is not read
};

inline size_t chunk_output_workspace_size(const ChunkOutputArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {
// Enqueues the stage on already-resolved chunk tables; no validation (launch_chunk_output and chunk_kda_fwd validate).
inline Status enqueue_chunk_output(const ChunkOutputArgs& a, const ResolvedChunks& chunks, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (chunks.grid_chunks == 0) return Status();
  kernels::ChunkOutputParams p;
  p.chunks = chunks.table;
  p.q = a.q;
  p.G = a.G;
  p.q_gated = a.q_gated;
  p.h = a.h;
  p.Aqk = a.Aqk;
  p.v_new = a.v_new;
  p.scale = effective_scale(a.scale, g.head_dim_k);
  p.num_heads = g.num_heads;
  p.head_dim_k = g.head_dim_k;
  p.head_dim_v = g.head_dim_v;
  p.o = a.o;
  const int v_tiles = g.head_dim_v / kernels::kOutputTileV;
  // K, V in {64, 128} with 16-byte-aligned q and o: the matrix-unit kernel (one block per chunk and head); otherwise
  // the scalar one.
  return detail::dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto e, auto bt) -> Status {
    using E = decltype(e);
    constexpr int BT = decltype(bt)::value;
    Status opt_in;
    const bool mma = detail::vector_aligned(a.q) && detail::vector_aligned(a.o) &&
                     detail::dispatch_mma_head_dims(g.head_dim_k, g.head_dim_v, [&](auto k, auto v) {
      constexpr int K = decltype(k)::value, V = decltype(v)::value;
      constexpr auto kKernel = kernels::chunk_output_mma_kernel<E, BT, K, V>;
      constexpr size_t kShared = kernels::chunk_output_mma_shared_bytes<BT, K, V>();
      opt_in = allow_dynamic_shared<kKernel>(kShared);
      if (!opt_in.is_ok()) return;
      kKernel<<<detail::chunk_grid(chunks.grid_chunks, g.num_heads), kernels::kOutputMmaWarps * kWarpSize, kShared,
                stream>>>(p);
    });
    KDA_RETURN_IF_ERROR(opt_in);
    if (!mma) {
      kernels::chunk_output_kernel<E, BT>
          <<<detail::chunk_grid(chunks.grid_chunks, g.num_heads, v_tiles), kernels::kOutputThreads, 0, stream>>>(p);
    }
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}
}  // namespace detail

inline Status launch_chunk_output(const ChunkOutputArgs& a, void* workspace, size_t workspace_bytes,
                                  hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_geometry(g));
  KDA_REQUIRE(detail::view_ok(a.q, g, g.head_dim_k), "q: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.o, g, g.head_dim_v), "o: null or overlapping strides");
  KDA_REQUIRE(std::isfinite(a.scale), "scale: not finite");
  KDA_REQUIRE(!detail::views_overlap(a.o.data, a.o.token_stride, a.o.head_stride, g.head_dim_v, dtype_size(g.dtype),
                                     a.q.data, a.q.token_stride, a.q.head_stride, g.head_dim_k, dtype_size(g.dtype), g),
              "o: overlaps q, which the output stage reads while writing o");
  KDA_REQUIRE(((a.G || a.q_gated) && a.h && a.Aqk && a.v_new) || g.metadata.total_tokens == 0,
              "G/h/Aqk/v_new: null");
  KDA_REQUIRE(detail::intermediates_aligned(a.G, a.h, a.Aqk, a.v_new), "G/h/Aqk/v_new: not 16-byte aligned");
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_chunk_output(a, chunks, stream);
}

}  // namespace kda
