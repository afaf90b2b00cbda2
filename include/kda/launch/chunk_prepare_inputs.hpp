// Launcher: chunk_kda_fwd's first launch when K and V are 64 or 128 (chunk_prepare_inputs_mma_kernel in
// kernels/kda/chunk_prepare_mma.hpp). From the raw q, k, v, g and beta it writes everything the state and output
// stages read: Aqk, w, u, kg, qg = round(q exp2 G) and G_last, the G of each chunk's last row. The l2norm and gate
// stages are folded in, so neither the normalised q, k nor G ever reach memory. Each output is bit-identical to the
// stage pipeline's (launch_qk_l2norm, launch_gate_cumsum, launch_chunk_prepare, and the output stage's own qg).
// In chunks of 64, batches whose sequences average fewer than four chunks (decodes, speculative drafts, short
// prefills) run a second kernel whose blocks take chunks of at most 16 rows on a short path
// (ChunkPrepareInputsArgs::short_chunks), and a third, with the short path alone, where the caller bounds every
// sequence at 16 tokens (ChunkMetadataArgs::max_sequence_tokens); on NVIDIA with K = V = 128 and a bound of at most 8
// tokens (speculative batches), a fourth that takes one (chunk, head) per warp (chunk_prepare_warp_short.hpp;
// ActiveTuning::kWarpShortDefaultForm). The bits are the same whichever runs.
#pragma once

#include "kda/chunk_prepare_warp_short.hpp"
#include "kda/launch/chunk_prepare.hpp"
#include "kda/launch/gate_cumsum.hpp"

