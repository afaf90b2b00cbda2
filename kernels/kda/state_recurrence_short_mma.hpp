// Stage 5 with the output folded in, for batches of short sequences (decodes, speculative batches): the same
// contract and bits as state_recurrence_mma_kernel. Two kernels: state_long_items_kernel, launched first, runs the
// general kernel's item for the sequences of more than kShortStateRows tokens (StateRecurrenceParams::short_rows);
// state_short_mma_kernel takes the short ones, as below.
//
// Where a long sequence spans several chunks (a chunked-prefill step: decodes beside one long prefill), its chain of
// chunk steps would hold the short items back. There the short kernel's kTickets form is launched with programmatic
// stream serialization (NVIDIA): it starts as soon as every long-item block has, beside the chains, and its blocks
// take items by ticket (StateRecurrenceParams::short_items_taken), so that the ones that start behind a chain take
// fewer. The ticket form costs where no chain runs, so the launcher takes the plain form wherever the host's chunk
// tables rule chains out. One kernel with both kinds of blocks spilled and ran slower
// (see docs/performance.md, "Short-sequence state kernel").
//
// Why a kernel of its own. A short sequence is one chunk step, so its cost is moving its fp32 state: the 64-column
// tile is read (32 KiB at K = 128) and written back, against a few small products. In the general kernel each block
// loads its state into registers, then computes, then stores, and at 128 registers and ~99 KB of shared memory two
// blocks fit an SM: the loads are in flight only while a block starts, and DRAM ran at 55 % of its peak.
// Here a block walks items (sequence, head, 64-column V-tile) in a grid-stride loop and copies the next item's
// initial state and operands into shared memory (asynchronous copies) as soon as the current item's state has left
// that buffer, so the copies fly while the item computes. Its buffers hold 16 rows, not a chunk's 64.
//
// Per item, with 8 warps: (A) the state tile goes from shared memory to the accumulators and round(S) back to shared
// memory; the copies of the next item start; (B) warps 0-3 form v_new = u - w round(S) per 16x16 tile, warps 4-7
// o = qg round(S); (C) S = exp2(G_last) S + kg^T v_new, o += Aqk v_new, then o and the final state leave from
// registers. Every tile is formed by the same functions as in the general kernel (state_tile_mma.hpp).
//
// Supported where the launcher sends it (detail::state_short_kernel_ok): K in {64, 128}, V a multiple of 64, chunks
// of 64, the output folded in without h or v_new, a K-first state pool whose pointers are 16-byte aligned.
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/state_recurrence.hpp"
#include "kda/state_recurrence_mma.hpp"
#include "kda/state_tile_mma.hpp"
#include "kda/tuning.hpp"

