// libFuzzer target: host-side argument validation of the launch API, on hostile kda::ChunkKdaArgs.
//
// Builds ChunkKdaArgs from fuzzer bytes (sizes, head dims, chunk size, dtypes and enums including out-of-range
// values, strides, null / distinct fake pointers, gate and lower_bound, scale, state pool fields, chunk tables and
// host NT) and calls only the pure host functions kda::detail::validate_chunk_kda, kda::chunk_kda_workspace_size and
// kda::detail::state_v_tile.
// Fake pointers are never dereferenced; no GPU is touched (no_gpu_runtime.cpp traps if a launch stub ever runs).
//
// Checks, besides "no crash, no UB" (ASan + UBSan with -fno-sanitize-recover):
//   - every Status is ok / invalid argument / unsupported with a non-null message;
//   - when validation passes: every enum is in range, every size is what the kernels support, grids and chunk ids
//     fit, and every region of the workspace layout holds its __int128 size without overlapping another (so no
//     size computation can have wrapped);
//   - when validation passes, the properties the kernels silently rely on (element offsets fit int64, tables
//     consistent with T and N, ...). Several of these do not hold today: they are the gaps G1..G9 of
//     docs/input_validation.md.
//
// Known gaps are tolerated by default (KDA_FUZZ_TOLERATED_GAPS, fuzz_input.hpp): build with
// -DKDA_FUZZ_TOLERATED_GAPS=0 to find them all, or clear one bit to find one.
//
// Input layout: a sequence of fields, each read by Input::pick (one selector byte: an index into a list of
// interesting values, or a raw value read from the stream) or as plain bytes; see decode() below.
#include "kda/chunk_kda.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "fuzz_input.hpp"


