// Stage 5 on the matrix units: the same recurrence and contract as state_recurrence.hpp, for K in {64, 128}.
//
// One block of Warps warps (4 or 8) per (sequence, head, V-tile of TileV columns, TileV in {16, 32, 64}). The fp32
// state S [K,TileV] stays in the accumulator registers for the whole sequence: each warp owns an equal rectangle of
// its 16x16 tiles (whole rows of tiles where there are enough). Per chunk:
//   1. stage w, kg [BT,K] and the u tile [BT,TileV] in shared memory; write h = round(S) to shared memory, where it is
//      the B operand of the next product;
//   2. v_new = u - w round(S): K/16 matrix-unit steps per 16x16 tile, written over u in shared memory;
//   3. S = exp2(G_last) S + kg^T v_new: the decay (exponentials taken once per chunk while staging) scales the
//      accumulators in place, then BT/16 steps add kg^T v_new;
//   4. copy v_new and h to global memory in 16-byte rows: as soon as each is in shared memory, or, for the
//      32-column tiles (kLateCopies), behind step 3's products, whose latency they then overlap. Either may be
//      skipped (null) when the output is folded in.
// kFoldOutput (chunk_kda_fwd): the output stage runs inside the chain. qg [BT,K] and Aqk [BT,BT] (as the 16-bit hi
// + lo pair the prepare kernel wrote) of the chunk fly to shared memory by asynchronous copies, and behind step 3's
// products each warp forms its output tiles o = scale qg round(S) + Aqk v_new from round(S) and v_new still in
// shared memory, in the output stage's order of products (chunk_output_mma.hpp), so o has its bits. Nothing per
// chunk need leave but o: no h [NT,H,K,V] in memory and no second pass over it. With 32 columns (the launcher's
// choice for few, long sequences, where the chain's latency is the cost) the copies run one chunk ahead into a
// second buffer, and o's first product qg round(S) is formed in step 2 beside v_new's on the same round(S) tiles;
// with 64 (many blocks, two per SM) one buffer, copied during the chunk's own steps 1-2.
// OutWarps > 0 (NVIDIA, 32 columns): the output's work leaves the chain. OutWarps more warps (the output warps) own
// the qg / Aqk copies and o; round(S) and v_new get a second buffer, and so do w and kg, whose next chunk flies there
// by asynchronous copies instead of through registers (kAsyncStage); per chunk c the Warps chain warps hand
// buffer c % 2 over with a named barrier (kStateReadyBarrier) after step 2 and go on with chunk c + 1, while the
// output warps form o of chunk c from it and hand it back (kStateFreeBarrier) for chunk c + 2. On one long sequence
// the chain's step is the cost and leaves most issue slots idle, so o costs little there; the products and their
// order are fold_output's, so o has the same bits.
// Every output element is summed in the same order whatever TileV and Warps are, so all forms give bit-identical
// results; they differ in how much each block shares and in how many warps share a chunk's step. A long sequence's
// chain of chunks runs on one block per (head, V-tile), so the step's latency is the cost and 8 warps share it.
// Staging w and kg is a large part of each chunk's step, so 32 columns beat 16 even for long single sequences (half
// the blocks); 64 pay where blocks are plentiful (many sequences). The launcher chooses (detail::state_v_tile,
// detail::state_warps; see docs/performance.md, "State tile width"). Short chunks (decodes, speculative batches,
// last chunks) skip the row tiles past their last token.
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/state_recurrence.hpp"
#include "kda/state_tile_mma.hpp"
#include "kda/tuning.hpp"