namespace kda {

struct ChunkPrepareInputsArgs {
  StageGeometry geometry;          // K and V in {64, 128}
  TensorView q, k, v;              // raw [T,H,K], [T,H,K], [T,H,V] in the I/O dtype, any strides
  TensorView g;                    // raw gate [T,H,K]
  ScalarType g_type = ScalarType::kFloat32;
  TensorView beta;                 // raw beta [T,H]
  ScalarType beta_type = ScalarType::kFloat32;
  GateKind gate = GateKind::kSoftplus;
  const float* A_log = nullptr;    // [H]
  const float* dt_bias = nullptr;  // [H*K]
  float lower_bound = -5.0f;
  BetaActivation beta_activation = BetaActivation::kSigmoid;
  bool qk_l2norm = true;
  float scale = 0.0f;              // 0 = K^-0.5
  float* Aqk = nullptr;            // out [T,H,BT] fp32
  MutableTensorView w, u, kg, qg;  // out [T,H,K], [T,H,V], [T,H,K], [T,H,K] in the I/O dtype, vector_aligned
  float* G_last = nullptr;         // out [NT_grid,H,K] fp32, by global chunk id (the state stage's G_last)
  // Optional: Aqk as hi = round(Aqk) and lo = round(Aqk - hi), [T,H,BT] each in the I/O dtype, 16-byte aligned,
  // instead of fp32 (Aqk may then be null): what the state kernel with the output folded in reads.
  void* Aqk_hi = nullptr;
  void* Aqk_lo = nullptr;
  // Chunks of at most 16 rows (decodes, speculative drafts, sequence tails): -1 = the launcher's choice
  // (detail::prepare_inputs_short_path_used), 0 = the long path takes them, 1 = a short path of their own
  // (chunk_prepare_inputs_short_mma_kernel; chunk_size 64 only). Either gives the same bits.
  int short_chunks = -1;
  // Where the caller bounds every sequence at kernels::kWarpShortRows tokens (K = V = 128, chunk size 64, NVIDIA):
  // -1 = the launcher's choice (detail::prepare_inputs_warp_short_used), 0 = never, 1 or 2 = the warp-per-item kernel
  // (chunk_prepare_inputs_warp_short_kernel; needs what detail::prepare_inputs_warp_short_ok lists) at 128 registers
  // (ActiveTuning::kWarpShortMinBlocks blocks per SM) or at 168 (kWarpShortMinBlocksNoSpill), for tuning. Same bits.
  int warp_short = -1;
};

inline size_t chunk_prepare_inputs_workspace_size(const ChunkPrepareInputsArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {

// Whether a view whose element type is known only at run time can be read 16 bytes at a time.
inline bool scalar_vector_aligned(const TensorView& v, ScalarType type) {
  const int64_t elems = type == ScalarType::kFloat32 ? 4 : 8;
  return reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && v.token_stride % elems == 0 && v.head_stride % elems == 0;
}

// Whether the warp-per-item kernel (chunk_prepare_warp_short.hpp) can take this call: NVIDIA, K = V = 128, chunks of
// 64, the short path not refused, and the caller's bound on every sequence at most kernels::kWarpShortRows tokens
// (which also rules out a chunk past a sequence's first).
inline bool prepare_inputs_warp_short_ok(const ChunkPrepareInputsArgs& a) {
  const StageGeometry& g = a.geometry;
  const int64_t bound = g.metadata.max_sequence_tokens;
  return kPlatformNvidia && g.head_dim_k == 128 && g.head_dim_v == 128 && g.chunk_size == 64 && a.short_chunks != 0 &&
         bound > 0 && bound <= kernels::kWarpShortRows;
}

inline Status validate_chunk_prepare_inputs(const ChunkPrepareInputsArgs& a) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(validate_geometry(g));
  KDA_RETURN_IF_ERROR(validate_gate(a.gate, a.A_log, a.lower_bound));
  if (!mma_head_dims(g.head_dim_k, g.head_dim_v)) {
    return unsupported("head_dim_k/head_dim_v: chunk_prepare_inputs needs K and V in {64, 128}");
  }
  KDA_REQUIRE(view_ok(a.q, g, g.head_dim_k), "q: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.k, g, g.head_dim_k), "k: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.v, g, g.head_dim_v), "v: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.g, g, g.head_dim_k), "g: null or overlapping strides");
  KDA_REQUIRE(scalar_view_ok(a.beta, g), "beta: null or overlapping strides");
  KDA_REQUIRE(scalar_type_ok(a.g_type), "g_type: unknown ScalarType");
  KDA_REQUIRE(scalar_type_ok(a.beta_type), "beta_type: unknown ScalarType");
  KDA_REQUIRE(beta_activation_ok(a.beta_activation), "beta_activation: unknown BetaActivation");
  KDA_REQUIRE(std::isfinite(a.scale), "scale: not finite");
  KDA_REQUIRE(view_ok(a.w, g, g.head_dim_k) && view_ok(a.u, g, g.head_dim_v) && view_ok(a.kg, g, g.head_dim_k) &&
                  view_ok(a.qg, g, g.head_dim_k),
              "w/u/kg/qg: null or overlapping strides");
  KDA_REQUIRE(vector_aligned(a.w) && vector_aligned(a.u) && vector_aligned(a.kg) && vector_aligned(a.qg),
              "w/u/kg/qg: not vector_aligned (16-byte base, strides multiples of 8 elements)");
  KDA_REQUIRE((a.Aqk_hi != nullptr) == (a.Aqk_lo != nullptr), "Aqk_hi/Aqk_lo: give both or neither");
  const bool aqk = a.Aqk != nullptr || (a.Aqk_hi != nullptr && a.Aqk_lo != nullptr);
  KDA_REQUIRE((aqk && a.G_last != nullptr) || g.metadata.total_tokens == 0, "Aqk/G_last: null");
  KDA_REQUIRE(intermediates_aligned(a.Aqk, a.G_last, a.Aqk_hi, a.Aqk_lo), "Aqk/G_last: not 16-byte aligned");
  KDA_REQUIRE(a.short_chunks >= -1 && a.short_chunks <= 1, "short_chunks: must be -1, 0 or 1");
  KDA_REQUIRE(a.short_chunks != 1 || g.chunk_size == 64, "short_chunks: 1 needs chunk_size 64");
  KDA_REQUIRE(a.warp_short >= -1 && a.warp_short <= 2, "warp_short: must be -1, 0, 1 or 2");
  KDA_REQUIRE(a.warp_short <= 0 || prepare_inputs_warp_short_ok(a),
              "warp_short: 1 and 2 need NVIDIA, head_dim_k = head_dim_v = 128, chunk_size 64, short_chunks -1 or 1 and "
              "metadata.max_sequence_tokens in [1, 8]");
  return Status();
}

// The form of it launch_chunk_prepare_inputs runs (1: 128 registers, 2: 168), 0 for none: forced by warp_short, else
// ActiveTuning::kWarpShortDefaultForm wherever it can. It gives the short-only kernel's bits faster
// (see docs/performance.md, "Warp-per-item prepare").
inline int prepare_inputs_warp_short_used(const ChunkPrepareInputsArgs& a) {
  if (a.warp_short >= 0) return a.warp_short;
  return prepare_inputs_warp_short_ok(a) ? ActiveTuning::kWarpShortDefaultForm : 0;
}

// Whether launch_chunk_prepare_inputs runs the kernel with the short path: forced by short_chunks, else in chunks of
// 64 wherever the sequences average fewer than four chunks (not long_sequence_batch). Its long path spills more, so
// long sequences run faster without it; many part-filled chunks run faster with it (see docs/performance.md,
// "Prepare kernel with the short path").
inline bool prepare_inputs_short_path_used(const ChunkPrepareInputsArgs& a) {
  if (a.short_chunks >= 0) return a.short_chunks == 1;
  return a.geometry.chunk_size == 64 && !long_sequence_batch(a.geometry.metadata, a.geometry.chunk_size);
}

// Enqueues the kernel on already-resolved chunk tables; no validation (the launcher below and chunk_kda_fwd
// validate).
inline Status enqueue_chunk_prepare_inputs(const ChunkPrepareInputsArgs& a, const ResolvedChunks& chunks,
                                           hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  if (chunks.grid_chunks == 0) return Status();
  // The two stages' parameters, on the raw q and k and without G (the kernel forms them itself).
  IntraChunkArgs intra{g, a.q, a.k, a.beta, a.beta_type, a.beta_activation, nullptr, a.scale, nullptr, a.Aqk, nullptr};
  intra.Aqk_hi = a.Aqk_hi;
  intra.Aqk_lo = a.Aqk_lo;
  const kernels::IntraChunkParams ip = intra_chunk_params(intra, chunks);
  const kernels::RecomputeWuParams wp = recompute_w_u_params(
      RecomputeWuArgs{g, a.k, a.v, a.beta, a.beta_type, a.beta_activation, nullptr, nullptr, a.w, a.u, a.kg}, chunks);
  kernels::PrepareInputsParams in;
  in.qk_l2norm = a.qk_l2norm;
  in.qk_vector = vector_aligned(a.q) && vector_aligned(a.k);
  in.g = a.g;
  in.g_type = a.g_type;
  in.g_vector = scalar_vector_aligned(a.g, a.g_type);
  in.A_log = a.A_log;
  in.dt_bias = a.dt_bias;
  in.gate = a.gate;
  in.lower_bound = a.lower_bound;
  in.qg = a.qg;
  in.G_last = a.G_last;
  const bool v_vector = vector_aligned(a.v);
#if defined(KDA_PLATFORM_CUDA)
  const int64_t warp_short_blocks =
      (chunks.grid_chunks * g.num_heads + ActiveTuning::kWarpShortWarps - 1) / ActiveTuning::kWarpShortWarps;
  // (A grid past x's limit, which only a batch of ~2^31 tokens could ask for, takes the short-only kernel instead.)
  const int warp_short = prepare_inputs_warp_short_used(a);
  if (warp_short > 0 && warp_short_blocks <= int64_t(INT32_MAX)) {  // one (chunk, head) per warp
    const auto blocks = static_cast<unsigned>(warp_short_blocks);
    constexpr int kThreads = ActiveTuning::kWarpShortWarps * kWarpSize;
    auto launch = [&](auto e, auto min_blocks) {
      kernels::chunk_prepare_inputs_warp_short_kernel<decltype(e), 64, 128, 128, decltype(min_blocks)::value>
          <<<blocks, kThreads, 0, stream>>>(ip, wp, in, v_vector);
    };
    using Spill = std::integral_constant<int, ActiveTuning::kWarpShortMinBlocks>;
    using NoSpill = std::integral_constant<int, ActiveTuning::kWarpShortMinBlocksNoSpill>;
    if (g.dtype == DType::kBF16) {
      warp_short == 2 ? launch(bf16_t{}, NoSpill{}) : launch(bf16_t{}, Spill{});
    } else {
      warp_short == 2 ? launch(fp16_t{}, NoSpill{}) : launch(fp16_t{}, Spill{});
    }
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  }
#endif
  const bool short_path = prepare_inputs_short_path_used(a);
  Status opt_in;  // the long-only kernel's dynamic shared memory (v rows), where it needs the opt-in
  const Status launched = dispatch_prepare_kernel(g, chunks, [&](auto e, auto bt, auto k, auto v, dim3 grid) {
    using E = decltype(e);
    constexpr int BT = decltype(bt)::value, K = decltype(k)::value, V = decltype(v)::value;
    constexpr int kThreads = kernels::kIntraMmaWarps * kWarpSize;
    if constexpr (BT == 64) {
      // every_sequence_short's host threshold is the kernel's: a bound above kShortChunkRows would skip chunks.
      static_assert(ActiveTuning::kShortBatchAverageTokens == kernels::kShortChunkRows,
                    "the short-only prepare's chunk rows");
      if (short_path && every_sequence_short(g.metadata)) {  // the caller bounds every sequence at 16 tokens
        kernels::chunk_prepare_inputs_short_only_mma_kernel<E, BT, K, V>
            <<<grid, kThreads, 0, stream>>>(ip, wp, in, v_vector);
        return;
      }
      if (short_path) {
        kernels::chunk_prepare_inputs_short_mma_kernel<E, BT, K, V>
            <<<grid, kThreads, 0, stream>>>(ip, wp, in, v_vector);
        return;
      }
    }
    constexpr auto kKernel = kernels::chunk_prepare_inputs_mma_kernel<E, BT, K, V>;
    constexpr size_t kVBytes = kernels::prepare_inputs_v_bytes<BT, V>();
    opt_in = allow_dynamic_shared<kKernel>(kVBytes, kernels::prepare_inputs_static_bytes<BT, K, V>());
    if (!opt_in.is_ok()) return;
    kKernel<<<grid, kThreads, kVBytes, stream>>>(ip, wp, in, v_vector);
  });
  KDA_RETURN_IF_ERROR(opt_in);
  return launched;
}

}  // namespace detail

inline Status launch_chunk_prepare_inputs(const ChunkPrepareInputsArgs& a, void* workspace, size_t workspace_bytes,
                                          hipStream_t stream) {
  KDA_RETURN_IF_ERROR(detail::validate_chunk_prepare_inputs(a));
  const StageGeometry& g = a.geometry;
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_chunk_prepare_inputs(a, chunks, stream);
}

}  // namespace kda
