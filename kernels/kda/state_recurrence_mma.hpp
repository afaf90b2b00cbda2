// Stage 5 on the matrix units: the same recurrence and contract as state_recurrence.hpp, for K in {64, 128}.
//
// One block of kWarps warps per (sequence, head, V-tile of 16 columns). The fp32 state S [K,16] stays in the
// accumulator registers for the whole sequence: warp w owns row tiles w, w + kWarps, ... of S. Per chunk:
//   1. stage w, kg [BT,K] and the u tile [BT,16] in shared memory; write h = round(S) to shared memory, where it is
//      the B operand of the next product, and from there to global in 16-byte rows;
//   2. v_new = u - w round(S): one 16-row tile per warp, K/16 matrix-unit steps;
//   3. S = exp2(G_last) S + kg^T v_new: the decay (exponentials taken once per chunk while staging) scales the
//      accumulators in place, then BT/16 steps add kg^T v_new.
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/state_recurrence.hpp"

namespace kda::kernels {

constexpr int kStateMmaWarps = 4;

// Three blocks per multiprocessor (168 registers, no spills; uncapped it takes 255 and fits two): batches of many
// short sequences run tens of thousands of these blocks, and the third block per SM hides their fixed latency
// (spec256x8 1.22 -> 0.98 ms on the H200); single long sequences lose ~1 % (docs/performance.md).
template <typename E, int BT, int K>
__global__ void __launch_bounds__(kStateMmaWarps * kWarpSize, 3) state_recurrence_mma_kernel(StateRecurrenceParams p) {
  namespace m = detail::mma;
  constexpr int kThreads = kStateMmaWarps * kWarpSize;
  constexpr int kTileV = 16;
  constexpr int kLd = K + 8;                 // padded row of w / kg in shared memory (16-bit elements)
  constexpr int kStateTiles = K / 16;        // row tiles of S
  constexpr int kTilesPerWarp = (kStateTiles + kStateMmaWarps - 1) / kStateMmaWarps;
  constexpr int kRowTiles = BT / 16;         // row tiles of a chunk
  static_assert(m::fragment_stride_ok(kLd) && m::fragment_stride_ok(kTileV), "fragment rows must be 16-byte aligned");
  __shared__ __align__(16) uint16_t w_s[BT * kLd];
  __shared__ __align__(16) uint16_t kg_s[BT * kLd];
  __shared__ __align__(16) uint16_t state_s[K * kTileV];   // round(S), B operand of w round(S)
  __shared__ __align__(16) uint16_t vn_s[BT * kTileV];     // v_new tile, B operand of kg^T v_new
  __shared__ float u_s[BT * kTileV];
  __shared__ float decay_s[K];              // exp2(G) of the chunk's last row: the state's decay over the chunk

  const int num_v_tiles = p.head_dim_v / kTileV;
  const int vt = blockIdx.x % num_v_tiles;
  const int h = (blockIdx.x / num_v_tiles) % p.num_heads;
  const int64_t n = int64_t(blockIdx.x) / (int64_t(num_v_tiles) * p.num_heads);
  if (n >= p.chunks.num_sequences) return;
  const int v0 = vt * kTileV;
  const int V = p.head_dim_v;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const uint16_t* kg = static_cast<const uint16_t*>(p.kg);
  const E* u = static_cast<const E*>(p.u);
  E* h_out = static_cast<E*>(p.h);
  E* vnew_out = static_cast<E*>(p.v_new);

  bool load_initial = false;
  const int64_t slot = state_slot(p, n, &load_initial);

  // S in registers: tile j of this warp is row tile warp + j * kStateMmaWarps.
  m::Acc S[kTilesPerWarp];
#pragma unroll
  for (int j = 0; j < kTilesPerWarp; ++j) {
    const int tile = warp + j * kStateMmaWarps;
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; ++e) {
      const m::Coord c = m::acc_coord(lane, e);
      S[j].x[e] = load_initial && tile < kStateTiles
                      ? p.initial_state[state_offset(p, slot, h, tile * 16 + c.row, v0 + c.col)]
                      : 0.0f;
    }
  }