namespace kda::kernels {

// Shared memory of one block (dynamic; above 48 KiB it needs the launcher's opt-in on NVIDIA). Rows of the
// [*, TileV] buffers are padded by 8 elements so that ldmatrix's eight 16-byte rows fall in distinct banks.
// With the output folded in, qg and Aqk's hi and lo follow, twice where the copies run a chunk ahead.
template <int TileV>
constexpr int kStateFoldBuffers = TileV == 32 ? 2 : 1;
template <int BT, int K>
constexpr int kStateFoldBufferElems = BT * (K + 8) + 2 * BT * (BT + 8);  // qg, Aqk hi, Aqk lo (16-bit elements)
// With output warps, round(S) and u / v_new have two buffers: the output warps read chunk c's while the chain
// writes chunk c + 1's.
template <int OutWarps>
constexpr int kStateChainBuffers = OutWarps > 0 ? 2 : 1;
// With output warps (NVIDIA), w and kg also have two buffers: the next chunk's fly there by asynchronous copies
// (cp.async) during this chunk's steps instead of in registers, as the fused prepare's raw slices do
// (see docs/performance.md, "State kernel details").
template <int OutWarps>
constexpr int kStateStageBuffers = OutWarps > 0 ? 2 : 1;
template <int BT, int K, int TileV, bool kFoldOutput = false, int OutWarps = 0>
constexpr size_t state_mma_shared_bytes() {
  return kStateStageBuffers<OutWarps> * 2 * sizeof(uint16_t) * BT * (K + 8)  // w, kg
         + kStateChainBuffers<OutWarps> * sizeof(uint16_t) * (K + BT) * (TileV + 8)  // round(S); u, then v_new
         + sizeof(float) * K                          // decay over the chunk
         + (kFoldOutput ? sizeof(uint16_t) * kStateFoldBuffers<TileV> * kStateFoldBufferElems<BT, K> : 0);
}

// Four warps up to 32 columns: ActiveTuning::kStateMmaMinBlocks per multiprocessor (168 registers at three): batches
// of many short sequences run thousands of these blocks, and a third block per SM hides their fixed latency (see
// docs/performance.md, "State warps per block"). 64 columns hold twice the state, eight warps half as much per thread:
// kStateMmaWideMinBlocks. The 32-column tiles with the output folded in keep two chunks' qg and Aqk in shared memory
// (~122 KB at K = V = 128; ~173 KB with output warps, whose round(S), v_new, w and kg have two buffers each): one
// block per SM, which may then use every register (with output warps, 16 warps share them: 128 each).
template <int TileV, int Warps, bool kFoldOutput = false>
constexpr int state_mma_min_blocks() {
  if (kFoldOutput && kStateFoldBuffers<TileV> == 2) return 1;
  return Warps > 4 || TileV >= 64 ? ActiveTuning::kStateMmaWideMinBlocks : ActiveTuning::kStateMmaMinBlocks;
}

// Named barriers of the output-warp form (ids 1-15; 0 is __syncthreads): among the chain warps, among the output
// warps, and per buffer b: ready (round(S) and v_new of the chunk in buffer b are written) and free (the output
// warps are done reading it).
constexpr int kStateChainBarrier = 1;
constexpr int kStateOutputBarrier = 2;
constexpr int kStateReadyBarrier = 3;  // + b
constexpr int kStateFreeBarrier = 5;   // + b

// One block's work on item `item` = (sequence, head, V-tile): the whole of state_recurrence_mma_kernel's block, or
// one turn of state_long_items_kernel's loop over long sequences (state_recurrence_long_items).
template <typename E, int BT, int K, int TileV, int Warps, bool kFoldOutput, int OutWarps>
__device__ __forceinline__ void state_recurrence_item(const StateRecurrenceParams& p, const unsigned item) {
  namespace m = detail::mma;
  constexpr int kThreads = Warps * kWarpSize;  // the chain's threads (all of the block without output warps)
  constexpr int kBlockThreads = (Warps + OutWarps) * kWarpSize;
  using ChainThreads = std::integral_constant<int, kThreads>;
  using OutThreads = std::integral_constant<int, OutWarps * kWarpSize>;
  using ChainWarpCount = std::integral_constant<int, Warps>;
  using OutWarpCount = std::integral_constant<int, OutWarps>;
  static_assert(OutWarps == 0 || (kFoldOutput && TileV == 32 && detail::kNamedBarriers),
                "output warps: the folded 32-column tiles, on NVIDIA (named barriers)");
  constexpr int kLd = K + 8;                 // padded row of w / kg in shared memory (16-bit elements)
  constexpr int kLdV = TileV + 8;            // padded row of round(S) and of u / v_new
  constexpr int kColTiles = TileV / 16;
  constexpr int kStateTiles = K / 16;        // row tiles of S
  constexpr int kRowTiles = BT / 16;         // row tiles of a chunk
  // Where h and v_new leave (step 4). The launcher runs 32 columns where blocks are few, and there the copies behind
  // the update measured faster; 64 columns run where blocks are many, and there the early copies did
  // (see docs/performance.md, "State kernel details").
  constexpr bool kLateCopies = TileV == 32;
  // This warp's rectangle of S: kTilesPerWarp row tiles x kColsPerWarp column tiles. Warps past the last tile (K 64
  // with 16 columns and 8 warps) own none.
  constexpr int kSTiles = kStateTiles * kColTiles;
  constexpr int kPerWarp = kSTiles >= Warps ? kSTiles / Warps : 1;
  constexpr int kColsPerWarp = kPerWarp < kColTiles ? kPerWarp : kColTiles;
  constexpr int kTilesPerWarp = kPerWarp / kColsPerWarp;
  constexpr int kWarpsPerRow = kColTiles / kColsPerWarp;
  static_assert(kSTiles % Warps == 0 || kSTiles < Warps, "equal rectangles");
  static_assert(kColTiles % kColsPerWarp == 0 && kPerWarp % kColsPerWarp == 0, "whole rectangles");
  static_assert(TileV % 16 == 0 && m::fragment_stride_ok(kLd) && m::fragment_stride_ok(kLdV),
                "fragment rows must be 16-byte aligned");
  extern __shared__ __align__(16) unsigned char state_smem[];
  // w and kg of the current chunk: buffer b of kStageBuffers at stage_s + b * kStageElems (w, then kg).
  constexpr int kStageElems = 2 * BT * kLd, kStageBuffers = kStateStageBuffers<OutWarps>;
  constexpr bool kAsyncStage = kStageBuffers == 2;  // w, kg of the next chunk by cp.async, not in registers
  uint16_t* const stage_s = reinterpret_cast<uint16_t*>(state_smem);
  uint16_t* w_s = stage_s;
  uint16_t* kg_s = w_s + BT * kLd;
  // round(S), B operand of w round(S), and the u tile, each element of which is replaced by v_new by the lane that
  // reads it: buffer b at chain_s + b * kChainElems; state_s and uv_s point at the current chunk's.
  constexpr int kChainElems = (K + BT) * kLdV, kChainBuffers = kStateChainBuffers<OutWarps>;
  uint16_t* chain_s = stage_s + kStageBuffers * kStageElems;
  uint16_t* state_s = chain_s;
  uint16_t* uv_s = chain_s + K * kLdV;
  float* decay_s = reinterpret_cast<float*>(chain_s + kChainBuffers * kChainElems);  // exp2(G) of the last row
  // kFoldOutput: per buffer b, qg [BT, kLd], then Aqk's hi and lo [BT, kLdA] (16-bit). Buffer c % kFoldBuffers
  // holds chunk c.
  constexpr int kLdA = BT + 8, kFoldBuffers = kStateFoldBuffers<TileV>;
  constexpr int kFoldElems = kStateFoldBufferElems<BT, K>;
  uint16_t* fold_s = reinterpret_cast<uint16_t*>(decay_s + K);
  static_assert((K * sizeof(float)) % 16 == 0 && (kFoldElems * sizeof(uint16_t)) % 16 == 0 &&
                    (kChainElems * sizeof(uint16_t)) % 16 == 0 && m::fragment_stride_ok(kLdA),
                "16-byte aligned rows");
  struct FoldBuffer {
    uint16_t *qg, *hi, *lo;
  };
  auto fold_buffer = [&](int b) {
    uint16_t* qg = fold_s + b * kFoldElems;
    return FoldBuffer{qg, qg + BT * kLd, qg + BT * kLd + BT * kLdA};
  };
  // The chain's barrier: the whole block, or with output warps the chain warps only.
  auto chain_sync = [&] {
    if constexpr (OutWarps > 0) {
      detail::named_barrier_sync(kStateChainBarrier, kThreads);
    } else {
      __syncthreads();
    }
  };

  const int num_v_tiles = p.head_dim_v / TileV;
  const int vt = item % num_v_tiles;
  const int h = (item / num_v_tiles) % p.num_heads;
  const int64_t n = int64_t(item) / (int64_t(num_v_tiles) * p.num_heads);
  if (n >= p.chunks.num_sequences) return;
  const int v0 = vt * TileV;
  const int V = p.head_dim_v;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const uint16_t* kg = static_cast<const uint16_t*>(p.kg);
  const uint16_t* u = static_cast<const uint16_t*>(p.u);
  uint16_t* h_out = static_cast<uint16_t*>(p.h);
  uint16_t* vnew_out = static_cast<uint16_t*>(p.v_new);

  const SequenceChunks seq = sequence_chunks<BT>(p, n);  // the sequence's chunks and pool slot
  // Offset of row t (a token or chunk index) of head h in a [rows, H, width] workspace. On the 32-column tiles the
  // index enters as a 32-bit factor of the row stride (detail::index_times), which ran faster there; on the
  // 64-column tiles it ran slower, so they keep the 64-bit product (see docs/performance.md, "Index arithmetic").
  auto row_offset = [&](int64_t t, int width) -> int64_t {
    if constexpr (TileV == 32) {
      return detail::index_times(t, int64_t(p.num_heads) * width) + int64_t(h) * width;
    } else {
      return (t * p.num_heads + h) * width;
    }
  };
  const int64_t slot = seq.slot;
  const bool load_initial = seq.load_initial;

  // S in registers: S[j][c] is row tile tile0 + j, column tile ct0 + c. Visits the elements this thread holds two at
  // a time (accumulator elements 2i and 2i+1) with their (state row, tile column) coordinates.
  const int tile0 = (warp / kWarpsPerRow) * kTilesPerWarp, ct0 = (warp % kWarpsPerRow) * kColsPerWarp;
  m::Acc S[kTilesPerWarp][kColsPerWarp];
  auto for_each_state_pair = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int tile = tile0 + j;
      if (tile >= kStateTiles) continue;
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) {
        const int ct = ct0 + c;
#pragma unroll
        for (int e = 0; e < m::kAccPerLane; e += 2) {
          const m::Coord c0 = m::acc_coord(lane, e), c1 = m::acc_coord(lane, e + 1);
          f(S[j][c].x[e], S[j][c].x[e + 1], tile * 16 + c0.row, ct * 16 + c0.col, tile * 16 + c1.row,
            ct * 16 + c1.col);
        }
      }
    }
  };
  // The fp32 initial and final state. Where a pair is two neighbouring columns of one row in memory (NVIDIA's
  // accumulator layout, the K-first pool, an 8-byte aligned pointer: offsets are even there), each thread moves its
  // pairs as 8-byte accesses at fixed offsets from one corner: element (d, v0 + col) is at tile + d V + col, and a
  // lane's accumulator coordinates are its (lane, 0) plus constants per element (static_assert below). Elsewhere (a
  // V-first pool, an unaligned pointer, AMD) the tile goes through shared memory (w and kg's buffers, unused before
  // the first chunk and after the last) kPassRows rows at a time, in a plain loop. A full index per pair was
  // ~1,100 of the ~1,700 instructions per warp on spec256x8. kCopiesFromCorner: the output-warp form (few blocks,
  // long sequences) keeps that per-pair form, ~6 % faster there (see docs/performance.md, "State kernel details").
  static_assert(m::acc_coords_separable(m::arch::acc_coord, m::arch::kLanes, m::arch::kAccPerLane),
                "a lane's accumulator coordinates are its (lane, 0) plus per-element constants");
  constexpr bool kCopiesFromCorner = OutWarps == 0;
  constexpr int kLdT = TileV + 4;  // fp32 row of the staged tile (4 floats of padding: fewer bank conflicts)
  constexpr int kFitRows = int(2 * sizeof(uint16_t) * BT * kLd / (sizeof(float) * kLdT));
  constexpr int kPassRows = kFitRows >= K ? K : kFitRows >= 64 ? 64 : kFitRows >= 32 ? 32 : 16;  // all K at BT 64
  static_assert(kFitRows >= 16 && K % kPassRows == 0, "whole passes of the state tile fit w and kg's buffers");
  float* tile_s = reinterpret_cast<float*>(w_s);
  auto pairs_contiguous = [&](const float* pool) {
    return m::kAccPairsInRows && p.layout == StateLayout::kKFirst && reinterpret_cast<uintptr_t>(pool) % 8 == 0;
  };
  // This thread's first pair in the tile: formed where it is used, not held across the chunk loop.
  auto corner = [&] {
    const m::Coord lane0 = m::acc_coord(lane, 0);
    return (tile0 * 16 + lane0.row) * V + ct0 * 16 + lane0.col;
  };
  // Visits the pairs this thread holds with their offsets from corner() in the K-first tile (row stride V).
  auto for_each_state_pair_offset = [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      if (tile0 + j >= kStateTiles) continue;
#pragma unroll
      for (int c = 0; c < kColsPerWarp; ++c) {
#pragma unroll
        for (int e = 0; e < m::kAccPerLane; e += 2) {
          const m::Coord k = m::acc_coord(0, e);
          f(S[j][c].x[e], S[j][c].x[e + 1], (j * 16 + k.row) * V + c * 16 + k.col);
        }
      }
    }
  };
