// Launcher: intra-chunk matrices Akk (beta-scaled, strictly lower) and Aqk (scaled, diagonal included), fp32
// [T,H,BT] (kernels/kda/intra_chunk.hpp).
#pragma once

#include <cmath>

#include "kda/intra_chunk.hpp"
#include "kda/intra_chunk_mma.hpp"
#include "kda/launch/solve_tril.hpp"
#include "kda/launch/stage_common.hpp"

namespace kda {

struct IntraChunkArgs {
  StageGeometry geometry;
  TensorView q, k;                   // [T,H,K] I/O type (already normalised if l2norm is wanted)
  TensorView beta;                   // raw beta [T,H]: element (t,h) at t*token_stride + h*head_stride
  ScalarType beta_type = ScalarType::kFloat32;
  BetaActivation beta_activation = BetaActivation::kNone;
  const float* G = nullptr;          // [T,H,K] from gate_cumsum
  float scale = 0.0f;                // 0 = K^-0.5
  float* Akk = nullptr;              // out [T,H,BT]; may be null when Tinv is asked for and q, k are vector_aligned
                                     // (the fused kernel then keeps Akk on chip: intra_chunk_keeps_akk_on_chip)
  float* Aqk = nullptr;              // out [T,H,BT]
  float* Tinv = nullptr;             // optional out [T,H,BT]: also run solve_tril (Tinv = (I + Akk)^-1), fused into
                                     // this launch where the matrix-unit kernel runs; must not alias Akk or Aqk
  MutableTensorView qg{};            // optional out [T,H,K], vector_aligned: also write round(q exp2 G), the left
                                     // operand of the output (chunk_kda_fwd's state kernel reads it); needs the
                                     // matrix-unit kernel (16-byte-aligned q and k)
  // Optional, with the matrix-unit kernel: Aqk as hi = round(Aqk) and lo = round(Aqk - hi), [T,H,BT] each in the
  // I/O type, 16-byte aligned, instead of fp32 (Aqk is then not written and may be null): the two 16-bit operands
  // the output forms from Aqk, which the state kernel with the output folded in reads as they are.
  void* Aqk_hi = nullptr;
  void* Aqk_lo = nullptr;
};

// Whether these arguments run the matrix-unit kernel with solve_tril fused in, which needs no Akk in memory.
inline bool intra_chunk_keeps_akk_on_chip(const IntraChunkArgs& a) {
  return a.Tinv != nullptr && detail::vector_aligned(a.q) && detail::vector_aligned(a.k);
}

inline size_t intra_chunk_workspace_size(const IntraChunkArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {
inline kernels::IntraChunkParams intra_chunk_params(const IntraChunkArgs& a, const ResolvedChunks& chunks) {
  const StageGeometry& g = a.geometry;
  kernels::IntraChunkParams p;
  p.chunks = chunks.table;
  p.q = a.q;
  p.k = a.k;
  p.beta = a.beta;
  p.beta_type = a.beta_type;
  p.beta_activation = a.beta_activation;
  p.G = a.G;
  p.scale = effective_scale(a.scale, g.head_dim_k);
  p.num_heads = g.num_heads;
  p.head_dim = g.head_dim_k;
  p.Akk = a.Akk;
  p.Aqk = a.Aqk;
  p.qg = a.qg;
  p.aqk_hi = a.Aqk_hi;
  p.aqk_lo = a.Aqk_lo;
  return p;
}

// Enqueues the stage on already-resolved chunk tables; no validation (launch_intra_chunk and chunk_kda_fwd validate).
inline Status enqueue_intra_chunk(const IntraChunkArgs& a, const ResolvedChunks& chunks, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (chunks.grid_chunks == 0) return Status();
  kernels::IntraChunkParams p = intra_chunk_params(a, chunks);
  // The matrix-unit kernel when q and k can be read 16 bytes at a time (it also inverts I + Akk when Tinv is asked
  // for); otherwise intra_chunk_kernel, the plain per-element form of the same contract, followed by solve_tril.
  const bool vectorizable = detail::vector_aligned(a.q) && detail::vector_aligned(a.k);
  return detail::dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto e, auto bt) -> Status {
    using E = decltype(e);
    constexpr int BT = decltype(bt)::value;
    const dim3 grid = detail::chunk_grid(chunks.grid_chunks, g.num_heads);
    if (vectorizable) {
      p.Tinv = a.Tinv;
      kernels::intra_chunk_mma_kernel<E, BT><<<grid, kernels::kIntraMmaWarps * kWarpSize, 0, stream>>>(p);
      KDA_RETURN_IF_LAUNCH_ERROR();
      return Status();
    }
    kernels::intra_chunk_kernel<E, BT><<<grid, kernels::kIntraThreads, 0, stream>>>(p);
    KDA_RETURN_IF_LAUNCH_ERROR();
    if (a.Tinv == nullptr) return Status();
    return enqueue_solve_tril(SolveTrilArgs{g, a.Akk, a.Tinv}, chunks, stream);
  });
}
}  // namespace detail

