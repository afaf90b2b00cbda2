// chunk_kda_fwd: the fused-gate KDA prefill in one call (KDA_SPEC §1), on the caller's stream, in the caller's
// workspace, with no allocation and no host sync — so a whole prefill can be captured in a graph.
//
//   size_t bytes = kda::chunk_kda_workspace_size(args);   // pure host function
//   ... caller provides `bytes` of device memory ...
//   kda::Status s = kda::chunk_kda_fwd(args, workspace, bytes, stream);
//
// Two forms, which give the same bits; the sizes pick one (chunk_kda_inputs_fused_by_shape). The fused form, for K
// and V in {64, 128} (in chunks other than 64 only where sequences average at least four chunks), is two launches:
// prepare (l2norm, gate + chunk cumsum, Aqk, Tinv, w, u, kg and qg from the raw inputs in one kernel; the normalised
// q, k, G, Akk and Tinv never reach memory) -> state recurrence with the output folded in (o, final state; no
// per-chunk h or v_new). The staged form, for the rest, is four: [q/k l2norm] -> gate + chunk cumsum -> prepare (Aqk,
// Tinv, w/u/kg and qg in one kernel where K, V are 64 or 128) -> state with the output folded in. Where the sizes
// cannot promise that the staged prepare is one kernel (K or V 256, or no in-kernel l2norm, whose caller views may
// be unaligned) the state writes h and v_new and a separate output launch follows (chunk_kda_output_folded). Where
// sequences average at most 16 tokens (speculative and decode batches) the folded state stage is itself two
// launches: a kernel of its own for the sequences of at most 16 tokens and the general one for the rest
// (detail::state_short_kernel_used). Where many long sequences would run the 64-column tiles, the folded state
// stage runs the register-state kernel instead (NVIDIA; detail::state_regs_warps_used), whose o and final state
// agree with the other kernels' within rounding, not bit for bit. Chunk tables: the caller's (args.metadata with tables and host NT) or derived on
// the device once per call and shared by all launches. Both metadata paths run the same kernels, so outputs are
// bit-identical.
//
// `o` may alias `v` (vLLM passes o=v): v is read only by the prepare launch, which completes before the launch that
// writes o on the same stream. `final_state` may equal `initial_state` (in-place pool update).
#pragma once

#include <cmath>

#include "kda/launch/chunk_output.hpp"
#include "kda/launch/chunk_prepare.hpp"
#include "kda/launch/chunk_prepare_inputs.hpp"
#include "kda/launch/gate_cumsum.hpp"
#include "kda/launch/intra_chunk.hpp"
#include "kda/launch/qk_l2norm.hpp"
#include "kda/launch/recompute_w_u.hpp"
#include "kda/launch/solve_tril.hpp"
#include "kda/launch/state_recurrence.hpp"

namespace kda {

struct ChunkKdaArgs {
  StageGeometry geometry;   // metadata (cu_seqlens, N, T, optional tables), H, K, V, chunk size (32 or 64), dtype

  TensorView q, k, v;       // [T,H,K], [T,H,K], [T,H,V] in the I/O dtype, strided views allowed
  TensorView g;             // raw gate [T,H,K]
  ScalarType g_type = ScalarType::kFloat32;
  TensorView beta;          // raw beta [T,H]
  ScalarType beta_type = ScalarType::kFloat32;

  GateKind gate = GateKind::kSoftplus;
  const float* A_log = nullptr;    // [H]
  const float* dt_bias = nullptr;  // [H*K]
  float lower_bound = -5.0f;
  BetaActivation beta_activation = BetaActivation::kSigmoid;
  bool qk_l2norm = true;
  float scale = 0.0f;              // 0 = K^-0.5

  StateArgs state;                 // initial/final state, layout, pool indices, has_initial_state