#pragma unroll
  for (int j = 0; j < kTilesPerWarp; ++j) {
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) m::zero(S[j][c]);
  }
  if (load_initial && !kCopiesFromCorner) {  // the per-pair form (see kCopiesFromCorner)
    const bool vec = pairs_contiguous(p.initial_state);
    for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
      const float* at = &p.initial_state[state_offset(p, slot, h, d0, v0 + col0)];
      if (vec) {
        const float2 v = *reinterpret_cast<const float2*>(at);
        s0 = v.x;
        s1 = v.y;
      } else {
        s0 = *at;
        s1 = p.initial_state[state_offset(p, slot, h, d1, v0 + col1)];
      }
    });
  } else if (load_initial) {  // uniform over the block
    if (pairs_contiguous(p.initial_state)) {
      const float* tile = p.initial_state + state_offset(p, slot, h, 0, v0) + corner();
      for_each_state_pair_offset([&](float& s0, float& s1, int off) {
        const float2 v = *reinterpret_cast<const float2*>(tile + off);
        s0 = v.x;
        s1 = v.y;
      });
    } else {
#pragma unroll 1
      for (int r0 = 0; r0 < K; r0 += kPassRows) {
        if (r0 > 0) __syncthreads();  // the previous pass is read (the chunk loop's first barrier orders the last)
        for (int e = threadIdx.x; e < kPassRows * TileV; e += kBlockThreads) {
          const int d = e / TileV, col = e % TileV;
          tile_s[d * kLdT + col] = p.initial_state[state_offset(p, slot, h, r0 + d, v0 + col)];
        }
        __syncthreads();
        for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
          if (d0 >= r0 && d0 < r0 + kPassRows) s0 = tile_s[(d0 - r0) * kLdT + col0];
          if (d1 >= r0 && d1 < r0 + kPassRows) s1 = tile_s[(d1 - r0) * kLdT + col1];
        });
      }
    }
  }

  const int64_t bos = seq.bos, eos = seq.eos, first_chunk = seq.first_chunk, nt = seq.nt,
                num_chunks = seq.num_chunks;

  // Operands of one chunk held in registers: the next chunk's loads are issued before the current chunk's products,
  // so the serial chain does not wait on memory latency. Rows past the chunk load as zeros and add nothing. With
  // kAsyncStage, w and kg instead fly by asynchronous copies into the other stage buffer (zero-filled past the
  // chunk), and only u and G_last pass through registers.
  constexpr int kRowVecs = K / 8;                                      // 16-byte vectors per row of w / kg
  constexpr int kWVecs = (BT * kRowVecs + kThreads - 1) / kThreads;    // per thread
  constexpr int kWRegs = kAsyncStage ? 0 : kWVecs;
  constexpr int kURowVecs = TileV / 8;                                 // 16-byte vectors per row of the u tile
  constexpr int kUVecs = (BT * kURowVecs + kThreads - 1) / kThreads;
  constexpr int kGLast = (K + kThreads - 1) / kThreads;
  struct ChunkRegs {
    uint4 w[kWRegs > 0 ? kWRegs : 1], kg[kWRegs > 0 ? kWRegs : 1], u[kUVecs];
    float glast[kGLast];
  };
  // stage_buffer: where kAsyncStage's copies of w and kg go (unused otherwise).
  auto load_chunk = [&](int64_t chunk_start, int length, int64_t gid, ChunkRegs& r, uint16_t* stage_buffer) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // Thread t reads rows t / kRowVecs + x * kRowsPerPass at column (t % kRowVecs) * 8: one 64-bit base offset and a
    // fixed stride instead of a full index computation per vector.
    static_assert(kThreads % kRowVecs == 0, "whole rows per pass");
    static_assert(!kAsyncStage || (BT * kRowVecs) % kThreads == 0, "no copy lands past the chunk's BT rows");
    constexpr int kRowsPerPass = kThreads / kRowVecs;
    const int row0 = threadIdx.x / kRowVecs;
    const int64_t base = row_offset(chunk_start + row0, K) + (threadIdx.x % kRowVecs) * 8;
    const int64_t stride = int64_t(kRowsPerPass) * p.num_heads * K;
    if constexpr (kAsyncStage) {
      uint16_t* w_dst = stage_buffer + row0 * kLd + (threadIdx.x % kRowVecs) * 8;
#pragma unroll
      for (int x = 0; x < kWVecs; ++x) {
        const bool valid = row0 + x * kRowsPerPass < length;
        const int64_t at = valid ? base + x * stride : 0;  // not read when !valid, but a real address
        detail::copy16_async_zfill(w_dst + x * kRowsPerPass * kLd, w + at, valid);
        detail::copy16_async_zfill(w_dst + BT * kLd + x * kRowsPerPass * kLd, kg + at, valid);
      }
      detail::copy16_async_commit();
    } else {
#pragma unroll
      for (int x = 0; x < kWVecs; ++x) {
        const bool valid = row0 + x * kRowsPerPass < length;
        r.w[x] = valid ? *reinterpret_cast<const uint4*>(w + base + x * stride) : zero;
        r.kg[x] = valid ? *reinterpret_cast<const uint4*>(kg + base + x * stride) : zero;
      }
    }