namespace detail {
// akk_optional: the caller runs the fused prepare kernel, which needs no Akk buffer.
inline Status validate_intra_chunk(const IntraChunkArgs& a, bool akk_optional) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_geometry(g));
  KDA_REQUIRE(detail::view_ok(a.q, g, g.head_dim_k), "q: null or overlapping strides");
  KDA_REQUIRE(detail::view_ok(a.k, g, g.head_dim_k), "k: null or overlapping strides");
  KDA_REQUIRE(detail::scalar_view_ok(a.beta, g), "beta: null or overlapping strides");
  KDA_REQUIRE(detail::scalar_type_ok(a.beta_type), "beta_type: unknown ScalarType");
  KDA_REQUIRE(detail::beta_activation_ok(a.beta_activation), "beta_activation: unknown BetaActivation");
  KDA_REQUIRE(std::isfinite(a.scale), "scale: not finite");
  const bool split = a.Aqk_hi != nullptr || a.Aqk_lo != nullptr;
  const bool have_outputs = a.G != nullptr && (a.Aqk != nullptr || (a.Aqk_hi != nullptr && a.Aqk_lo != nullptr));
  KDA_REQUIRE(have_outputs || g.metadata.total_tokens == 0, "G/Aqk: null");
  KDA_REQUIRE(a.Akk != nullptr || akk_optional || intra_chunk_keeps_akk_on_chip(a) || g.metadata.total_tokens == 0,
              "Akk: null (allowed only with Tinv asked for and 16-byte-aligned q and k)");
  KDA_REQUIRE(detail::intermediates_aligned(a.G, a.Akk, a.Aqk, a.Tinv), "G/Akk/Aqk/Tinv: not 16-byte aligned");
  KDA_REQUIRE(a.Tinv == nullptr || (a.Tinv != a.Akk && a.Tinv != a.Aqk), "Tinv: must not alias Akk or Aqk");
  KDA_REQUIRE(!split || (a.Aqk_hi != nullptr && a.Aqk_lo != nullptr), "Aqk_hi/Aqk_lo: give both or neither");
  KDA_REQUIRE(detail::intermediates_aligned(a.Aqk_hi, a.Aqk_lo), "Aqk_hi/Aqk_lo: not 16-byte aligned");
  KDA_REQUIRE(!split || (detail::vector_aligned(a.q) && detail::vector_aligned(a.k)),
              "Aqk_hi/Aqk_lo: need 16-byte-aligned q and k (the matrix-unit kernel writes them)");
  if (a.qg.data != nullptr) {
    KDA_REQUIRE(detail::vector_aligned(a.q) && detail::vector_aligned(a.k),
                "qg: needs 16-byte-aligned q and k (the matrix-unit kernel writes it)");
    KDA_REQUIRE(detail::view_ok(a.qg, g, g.head_dim_k) && detail::vector_aligned(a.qg),
                "qg: overlapping strides or not vector_aligned");
  }
  return Status();
}
}  // namespace detail

inline Status launch_intra_chunk(const IntraChunkArgs& a, void* workspace, size_t workspace_bytes,
                                 hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_intra_chunk(a, /*akk_optional=*/false));
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_intra_chunk(a, chunks, stream);
}

}  // namespace kda