namespace {

using kda_fuzz::Input;
using i128 = __int128;

using kda_fuzz::tolerate;
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

// Distinct, never-dereferenced fake device addresses (multiples of 4 KiB, like real allocations).
template <typename T = void>
T* fake(int slot) {
  return reinterpret_cast<T*>(uintptr_t(0x10000) * uintptr_t(slot + 1));
}

int64_t clamp64(i128 v) { return v > kI64Max ? kI64Max : (v < kI64Min ? kI64Min : int64_t(v)); }
i128 ceil_div(i128 a, i128 b) { return (a + b - 1) / b; }

enum ViewId { kQ, kK, kV, kG, kBeta, kO, kNumViews };

// Strides of one view: contiguous, fused-projection, overlapping, head-major, huge, raw.
void decode_strides(Input& in, int64_t heads, int64_t dim, int64_t total_tokens, int64_t* token_stride,
                    int64_t* head_stride) {
  const uint8_t mode = in.u8();
  i128 ts = 0, hs = 0;
  switch (mode % 9) {
    case 0: hs = dim; ts = i128(heads) * dim; break;                                   // contiguous [T,H,D]
    case 1: hs = dim; ts = i128(heads) * dim * (2 + (in.u8() % 3)); break;             // view into a fused qkv
    case 2: hs = dim - 1 - (in.u8() % 4); ts = i128(heads) * dim; break;                // heads overlap
    case 3: hs = dim; ts = i128(heads - 1) * dim + dim - 1 - (in.u8() % 4); break;       // tokens overlap
    case 4: ts = dim; hs = i128(total_tokens) * dim; break;                               // head-major [H,T,D]
    case 5: hs = i128(1) << (30 + in.u8() % 34); ts = i128(heads) * hs; break;            // huge, up to 2^63
    case 6: hs = in.i64(); ts = i128(heads - 1) * hs + dim + (in.u8() % 2); break;       // raw head stride, tight
    case 7: ts = in.i64(); hs = in.i64(); break;                                          // anything
    case 8: hs = int64_t(in.u16()); ts = int64_t(in.u32()); break;
  }
  if (tolerate(2)) {
    // G2: view_ok computes (H-1)*head_stride + dim in int64 and overflows (UB) for |head_stride| > ~2^51.
    const i128 lim = i128(1) << 40;
    hs = hs > lim ? lim : (hs < -lim ? -lim : hs);
    ts = ts > lim ? lim : (ts < -lim ? -lim : ts);
  }
  *token_stride = clamp64(ts);
  *head_stride = clamp64(hs);
}

struct Decoded {
  kda::ChunkKdaArgs args;
  bool o_aliases_v = false;
};

Decoded decode(Input& in) {
  Decoded d;
  kda::ChunkKdaArgs& a = d.args;
  kda::StageGeometry& g = a.geometry;
  kda::ChunkMetadataArgs& m = g.metadata;

  static const int64_t kSeqs[] = {1, 2, 0, 3, 7, 64, 1000, 65536, (int64_t(1) << 30) - 1, int64_t(1) << 30,
                                  int64_t(1) << 31, -1, kI64Max, kI64Min, int64_t(1) << 62, kI64Max - 1};
  static const int64_t kTokens[] = {64, 1, 0, 15, 16, 63, 65, 1000, 4096, 32768, int64_t(1) << 31,
                                    int64_t(1) << 36, (int64_t(1) << 36) - 1, -1, kI64Max, kI64Min};
  m.num_sequences = in.pick(kSeqs, &Input::i64);
  m.total_tokens = in.pick(kTokens, &Input::i64);
  if (tolerate(1)) {
    // G1: validate_metadata computes max_num_chunks(T, N, BT) = ceil(T/BT) + N in int64 (UB on overflow).
    const int64_t lim = int64_t(1) << 61;
    m.num_sequences = m.num_sequences > lim ? lim : (m.num_sequences < -lim ? -lim : m.num_sequences);
    m.total_tokens = m.total_tokens > lim ? lim : (m.total_tokens < -lim ? -lim : m.total_tokens);
  }
  static const int32_t kHeads[] = {4, 1, 2, 32, 64, 4096, 4097, 0, -1, 65535, 65536, std::numeric_limits<int32_t>::max(),
                                   std::numeric_limits<int32_t>::min()};
  static const int32_t kDims[] = {128, 64, 256, 0, 32, 512, -64, 96, 16};
  static const int32_t kChunk[] = {64, 32, 16, 0, 128, -64, 1, 48, std::numeric_limits<int32_t>::min()};
  static const int32_t kEnum[] = {0, 1, 2, 3, -1, 255};
  g.num_heads = in.pick(kHeads, &Input::i32);
  g.head_dim_k = in.pick(kDims, &Input::i32);
  g.head_dim_v = in.pick(kDims, &Input::i32);
  g.chunk_size = in.pick(kChunk, &Input::i32);
  g.dtype = kda::DType(in.pick(kEnum, &Input::i32));
  a.g_type = kda::ScalarType(in.pick(kEnum, &Input::i32));
  a.beta_type = kda::ScalarType(in.pick(kEnum, &Input::i32));
  a.gate = kda::GateKind(in.pick(kEnum, &Input::i32));
  a.beta_activation = kda::BetaActivation(in.pick(kEnum, &Input::i32));
  a.state.layout = kda::StateLayout(in.pick(kEnum, &Input::i32));

  static const float kLowerBounds[] = {-5.0f, -1.0f, -4.9999995f, -0.0f, 0.0f, -5.0000005f, NAN, -INFINITY, INFINITY,
                                       1.0f, -1e-45f};
  static const float kScales[] = {0.0f, 0.125f, 1.0f, -1.0f, NAN, INFINITY, -INFINITY, 1e-45f, 3e38f};
  a.lower_bound = in.pick(kLowerBounds, &Input::f32);
  a.scale = in.pick(kScales, &Input::f32);

  // Which pointers are present (bit set = null), then the index types of the integer tables.
  const uint32_t nulls = in.u32();
  auto present = [&](int bit) { return (nulls & (1u << bit)) == 0; };
  m.cu_seqlens.data = present(0) ? fake<const void>(0) : nullptr;
  const void* view_data[kNumViews] = {};
  for (int v = 0; v < kNumViews; ++v) view_data[v] = present(1 + v) ? fake<const void>(1 + v) : nullptr;
  a.A_log = present(7) ? fake<const float>(8) : nullptr;
  a.dt_bias = present(8) ? fake<const float>(9) : nullptr;
  // State pool: absent by default (bits set mean present here).
  a.state.initial_state = (nulls & (1u << 9)) ? fake<const float>(10) : nullptr;
  a.state.final_state = (nulls & (1u << 10)) ? fake<float>(11) : nullptr;
  if ((nulls & (1u << 11)) && a.state.initial_state != nullptr) {
    a.state.final_state = const_cast<float*>(a.state.initial_state);  // in-place pool update
  }
  a.state.state_indices.data = (nulls & (1u << 12)) ? fake<const void>(12) : nullptr;
  a.state.has_initial_state = (nulls & (1u << 13)) ? fake<const uint8_t>(13) : nullptr;
  // Host chunk tables: absent by default.
  m.chunk_indices.data = (nulls & (1u << 14)) ? fake<const void>(14) : nullptr;
  m.chunk_offsets.data = (nulls & (1u << 15)) ? fake<const void>(15) : nullptr;
  a.qk_l2norm = (nulls & (1u << 16)) == 0;
  d.o_aliases_v = (nulls & (1u << 17)) != 0;  // vLLM passes o = v
  const bool o_aliases_q = (nulls & (1u << 18)) != 0;

  static const int32_t kIndexTypes[] = {0, 1, 2, -1};
  m.cu_seqlens.type = kda::IndexType(in.pick(kIndexTypes, &Input::i32));
  m.chunk_indices.type = kda::IndexType(in.pick(kIndexTypes, &Input::i32));
  m.chunk_offsets.type = kda::IndexType(in.pick(kIndexTypes, &Input::i32));
  a.state.state_indices.type = kda::IndexType(in.pick(kIndexTypes, &Input::i32));

  // Host NT, relative to the bounds the tables must satisfy: ceil(T/BT) <= NT <= ceil(T/BT) + N (and NT <= T).
  const int bt = g.chunk_size > 0 ? g.chunk_size : 64;
  const i128 lower = m.total_tokens > 0 ? ceil_div(m.total_tokens, bt) : 0;
  const i128 upper = lower + (m.num_sequences > 0 ? m.num_sequences : 0);
  switch (in.u8() % 8) {
    case 0: m.num_chunks = clamp64(lower); break;
    case 1: m.num_chunks = clamp64(upper); break;
    case 2: m.num_chunks = clamp64(upper + 1); break;
    case 3: m.num_chunks = clamp64(lower - 1); break;
    case 4: m.num_chunks = -1; break;
    case 5: m.num_chunks = 0; break;
    case 6: m.num_chunks = clamp64(lower + in.u8() % 4); break;
    case 7: m.num_chunks = in.i64(); break;
  }

  // Pool size: -1 (N slots), relative to N, or raw.
  switch (in.u8() % 6) {
    case 0: a.state.pool_size = -1; break;
    case 1: a.state.pool_size = m.num_sequences; break;
    case 2: a.state.pool_size = clamp64(i128(m.num_sequences) - 1); break;
    case 3: a.state.pool_size = clamp64(i128(m.num_sequences) + in.u8()); break;
    case 4: a.state.pool_size = int64_t(in.u8()) - 3; break;
    case 5: a.state.pool_size = in.i64(); break;
  }

  // Views (q, k: K; v, o: V; g: K; beta: [T,H]).
  const int64_t heads = g.num_heads;
  const int64_t dims[kNumViews] = {g.head_dim_k, g.head_dim_k, g.head_dim_v, g.head_dim_k, 1, g.head_dim_v};
  kda::TensorView* views[kNumViews - 1] = {&a.q, &a.k, &a.v, &a.g, &a.beta};
  for (int v = 0; v < kNumViews; ++v) {
    int64_t ts = 0, hs = 0;
    decode_strides(in, heads, dims[v], m.total_tokens, &ts, &hs);
    if (v == kO) {
      a.o = kda::MutableTensorView{const_cast<void*>(view_data[kO]), ts, hs};
    } else {
      *views[v] = kda::TensorView{view_data[v], ts, hs};
    }
  }
  if (d.o_aliases_v) a.o = kda::MutableTensorView{const_cast<void*>(a.v.data), a.v.token_stride, a.v.head_stride};
  if (o_aliases_q && !tolerate(9)) {
    // G9: o may alias v (documented), but nothing stops it from aliasing q, which the output stage reads.
    a.o = kda::MutableTensorView{const_cast<void*>(a.q.data), a.q.token_stride, a.q.head_stride};
  }
  return d;
}

bool one_of(int x, std::initializer_list<int> values) {
  for (int v : values) {
    if (x == v) return true;
  }
  return false;
}

// One named region of the chunk_kda_fwd workspace: its offset in the layout and the bytes it must hold, computed
// in __int128 from the shapes (KDA_SPEC: G/Akk/Aqk/Tinv fp32, q_norm/k_norm/w/u/kg/v_new/h in the I/O type).
struct Region {
  const char* name;
  size_t offset;
  i128 bytes;
};

// Checks the layout against the shapes without copying its formula (so new regions or a new order need no edit
// here): every named region is 256-byte aligned, lies inside the total and overlaps no other one. A size_t product
// or sum that wrapped would leave some region smaller than its __int128 size, hence overlapping its successor or
// running past the total.
void check_workspace_layout(const kda::ChunkKdaArgs& a) {
  const kda::StageGeometry& g = a.geometry;
  const kda::ChunkMetadataArgs& m = g.metadata;
  const i128 T = m.total_tokens, N = m.num_sequences, H = g.num_heads, K = g.head_dim_k, V = g.head_dim_v,
             BT = g.chunk_size, E = 2;
  const bool tables = m.chunk_indices.data != nullptr || m.chunk_offsets.data != nullptr;
  const i128 nt_max = ceil_div(T, BT) + N;
  const i128 grid = tables ? i128(m.num_chunks) : nt_max;
  const kda::detail::ChunkKdaWorkspaceLayout l = kda::detail::chunk_kda_workspace_layout(a);
  const size_t ws = kda::chunk_kda_workspace_size(a);
  KDA_FUZZ_CHECK(ws == l.total);
  KDA_FUZZ_CHECK(i128(ws) < (i128(1) << 62));
  // Derived tables: offsets [N+1] and NT (int32), indices [NT_max,2] (int32).
  // K, V in {64, 128}, and chunks of 64 or sequences averaging at least 4 chunks: the fused prepare from the raw
  // inputs, whose layout has no G, q_norm, k_norm, Akk or Tinv, but qg and G_last. Otherwise the staged form.
  const bool fusable = one_of(g.head_dim_k, {64, 128}) && one_of(g.head_dim_v, {64, 128});
  const bool fused = fusable && (BT == 64 || T >= 4 * BT * N);
  KDA_FUZZ_CHECK(l.inputs_fused == fused);
  KDA_FUZZ_CHECK(l.inputs_fused == kda::detail::chunk_kda_inputs_fused_by_shape(a));
  const i128 staged = fused ? 0 : 1;
  // The state kernel forms the output wherever qg exists (the fused form, and the staged form's one prepare kernel:
  // qk_l2norm, K and V in {64, 128}); then qg and no per-chunk h.
  const bool folded = fused || (a.qk_l2norm && fusable);
  KDA_FUZZ_CHECK(l.output_folded == folded);
  const i128 fold = folded ? 1 : 0;
  const Region regions[] = {
      {"metadata", l.metadata, tables ? 0 : 4 * (N + 2) + 8 * nt_max},
      {"G", l.G, staged * T * H * K * 4},
      {"q_norm", l.q_norm, a.qk_l2norm ? staged * T * H * K * E : 0},
      {"k_norm", l.k_norm, a.qk_l2norm ? staged * T * H * K * E : 0},
      {"Akk", l.Akk, a.qk_l2norm ? 0 : staged * T * H * BT * 4},  // on chip when q, k are the normalised copies
      {"Aqk", l.Aqk, T * H * BT * 4},
      {"Tinv", l.Tinv, l.tinv_in_memory ? T * H * BT * 4 : 0},  // on chip when the staged prepare is one kernel
      {"w", l.w, T * H * K * E},
      {"u", l.u, T * H * V * E},
      {"kg", l.kg, T * H * K * E},
      {"qg", l.qg, fold * T * H * K * E},
      {"h", l.h, (1 - fold) * grid * H * K * V * E},
      {"G_last", l.G_last, (1 - staged) * grid * H * K * 4},
  };
  KDA_FUZZ_CHECK(l.v_new == l.u);  // v_new is written over u (same shape, [T,H,V])
  // Akk and Tinv may lack memory only where the launches are sure to keep them on chip.
  KDA_FUZZ_CHECK(l.tinv_in_memory == (!fused && !kda::detail::chunk_kda_prepare_fused_by_shape(a)));
  KDA_FUZZ_CHECK(l.akk_in_memory == (!fused && !a.qk_l2norm));
  {
    // Fake but 256-byte-aligned data pointers: only the views' alignment decides which launches run.
    kda::ChunkKdaArgs b = a;
    b.q.data = b.k.data = b.v.data = reinterpret_cast<const void*>(uintptr_t(1) << 20);
    const kda::detail::ChunkKdaStageArgs s =
        kda::detail::chunk_kda_stage_args(b, b.geometry, reinterpret_cast<void*>(uintptr_t(1) << 30));
    KDA_FUZZ_CHECK(s.inputs_fused == fused);
    KDA_FUZZ_CHECK(s.output_folded == folded);
    if (folded) {  // the state launch writes o and no h; the staged prepare writes the qg it reads
      KDA_FUZZ_CHECK(s.state.o.data == b.o.data && s.state.h == nullptr && s.state.v_new == nullptr);
      KDA_FUZZ_CHECK(fused || (kda::chunk_prepare_fused(s.intra, s.wu) && s.intra.qg.data != nullptr));
    }
    if (!fused) {  // the staged form must never skip a buffer a launch it may run needs
      const bool prepare_fused = kda::chunk_prepare_fused(s.intra, s.wu);
      KDA_FUZZ_CHECK(l.tinv_in_memory || prepare_fused);
      if (!l.akk_in_memory) KDA_FUZZ_CHECK(prepare_fused || kda::intra_chunk_keeps_akk_on_chip(s.intra));
      KDA_FUZZ_CHECK(s.intra.Akk == nullptr || l.akk_in_memory);
    }
  }
  for (const Region& r : regions) {
    KDA_FUZZ_CHECK(r.offset % kda::detail::kWorkspaceAlignment == 0);
    KDA_FUZZ_CHECK(i128(r.offset) + r.bytes <= i128(l.total));
    for (const Region& o : regions) {
      if (&o == &r || r.bytes == 0 || o.bytes == 0) continue;
      const bool disjoint = i128(r.offset) + r.bytes <= i128(o.offset) || i128(o.offset) + o.bytes <= i128(r.offset);
      KDA_FUZZ_CHECK(disjoint);
    }
  }
}

// Largest element offset a kernel forms for a view: (T-1)*token_stride + (H-1)*head_stride + (D-1), in int64 in
// device_common.hpp, then scaled by the element size in pointer arithmetic.
bool offsets_fit(const kda::TensorView& v, int64_t T, int64_t H, int64_t D, int elem_size) {
  if (T == 0) return true;
  const i128 last = i128(T - 1) * v.token_stride + i128(H - 1) * v.head_stride + (D - 1);
  return last >= 0 && last * elem_size <= kI64Max;
}

void check(const Decoded& d) {
  const kda::ChunkKdaArgs& a = d.args;
  const kda::StageGeometry& g = a.geometry;
  const kda::ChunkMetadataArgs& m = g.metadata;

  const kda::Status s = kda::detail::validate_chunk_kda(a);
  KDA_FUZZ_CHECK(s.message() != nullptr);
  KDA_FUZZ_CHECK(s.code() == kda::StatusCode::kOk || s.code() == kda::StatusCode::kInvalidArgument ||
                 s.code() == kda::StatusCode::kUnsupported);
  KDA_FUZZ_STAT(s.is_ok() ? "validate ok" : (s.code() == kda::StatusCode::kUnsupported ? "validate unsupported"
                                                                                       : "validate invalid"));

  // chunk_kda_workspace_size is documented as a pure host function and, in the two-phase pattern, is called before
  // chunk_kda_fwd validates, so it must be safe on any argument.
  const bool tame_for_workspace =
      (g.chunk_size == 16 || g.chunk_size == 32 || g.chunk_size == 64) && m.num_sequences >= 0 &&
      m.num_sequences <= (int64_t(1) << 40) && m.total_tokens >= 0 && m.total_tokens <= (int64_t(1) << 40);
  // G4: on unvalidated arguments it divides by chunk_size (0 -> SIGFPE) and overflows int64 in max_num_chunks and
  // derived_metadata_bytes.
  if (s.is_ok() || !tolerate(4) || tame_for_workspace) {
    const size_t ws = kda::chunk_kda_workspace_size(a);
    if (!s.is_ok()) {
      KDA_FUZZ_STAT("workspace_size on invalid args");
    }
    (void)ws;
  }
  if (!s.is_ok()) return;

  // ---- What validation promises when it passes ----
  const int64_t N = m.num_sequences, T = m.total_tokens, H = g.num_heads, K = g.head_dim_k, V = g.head_dim_v;
  const int BT = g.chunk_size;
  KDA_FUZZ_CHECK(N >= 0 && T >= 0);
  KDA_FUZZ_CHECK(H >= 1 && H <= 4096);
  KDA_FUZZ_CHECK(one_of(int(K), {64, 128, 256}) && one_of(int(V), {64, 128, 256}));
  KDA_FUZZ_CHECK(BT == 32 || BT == 64);
  KDA_FUZZ_CHECK(g.dtype == kda::DType::kBF16 || g.dtype == kda::DType::kFP16);
  KDA_FUZZ_CHECK(one_of(int(a.gate), {0, 1, 2}) && one_of(int(a.beta_activation), {0, 1, 2}));
  KDA_FUZZ_CHECK(a.state.layout == kda::StateLayout::kKFirst || a.state.layout == kda::StateLayout::kVFirst);
  KDA_FUZZ_CHECK(m.cu_seqlens.data != nullptr);
  if (a.gate == kda::GateKind::kSoftplus) KDA_FUZZ_CHECK(a.A_log != nullptr);
  if (a.gate == kda::GateKind::kLowerBound) KDA_FUZZ_CHECK(a.lower_bound >= -5.0f && a.lower_bound < 0.0f);
  if (a.state.state_indices.data != nullptr) {
    KDA_FUZZ_CHECK(a.state.initial_state != nullptr || a.state.final_state != nullptr);
    KDA_FUZZ_CHECK(a.state.pool_size >= 0);
  } else {
    KDA_FUZZ_CHECK(a.state.pool_size == -1 || a.state.pool_size >= N);
  }
  if (T > 0) {
    for (const kda::TensorView* v : {&a.q, &a.k, &a.v, &a.g, &a.beta}) KDA_FUZZ_CHECK(v->data != nullptr);
    KDA_FUZZ_CHECK(a.o.data != nullptr);
  }

  // Grids and chunk ids: ceil(T/BT) + N < 2^30 (int32 chunk ids, gridDim.x); state blocks < 2^31.
  const bool tables = m.chunk_indices.data != nullptr || m.chunk_offsets.data != nullptr;
  const i128 nt_max = ceil_div(T, BT) + N;
  KDA_FUZZ_CHECK(nt_max < (i128(1) << 30));
  if (tables) {
    KDA_FUZZ_CHECK(m.chunk_indices.data != nullptr && m.chunk_offsets.data != nullptr);
    KDA_FUZZ_CHECK(m.num_chunks >= 0 && m.num_chunks <= nt_max);
  }
  KDA_FUZZ_CHECK(i128(N) * H * (V / kda::kernels::kStateTileV) < (i128(1) << 31));
  // The state recurrence's V-tile width (chunk_kda_fwd never forces one): a width the kernels have, a whole number of
  // tiles, a matrix-unit width only where that kernel runs, and a grid that fits.
  {
    kda::StateRecurrenceArgs st;
    st.geometry = a.geometry;
    const int width = kda::detail::state_v_tile(st);
    KDA_FUZZ_CHECK(width == 16 || width == 32 || width == 64);
    KDA_FUZZ_CHECK(V % width == 0);
    KDA_FUZZ_CHECK(width == kda::kernels::kStateTileV || K == 64 || K == 128);
    KDA_FUZZ_CHECK(i128(N) * H * (V / width) < (i128(1) << 31));
    const int warps = kda::detail::state_warps(st);  // warp counts the kernels have; 8 only on 32 or 64 columns
    KDA_FUZZ_CHECK(warps == kda::ActiveTuning::kStateMmaWarps ||
                   (warps == kda::ActiveTuning::kStateMmaWideWarps && width >= 32));
  }

  // The workspace size cannot have wrapped.
  check_workspace_layout(a);
  KDA_FUZZ_STAT(tables ? "validate ok, host tables" : "validate ok, derived tables");
  if (T > 0) KDA_FUZZ_STAT("validate ok, T > 0");

  // ---- What the kernels rely on but validation does not check today (known gaps) ----
  if (!tolerate(3)) {
    // G3: element offsets of every view fit int64 (and bytes fit the address space).
    KDA_FUZZ_CHECK(offsets_fit(a.q, T, H, K, 2));
    KDA_FUZZ_CHECK(offsets_fit(a.k, T, H, K, 2));
    KDA_FUZZ_CHECK(offsets_fit(a.v, T, H, V, 2));
    KDA_FUZZ_CHECK(offsets_fit(a.g, T, H, K, a.g_type == kda::ScalarType::kFloat32 ? 4 : 2));
    KDA_FUZZ_CHECK(offsets_fit(a.beta, T, H, 1, a.beta_type == kda::ScalarType::kFloat32 ? 4 : 2));
    KDA_FUZZ_CHECK(offsets_fit(kda::TensorView{a.o.data, a.o.token_stride, a.o.head_stride}, T, H, V, 2));
  }
  if (!tolerate(5)) {
    // G5: raw gate / beta element types in range (the device treats anything else as fp16).
    KDA_FUZZ_CHECK(one_of(int(a.g_type), {0, 1, 2}) && one_of(int(a.beta_type), {0, 1, 2}));
  }
  if (!tolerate(6)) {
    // G6: index types of the integer tables in range (the device reads anything else as int32).
    KDA_FUZZ_CHECK(one_of(int(m.cu_seqlens.type), {0, 1}));
    if (tables) KDA_FUZZ_CHECK(one_of(int(m.chunk_indices.type), {0, 1}) && one_of(int(m.chunk_offsets.type), {0, 1}));
    if (a.state.state_indices.data != nullptr) KDA_FUZZ_CHECK(one_of(int(a.state.state_indices.type), {0, 1}));
  }
  if (!tolerate(7)) {
    // G7: a finite scale (NaN / inf turn every output into NaN).
    KDA_FUZZ_CHECK(std::isfinite(a.scale));
  }
  if (!tolerate(8)) {
    // G8: T and N consistent (cu[0] = 0 and cu[N] = T, so N = 0 means T = 0), and a host NT that covers every
    // token: ceil(T/BT) <= NT <= T.
    KDA_FUZZ_CHECK(N > 0 || T == 0);
    if (tables) KDA_FUZZ_CHECK(m.num_chunks >= ceil_div(T, BT) && m.num_chunks <= T);
  }
  if (!tolerate(9) && T > 0 && !a.qk_l2norm) {
    // G9: without l2norm the output stage reads the caller's q in the launch that writes o, so o must not be q.
    // (o = v is documented and safe; k, g and beta are read only by earlier stages.)
    KDA_FUZZ_CHECK(a.o.data != a.q.data);
  }
}

// With KDA_FUZZ_VERBOSE=1 in the environment, prints the decoded arguments (to read a reproducer).
void dump(const kda::ChunkKdaArgs& a) {
  const kda::StageGeometry& g = a.geometry;
  const kda::ChunkMetadataArgs& m = g.metadata;
  auto ll = [](int64_t v) { return static_cast<long long>(v); };
  std::fprintf(stderr,
               "ChunkKdaArgs: N=%lld T=%lld H=%d K=%d V=%d BT=%d dtype=%d g_type=%d beta_type=%d gate=%d "
               "beta_activation=%d layout=%d lower_bound=%a scale=%a qk_l2norm=%d\n"
               "  cu_seqlens=%p/%d chunk_indices=%p/%d chunk_offsets=%p/%d num_chunks=%lld\n"
               "  A_log=%p dt_bias=%p initial_state=%p final_state=%p state_indices=%p/%d has_initial_state=%p "
               "pool_size=%lld\n",
               ll(m.num_sequences), ll(m.total_tokens), g.num_heads, g.head_dim_k, g.head_dim_v, g.chunk_size,
               int(g.dtype), int(a.g_type), int(a.beta_type), int(a.gate), int(a.beta_activation), int(a.state.layout),
               double(a.lower_bound), double(a.scale), int(a.qk_l2norm), m.cu_seqlens.data, int(m.cu_seqlens.type),
               m.chunk_indices.data, int(m.chunk_indices.type), m.chunk_offsets.data, int(m.chunk_offsets.type),
               ll(m.num_chunks), static_cast<const void*>(a.A_log), static_cast<const void*>(a.dt_bias),
               static_cast<const void*>(a.state.initial_state), static_cast<const void*>(a.state.final_state),
               a.state.state_indices.data, int(a.state.state_indices.type),
               static_cast<const void*>(a.state.has_initial_state), ll(a.state.pool_size));
  const char* names[] = {"q", "k", "v", "g", "beta"};
  const kda::TensorView* views[] = {&a.q, &a.k, &a.v, &a.g, &a.beta};
  for (int i = 0; i < 5; ++i) {
    std::fprintf(stderr, "  %s=%p token_stride=%lld head_stride=%lld\n", names[i], views[i]->data,
                 ll(views[i]->token_stride), ll(views[i]->head_stride));
  }
  std::fprintf(stderr, "  o=%p token_stride=%lld head_stride=%lld\n", a.o.data, ll(a.o.token_stride),
               ll(a.o.head_stride));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verbose = std::getenv("KDA_FUZZ_VERBOSE") != nullptr;
  Input in(data, size);
  const Decoded d = decode(in);
  if (verbose) dump(d.args);
  check(d);
  return 0;
}