#pragma unroll
    for (int x = 0; x < kUVecs; ++x) {
      const int e = threadIdx.x + x * kThreads;
      const int i = e / kURowVecs, part = e % kURowVecs;
      const bool valid = e < BT * kURowVecs && i < length;
      const int64_t off = row_offset(chunk_start + i, V) + v0 + part * 8;
      r.u[x] = valid ? *reinterpret_cast<const uint4*>(u + off) : zero;
    }
#pragma unroll
    for (int x = 0; x < kGLast; ++x) {
      const int d = threadIdx.x + x * kThreads;
      if (p.G_last != nullptr) {  // G of the chunk's last row, per chunk (gid checked: a bad table reads nothing)
        r.glast[x] = d < K && gid >= 0 && gid < nt ? p.G_last[row_offset(gid, K) + d] : 0.0f;
      } else {
        r.glast[x] = d < K ? p.G[row_offset(chunk_start + length - 1, K) + d] : 0.0f;
      }
    }
  };
  auto store_chunk = [&](const ChunkRegs& r) {
#pragma unroll
    for (int x = 0; x < kWRegs; ++x) {
      const int e = threadIdx.x + x * kThreads;
      if (e >= BT * kRowVecs) continue;
      const int i = e / kRowVecs, d = (e % kRowVecs) * 8;
      *reinterpret_cast<uint4*>(&w_s[i * kLd + d]) = r.w[x];
      *reinterpret_cast<uint4*>(&kg_s[i * kLd + d]) = r.kg[x];
    }
#pragma unroll
    for (int x = 0; x < kUVecs; ++x) {
      const int e = threadIdx.x + x * kThreads;
      if (e >= BT * kURowVecs) continue;
      *reinterpret_cast<uint4*>(&uv_s[(e / kURowVecs) * kLdV + (e % kURowVecs) * 8]) = r.u[x];
    }
#pragma unroll
    for (int x = 0; x < kGLast; ++x) {
      const int d = threadIdx.x + x * kThreads;
      if (d < K) decay_s[d] = detail::decay_exp2(r.glast[x]);
    }
  };
  auto chunk_length = [&](int64_t c) {
    const int64_t chunk_start = bos + c * BT;
    return static_cast<int>(eos - chunk_start < BT ? eos - chunk_start : BT);
  };

  // v_new and h = round(S) leave in 16-byte rows. Nothing on the chain waits on these copies; they read uv_s and
  // state_s, which the next chunk overwrites only after its first barrier. Without kLateCopies each leaves as soon as
  // it is in shared memory (h before the v_new product, v_new before the update); with it, both leave behind the
  // update's products, whose latency they then overlap.
  auto copy_v_new = [&](int64_t start, int length) {
    if (vnew_out == nullptr) return;
    for (int e = threadIdx.x; e < length * kURowVecs; e += kThreads) {
      const int i = e / kURowVecs, part = e % kURowVecs;
      *reinterpret_cast<uint4*>(&vnew_out[row_offset(start + i, V) + v0 + part * 8]) =
          *reinterpret_cast<const uint4*>(&uv_s[i * kLdV + part * 8]);
    }
  };
  auto copy_h = [&](int64_t gid) {
    if (h_out == nullptr) return;
    for (int e = threadIdx.x; e < K * kURowVecs; e += kThreads) {
      const int d = e / kURowVecs, part = e % kURowVecs;
      *reinterpret_cast<uint4*>(&h_out[((gid * p.num_heads + h) * K + d) * V + v0 + part * 8]) =
          *reinterpret_cast<const uint4*>(&state_s[d * kLdV + part * 8]);
    }
  };

  // kFoldOutput: a chunk's qg and Aqk (hi, lo) rows start for buffer `b` of shared memory, as one group of
  // asynchronous copies by the `threads` threads that take part (this one is number `tid`), committed even when
  // empty, so that "all groups but the newest" always means the chunk before. Each thread copies one 16-byte column
  // of every (threads / vectors per row)-th row, from one base offset by a fixed stride (the output warps spent a
  // third of their instructions on per-copy index arithmetic before). Rows past the chunk are left as they are: they
  // feed only rows of o that are never stored.
  auto issue_fold_loads = [&](int64_t start, int length, int b, int tid, auto threads) {
    constexpr int kT = decltype(threads)::value;
    constexpr int kAqkVecs = BT / 8;  // 16-byte vectors per 16-bit row of Aqk
    static_assert(kT % kRowVecs == 0 && kT % kAqkVecs == 0, "whole rows per pass");
    const FoldBuffer f = fold_buffer(b);
    {
      constexpr int kRows = kT / kRowVecs;  // rows of qg per pass
      const int i0 = tid / kRowVecs, d = (tid % kRowVecs) * 8;
      const uint16_t* qg = static_cast<const uint16_t*>(p.qg);
      const int64_t at = row_offset(start + i0, K) + d, stride = int64_t(kRows) * p.num_heads * K;
#pragma unroll
      for (int x = 0; x < (BT + kRows - 1) / kRows; ++x) {
        const int i = i0 + x * kRows;
        if (i < length) detail::copy16_async(&f.qg[i * kLd + d], qg + at + x * stride);
      }
    }
    {
      constexpr int kRows = kT / kAqkVecs;  // rows of Aqk per pass
      const int i0 = tid / kAqkVecs, j = (tid % kAqkVecs) * 8;
      const uint16_t* hi = static_cast<const uint16_t*>(p.aqk_hi);
      const uint16_t* lo = static_cast<const uint16_t*>(p.aqk_lo);
      const int64_t at = row_offset(start + i0, BT) + j, stride = int64_t(kRows) * p.num_heads * BT;
#pragma unroll
      for (int x = 0; x < (BT + kRows - 1) / kRows; ++x) {
        const int i = i0 + x * kRows;
        if (i < length) {
          detail::copy16_async(&f.hi[i * kLdA + j], hi + at + x * stride);
          detail::copy16_async(&f.lo[i * kLdA + j], lo + at + x * stride);
        }
      }
    }
    detail::copy16_async_commit();
  };
  // kFoldOutput: output tiles formed as chunk_output_mma_kernel forms them: qg round(S) over K in order, times
  // scale, then Aqk v_new with Aqk as hi + lo over the tiles kt <= rt. Rows of o leave as 4-byte pairs where the
  // accumulator layout and o's alignment allow, else one element at a time.
  const bool o_pairs = state_tile::output_pairs_ok(p.o);
  // o's first product qg round(S) of tile round r (t0 = r * Warps): with the copies a chunk ahead (kInterEarly) it is
  // formed in step 2, beside v_new's product on the same round(S) tiles, as a third independent chain while v_new's
  // two wait on theirs; fold_output then starts from it. With one buffer it is formed in fold_output (the copies of
  // qg are only waited for after step 2). Either way the same products in the same order.
  constexpr int kTileRounds = (kRowTiles * kColTiles + Warps - 1) / Warps;
  constexpr bool kInterEarly = kFoldOutput && kFoldBuffers == 2 && OutWarps == 0;
  m::Acc o_inter[kInterEarly ? kTileRounds : 1];
  auto qg_round_s = [&](m::Acc& o, const uint16_t* qg_s, const uint16_t* s_s, int rt, int ct) {
    state_tile::qg_times_state<E, K>(o, qg_s, kLd, s_s, kLdV, rt, ct, lane);
  };
  // The rest of output tile (rt, ct) once o holds qg round(S): the scale, Aqk v_new (v_new at vn_s), then o's rows.
  auto finish_o_tile = [&](m::Acc& o, const FoldBuffer& f, const uint16_t* vn_s, int64_t start, int length, int rt,
                           int ct) {
    state_tile::add_aqk_v_new<E>(o, p.scale, f.hi, f.lo, kLdA, vn_s, kLdV, rt, ct, lane);
    state_tile::store_output<E>(p.o, o_pairs, o, start, length, h, v0, rt, ct, lane);
  };
  // Output tiles dealt in turn to `workers` warps (a std::integral_constant; this one is number `worker`): the
  // chain's warps, or the output warps, one tile each. From round(S) at s_s and v_new at vn_s.
  auto fold_output = [&](int64_t start, int length, int row_tiles, int b, int worker, auto workers,
                         const uint16_t* s_s, const uint16_t* vn_s) {
    constexpr int kWorkers = decltype(workers)::value;
    const FoldBuffer f = fold_buffer(b);
#pragma unroll
    for (int t0 = 0; t0 < kRowTiles * kColTiles; t0 += kWorkers) {
      const int t = t0 + worker, rt = t / kColTiles, ct = t % kColTiles;
      if (t >= kRowTiles * kColTiles || rt >= row_tiles) continue;  // uniform over the warp
      m::Acc o;
      if constexpr (kInterEarly) {
        o = o_inter[t0 / Warps];
      } else {
        qg_round_s(o, f.qg, s_s, rt, ct);
      }
      finish_o_tile(o, f, vn_s, start, length, rt, ct);
    }
  };

  // Launched beside chunk_kda_fwd's prepare (launch_state_mma's beside_prepare), the block has come this far, its
  // initial state loaded, while the prepare's last blocks ran; everything below reads what the prepare wrote. A no-op
  // for a plain launch.
  detail::wait_for_prior_grid();

  // Output warps: their own loop over the chunks, one step behind the chain. They copy qg and Aqk a chunk ahead
  // (buffer (c + 1) % 2 was last read for chunk c - 1, which every output warp is past after kStateOutputBarrier),
  // wait for the chain's ready on buffer c % 2, form o from it, and free it for chunk c + 2. They stop where the
  // chain stops (a bad chunk table) and arrive on free only where the chain will wait for it.
  if constexpr (OutWarps > 0) {
    if (warp >= Warps) {
      constexpr int kOutThreads = OutWarps * kWarpSize;
      const int tid = threadIdx.x - kThreads;
      if (num_chunks > 0) issue_fold_loads(bos, chunk_length(0), 0, tid, OutThreads{});
      for (int64_t c = 0; c < num_chunks; ++c) {
        const int64_t gid = first_chunk + c;
        if (gid < 0 || gid >= nt) break;
        const int64_t start = bos + c * BT;
        const int length = chunk_length(c), b = int(c % 2);
        if (c > 0) detail::named_barrier_sync(kStateOutputBarrier, kOutThreads);
        if (c + 1 < num_chunks) {
          issue_fold_loads(start + BT, chunk_length(c + 1), 1 - b, tid, OutThreads{});
        } else {
          detail::copy16_async_commit();
        }
        detail::copy16_async_wait_prior();  // this chunk's qg and Aqk; the barrier below publishes them
        detail::named_barrier_sync(kStateReadyBarrier + b, kBlockThreads);
        const uint16_t* s_s = chain_s + b * kChainElems;
        fold_output(start, length, (length + 15) / 16, b, warp - Warps, OutWarpCount{}, s_s, s_s + K * kLdV);
        if (c + 2 < num_chunks && gid + 2 < nt) detail::named_barrier_arrive(kStateFreeBarrier + b, kBlockThreads);
      }
      detail::copy16_async_wait();
      return;
    }
  }

  ChunkRegs next;
  if (num_chunks > 0) load_chunk(bos, chunk_length(0), first_chunk, next, stage_s);
  if constexpr (kFoldOutput && kFoldBuffers == 2 && OutWarps == 0) {
    if (num_chunks > 0) issue_fold_loads(bos, chunk_length(0), 0, threadIdx.x, ChainThreads{});
  }
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t gid = first_chunk + c;
    if (gid < 0 || gid >= nt) {
      if (threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusBadChunkTable);
      break;
    }
    const int64_t start = bos + c * BT;
    const int length = chunk_length(c);
    const int b = kChainBuffers == 2 ? int(c % 2) : 0;
    state_s = chain_s + b * kChainElems;
    uv_s = state_s + K * kLdV;
    // The previous chunk's reads of shared memory are done; with output warps, from chunk 2 on, also their reads
    // of buffer b (chunk c - 2), and that barrier holds every chain warp too.
    if (OutWarps > 0 && c >= 2) {
      detail::named_barrier_sync(kStateFreeBarrier + b, kBlockThreads);
    } else {
      chain_sync();
    }

    // 1. Stage this chunk's operands (already in registers) and prefetch the next chunk's.
    if constexpr (kFoldOutput && OutWarps == 0) {  // the chunk ahead (two buffers; the one it takes was last read
                                                   // before the barrier above), or this chunk (one buffer)
      if constexpr (kFoldBuffers == 2) {
        if (c + 1 < num_chunks) {
          issue_fold_loads(start + BT, chunk_length(c + 1), int((c + 1) % 2), threadIdx.x, ChainThreads{});
        } else {
          detail::copy16_async_commit();
        }
      } else {
        issue_fold_loads(start, length, 0, threadIdx.x, ChainThreads{});
      }
    }
    store_chunk(next);
    if constexpr (kAsyncStage) {
      // The other buffer was last read in chunk c - 1, which every chain warp finished before the barrier above.
      // Then wait for this chunk's copies (issued a chunk ago): all groups but the newest (the empty one past the
      // last chunk included); the barrier below publishes them.
      uint16_t* next_buffer = stage_s + int((c + 1) % 2) * kStageElems;
      if (c + 1 < num_chunks) {
        load_chunk(start + BT, chunk_length(c + 1), gid + 1, next, next_buffer);
      } else {
        detail::copy16_async_commit();
      }
      detail::copy16_async_wait_prior();
      w_s = stage_s + int(c % 2) * kStageElems;
      kg_s = w_s + BT * kLd;
    } else if (c + 1 < num_chunks) {
      load_chunk(start + BT, chunk_length(c + 1), gid + 1, next, nullptr);
    }
    for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
      const uint32_t pair = numeric::pack2<E>(s0, s1);  // round(s0) in the low half
      if constexpr (m::kAccPairsInRows) {
        *reinterpret_cast<uint32_t*>(&state_s[d0 * kLdV + col0]) = pair;
      } else {
        state_s[d0 * kLdV + col0] = uint16_t(pair & 0xffffu);
        state_s[d1 * kLdV + col1] = uint16_t(pair >> 16);
      }
    });
    if constexpr (kInterEarly) detail::copy16_async_wait_prior();  // this chunk's qg and Aqk, copied a chunk ahead
    chain_sync();
    if constexpr (!kLateCopies) copy_h(gid);
    // 2. v_new = u - w round(S), per 16x16 tile as two independent accumulation chains (even and odd 32-column
    //    steps) added at the end: this product is on the serial path from one chunk to the next, so its latency
    //    counts. Row tiles past the chunk are never read (step 3 stops at the chunk's last row tile).
    const int row_tiles = (length + 15) / 16;
    // Output tile t = (row tile t / kColTiles, column tile t % kColTiles), tiles dealt to the warps in turn.