namespace kda::kernels {

constexpr int kShortStateRows = 16;   // the longest sequence the kernel takes: one row tile
constexpr int kShortStateTileV = 64;  // V columns per item
constexpr int kShortStateWarps = 8;

// Shared memory of one block (bytes from the start). Rows of 16-bit tiles are padded by 8 elements so that
// ldmatrix's eight 16-byte rows fall in distinct banks; the fp32 state rows by 8 floats, so that the accumulator
// pairs a half-warp reads (four rows, 32 bytes each) fall in distinct banks. Two operand buffers: item i's and the
// next one's.
template <int K>
struct ShortStateLayout {
  static constexpr int kRows = kShortStateRows, kTileV = kShortStateTileV;
  static constexpr int kLd = K + 8;          // w, kg, qg (16-bit)
  static constexpr int kLdV = kTileV + 8;    // round(S), u / v_new (16-bit)
  static constexpr int kLdA = kRows + 8;     // Aqk hi, lo: the first 16 columns (16-bit)
  static constexpr int kLdF = kTileV + 8;    // the fp32 state tile
  static constexpr size_t kStateF = 0;                                  // [K][kLdF] fp32, the next initial state
  static constexpr size_t kRoundS = kStateF + sizeof(float) * K * kLdF;  // [K][kLdV] round(S)
  static constexpr size_t kOperands = kRoundS + sizeof(uint16_t) * K * kLdV;
  // Offsets inside one operand buffer.
  static constexpr size_t kW = 0;
  static constexpr size_t kKg = kW + sizeof(uint16_t) * kRows * kLd;
  static constexpr size_t kQg = kKg + sizeof(uint16_t) * kRows * kLd;
  static constexpr size_t kUv = kQg + sizeof(uint16_t) * kRows * kLd;   // u, then v_new
  static constexpr size_t kHi = kUv + sizeof(uint16_t) * kRows * kLdV;
  static constexpr size_t kLo = kHi + sizeof(uint16_t) * kRows * kLdA;
  static constexpr size_t kGLast = kLo + sizeof(uint16_t) * kRows * kLdA;  // [K] fp32
  static constexpr size_t kBuffer = kGLast + sizeof(float) * K;
  static constexpr size_t kBytes = kOperands + 2 * kBuffer;
  static_assert(kRoundS % 16 == 0 && kOperands % 16 == 0 && kKg % 16 == 0 && kQg % 16 == 0 && kUv % 16 == 0 &&
                    kHi % 16 == 0 && kLo % 16 == 0 && kGLast % 16 == 0 && kBuffer % 16 == 0,
                "16-byte aligned buffers");
};

template <int K>
constexpr size_t state_short_shared_bytes() {
  return ShortStateLayout<K>::kBytes;
}

// Block `block` of the `blocks` short-item blocks. kShortOnly: no kernel takes the longer sequences (the caller
// bounds every sequence at p.short_rows <= kShortStateRows tokens, ChunkMetadataArgs::max_sequence_tokens), so a
// longer one is reported (kDeviceStatusSequenceOverBound) and skipped: the prepare stage skipped it as well where the
// bound is at most 8 (the warp-per-item prepare), so its operands were never written. A form of its own, so that
// the others keep their code.
template <typename E, int BT, int K, bool kTickets, bool kShortOnly = false>
__device__ __forceinline__ void state_short_items(const StateRecurrenceParams& p, unsigned block, unsigned blocks) {
  namespace m = detail::mma;
  using L = ShortStateLayout<K>;
  constexpr int kThreads = kShortStateWarps * kWarpSize;
  constexpr int kTileV = L::kTileV, kLd = L::kLd, kLdV = L::kLdV, kLdA = L::kLdA, kLdF = L::kLdF;
  constexpr int kColTiles = kTileV / 16, kStateTiles = K / 16;
  // This warp's rectangle of S, as in the general kernel: one row tile, kColsPerWarp column tiles.
  constexpr int kPerWarp = kStateTiles * kColTiles / kShortStateWarps;
  constexpr int kColsPerWarp = kPerWarp < kColTiles ? kPerWarp : kColTiles;
  constexpr int kWarpsPerRow = kColTiles / kColsPerWarp;
  static_assert(kPerWarp == kColsPerWarp, "one row tile of S per warp");
  static_assert(BT >= kShortStateRows && m::fragment_stride_ok(kLd) && m::fragment_stride_ok(kLdV) &&
                    m::fragment_stride_ok(kLdA),
                "16-byte aligned fragment rows");
  static_assert(kColTiles * 2 == kShortStateWarps, "step B: one v_new tile or one o tile per warp");

  extern __shared__ __align__(16) unsigned char short_smem[];
  float* state_f = reinterpret_cast<float*>(short_smem + L::kStateF);
  uint16_t* round_s = reinterpret_cast<uint16_t*>(short_smem + L::kRoundS);
  struct Operands {
    uint16_t *w, *kg, *qg, *uv, *hi, *lo;
    float* glast;
  };
  auto operands = [&](int b) {
    unsigned char* base = short_smem + L::kOperands + b * L::kBuffer;
    return Operands{reinterpret_cast<uint16_t*>(base + L::kW),  reinterpret_cast<uint16_t*>(base + L::kKg),
                    reinterpret_cast<uint16_t*>(base + L::kQg), reinterpret_cast<uint16_t*>(base + L::kUv),
                    reinterpret_cast<uint16_t*>(base + L::kHi), reinterpret_cast<uint16_t*>(base + L::kLo),
                    reinterpret_cast<float*>(base + L::kGLast)};
  };

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int V = p.head_dim_v, H = p.num_heads;
  const int num_v_tiles = V / kTileV;
  // Item i is (sequence, head, V-tile) = (i / (H num_v_tiles), ...): in 32 bits, as the launcher keeps
  // N H V / kStateTileV below 2^31, so that items plus a ticket per block never reach it.
  const int items = int(p.chunks.num_sequences * H * num_v_tiles);
  const int item_stride = int(blocks);
  // Which items a block takes: with a counter, the next untaken one whenever it is ready for one (a ticket: thread 0
  // adds 1 to the counter); without, block, block + blocks, block + 2 blocks, ... In the loop below a ticket is taken
  // during (C) of item t, handed to the block at item t + 1's first barrier (handoff_s), and looked up at its end, so
  // the atomic's round trip falls where warp 0 has time to spare: ptxas turns the add into a warp-wide atomic and a
  // shuffle of its result that waits at once (taken just before a barrier, it added ~10 % on spec256x8).
  // Tickets are looked up in the order they were taken, so when a block's last one is past the items, so are the
  // ones it still holds.
  unsigned* const taken = kTickets ? p.short_items_taken : nullptr;
  __shared__ unsigned ticket_s, handoff_s;
  auto take_ticket = [&]() -> int {  // where every thread calls it, outside the loop
    __syncthreads();                 // every thread has read the last ticket
    if (threadIdx.x == 0) ticket_s = atomicAdd(taken, 1u);
    __syncthreads();
    return int(ticket_s);
  };
  const int tile0 = warp / kWarpsPerRow, ct0 = (warp % kWarpsPerRow) * kColsPerWarp;

  // An item and what its step needs: rows = tokens in the chunk (0 for an empty sequence or a chunk id the table
  // got wrong, reported: the state then passes through unchanged, as in the general kernel). index < 0: none.
  // 32-bit where the launcher's limits allow (items, tokens and chunk ids stay below 2^31): registers bound this kernel.
  struct Item {
    int index, bos, gid;
    int64_t slot;
    int h, v0, rows;
    bool load_initial;
  };
  // A candidate item and its sequence's indices, loaded at the end of the item before (when S has left and its
  // registers are free) and looked at when the next one starts: their latency is off the path.
  struct Candidate {
    int index;
    SequenceIndices x;
  };
  auto fetch = [&](int i) {
    Candidate c{i, {}};
    if (i < items) c.x = load_sequence_indices(p, unsigned(i) / unsigned(num_v_tiles * H));
    return c;
  };
  // The item of candidate c if its sequence is short, else of the first short one the block takes after it (loading
  // those indices on the path: a batch that runs this kernel is mostly short sequences). index -1: none left.
  // With tickets, a long candidate's item is one that does nothing (no rows, no state in or out): the loop below
  // goes on to the next ticket, so that the lookup never takes one itself (which needs two barriers; both forms
  // measured the same time).
  auto resolve = [&](const Candidate& c) {
    int i = c.index;
    SequenceIndices x = c.x;
    for (; i < items; i += item_stride, x = i < items ? fetch(i).x : x) {
      const SequenceChunks seq = resolve_sequence_chunks<BT>(p, x);
      const int64_t length = seq.eos - seq.bos;
      if (length > (kShortOnly ? p.short_rows : kShortStateRows)) {
        if (kShortOnly && threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusSequenceOverBound);
        if (taken == nullptr) continue;
        return Item{i, 0, 0, -1, 0, 0, 0, false};
      }
      const bool table_ok = seq.num_chunks == 0 || (seq.first_chunk >= 0 && seq.first_chunk < seq.nt);
      if (!table_ok && threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusBadChunkTable);
      const int head_tile = i - int(x.n) * (num_v_tiles * H);  // h num_v_tiles + V-tile
      const int h = int(unsigned(head_tile) / unsigned(num_v_tiles));
      return Item{i, int(seq.bos), int(seq.first_chunk), seq.slot, h, (head_tile - h * num_v_tiles) * kTileV,
                  table_ok ? int(length) : 0, seq.load_initial};
    }
    return Item{-1, 0, 0, -1, 0, 0, 0, false};
  };

  // Copies of an item's initial state (when it has one) and operands into operand buffer b; the caller commits them
  // as one group. Operand rows past the chunk are zero-filled: kg's must add nothing to the update; the others feed
  // only rows of v_new and o that are never kept.
  // Each thread's share is fixed: one 16-byte vector of a row of w, kg and qg each, K / kStateRowsPerPass of the state
  // tile's, and at most one of u, Aqk hi, Aqk lo or G_last (threads in whole warps per matrix). An item's 64-bit base
  // is formed once; every offset inside a tile or a 16-row chunk fits 32 bits. (The generic loops with 64-bit offsets
  // per vector were ~330 instructions per warp and item, a third of the kernel's.)
  constexpr int kStateRowVecs = kTileV / 4, kStateRowsPerPass = kThreads / kStateRowVecs;
  constexpr int kVecsK = K / 8, kVecsV = kTileV / 8, kVecsA = kShortStateRows / 8;
  constexpr int kCopiesU = kShortStateRows * kVecsV, kCopiesA = kShortStateRows * kVecsA, kCopiesG = K / 4;
  static_assert(kThreads % kStateRowVecs == 0 && K % kStateRowsPerPass == 0, "whole state rows per pass");
  static_assert(kShortStateRows * kVecsK <= kThreads && kCopiesU + 2 * kCopiesA + kCopiesG <= kThreads,
                "at most one vector of each operand per thread");
  // Element (0, v0) of the state tile of (slot, head h); the kernel runs only on K-first pools (the launcher's test).
  auto state_tile_offset = [&](int64_t slot, int h, int v0) { return state_base_offset(slot, h, H, K, V) + v0; };
  auto issue_copies = [&](const Item& it, int b) {
    const int t = threadIdx.x;
    if (it.load_initial) {
      const int d = t / kStateRowVecs, part = t % kStateRowVecs;
      const float* src = p.initial_state + state_tile_offset(it.slot, it.h, it.v0) + (d * V + part * 4);
      float* dst = &state_f[d * kLdF + part * 4];
#pragma unroll
      for (int x = 0; x < K / kStateRowsPerPass; ++x) {
        detail::copy16_async(dst + x * kStateRowsPerPass * kLdF, src + x * kStateRowsPerPass * V);
      }
    }
    if (it.rows > 0) {
      const Operands o = operands(b);
      const int64_t token_head = int64_t(it.bos) * H + it.h;  // row (bos, h) of a [T,H,...] tensor
      // Row i of the chunk, or row 0 (a valid address, not read) past it.
      auto row_offset = [&](int i, int width) { return i < it.rows ? i * H * width : 0; };
      if (t < kShortStateRows * kVecsK) {
        const int i = t / kVecsK, part = t % kVecsK;
        const int64_t at = token_head * K + (row_offset(i, K) + part * 8);
        const int to = i * kLd + part * 8;
        detail::copy16_async_zfill(o.w + to, static_cast<const uint16_t*>(p.w) + at, i < it.rows);
        detail::copy16_async_zfill(o.kg + to, static_cast<const uint16_t*>(p.kg) + at, i < it.rows);
        detail::copy16_async_zfill(o.qg + to, static_cast<const uint16_t*>(p.qg) + at, i < it.rows);
      }
      if (t < kCopiesU) {
        const int i = t / kVecsV, part = t % kVecsV;
        const int64_t at = token_head * V + (row_offset(i, V) + it.v0 + part * 8);
        detail::copy16_async_zfill(o.uv + i * kLdV + part * 8, static_cast<const uint16_t*>(p.u) + at, i < it.rows);
      } else if (t < kCopiesU + 2 * kCopiesA) {
        const bool lo = t >= kCopiesU + kCopiesA;
        const int j = t - kCopiesU - (lo ? kCopiesA : 0), i = j / kVecsA, part = j % kVecsA;
        const int64_t at = token_head * BT + (row_offset(i, BT) + part * 8);
        const uint16_t* src = static_cast<const uint16_t*>(lo ? p.aqk_lo : p.aqk_hi) + at;
        detail::copy16_async_zfill((lo ? o.lo : o.hi) + i * kLdA + part * 8, src, i < it.rows);
      } else if (t < kCopiesU + 2 * kCopiesA + kCopiesG) {
        // G of the chunk's last row: per chunk where the fused prepare wrote it, else the row of G.
        const int e = t - kCopiesU - 2 * kCopiesA;
        const float* g = p.G_last != nullptr ? p.G_last + (int64_t(it.gid) * H + it.h) * K
                                             : p.G + (token_head + int64_t(it.rows - 1) * H) * K;
        detail::copy16_async(&o.glast[e * 4], g + e * 4);
      }
    }
  };

  // S in registers: S[c] is row tile tile0, column tile ct0 + c; visited two accumulator elements at a time with
  // their (state row, tile column) coordinates.
  m::Acc S[kColsPerWarp];
  auto for_each_state_pair = [&](auto&& f) {
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; e += 2) {
        const m::Coord c0 = m::acc_coord(lane, e), c1 = m::acc_coord(lane, e + 1);
        f(S[c].x[e], S[c].x[e + 1], tile0 * 16 + c0.row, (ct0 + c) * 16 + c0.col, tile0 * 16 + c1.row,
          (ct0 + c) * 16 + c1.col);
      }
    }
  };
  const bool o_pairs = state_tile::output_pairs_ok(p.o);
  const bool final_pairs = m::kAccPairsInRows && reinterpret_cast<uintptr_t>(p.final_state) % 8 == 0;

  // The pipeline over a block's items: during item t, item t + 1's copies (state and operands) fly to shared memory;
  // at its end, the indices of item t + 2's candidate start on their way (registers).
  Item cur = resolve(fetch(taken != nullptr ? take_ticket() : int(block)));
  if (cur.index < 0) return;
  issue_copies(cur, 0);
  detail::copy16_async_commit();
  Candidate candidate = fetch(taken != nullptr ? take_ticket() : cur.index + item_stride);
  if (taken != nullptr && threadIdx.x == 0) handoff_s = atomicAdd(taken, 1u);  // read after the loop's first barrier
  for (int b = 0;; b ^= 1) {
    const Item next = resolve(candidate);  // its indices have arrived by now
    const bool has_next = next.index >= 0;
    detail::copy16_async_wait();  // this item's copies, the only group in flight
    __syncthreads();              // ... and handoff_s holds the ticket of the item after next
    const int after_next = taken != nullptr ? int(handoff_s) : next.index + item_stride;
    const Operands op = operands(b);

    // (A) S from the staged tile (or zero), round(S) to shared memory as the B operand of both products. Where an
    // accumulator pair is two neighbours in a row, one 8-byte load: a half-warp's pairs then cover 32 distinct banks,
    // where two 4-byte loads each hit rows r and r + 4 in the same bank (21 % of the kernel's shared load wavefronts
    // were such conflicts). Step A is the stretch in which none of the block's copies are in flight.
    for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
      if constexpr (m::kAccPairsInRows) {
        const float2 v = cur.load_initial ? *reinterpret_cast<const float2*>(&state_f[d0 * kLdF + col0])
                                          : make_float2(0.0f, 0.0f);
        s0 = v.x;
        s1 = v.y;
      } else {
        s0 = cur.load_initial ? state_f[d0 * kLdF + col0] : 0.0f;
        s1 = cur.load_initial ? state_f[d1 * kLdF + col1] : 0.0f;
      }
      const uint32_t pair = numeric::pack2<E>(s0, s1);  // round(s0) in the low half
      if constexpr (m::kAccPairsInRows) {
        *reinterpret_cast<uint32_t*>(&round_s[d0 * kLdV + col0]) = pair;
      } else {
        round_s[d0 * kLdV + col0] = uint16_t(pair & 0xffffu);
        round_s[d1 * kLdV + col1] = uint16_t(pair >> 16);
      }
    });
    __syncthreads();  // round(S) is complete and the staged tile is free
    if (has_next) issue_copies(next, b ^ 1);
    detail::copy16_async_commit();

    // (B) v_new = u - w round(S) (warps 0-3) beside o = qg round(S) (warps 4-7), one 16x16 tile each.
    const int rows = cur.rows;
    m::Acc o;
    if (rows > 0) {
      if (warp < kColTiles) {
        const m::Acc acc = state_tile::w_times_state<E, K>(op.w, kLd, round_s, kLdV, 0, warp, lane);
        state_tile::store_v_new<E>(op.uv, kLdV, acc, rows, 0, warp, lane);
      } else {
        state_tile::qg_times_state<E, K>(o, op.qg, kLd, round_s, kLdV, 0, warp - kColTiles, lane);
      }
    }
    __syncthreads();  // v_new is complete
    const bool ticketed = taken != nullptr && has_next;
    unsigned ticket = 0;
    if (ticketed && threadIdx.x == 0) ticket = atomicAdd(taken, 1u);

    // (C) S = exp2(G_last) S + kg^T v_new; o = scale o + Aqk v_new; then o and the final state leave.
    if (rows > 0) {
      for_each_state_pair([&](float& s0, float& s1, int d0, int, int d1, int) {
        s0 *= detail::decay_exp2(op.glast[d0]);
        s1 *= detail::decay_exp2(op.glast[d1]);
      });
      const m::FragA a = m::load_a_transposed(&op.kg[tile0 * 16], kLd, lane);
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) m::mma<E>(S[c], a, m::load_b(&op.uv[(ct0 + c) * 16], kLdV, lane));
      if (warp >= kColTiles) {
        const int ct = warp - kColTiles;
        state_tile::add_aqk_v_new<E>(o, p.scale, op.hi, op.lo, kLdA, op.uv, kLdV, 0, ct, lane);
        state_tile::store_output<E>(p.o, o_pairs, o, cur.bos, rows, cur.h, cur.v0, 0, ct, lane);
      }
    }
    if (ticketed && threadIdx.x == 0) handoff_s = ticket;  // read after the next item's first barrier
    if (p.final_state != nullptr && cur.slot >= 0) {
      float* tile = p.final_state + state_tile_offset(cur.slot, cur.h, cur.v0);  // row stride V; offsets fit 32 bits
      if (final_pairs) {
        for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int, int) {
          detail::store_float2(tile + (d0 * V + col0), s0, s1);
        });
      } else {
        for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
          tile[d0 * V + col0] = s0;
          tile[d1 * V + col1] = s1;
        });
      }
    }
    if (!has_next) break;
    candidate = fetch(after_next);
    cur = next;
  }
  detail::copy16_async_wait();  // none left in flight
}