  MutableTensorView o;             // out [T,H,V]; may alias v
};

namespace detail {

// 32-bit words at the start of chunk_kda_fwd's workspace that each call clears first: the device status word, then
// the state stage's item counter (StateRecurrenceArgs::short_items_taken).
constexpr int kChunkKdaCallWords = 2;

// Byte offsets of every intermediate inside the workspace. One function serves workspace_size and the launcher,
// so the two can never disagree.
struct ChunkKdaWorkspaceLayout {
  size_t status = 0, metadata = 0, G = 0, q_norm = 0, k_norm = 0, Akk = 0, Aqk = 0, Tinv = 0, w = 0, u = 0, kg = 0,
         qg = 0, v_new = 0, h = 0, G_last = 0, total = 0;
  // true: chunk_kda_fwd runs chunk_prepare_inputs, and G, q_norm, k_norm, Akk and Tinv are empty while qg and
  // G_last are used; false: the stage-by-stage form, with qg and G_last empty.
  bool inputs_fused = false;
  // true: the state kernel forms o (chunk_kda_output_folded): qg is used, h is empty and v_new is not written.
  bool output_folded = false;
  bool akk_in_memory = true, tinv_in_memory = true;  // false: the region is empty (the value stays on chip)
};

// Whether the sizes alone guarantee that the staged form's prepare launch (Aqk, Tinv, w, u, kg) is one kernel, so
// that Tinv never needs memory: q and k are then the normalised workspace copies (16-byte aligned), and that kernel
// takes K and V in {64, 128} and any v.
inline bool chunk_kda_prepare_fused_by_shape(const ChunkKdaArgs& a) {
  return a.qk_l2norm && mma_head_dims(a.geometry.head_dim_k, a.geometry.head_dim_v);
}

// Which form chunk_kda_fwd runs: kAuto decides by the sizes (chunk_kda_inputs_fused_by_shape); kStaged and kFused
// force a form (kFused runs the staged one where K or V is 256). Both give the same bits; tests compare them and
// kda_bench times each form's launches on their own.
enum class ChunkKdaPath { kAuto, kStaged, kFused };

// Where chunk_kda_fwd forms the output: kAuto folds it into the state kernel wherever it can
// (chunk_kda_output_folded); kSeparate keeps a separate output launch that reads a per-chunk h from the workspace.
// Both give the same bits; tests compare them and kda_bench times both (--kda_output_separate).
enum class ChunkKdaOutput { kAuto, kSeparate };

// Whether the fused form can run: K and V in {64, 128}. It takes any q, k, g and v views.
inline bool chunk_kda_inputs_fusable(const ChunkKdaArgs& a) {
  return mma_head_dims(a.geometry.head_dim_k, a.geometry.head_dim_v);
}

// Whether chunk_kda_fwd starts with the fused prepare from the raw inputs (launch_chunk_prepare_inputs): it can run,
// and the chunk size is 64 or the batch is long (long_sequence_batch). Sizes only, so the workspace layout can
// follow; builder and derived tables pick the same form.
// Only chunks of 64 have a prepare kernel with a short path; without it, batches of mostly short chunks run faster
// staged (see docs/performance.md, "Fused and staged forms").
inline bool chunk_kda_inputs_fused_by_shape(const ChunkKdaArgs& a) {
  return chunk_kda_inputs_fusable(a) &&
         (a.geometry.chunk_size == 64 || long_sequence_batch(a.geometry.metadata, a.geometry.chunk_size));
}

// Whether the state kernel forms the output (o = scale qg round(S) + Aqk v_new, chunk after chunk), so that no
// per-chunk h reaches memory and no output launch runs: wherever qg = round(q exp2 G) is in the workspace (the fused
// prepare, or the staged form's one prepare kernel with qk_l2norm on and K, V in {64, 128}). Elsewhere (K or V 256,
// unnormalised q and k in the staged form) the output stays a launch of its own. Sizes only, so the workspace layout
// follows. No h keeps the workspace small, and the fold measured no slower than a separate output launch on any
// batch (see docs/performance.md, "Output folded into the state kernel").
inline bool chunk_kda_output_folded(const ChunkKdaArgs& a, bool inputs_fused) {
  return inputs_fused || chunk_kda_prepare_fused_by_shape(a);
}

inline ChunkKdaWorkspaceLayout chunk_kda_workspace_layout(const ChunkKdaArgs& a,
                                                          ChunkKdaPath path = ChunkKdaPath::kAuto,
                                                          ChunkKdaOutput output = ChunkKdaOutput::kAuto) {
  const StageGeometry& g = a.geometry;
  const size_t T = size_t(g.metadata.total_tokens), H = size_t(g.num_heads), K = size_t(g.head_dim_k),
               V = size_t(g.head_dim_v), BT = size_t(g.chunk_size), E = size_t(dtype_size(g.dtype));
  const size_t grid_chunks = g.metadata.has_tables()
                                 ? size_t(g.metadata.num_chunks)
                                 : size_t(max_num_chunks(g.metadata.total_tokens, g.metadata.num_sequences,
                                                         g.chunk_size));
  ChunkKdaWorkspaceLayout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at = align_up(at + bytes, kWorkspaceAlignment);
    return here;
  };
  l.status = take(kChunkKdaCallWords * sizeof(uint32_t));
  l.metadata = take(derived_metadata_bytes(g.metadata, g.chunk_size));
  l.inputs_fused = path == ChunkKdaPath::kAuto ? chunk_kda_inputs_fused_by_shape(a)
                                               : path == ChunkKdaPath::kFused && chunk_kda_inputs_fusable(a);
  const bool staged = !l.inputs_fused;
  l.output_folded = output == ChunkKdaOutput::kAuto && chunk_kda_output_folded(a, l.inputs_fused);
  l.G = take(staged ? T * H * K * sizeof(float) : 0);
  l.q_norm = take(staged && a.qk_l2norm ? T * H * K * E : 0);
  l.k_norm = take(staged && a.qk_l2norm ? T * H * K * E : 0);
  // Staged: Akk lives only on chip when the intra-chunk launch fuses solve_tril, which it always does on the
  // normalised (workspace, hence 16-byte-aligned) q and k; unnormalised caller views may need the per-element path's
  // Akk. Tinv lives only on chip when the staged prepare launch is one kernel (chunk_kda_prepare_fused_by_shape).
  // Fused: both stay on chip.
  l.akk_in_memory = staged && !a.qk_l2norm;
  l.tinv_in_memory = staged && !chunk_kda_prepare_fused_by_shape(a);
  l.Akk = take(l.akk_in_memory ? T * H * BT * sizeof(float) : 0);
  l.Aqk = take(T * H * BT * sizeof(float));  // fp32, or (output folded) its 16-bit hi and lo halves
  l.Tinv = take(l.tinv_in_memory ? T * H * BT * sizeof(float) : 0);
  l.w = take(T * H * K * E);
  l.u = take(T * H * V * E);
  l.kg = take(T * H * K * E);
  l.qg = take(l.inputs_fused || l.output_folded ? T * H * K * E : 0);
  // v_new is written over u (when the output is a launch of its own): the state kernels read each u row of a
  // (sequence, head, V-tile) before they write that row's v_new, and nothing reads u afterwards.
  l.v_new = l.u;
  l.h = take(l.output_folded ? 0 : grid_chunks * H * K * V * E);
  l.G_last = take(l.inputs_fused ? grid_chunks * H * K * sizeof(float) : 0);
  l.total = at;
  return l;
}

// The checks the workspace size depends on: sizes, head dims, dtype, chunk size, the host NT. No data pointers, so
// an engine can size its workspace before its buffers exist.
inline Status validate_chunk_kda_sizes(const ChunkKdaArgs& a, bool check_pointers = false) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(validate_geometry(g, check_pointers));
  if (g.chunk_size != 32 && g.chunk_size != 64) return unsupported("chunk_size: chunk_kda_fwd supports 32 and 64");
  return Status();
}