#pragma unroll
    for (int t0 = 0; t0 < kRowTiles * kColTiles; t0 += Warps) {
      const int t = t0 + warp, rt = t / kColTiles, ct = t % kColTiles;
      if (t >= kRowTiles * kColTiles || rt >= row_tiles) continue;  // uniform over the warp
      const m::Acc acc = state_tile::w_times_state<E, K>(w_s, kLd, state_s, kLdV, rt, ct, lane);
      if constexpr (kInterEarly) qg_round_s(o_inter[t0 / Warps], fold_buffer(int(c % 2)).qg, state_s, rt, ct);
      state_tile::store_v_new<E>(uv_s, kLdV, acc, length, rt, ct, lane);
    }
    if constexpr (kFoldOutput && !kInterEarly && OutWarps == 0) detail::copy16_async_wait();  // chunk's qg, Aqk
    chain_sync();
    // With output warps, round(S) and v_new of this chunk are theirs to read from here on.
    if constexpr (OutWarps > 0) detail::named_barrier_arrive(kStateReadyBarrier + b, kBlockThreads);
    if constexpr (!kLateCopies) copy_v_new(start, length);

    // 3. S = exp2(G_last) S + kg^T v_new, over the chunk's row tiles only (a short chunk, e.g. a decode or a
    //    speculative batch's 8 tokens, skips the tiles that would add zeros). A full chunk takes the loop with a
    //    constant trip count: the early exit measured 13 % slower on single sequences
    //    (see docs/performance.md, "State kernel details").
    for_each_state_pair([&](float& s0, float& s1, int d0, int, int d1, int) {
      s0 *= decay_s[d0];
      s1 *= decay_s[d1];
    });
    auto add_kg_vnew = [&](int tiles) {
#pragma unroll
      for (int j = 0; j < kTilesPerWarp; ++j) {
        const int tile = tile0 + j;
        if (tile >= kStateTiles) continue;
#pragma unroll
        for (int it = 0; it < kRowTiles; ++it) {
          if (it >= tiles) break;
          const m::FragA a = m::load_a_transposed(&kg_s[it * 16 * kLd + tile * 16], kLd, lane);
#pragma unroll
          for (int c = 0; c < kColsPerWarp; ++c) {
            const m::FragB b = m::load_b(&uv_s[it * 16 * kLdV + (ct0 + c) * 16], kLdV, lane);
            m::mma<E>(S[j][c], a, b);
          }
        }
      }
    };
    if (row_tiles == kRowTiles) {
      add_kg_vnew(kRowTiles);
    } else {
      add_kg_vnew(row_tiles);
    }

    // With the output folded in, its products go in behind the update's, which nothing here waits on.
    if constexpr (kFoldOutput && OutWarps == 0) {
      fold_output(start, length, row_tiles, int(c % kFoldBuffers), warp, ChainWarpCount{}, state_s, uv_s);
    }

    // 4. With kLateCopies, v_new and h leave here, while the update's products are in flight.
    if constexpr (kLateCopies) {
      copy_v_new(start, length);
      copy_h(gid);
    }
  }

  if constexpr (kFoldOutput) detail::copy16_async_wait();  // none left in flight (a bad table ends the loop early)
  if (p.final_state != nullptr && slot >= 0 && !kCopiesFromCorner) {  // the per-pair form
    const bool vec = pairs_contiguous(p.final_state);
    for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
      float* at = &p.final_state[state_offset(p, slot, h, d0, v0 + col0)];
      if (vec) {
        *reinterpret_cast<float2*>(at) = make_float2(s0, s1);
      } else {
        *at = s0;
        p.final_state[state_offset(p, slot, h, d1, v0 + col1)] = s1;
      }
    });
  } else if (p.final_state != nullptr && slot >= 0) {  // uniform over the chain's warps
    if (pairs_contiguous(p.final_state)) {
      float* tile = p.final_state + state_offset(p, slot, h, 0, v0) + corner();
      for_each_state_pair_offset([&](float& s0, float& s1, int off) {
        *reinterpret_cast<float2*>(tile + off) = make_float2(s0, s1);
      });
    } else {
#pragma unroll 1
      for (int r0 = 0; r0 < K; r0 += kPassRows) {
        chain_sync();  // the last chunk's reads of w and kg, or the previous pass's copies, are done
        for_each_state_pair([&](float& s0, float& s1, int d0, int col0, int d1, int col1) {
          if (d0 >= r0 && d0 < r0 + kPassRows) tile_s[(d0 - r0) * kLdT + col0] = s0;
          if (d1 >= r0 && d1 < r0 + kPassRows) tile_s[(d1 - r0) * kLdT + col1] = s1;
        });
        chain_sync();
        for (int e = threadIdx.x; e < kPassRows * TileV; e += kThreads) {
          const int d = e / TileV, col = e % TileV;
          p.final_state[state_offset(p, slot, h, r0 + d, v0 + col)] = tile_s[d * kLdT + col];
        }
      }
    }
  }
}