// The short items. Its last act waits for the kernel before it (state_long_items_kernel, when launched beside it), so
// that whatever the stream runs next finds the long sequences done too.
template <typename E, int BT, int K, bool kTickets, bool kShortOnly = false>
__global__ void __launch_bounds__(kShortStateWarps * kWarpSize, ActiveTuning::kShortStateMinBlocks)
    state_short_mma_kernel(const KDA_GRID_CONSTANT StateRecurrenceParams p) {
  static_assert(!(kTickets && kShortOnly), "no chain to take tickets beside");
  state_short_items<E, BT, K, kTickets, kShortOnly>(p, blockIdx.x, gridDim.x);
  detail::wait_for_prior_grid();
}

// The long items: the general kernel's 64-column tile, 8 warps, the output folded in. Every block first lets the
// short-item kernel launch.
template <typename E, int BT, int K>
__global__ void __launch_bounds__(ActiveTuning::kStateMmaWideWarps * kWarpSize,
                                  (state_mma_min_blocks<kShortStateTileV, ActiveTuning::kStateMmaWideWarps, true>()))
    state_long_items_kernel(StateRecurrenceParams p) {
  detail::allow_dependent_launch();
  state_recurrence_long_items<E, BT, K, kShortStateTileV, ActiveTuning::kStateMmaWideWarps, true>(p);
}

}  // namespace kda::kernels