  const SequenceChunks seq = sequence_chunks<BT>(p, n);
  const int64_t bos = seq.bos, eos = seq.eos, first_chunk = seq.first_chunk, nt = seq.nt,
                num_chunks = seq.num_chunks;

  // Operands of one chunk held in registers: the next chunk's loads are issued before the current chunk's products,
  // so the serial chain does not wait on memory latency. Rows past the chunk load as zeros and add nothing.
  constexpr int kRowVecs = K / 8;                                      // 16-byte vectors per row of w / kg
  constexpr int kWVecs = (BT * kRowVecs + kThreads - 1) / kThreads;    // per thread
  constexpr int kUVecs = (BT * 2 + kThreads - 1) / kThreads;           // the u tile row is 16 x 16 bit = 2 vectors
  constexpr int kGLast = (K + kThreads - 1) / kThreads;
  struct ChunkRegs {
    uint4 w[kWVecs], kg[kWVecs], u[kUVecs];
    float glast[kGLast];
  };
  auto load_chunk = [&](int64_t chunk_start, int length, ChunkRegs& r) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // Thread t reads rows t / kRowVecs + x * kRowsPerPass at column (t % kRowVecs) * 8: one 64-bit base offset and a
    // fixed stride instead of a full index computation per vector.
    static_assert(kThreads % kRowVecs == 0, "whole rows per pass");
    constexpr int kRowsPerPass = kThreads / kRowVecs;
    const int row0 = threadIdx.x / kRowVecs;
    const int64_t base = ((chunk_start + row0) * p.num_heads + h) * K + (threadIdx.x % kRowVecs) * 8;
    const int64_t stride = int64_t(kRowsPerPass) * p.num_heads * K;
#pragma unroll
    for (int x = 0; x < kWVecs; ++x) {
      const bool valid = row0 + x * kRowsPerPass < length;
      r.w[x] = valid ? *reinterpret_cast<const uint4*>(w + base + x * stride) : zero;
      r.kg[x] = valid ? *reinterpret_cast<const uint4*>(kg + base + x * stride) : zero;
    }
#pragma unroll
    for (int x = 0; x < kUVecs; ++x) {
      const int e = threadIdx.x + x * kThreads;
      const int i = e / 2, half = e % 2;
      const bool valid = e < BT * 2 && i < length;
      const int64_t off = ((chunk_start + i) * p.num_heads + h) * V + v0 + half * 8;
      r.u[x] = valid ? *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(u) + off) : zero;
    }