// Which item block b of state_recurrence_mma_kernel takes. Blocks start in index order, and an item's time is its
// sequence's chain of chunk steps, so the longest chains should start first: where they start late they run in rounds
// after everything else (see docs/performance.md, "State item order").
//   - Up to ActiveTuning::kStateSortedSequences sequences: longest first (ties in index order). Thread t ranks
//     sequence t against the others' lengths in shared memory; the block takes the sequence whose rank is b's.
//   - More: from the last item back. Engines lay a batch out decodes first, then prefills (KDA_SPEC §5), so the
//     prefills' chains start first and the one-step decode items fill the multiprocessors around them; sorting
//     that many sequences in every block would cost the decode items' blocks more than it saves.
// The order's shared memory stays small: the 64-column kernel's two blocks per SM sit ~0.7 KB under the 196 KB
// shared-memory carveout. A build with 256 more bytes here ran varlen16's state stage 10 % slower on otherwise
// identical instructions, most likely because the blocks then need the 228 KB carveout, which leaves L1 28 KB
// instead of 60 (not verified).
__device__ inline unsigned state_item_in_order(const StateRecurrenceParams& p, int items_per_sequence) {
  constexpr int kSorted = ActiveTuning::kStateSortedSequences;
  const int64_t N = p.chunks.num_sequences;
  if (N <= 1) return blockIdx.x;  // uniform over the grid
  if (N > kSorted) return gridDim.x - 1 - blockIdx.x;
  __shared__ int length_s[kSorted];  // < 2^31 tokens (the launcher's limit)
  __shared__ int sequence_s;
  const int rank = blockIdx.x / items_per_sequence;
  if (threadIdx.x < N) {
    int64_t bos, eos;
    p.chunks.sequence_range(threadIdx.x, &bos, &eos);
    length_s[threadIdx.x] = int(eos - bos);
  }
  __syncthreads();
  if (threadIdx.x < N) {
    const int mine = length_s[threadIdx.x];
    int before = 0;  // sequences that go first: longer, or as long and earlier
    for (int m = 0; m < N; ++m) before += length_s[m] > mine || (length_s[m] == mine && m < int(threadIdx.x));
    if (before == rank) sequence_s = threadIdx.x;
  }
  __syncthreads();
  return unsigned(sequence_s) * items_per_sequence + blockIdx.x % items_per_sequence;
}

