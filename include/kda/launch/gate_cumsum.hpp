// Launcher: fused gate + chunk-local cumsum (kernels/kda/gate_cumsum.hpp). G is fp32 [T,H,K], times RCP_LN2.
#pragma once

#include "kda/gate_cumsum.hpp"
#include "kda/launch/stage_common.hpp"

namespace kda {

struct GateCumsumArgs {
  StageGeometry geometry;
  TensorView g;                      // raw gate [T,H,K]
  ScalarType g_type = ScalarType::kFloat32;
  GateKind gate = GateKind::kPrecomputed;
  const float* A_log = nullptr;      // [H]; required for kSoftplus, optional for kLowerBound
  const float* dt_bias = nullptr;    // [H*K] or null
  float lower_bound = -5.0f;         // kLowerBound: in [-5, 0)
  float* G = nullptr;                // out [T,H,K] fp32
};

namespace detail {
inline Status validate_gate(GateKind gate, const float* A_log, float lower_bound) {
  if (gate == GateKind::kSoftplus) KDA_REQUIRE(A_log != nullptr, "A_log: required by the softplus gate");
  if (gate == GateKind::kLowerBound) {
    KDA_REQUIRE(lower_bound >= -5.0f && lower_bound < 0.0f, "lower_bound: must be in [-5, 0)");
  }
  KDA_REQUIRE(gate == GateKind::kPrecomputed || gate == GateKind::kSoftplus || gate == GateKind::kLowerBound,
              "gate: unknown GateKind");
  return Status();
}
}  // namespace detail

inline size_t gate_cumsum_workspace_size(const GateCumsumArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {
// Enqueues the stage on already-resolved chunk tables; no validation (launch_gate_cumsum and chunk_kda_fwd validate).
inline Status enqueue_gate_cumsum(const GateCumsumArgs& a, const ResolvedChunks& chunks, hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (chunks.grid_chunks == 0) return Status();
  kernels::GateCumsumParams p;
  p.chunks = chunks.table;
  p.g = a.g;
  p.g_type = a.g_type;
  p.A_log = a.A_log;
  p.dt_bias = a.dt_bias;
  p.gate = a.gate;
  p.lower_bound = a.lower_bound;
  p.num_heads = g.num_heads;
  p.head_dim = g.head_dim_k;
  p.G = a.G;
  return detail::dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto, auto bt) -> Status {
    kernels::gate_chunk_cumsum_kernel<decltype(bt)::value>
        <<<detail::chunk_grid(chunks.grid_chunks, g.num_heads), g.head_dim_k, 0, stream>>>(p);
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}
}  // namespace detail

inline Status launch_gate_cumsum(const GateCumsumArgs& a, void* workspace, size_t workspace_bytes,
                                 hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_geometry(g));
  KDA_RETURN_IF_ERROR(detail::validate_gate(a.gate, a.A_log, a.lower_bound));
  KDA_REQUIRE(detail::view_ok(a.g, g, g.head_dim_k), "g: null or overlapping strides");
  KDA_REQUIRE(detail::scalar_type_ok(a.g_type), "g_type: unknown ScalarType");
  KDA_REQUIRE(a.G != nullptr || g.metadata.total_tokens == 0, "G: null");
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_gate_cumsum(a, chunks, stream);
}

}  // namespace kda