#pragma unroll
    for (int x = 0; x < kGLast; ++x) {
      const int d = threadIdx.x + x * kThreads;
      r.glast[x] = d < K ? p.G[((chunk_start + length - 1) * p.num_heads + h) * K + d] : 0.0f;
    }
  };
  auto store_chunk = [&](const ChunkRegs& r) {
#pragma unroll
    for (int x = 0; x < kWVecs; ++x) {
      const int e = threadIdx.x + x * kThreads;
      if (e >= BT * kRowVecs) continue;
      const int i = e / kRowVecs, d = (e % kRowVecs) * 8;
      *reinterpret_cast<uint4*>(&w_s[i * kLd + d]) = r.w[x];
      *reinterpret_cast<uint4*>(&kg_s[i * kLd + d]) = r.kg[x];
    }
#pragma unroll
    for (int x = 0; x < kUVecs; ++x) {
      const int e = threadIdx.x + x * kThreads;
      if (e >= BT * 2) continue;
      const uint16_t* bits = reinterpret_cast<const uint16_t*>(&r.u[x]);
#pragma unroll
      for (int k8 = 0; k8 < 8; ++k8) u_s[e * 8 + k8] = numeric::to_float(E{bits[k8]});
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

  ChunkRegs next;
  if (num_chunks > 0) load_chunk(bos, chunk_length(0), next);
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t gid = first_chunk + c;
    if (gid < 0 || gid >= nt) {
      if (threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusBadChunkTable);
      break;
    }
    const int64_t start = bos + c * BT;
    const int length = chunk_length(c);
    __syncthreads();  // the previous chunk's reads of shared memory are done

    // 1. Stage this chunk's operands (already in registers) and prefetch the next chunk's.
    store_chunk(next);
    if (c + 1 < num_chunks) load_chunk(start + BT, chunk_length(c + 1), next);
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int tile = warp + j * kStateMmaWarps;
      if (tile >= kStateTiles) continue;
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) {
        const m::Coord cc = m::acc_coord(lane, e);
        const int d = tile * 16 + cc.row;
        state_s[d * kTileV + cc.col] = numeric::from_float<E>(S[j].x[e]).bits;
      }
    }
    __syncthreads();
    // h = round(S) leaves in 16-byte rows (two per state row), off the chain: nothing waits on these stores.
    for (int e = threadIdx.x; e < K * 2; e += kThreads) {
      const int d = e / 2, half = e % 2;
      *reinterpret_cast<uint4*>(&h_out[((gid * p.num_heads + h) * K + d) * V + v0 + half * 8]) =
          *reinterpret_cast<const uint4*>(&state_s[d * kTileV + half * 8]);
    }

    // 2. v_new = u - w round(S), as two independent accumulation chains (even and odd 32-column steps) that are
    //    added at the end: this product is on the serial path from one chunk to the next, so its latency counts.
    for (int rt = warp; rt < kRowTiles; rt += kStateMmaWarps) {
      m::Acc acc, odd;
      m::zero(acc);
      m::zero(odd);
#pragma unroll
      for (int kt = 0; kt < K / 32; ++kt) {
        m::mma_k32<E, false>(kt % 2 == 0 ? acc : odd, &w_s[rt * 16 * kLd + kt * 32], kLd, &state_s[kt * 32 * kTileV],
                             kTileV, lane);
      }
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) acc.x[e] += odd.x[e];
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) {
        const m::Coord cc = m::acc_coord(lane, e);
        const int i = rt * 16 + cc.row;
        const E rounded = numeric::from_float<E>(u_s[i * kTileV + cc.col] - acc.x[e]);
        vn_s[i * kTileV + cc.col] = i < length ? rounded.bits : uint16_t(0);
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < length * 2; e += kThreads) {
      const int i = e / 2, half = e % 2;
      *reinterpret_cast<uint4*>(&vnew_out[((start + i) * p.num_heads + h) * V + v0 + half * 8]) =
          *reinterpret_cast<const uint4*>(&vn_s[i * kTileV + half * 8]);
    }

    // 3. S = exp2(G_last) S + kg^T v_new.
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int tile = warp + j * kStateMmaWarps;
      if (tile >= kStateTiles) continue;
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) S[j].x[e] *= decay_s[tile * 16 + m::acc_coord(lane, e).row];
#pragma unroll
      for (int it = 0; it < kRowTiles; ++it) {
        const m::FragA a = m::load_a_transposed(&kg_s[it * 16 * kLd + tile * 16], kLd, lane);
        const m::FragB b = m::load_b(&vn_s[it * 16 * kTileV], kTileV, lane);
        m::mma<E>(S[j], a, b);
      }
    }
  }

  if (p.final_state != nullptr && slot >= 0) {
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
      const int tile = warp + j * kStateMmaWarps;
      if (tile >= kStateTiles) continue;
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) {
        const m::Coord cc = m::acc_coord(lane, e);
        p.final_state[state_offset(p, slot, h, tile * 16 + cc.row, v0 + cc.col)] = S[j].x[e];
      }
    }
  }
}

}  // namespace kda::kernels