inline Status validate_chunk_kda(const ChunkKdaArgs& a) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(validate_chunk_kda_sizes(a, /*check_pointers=*/true));
  KDA_RETURN_IF_ERROR(validate_gate(a.gate, a.A_log, a.lower_bound));
  KDA_RETURN_IF_ERROR(validate_state(a.state, g.metadata.num_sequences));
  KDA_REQUIRE(view_ok(a.q, g, g.head_dim_k), "q: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.k, g, g.head_dim_k), "k: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.v, g, g.head_dim_v), "v: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.g, g, g.head_dim_k), "g: null or overlapping strides");
  KDA_REQUIRE(scalar_view_ok(a.beta, g), "beta: null or overlapping strides");
  KDA_REQUIRE(view_ok(a.o, g, g.head_dim_v), "o: null or overlapping strides");
  KDA_REQUIRE(beta_activation_ok(a.beta_activation), "beta_activation: unknown BetaActivation");
  KDA_REQUIRE(scalar_type_ok(a.g_type), "g_type: unknown ScalarType");
  KDA_REQUIRE(scalar_type_ok(a.beta_type), "beta_type: unknown ScalarType");
  KDA_REQUIRE(std::isfinite(a.scale), "scale: not finite");
  // o may be v itself (same data and strides: each element of v is read before o overwrites it), but must not
  // overlap any other input or partially overlap v.
  const int E = dtype_size(g.dtype), K = g.head_dim_k, V = g.head_dim_v;
  const bool o_is_v = a.o.data == a.v.data && a.o.token_stride == a.v.token_stride &&
                      a.o.head_stride == a.v.head_stride;
  auto o_overlaps = [&](const TensorView& x, int dim, int elem) {
    return views_overlap(a.o.data, a.o.token_stride, a.o.head_stride, V, E, x.data, x.token_stride, x.head_stride,
                         dim, elem, g);
  };
  KDA_REQUIRE(o_is_v || !o_overlaps(a.v, V, E), "o: partially overlaps v (o may only be exactly v)");
  KDA_REQUIRE(!o_overlaps(a.q, K, E) && !o_overlaps(a.k, K, E), "o: overlaps q or k");
  KDA_REQUIRE(!o_overlaps(a.g, K, scalar_type_size(a.g_type)), "o: overlaps g");
  KDA_REQUIRE(!o_overlaps(a.beta, 1, scalar_type_size(a.beta_type)), "o: overlaps beta");
  KDA_REQUIRE(g.metadata.num_sequences * g.num_heads * (g.head_dim_v / kernels::kStateTileV) < (int64_t(1) << 31),
              "num_sequences*num_heads: too many state blocks");
  return Status();
}

