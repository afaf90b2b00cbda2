// Launcher: Tinv = (I + A)^-1 per chunk, chunk sizes 16, 32, 64, fp32 [T,H,BT] in and out
// (kernels/kda/solve_tril.hpp). Only metadata, num_heads and chunk_size of the geometry are used.
#pragma once

#include "kda/launch/stage_common.hpp"
#include "kda/solve_tril.hpp"

namespace kda {

struct SolveTrilArgs {
  StageGeometry geometry;
  const float* A = nullptr;   // [T,H,BT], strictly lower within each chunk
  float* Tinv = nullptr;      // out [T,H,BT]; must not alias A
};

inline size_t solve_tril_workspace_size(const SolveTrilArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {
// Enqueues the stage on already-resolved chunk tables; no validation (launch_solve_tril and chunk_kda_fwd validate).
inline Status enqueue_solve_tril(const SolveTrilArgs& a, const ResolvedChunks& chunks, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (chunks.grid_chunks == 0) return Status();
  kernels::SolveTrilParams p;
  p.chunks = chunks.table;
  p.A = a.A;
  p.num_heads = g.num_heads;
  p.Tinv = a.Tinv;
  return detail::dispatch_dtype_chunk<true>(DType::kBF16, g.chunk_size, [&](auto, auto bt) -> Status {
    constexpr int BT = decltype(bt)::value;
    kernels::solve_tril_kernel<BT><<<detail::chunk_grid(chunks.grid_chunks, g.num_heads), kernels::kSolveThreads, 0, stream>>>(p);
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}
}  // namespace detail

inline Status launch_solve_tril(const SolveTrilArgs& a, void* workspace, size_t workspace_bytes,
                                hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_metadata(g.metadata, g.chunk_size));
  KDA_REQUIRE(g.num_heads >= 1 && g.num_heads <= detail::kMaxHeads, "num_heads: must be in [1, 4096]");
  KDA_REQUIRE((a.A != nullptr && a.Tinv != nullptr) || g.metadata.total_tokens == 0, "A/Tinv: null");
  KDA_REQUIRE(detail::intermediates_aligned(a.A, a.Tinv), "A/Tinv: not 16-byte aligned");
  KDA_REQUIRE(a.A != a.Tinv || a.A == nullptr, "Tinv: must not alias A");
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_solve_tril(a, chunks, stream);
}

}  // namespace kda
