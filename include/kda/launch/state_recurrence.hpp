// Launcher: chunk_gated_delta_rule_fwd_h, the serial state recurrence over each sequence's chunks
// (kernels/kda/state_recurrence.hpp). Writes per-chunk h [NT,H,K,V] and v_new [T,H,V] in the I/O type and,
// optionally, the final state. With the output folded in (StateRecurrenceArgs::o) it writes o instead, and h and
// v_new only where asked.
#pragma once

#include <algorithm>

#include "kda/launch/stage_common.hpp"
#include "kda/state_recurrence.hpp"
#include "kda/state_recurrence_mma.hpp"
#include "kda/state_recurrence_regs_mma.hpp"
#include "kda/state_recurrence_short_mma.hpp"

namespace kda {

// Where the recurrence reads its initial state and writes its final state.
struct StateArgs {
  const float* initial_state = nullptr;  // pool [P,H,K,V] or [P,H,V,K]; null = zero initial state
  float* final_state = nullptr;          // pool, may equal initial_state; null = not written
  StateLayout layout = StateLayout::kKFirst;
  IndexSpan state_indices;               // device [N]: slot of sequence n (negative = none); absent = slot n
  const uint8_t* has_initial_state = nullptr;  // device [N]: 0 = start from zero; null = all 1
  int64_t pool_size = -1;                // slots P; -1 = N (no state_indices)
};

struct StateRecurrenceArgs {
  StageGeometry geometry;
  const void* w = nullptr;   // [T,H,K] I/O type, contiguous
  const void* u = nullptr;   // [T,H,V]
  const void* kg = nullptr;  // [T,H,K]
  const float* G = nullptr;  // [T,H,K]
  StateArgs state;
  void* h = nullptr;         // out [NT_grid,H,K,V]: NT rows with tables, ceil(T/BT)+N rows when derived
  void* v_new = nullptr;     // out [T,H,V]; may be exactly u (each u row is read before its v_new is written)
  // Columns of V per block: 0 = the launcher's choice (detail::state_v_tile); 16, 32 or 64 forces a width (tests,
  // tuning). Every width gives bit-identical results. K = 256 runs the scalar kernel, which takes only 16.
  int v_tile = 0;
  // Warps per block of the matrix-unit kernel: 0 = the launcher's choice (detail::state_warps); 4 or 8 forces it
  // (tests, tuning; 8 needs a V-tile of 32 or 64 columns). Every choice gives bit-identical results.
  int warps = 0;
  // G of each chunk's last row, [NT_grid,H,K] fp32 by global chunk id, as chunk_prepare_inputs writes it: when set,
  // G is not read (and may be null).
  const float* G_last = nullptr;
  // The output stage folded in (chunk_kda_fwd): when o.data is set, the kernel also writes o = scale qg round(S) +
  // Aqk v_new chunk after chunk, bit for bit what launch_chunk_output computes from this h and v_new with q_gated
  // (and Aqk in fp32, which it splits into the same hi + lo pair), and h and v_new may be null (then not written).
  // Needs K in {64, 128} and the 32- or 64-column tiles with 8 warps (what the launcher picks for that K unless
  // v_tile or warps force something else).
  const void* qg = nullptr;      // [T,H,K] I/O type, contiguous: round(q exp2 G), as chunk_prepare(_inputs) writes it
  const void* Aqk_hi = nullptr;  // [T,H,BT] I/O type: round(Aqk), as intra_chunk / chunk_prepare(_inputs) write it
  const void* Aqk_lo = nullptr;  // [T,H,BT] I/O type: round(Aqk - round(Aqk))
  MutableTensorView o{};         // out [T,H,V]; must not overlap w, u, kg, qg, Aqk or v_new
  float scale = 0.0f;            // 0 = K^-0.5
  // Dedicated output warps beside the chain's 8 with the output folded in: -1 = the launcher's choice
  // (detail::state_output_warps), 0 or 8 forces it (tests, tuning; 8 needs the 32-column tiles and NVIDIA). Every
  // choice gives bit-identical results.
  int output_warps = -1;
  // Sequences of at most 16 tokens (decodes, speculative batches) with the output folded in: -1 = the launcher's
  // choice (detail::state_short_kernel_used), 0 = the general kernel takes them, 1 = a kernel of their own takes
  // them (state_recurrence_short_mma.hpp; needs what detail::state_short_kernel_ok lists). Either gives the same bits.
  int short_sequences = -1;
  // Optional, for the short-sequence kernel: a device word that is zero when the stage starts (the launch may leave it
  // nonzero). With it, where a long sequence may span several chunks (detail::state_short_tickets_used), that
  // kernel starts beside the long sequences' chains and its blocks take their items as they get to them; null: the
  // chains run first, then the short items, a fixed share per block. chunk_kda_fwd passes a word of its workspace that
  // it clears with its status word. Either gives the same bits.
  unsigned* short_items_taken = nullptr;
  // The output folded in without h or v_new, on NVIDIA: the state held transposed in each warp's registers
  // (state_recurrence_regs_mma.hpp; 16 columns of V per warp, no shared-memory round trip of S or v_new). -1 = the
  // launcher's choice (detail::state_regs_warps_used), 0 = never, 2, 4 or 8 = that form with that many warps per
  // block (needs what detail::state_regs_ok lists). Its o and final state agree with the other forms within the
  // output's tolerance, not bit for bit (its sums run in another order); both metadata modes still give the same bits.
  int regs_warps = -1;
};

// Whether a has the output folded in.
inline bool state_folds_output(const StateRecurrenceArgs& a) { return a.o.data != nullptr; }

namespace detail {
inline Status validate_state(const StateArgs& s, int64_t num_sequences) {
  if (s.state_indices.data != nullptr) KDA_REQUIRE(index_type_ok(s.state_indices.type), "state_indices: unknown IndexType");
  const bool any_state = s.initial_state != nullptr || s.final_state != nullptr;
  if (s.state_indices.data != nullptr) {
    KDA_REQUIRE(any_state, "state_indices: given without an initial_state or final_state pool");
    KDA_REQUIRE(s.pool_size >= 0, "pool_size: required with state_indices");
  } else {
    KDA_REQUIRE(s.pool_size == -1 || s.pool_size >= num_sequences, "pool_size: smaller than num_sequences");
  }
  KDA_REQUIRE(s.layout == StateLayout::kKFirst || s.layout == StateLayout::kVFirst, "state layout: unknown");
  return Status();
}
inline int64_t pool_slots(const StateArgs& s, int64_t num_sequences) {
  return s.pool_size >= 0 ? s.pool_size : num_sequences;
}
}  // namespace detail

inline size_t state_recurrence_workspace_size(const StateRecurrenceArgs& a) {
  return detail::derived_metadata_bytes(a.geometry.metadata, a.geometry.chunk_size);
}

namespace detail {
// The folded forms are instantiated for these two widths only (launch_state_mma below).
static_assert(ActiveTuning::kStateNarrowTileV == 32 && ActiveTuning::kStateWideTileV == 64, "the state tiles");

// The V-tile width the launcher runs: a forced a.v_tile, else the wide tile where it still gives
// ActiveTuning::kStateWideTileMinBlocks blocks, else the narrow one (see docs/performance.md, "State tile width").
// Every supported V (64, 128, 256) is a multiple of 64. 16 is for tests, forced runs and the scalar kernel (K = 256).
inline int state_v_tile(const StateRecurrenceArgs& a) {
  using T = ActiveTuning;
  const StageGeometry& g = a.geometry;
  if (a.v_tile != 0) return a.v_tile;
  if (g.head_dim_k != 64 && g.head_dim_k != 128) return kernels::kStateTileV;
  return g.metadata.num_sequences * g.num_heads * (g.head_dim_v / T::kStateWideTileV) >= T::kStateWideTileMinBlocks
             ? T::kStateWideTileV
             : T::kStateNarrowTileV;
}

// Warps per block the launcher runs: a forced a.warps, else ActiveTuning::kStateMmaWideWarps for the 32- and 64-column
// tiles and kStateMmaWarps for 16 (see docs/performance.md, "State warps per block").
inline int state_warps(const StateRecurrenceArgs& a) {
  if (a.warps != 0) return a.warps;
  return state_v_tile(a) >= 32 ? ActiveTuning::kStateMmaWideWarps : ActiveTuning::kStateMmaWarps;
}

// Output warps the launcher runs: a forced a.output_warps, else ActiveTuning::kStateOutputWarps for the folded
// 32-column tiles on NVIDIA (named barriers), where a long sequence's chain leaves most issue slots idle and o can be
// formed off the chain (see docs/performance.md, "Output warps"). Elsewhere none: the 64-column tiles run two blocks
// per SM at 128 registers, and AMD has no named barriers.
inline int state_output_warps(const StateRecurrenceArgs& a) {
  if (a.output_warps >= 0) return a.output_warps;
  const bool folded_narrow = state_folds_output(a) && state_v_tile(a) == 32;
  return folded_narrow && kNamedBarriers ? ActiveTuning::kStateOutputWarps : 0;
}

// Whether the short-sequence kernel can take a's short sequences: the output folded in, with neither h nor v_new
// written; K in {64, 128}, V a multiple of its 64 columns, chunks of 64 (its buffers hold one row tile of one
// chunk); and a K-first state pool whose pointers are 16-byte aligned (it copies the state tile in 16-byte pieces).
inline bool state_short_kernel_ok(const StateRecurrenceArgs& a) {
  const StageGeometry& g = a.geometry;
  auto aligned = [](const void* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; };
  return state_folds_output(a) && a.h == nullptr && a.v_new == nullptr &&
         (g.head_dim_k == 64 || g.head_dim_k == 128) && g.head_dim_v % kernels::kShortStateTileV == 0 &&
         g.chunk_size == 64 && a.state.layout == StateLayout::kKFirst && aligned(a.state.initial_state) &&
         aligned(a.state.final_state);
}

// Whether the launcher runs the short-sequence kernel for a's short sequences: where it can and the table says so
// (ActiveTuning::kShortStateKernel: not on AMD), for batches of short sequences (short_sequence_batch: sequences
// averaging at most 16 tokens; state_long_items_kernel runs the longer ones beside it). Elsewhere the general kernel
// takes every sequence.
inline bool state_short_kernel_used(const StateRecurrenceArgs& a) {
  if (a.short_sequences == 0 || !state_short_kernel_ok(a)) return false;
  if (a.short_sequences == 1) return true;
  if ((a.v_tile != 0 && a.v_tile != kernels::kShortStateTileV) || a.output_warps > 0) return false;  // forced forms
  return ActiveTuning::kShortStateKernel && short_sequence_batch(a.geometry.metadata);
}

// Whether the short-sequence kernel runs its ticket form beside the long sequences: where a counter is given and a
// sequence may span several chunks, whose chain would otherwise hold the short items back. The host rules chains out
// with the builder's tables (NT = N) or the caller's bound (every_sequence_short); derived tables alone cannot, and
// there the ticket form costs ~6 % of the stage (see docs/performance.md, "Short-sequence state kernel").
// every_sequence_short's host threshold must be what the short kernel takes, or its kShortOnly form would skip
// sequences that the bound allows.
static_assert(ActiveTuning::kShortBatchAverageTokens == kernels::kShortStateRows,
              "the short state kernel's sequence bound");
inline bool state_short_tickets_used(const StateRecurrenceArgs& a) {
  const ChunkMetadataArgs& m = a.geometry.metadata;
  return a.short_items_taken != nullptr && !(m.has_tables() && m.num_chunks <= m.num_sequences) &&
         !every_sequence_short(m);
}

// Whether the register-state kernel (state_recurrence_regs_mma.hpp) can run a with `warps` warps per block: NVIDIA,
// the output folded in with neither h nor v_new written, K in {64, 128}, V a multiple of the block's 16 x warps
// columns, chunks of 32 or 64, and o stored in 16-byte pieces (16-byte aligned, strides multiples of 8 elements).
inline bool state_regs_ok(const StateRecurrenceArgs& a, int warps) {
  const StageGeometry& g = a.geometry;
  const bool o_vectors = reinterpret_cast<uintptr_t>(a.o.data) % 16 == 0 && a.o.token_stride % 8 == 0 &&
                         a.o.head_stride % 8 == 0;
  return kPlatformNvidia && state_folds_output(a) && a.h == nullptr && a.v_new == nullptr &&
         (g.head_dim_k == 64 || g.head_dim_k == 128) && (warps == 2 || warps == 4 || warps == 8) &&
         g.head_dim_v % (16 * warps) == 0 && (g.chunk_size == 32 || g.chunk_size == 64) && o_vectors;
}

// Warps per block of the register-state kernel the launcher runs, 0 for none: a forced a.regs_warps; else none where
// a caller forces another kernel's form (v_tile, warps, output_warps, short_sequences: tests, tuning), and
// ActiveTuning::kStateRegsWarps where the other kernel would run its wide tiles on a batch of long sequences
// (long_sequence_batch). Only there it measured faster: its chunk step is slower, so it pays only with many items per
// SM, and decodes' fixed cost is higher (see docs/performance.md, "Register-state kernel").
inline int state_regs_warps_used(const StateRecurrenceArgs& a) {
  using T = ActiveTuning;
  if (a.regs_warps >= 0) return a.regs_warps;
  if (a.v_tile != 0 || a.warps != 0 || a.output_warps != -1 || a.short_sequences == 1) return 0;
  const StageGeometry& g = a.geometry;
  if (state_short_kernel_used(a) || state_v_tile(a) != T::kStateWideTileV ||
      !long_sequence_batch(g.metadata, g.chunk_size)) {
    return 0;
  }
  return state_regs_ok(a, T::kStateRegsWarps) ? T::kStateRegsWarps : 0;
}

inline Status validate_state_v_tile(const StateRecurrenceArgs& a) {
  const StageGeometry& g = a.geometry;
  using T = ActiveTuning;
  KDA_REQUIRE(a.warps == 0 || a.warps == T::kStateMmaWarps || a.warps == T::kStateMmaWideWarps,
              "warps: must be 0, 4 or 8");
  if (a.v_tile != 0) {
    KDA_REQUIRE(a.v_tile == 16 || a.v_tile == 32 || a.v_tile == 64, "v_tile: must be 0, 16, 32 or 64");
    KDA_REQUIRE(a.v_tile == 16 || g.head_dim_k == 64 || g.head_dim_k == 128,
                "v_tile: 32 and 64 need head_dim_k 64 or 128");
  }
  KDA_REQUIRE(a.warps != T::kStateMmaWideWarps || state_v_tile(a) >= 32, "warps: 8 needs a V-tile of 32 or 64 columns");
  if (state_folds_output(a)) {
    KDA_REQUIRE(g.head_dim_k == 64 || g.head_dim_k == 128, "o: the output folded in needs head_dim_k 64 or 128");
    KDA_REQUIRE(state_v_tile(a) >= 32 && state_warps(a) == T::kStateMmaWideWarps,
                "o: the output folded in needs a V-tile of 32 or 64 columns and 8 warps");
  }
  KDA_REQUIRE(a.output_warps == -1 || a.output_warps == 0 || a.output_warps == T::kStateOutputWarps,
              "output_warps: must be -1, 0 or 8");
  KDA_REQUIRE(a.output_warps <= 0 || (state_folds_output(a) && state_v_tile(a) == 32 && kNamedBarriers),
              "output_warps: 8 needs the output folded in, a V-tile of 32 columns and NVIDIA");
  KDA_REQUIRE(a.regs_warps == -1 || a.regs_warps == 0 || a.regs_warps == 2 || a.regs_warps == 4 || a.regs_warps == 8,
              "regs_warps: must be -1, 0, 2, 4 or 8");
  KDA_REQUIRE(a.regs_warps <= 0 || state_regs_ok(a, a.regs_warps),
              "regs_warps: needs NVIDIA, the output folded in without h or v_new, head_dim_k 64 or 128, head_dim_v a "
              "multiple of 16 x regs_warps, chunk_size 32 or 64 and o in 16-byte aligned rows");
  KDA_REQUIRE(a.short_sequences >= -1 && a.short_sequences <= 1, "short_sequences: must be -1, 0 or 1");
  KDA_REQUIRE(a.short_sequences != 1 || state_short_kernel_ok(a),
              "short_sequences: 1 needs the output folded in without h or v_new, head_dim_k 64 or 128, chunk_size 64 "
              "and a K-first state pool with 16-byte aligned pointers");
  KDA_REQUIRE(a.short_sequences != 1 || ((a.v_tile == 0 || a.v_tile == 64) && a.output_warps <= 0),
              "short_sequences: 1 runs the long sequences on the 64-column tiles without output warps");
  return Status();
}

// beside_prepare: the kernel before this one in the stream is chunk_kda_fwd's prepare, which lets its dependents
// start early (detail::allow_dependent_launch: the fused prepare kernels once each block's work is done, the staged
// one at each block's start). Then, on NVIDIA, this kernel is launched with programmatic stream serialization: its
// blocks take the multiprocessors the prepare's last blocks leave, and load their initial state while those finish;
// they wait for the whole prepare (detail::wait_for_prior_grid) before reading anything it wrote.
template <typename E, int BT, int K, int TileV, int Warps, bool kFold = false, int OutWarps = 0>
inline Status launch_state_mma(const kernels::StateRecurrenceParams& p, int64_t sequences_heads, bool beside_prepare,
                               hipStream_t stream) {
  constexpr auto kKernel = kernels::state_recurrence_mma_kernel<E, BT, K, TileV, Warps, kFold, OutWarps>;
  constexpr size_t kShared = kernels::state_mma_shared_bytes<BT, K, TileV, kFold, OutWarps>();
  constexpr int kThreads = (Warps + OutWarps) * kWarpSize;
  KDA_RETURN_IF_ERROR(allow_dynamic_shared<kKernel>(kShared));
  const int64_t blocks = sequences_heads * (p.head_dim_v / TileV);
#if defined(KDA_PLATFORM_CUDA)
  if (beside_prepare) return launch_programmatic<kKernel>(static_cast<unsigned>(blocks), kThreads, kShared, stream, p);
#endif
  (void)beside_prepare;
  kKernel<<<static_cast<unsigned>(blocks), kThreads, kShared, stream>>>(p);
  KDA_RETURN_IF_LAUNCH_ERROR();
  return Status();
}

// The register-state kernel (NVIDIA): one block of Warps warps per (sequence, head, 16 Warps columns of V).
template <typename E, int BT, int K, int Warps>
inline Status launch_state_regs(const kernels::StateRecurrenceParams& p, int64_t sequences_heads, bool beside_prepare,
                                hipStream_t stream) {
#if defined(KDA_PLATFORM_CUDA)
  constexpr auto kKernel = kernels::state_recurrence_regs_kernel<E, BT, K, Warps>;
  using Layout = kernels::StateRegsLayout<BT, K, Warps>;
  constexpr size_t kShared = Layout::kBytes;
  static_assert(kShared <= 227 * 1024, "one block's shared memory on sm_90");
  KDA_RETURN_IF_ERROR(allow_dynamic_shared<kKernel>(kShared));
  const unsigned blocks = static_cast<unsigned>(sequences_heads * (p.head_dim_v / Layout::kCols));
  if (beside_prepare) return launch_programmatic<kKernel>(blocks, Warps * kWarpSize, kShared, stream, p);
  kKernel<<<blocks, Warps * kWarpSize, kShared, stream>>>(p);
  KDA_RETURN_IF_LAUNCH_ERROR();
  return Status();
#else
  (void)p, (void)sequences_heads, (void)beside_prepare, (void)stream;
  return Status(StatusCode::kUnsupported, "regs_warps: the register-state kernel is NVIDIA only");
#endif
}
template <typename E, int BT, int K>
inline Status launch_state_regs(const kernels::StateRecurrenceParams& p, int warps, int64_t sequences_heads,
                                bool beside_prepare, hipStream_t stream) {
  if (warps == 8) return launch_state_regs<E, BT, K, 8>(p, sequences_heads, beside_prepare, stream);
  if (warps == 4) return launch_state_regs<E, BT, K, 4>(p, sequences_heads, beside_prepare, stream);
  return launch_state_regs<E, BT, K, 2>(p, sequences_heads, beside_prepare, stream);
}

// The output folded in (fold) is instantiated only for the tiles the launcher picks (8 warps, 32 or 64 columns;
// output warps on 32 columns, NVIDIA only): validate_state_v_tile refuses the others.
template <typename E, int BT, int K>
inline Status launch_state_mma(const kernels::StateRecurrenceParams& p, int v_tile, int warps, bool fold,
                               int output_warps, int64_t sequences_heads, bool beside_prepare, hipStream_t stream) {
  constexpr int kWide = ActiveTuning::kStateMmaWideWarps, kNarrow = ActiveTuning::kStateMmaWarps;
  const bool wide = warps == kWide;
  if (fold) {
    if (v_tile == 64) return launch_state_mma<E, BT, K, 64, kWide, true>(p, sequences_heads, beside_prepare, stream);
#if defined(KDA_PLATFORM_CUDA)
    if (output_warps > 0) {
      return launch_state_mma<E, BT, K, 32, kWide, true, ActiveTuning::kStateOutputWarps>(p, sequences_heads,
                                                                                         beside_prepare, stream);
    }
#endif
    return launch_state_mma<E, BT, K, 32, kWide, true>(p, sequences_heads, beside_prepare, stream);
  }
  switch (v_tile) {
    case 64:
      return wide ? launch_state_mma<E, BT, K, 64, kWide>(p, sequences_heads, beside_prepare, stream)
                  : launch_state_mma<E, BT, K, 64, kNarrow>(p, sequences_heads, beside_prepare, stream);
    case 32:
      return wide ? launch_state_mma<E, BT, K, 32, kWide>(p, sequences_heads, beside_prepare, stream)
                  : launch_state_mma<E, BT, K, 32, kNarrow>(p, sequences_heads, beside_prepare, stream);
    default: return launch_state_mma<E, BT, K, 16, kNarrow>(p, sequences_heads, beside_prepare, stream);
  }
}

// The short-sequence kernel over every item (sequence, head, 64-column V-tile): as many blocks as the device holds at
// once, or fewer where there are fewer items; its blocks loop over the items. Unless every sequence is short,
// state_long_items_kernel goes first with L blocks, each looking at up to one item per thread (items b, b + L, ...):
// L is ActiveTuning::kLongItemWaves times the blocks the device holds at once (fewer where there are fewer items). A
// block runs its long items in turn, so L well above the resident blocks keeps two long items from sharing a block
// while others sit idle; the blocks with none exit after one load (spec256x8: 264 blocks 3 us, 16,384 blocks 53 us;
// ncu, H200).
// With tickets (NVIDIA) the short kernel then starts as soon as every long-item block has (programmatic stream
// serialization), beside the long sequences' chains.
template <typename E, int BT, int K, bool kTickets, bool kShortOnly = false>
inline Status launch_state_short(const kernels::StateRecurrenceParams& p, int64_t sequences_heads, bool all_short,
                                 hipStream_t stream) {
  constexpr int kThreads = kernels::kShortStateWarps * kWarpSize;
  static_assert(ActiveTuning::kStateMmaWideWarps == kernels::kShortStateWarps, "both kernels launch kThreads threads");
  const int64_t items = sequences_heads * (p.head_dim_v / kernels::kShortStateTileV);
  if (!all_short) {
    constexpr auto kLong = kernels::state_long_items_kernel<E, BT, K>;
    constexpr size_t kLongShared = kernels::state_mma_shared_bytes<BT, K, kernels::kShortStateTileV, true, 0>();
    KDA_RETURN_IF_ERROR(allow_dynamic_shared<kLong>(kLongShared));
    int64_t resident = 0;
    KDA_RETURN_IF_ERROR(resident_blocks<kLong>(kThreads, kLongShared, &resident));
    const int64_t fewest = (items + kThreads - 1) / kThreads;  // one item per thread at most
    const int64_t blocks = std::max(fewest, std::min(items, ActiveTuning::kLongItemWaves * resident));
    kLong<<<static_cast<unsigned>(blocks), kThreads, kLongShared, stream>>>(p);
    KDA_RETURN_IF_LAUNCH_ERROR();
  }
  constexpr auto kShort = kernels::state_short_mma_kernel<E, BT, K, kTickets, kShortOnly>;
  constexpr size_t kShared = kernels::state_short_shared_bytes<K>();
  KDA_RETURN_IF_ERROR(allow_dynamic_shared<kShort>(kShared));
  int64_t resident = 0;
  KDA_RETURN_IF_ERROR(resident_blocks<kShort>(kThreads, kShared, &resident));
  const unsigned blocks = static_cast<unsigned>(std::min(items, resident));
#if defined(KDA_PLATFORM_CUDA)
  // Beside the long items (without tickets, late blocks would hold their share back).
  if (kTickets && !all_short) return launch_programmatic<kShort>(blocks, kThreads, kShared, stream, p);
#endif
  kShort<<<blocks, kThreads, kShared, stream>>>(p);
  KDA_RETURN_IF_LAUNCH_ERROR();
  return Status();
}

// Enqueues the stage on already-resolved chunk tables; no validation (launch_state_recurrence and chunk_kda_fwd validate).
// beside_prepare: chunk_kda_fwd's prepare kernel is the launch right before this one (see launch_state_mma).
inline Status enqueue_state_recurrence(const StateRecurrenceArgs& a, const ResolvedChunks& chunks, hipStream_t stream,
                                       bool beside_prepare = false) {
  const StageGeometry& g = a.geometry;
  const int64_t sequences_heads = g.metadata.num_sequences * g.num_heads;
  if (sequences_heads == 0) return Status();
  kernels::StateRecurrenceParams p;
  p.chunks = chunks.table;
  p.w = a.w;
  p.u = a.u;
  p.kg = a.kg;
  p.G = a.G;
  p.G_last = a.G_last;
  p.num_heads = g.num_heads;
  p.head_dim_k = g.head_dim_k;
  p.head_dim_v = g.head_dim_v;
  p.initial_state = a.state.initial_state;
  p.final_state = a.state.final_state;
  p.layout = a.state.layout;
  p.state_indices = a.state.state_indices;
  p.has_initial_state = a.state.has_initial_state;
  p.state_pool_size = detail::pool_slots(a.state, g.metadata.num_sequences);
  p.h = a.h;
  p.v_new = a.v_new;
  p.qg = a.qg;
  p.aqk_hi = a.Aqk_hi;
  p.aqk_lo = a.Aqk_lo;
  p.o = a.o;
  p.scale = effective_scale(a.scale, g.head_dim_k);
  // K in {64, 128}: the matrix-unit kernel; K = 256 (whose operands exceed its shared memory): the scalar one.
  return detail::dispatch_dtype_chunk(g.dtype, g.chunk_size, [&](auto e, auto bt) -> Status {
    using E = decltype(e);
    constexpr int BT = decltype(bt)::value;
    const int v_tile = state_v_tile(a), warps = state_warps(a), output_warps = state_output_warps(a);
    const bool fold = state_folds_output(a);
    if (const int regs = state_regs_warps_used(a); regs > 0) {
      return g.head_dim_k == 64 ? launch_state_regs<E, BT, 64>(p, regs, sequences_heads, beside_prepare, stream)
                                : launch_state_regs<E, BT, 128>(p, regs, sequences_heads, beside_prepare, stream);
    }
    // The short-sequence kernel takes the sequences of at most kShortStateRows tokens, state_long_items_kernel the
    // rest; where every sequence is that short (T itself is), the latter is not launched.
    if constexpr (BT == 64) {
      if (state_short_kernel_used(a)) {
        p.short_rows = kernels::kShortStateRows;
        const bool all_short = g.metadata.total_tokens <= kernels::kShortStateRows;
        auto launch = [&](auto k) -> Status {
          constexpr int K = decltype(k)::value;
          // Where the caller bounds every sequence at kShortStateRows tokens, no kernel runs the longer ones, and
          // the kernel skips (and reports) a sequence over the bound itself, as the prepare stage does.
          if (every_sequence_short(g.metadata)) {
            p.short_rows = int(g.metadata.max_sequence_tokens);
            return launch_state_short<E, BT, K, false, /*kShortOnly=*/true>(p, sequences_heads, /*all_short=*/true,
                                                                            stream);
          }
          if (!state_short_tickets_used(a)) {
            return launch_state_short<E, BT, K, false>(p, sequences_heads, all_short, stream);
          }
          p.short_items_taken = a.short_items_taken;
          return launch_state_short<E, BT, K, true>(p, sequences_heads, all_short, stream);
        };
        return g.head_dim_k == 64 ? launch(std::integral_constant<int, 64>{})
                                  : launch(std::integral_constant<int, 128>{});
      }
    }
    if (g.head_dim_k == 64) {
      return launch_state_mma<E, BT, 64>(p, v_tile, warps, fold, output_warps, sequences_heads, beside_prepare,
                                        stream);
    }
    if (g.head_dim_k == 128) {
      return launch_state_mma<E, BT, 128>(p, v_tile, warps, fold, output_warps, sequences_heads, beside_prepare,
                                         stream);
    }
    const int64_t blocks = sequences_heads * (g.head_dim_v / kernels::kStateTileV);
    kernels::state_recurrence_kernel<E, BT><<<static_cast<unsigned>(blocks), kernels::kStateThreads, 0, stream>>>(p);
    KDA_RETURN_IF_LAUNCH_ERROR();
    return Status();
  });
}
}  // namespace detail

inline Status launch_state_recurrence(const StateRecurrenceArgs& a, void* workspace, size_t workspace_bytes,
                                      hipStream_t stream) {
  const StageGeometry& g = a.geometry;
  KDA_RETURN_IF_ERROR(detail::validate_geometry(g));
  KDA_RETURN_IF_ERROR(detail::validate_state(a.state, g.metadata.num_sequences));
  KDA_RETURN_IF_ERROR(detail::validate_state_v_tile(a));
  KDA_REQUIRE(g.metadata.num_sequences * g.num_heads * (g.head_dim_v / kernels::kStateTileV) < (int64_t(1) << 31),
              "num_sequences*num_heads: too many state blocks");
  const bool fold = state_folds_output(a);
  const bool have =
      a.w && a.u && a.kg && (a.G || a.G_last) && (fold ? a.qg && a.Aqk_hi && a.Aqk_lo : a.h && a.v_new);
  KDA_REQUIRE(have || g.metadata.total_tokens == 0,
              fold ? "w/u/kg/G/qg/Aqk_hi/Aqk_lo: null" : "w/u/kg/G/h/v_new: null");
  KDA_REQUIRE(detail::intermediates_aligned(a.w, a.u, a.kg, a.G, a.G_last, a.h, a.v_new, a.qg, a.Aqk_hi, a.Aqk_lo),
              "w/u/kg/G/G_last/h/v_new/qg/Aqk: not 16-byte aligned");
  if (fold) {
    KDA_REQUIRE(std::isfinite(a.scale), "scale: not finite");
    KDA_REQUIRE(detail::view_ok(a.o, g, g.head_dim_v), "o: overlapping strides");
    const int E = dtype_size(g.dtype), K = g.head_dim_k, V = g.head_dim_v, BT = g.chunk_size;
    auto o_overlaps = [&](const void* x, int dim, int elem) {  // a contiguous [T,H,dim] intermediate
      return x != nullptr && detail::views_overlap(a.o.data, a.o.token_stride, a.o.head_stride, V, E, x,
                                                   int64_t(g.num_heads) * dim, dim, dim, elem, g);
    };
    KDA_REQUIRE(!o_overlaps(a.w, K, E) && !o_overlaps(a.u, V, E) && !o_overlaps(a.kg, K, E) &&
                    !o_overlaps(a.qg, K, E) && !o_overlaps(a.Aqk_hi, BT, E) && !o_overlaps(a.Aqk_lo, BT, E) &&
                    !o_overlaps(a.v_new, V, E),
                "o: overlaps w, u, kg, qg, Aqk or v_new, which the recurrence reads while writing o");
  }
  detail::ResolvedChunks chunks;
  KDA_RETURN_IF_ERROR(detail::resolve_chunks(g.metadata, g.chunk_size, workspace, workspace_bytes, stream, &chunks));
  return detail::enqueue_state_recurrence(a, chunks, stream);
}

}  // namespace kda