// The arguments of every stage chunk_kda_fwd runs, pointing into `workspace` (laid out by chunk_kda_workspace_layout)
// and using geometry `g` (chunk_kda_fwd passes the caller's with its device status word added). intra asks for Tinv,
// so solve_tril runs inside the intra-chunk launch. kda_bench's per-stage runner uses the same arguments, so what it
// times is what chunk_kda_fwd launches.
struct ChunkKdaStageArgs {
  bool inputs_fused = false;  // prepare_inputs, state, output run; otherwise the staged form below
  bool output_folded = false;  // the state launch writes o (state.o); the output launch does not run
  ChunkPrepareInputsArgs prepare_inputs;
  QkL2NormArgs l2norm;  // staged form: run only when ChunkKdaArgs::qk_l2norm
  GateCumsumArgs gate;
  IntraChunkArgs intra;
  RecomputeWuArgs wu;
  StateRecurrenceArgs state;
  ChunkOutputArgs output;
};

inline ChunkKdaStageArgs chunk_kda_stage_args(const ChunkKdaArgs& a, const StageGeometry& g, void* workspace,
                                              ChunkKdaPath path = ChunkKdaPath::kAuto,
                                              ChunkKdaOutput output = ChunkKdaOutput::kAuto) {
  const ChunkKdaWorkspaceLayout l = chunk_kda_workspace_layout(a, path, output);
  char* ws = static_cast<char*>(workspace);
  auto at = [&](size_t off) { return static_cast<void*>(ws + off); };
  const int H = g.num_heads, K = g.head_dim_k, V = g.head_dim_v;
  ChunkKdaStageArgs s;
  TensorView q = a.q, k = a.k;
  s.l2norm = QkL2NormArgs{g, a.q, a.k, contiguous_view(at(l.q_norm), H, K), contiguous_view(at(l.k_norm), H, K)};
  if (a.qk_l2norm) {
    q = contiguous_view(static_cast<const void*>(at(l.q_norm)), H, K);
    k = contiguous_view(static_cast<const void*>(at(l.k_norm)), H, K);
  }
  float* G = static_cast<float*>(at(l.G));
  float* Aqk = static_cast<float*>(at(l.Aqk));
  float* Akk = l.akk_in_memory ? static_cast<float*>(at(l.Akk)) : nullptr;
  float* Tinv = l.tinv_in_memory ? static_cast<float*>(at(l.Tinv)) : nullptr;
  s.gate = GateCumsumArgs{g, a.g, a.g_type, a.gate, a.A_log, a.dt_bias, a.lower_bound, G};
  s.intra = IntraChunkArgs{g, q, k, a.beta, a.beta_type, a.beta_activation, G, a.scale, Akk, Aqk, Tinv};
  s.wu = RecomputeWuArgs{g, k, a.v, a.beta, a.beta_type, a.beta_activation, G, Tinv,
                         contiguous_view(at(l.w), H, K), contiguous_view(at(l.u), H, V), contiguous_view(at(l.kg), H, K)};
  // Nothing downstream reads Akk: it stays on chip wherever the launch that makes Tinv can keep it there.
  if (chunk_prepare_fused(s.intra, s.wu) || intra_chunk_keeps_akk_on_chip(s.intra)) s.intra.Akk = nullptr;
  s.state = StateRecurrenceArgs{g, at(l.w), at(l.u), at(l.kg), G, a.state, at(l.h), at(l.v_new)};
  s.output = ChunkOutputArgs{g, q, G, at(l.h), Aqk, at(l.v_new), a.scale, a.o};
  s.inputs_fused = l.inputs_fused;
  if (s.inputs_fused) {  // G, q_norm and k_norm do not exist: the state reads G_last, the output qg
    float* G_last = static_cast<float*>(at(l.G_last));
    const MutableTensorView qg = contiguous_view(at(l.qg), H, K);
    s.prepare_inputs = ChunkPrepareInputsArgs{g,        a.q,      a.k,           a.v,           a.g,
                                              a.g_type, a.beta,   a.beta_type,   a.gate,        a.A_log,
                                              a.dt_bias, a.lower_bound, a.beta_activation, a.qk_l2norm, a.scale,
                                              Aqk,      s.wu.w,   s.wu.u,        s.wu.kg,       qg,
                                              G_last};
    s.state.G = nullptr;
    s.state.G_last = G_last;
    s.output.q = contiguous_view(static_cast<const void*>(at(l.qg)), H, K);
    s.output.G = nullptr;
    s.output.q_gated = true;
  }
  s.output_folded = l.output_folded;
  if (s.output_folded) {
    // The state kernel forms o from qg and Aqk; no h, and v_new stays on chip. The prepare launch writes Aqk's
    // region as the hi + lo pair of 16-bit matrices the output multiplies (same bytes as fp32), and the staged form's
    // prepare also writes qg.
    void* aqk_hi = at(l.Aqk);
    void* aqk_lo = static_cast<char*>(aqk_hi) + size_t(g.metadata.total_tokens) * H * g.chunk_size * dtype_size(g.dtype);
    s.state.h = nullptr;
    s.state.v_new = nullptr;
    s.state.qg = at(l.qg);
    s.state.Aqk_hi = aqk_hi;
    s.state.Aqk_lo = aqk_lo;
    s.state.o = a.o;
    s.state.scale = a.scale;
    if (s.inputs_fused) {
      s.prepare_inputs.Aqk = nullptr;
      s.prepare_inputs.Aqk_hi = aqk_hi;
      s.prepare_inputs.Aqk_lo = aqk_lo;
    } else {
      s.intra.qg = contiguous_view(at(l.qg), H, K);
      s.intra.Aqk = nullptr;
      s.intra.Aqk_hi = aqk_hi;
      s.intra.Aqk_lo = aqk_lo;
    }
  }
  return s;
}

}  // namespace detail