template <typename E, int BT, int K, int TileV, int Warps = ActiveTuning::kStateMmaWarps, bool kFoldOutput = false,
          int OutWarps = 0>
__global__ void __launch_bounds__((Warps + OutWarps) * kWarpSize, (state_mma_min_blocks<TileV, Warps, kFoldOutput>()))
    state_recurrence_mma_kernel(StateRecurrenceParams p) {
  static_assert((Warps + OutWarps) * kWarpSize >= ActiveTuning::kStateSortedSequences, "a thread per sequence");
  const unsigned item = state_item_in_order(p, p.num_heads * (p.head_dim_v / TileV));
  state_recurrence_item<E, BT, K, TileV, Warps, kFoldOutput, OutWarps>(p, item);
}

// The long sequences' share of a batch that the short-sequence kernel (state_recurrence_short_mma.hpp) runs: that
// kernel takes the sequences of at most p.short_rows tokens, state_long_items_kernel the rest. The host cannot tell
// which sequences are long (their lengths are on the device), so a block per item would mostly start blocks that
// find nothing to do: 53 us of 16,384 such blocks on spec256x8 (ncu, H200). Instead block b of the G blocks looks at
// items I - 1 - b, I - 1 - b - G, ... of the I items (one per thread t: item I - 1 - b - t G; the launcher sizes G
// so), all at once, one load each, and runs the long ones in turn, in thread order. From the last item back, as
// state_recurrence_mma_kernel: a decode-first batch's prefills start first. Which threads found a long item is one
// bit each in shared memory, not a list of items: the list's 1 KB put two blocks per SM over the 196 KB
// shared-memory carveout (see state_item_in_order).
template <typename E, int BT, int K, int TileV, int Warps, bool kFoldOutput>
__device__ __forceinline__ void state_recurrence_long_items(const StateRecurrenceParams& p) {
  constexpr int kThreads = Warps * kWarpSize, kWords = kThreads / 32;
  __shared__ unsigned long_mask[kWords];  // bit t % 32 of word t / 32: thread t's item is long
  // Thread t's item (items < 2^31: the launcher checks), formed from the parameters wherever it is needed, so that
  // nothing but t lives across the loop below.
  auto item_of = [&](int t) {
    return p.chunks.num_sequences * p.num_heads * (p.head_dim_v / TileV) - 1 -
           (blockIdx.x + int64_t(t) * gridDim.x);
  };
  if (threadIdx.x < kWords) long_mask[threadIdx.x] = 0;
  __syncthreads();
  const int64_t item = item_of(threadIdx.x);
  if (item >= 0) {
    int64_t bos, eos;
    p.chunks.sequence_range(item / (int64_t(p.head_dim_v / TileV) * p.num_heads), &bos, &eos);
    if (eos - bos > p.short_rows) atomicOr(&long_mask[threadIdx.x / 32], 1u << (threadIdx.x % 32));
  }
  // The first thread at or after t whose item is long; kThreads if none.
  auto next_long = [&](int t) -> int {
    for (; t < kThreads; t = (t / 32 + 1) * 32) {
      const unsigned bits = long_mask[t / 32] >> (t % 32);
      if (bits != 0) return t + int(__ffs(bits)) - 1;  // __ffs: int on NVIDIA, unsigned on HIP
    }
    return kThreads;
  };
  __syncthreads();
  for (int t = next_long(0); t < kThreads; t = next_long(t + 1)) {
    state_recurrence_item<E, BT, K, TileV, Warps, kFoldOutput, 0>(p, unsigned(item_of(t)));
    __syncthreads();  // the item is done with shared memory
  }
}

}  // namespace kda::kernels