// Bytes of device workspace chunk_kda_fwd needs for these arguments; a pure host function of the sizes (data
// pointers may still be null). 0 for sizes chunk_kda_fwd would reject (it then returns the reason).
inline size_t chunk_kda_workspace_size(const ChunkKdaArgs& a) {
  return detail::validate_chunk_kda_sizes(a).is_ok() ? detail::chunk_kda_workspace_layout(a).total : 0;
}

// The device status word (DeviceStatusBits) of the last chunk_kda_fwd that used this workspace: 0 when the device
// saw nothing wrong. It lives at the start of the workspace; pass it to read_device_status.
inline const uint32_t* chunk_kda_device_status(const void* workspace) { return static_cast<const uint32_t*>(workspace); }

namespace detail {
// chunk_kda_fwd on a chosen path; the workspace must hold chunk_kda_workspace_layout(a, path, output).total bytes.
// state_regs_warps: StateRecurrenceArgs::regs_warps of the state launch, prepare_warp_short:
// ChunkPrepareInputsArgs::warp_short of the fused form's prepare (-1: the launcher's choice), for benchmarks and tests.
inline Status chunk_kda_fwd_on_path(const ChunkKdaArgs& a, void* workspace, size_t workspace_bytes,
                                    hipStream_t stream, ChunkKdaPath path,
                                    ChunkKdaOutput output = ChunkKdaOutput::kAuto, int state_regs_warps = -1,
                                    int prepare_warp_short = -1) {
  KDA_RETURN_IF_ERROR(detail::validate_chunk_kda(a));
  const detail::ChunkKdaWorkspaceLayout l = detail::chunk_kda_workspace_layout(a, path, output);
  if (workspace_bytes < l.total) return Status(StatusCode::kWorkspaceTooSmall, "workspace: smaller than chunk_kda_workspace_size()");
  if (workspace == nullptr && l.total > 0) return invalid_argument("workspace: null");
  char* ws = static_cast<char*>(workspace);

  // The device status word of this call and the state stage's item counter after it start clear: resolve_chunks
  // zeroes them first, inside the derivation kernel when the tables are derived, by a memset (a memset node under
  // graph capture) when the caller passed them.
  auto* status = reinterpret_cast<uint32_t*>(ws + l.status);
  StageGeometry g = a.geometry;
  g.metadata.device_status = status;

  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, ws + l.metadata,
                                             detail::derived_metadata_bytes(a.geometry.metadata, g.chunk_size), stream,
                                             &chunks, kChunkKdaCallWords));

  const detail::ChunkKdaStageArgs s = detail::chunk_kda_stage_args(a, g, workspace, path, output);
  StateRecurrenceArgs state = s.state;
  state.short_items_taken = status + 1;  // cleared above, for this call
  state.regs_warps = state_regs_warps;
  if (state_regs_warps != -1) KDA_RETURN_IF_ERROR(detail::validate_state_v_tile(state));
  if (s.inputs_fused) {
    ChunkPrepareInputsArgs prepare = s.prepare_inputs;
    prepare.warp_short = prepare_warp_short;
    if (prepare_warp_short != -1) KDA_RETURN_IF_ERROR(detail::validate_chunk_prepare_inputs(prepare));
    KDA_RETURN_IF_ERROR(detail::enqueue_chunk_prepare_inputs(prepare, chunks, stream));
    KDA_RETURN_IF_ERROR(detail::enqueue_state_recurrence(state, chunks, stream, /*beside_prepare=*/true));
    return s.output_folded ? Status() : detail::enqueue_chunk_output(s.output, chunks, stream);
  }
  // l2norm and gate stay two launches: one kernel for both ran slower
  // (see docs/performance.md, "l2norm and gate launches").
  if (a.qk_l2norm) KDA_RETURN_IF_ERROR(launch_qk_l2norm(s.l2norm, stream));
  KDA_RETURN_IF_ERROR(detail::enqueue_gate_cumsum(s.gate, chunks, stream));
  // Aqk, w, u and kg in one launch (Akk and Tinv on chip), or intra + w/u through Tinv where it cannot be fused
  // (the layout gives Akk and Tinv memory whenever that can happen; the fuzz target checks it for every shape).
  KDA_RETURN_IF_ERROR(detail::enqueue_chunk_prepare(s.intra, s.wu, chunks, stream));
  KDA_RETURN_IF_ERROR(detail::enqueue_state_recurrence(state, chunks, stream, /*beside_prepare=*/true));
  return s.output_folded ? Status() : detail::enqueue_chunk_output(s.output, chunks, stream);
}
}  // namespace detail

inline Status chunk_kda_fwd(const ChunkKdaArgs& a, void* workspace, size_t workspace_bytes, hipStream_t stream) {
  return detail::chunk_kda_fwd_on_path(a, workspace, workspace_bytes, stream, detail::ChunkKdaPath::kAuto);
}

}  // namespace kda
