// Stage 5: the inter-chunk state recurrence (FLA chunk_gated_delta_rule_fwd_h).
//
// One block per (sequence, head, V-tile of kStateTileV columns) walks that sequence's chunks in order. The fp32
// state S [K, kStateTileV] lives in shared memory. For each chunk:
//   h[chunk]   = round(S)                                   (pre-chunk state, for the output stage)
//   v_new[i,:] = round( u[i,:] - sum_d w[i,d] round(S)[d,:] )   (S enters the product in the I/O type)
//   S[d,:]     = exp2(G_last[d]) S[d,:] + sum_{i<L} kg[i,d] v_new[i,:]
// and at the end the final state is written. Chunk c of sequence n is global chunk chunk_offsets[n] + c, the order
// the per-chunk stages use, so h and v_new line up with them.
//
// State I/O serves engines directly: K-first [N,H,K,V] or V-first [N,H,V,K] (vLLM); an optional state_indices [N]
// maps sequence n to a slot of a state pool (negative = no state: start from zero, write nothing); optional
// has_initial_state [N] flags start a slot from zero without a masked write by the caller. initial and final may be
// the same pool (each block reads its slice before writing it); two sequences must not share a slot.
#pragma once

#include "kda/detail/chunk_table.hpp"

namespace kda::kernels {

constexpr int kStateThreads = 256;
constexpr int kStateTileV = 16;
constexpr int kStateMaxK = 256;

struct StateRecurrenceParams {
  detail::ChunkTable chunks;
  const void* w = nullptr;    // [T,H,K] I/O type, contiguous
  const void* u = nullptr;    // [T,H,V]
  const void* kg = nullptr;   // [T,H,K]
  const float* G = nullptr;   // [T,H,K], read at each chunk's last row; unused when G_last is set
  const float* G_last = nullptr;  // [NT_grid,H,K]: G of each chunk's last row (the fused prepare writes it), or null
  int num_heads = 0, head_dim_k = 0, head_dim_v = 0;
  const float* initial_state = nullptr;  // pool of states, or null (all start at zero)
  float* final_state = nullptr;          // pool of states, or null (not written)
  StateLayout layout = StateLayout::kKFirst;
  IndexSpan state_indices;               // [N] or absent (slot n for sequence n)
  const uint8_t* has_initial_state = nullptr;  // [N] or null (all true)
  int64_t state_pool_size = 0;           // slots in the pool(s)
  void* h = nullptr;                     // out [NT,H,K,V] I/O type
  void* v_new = nullptr;                 // out [T,H,V] I/O type; may be exactly u: a block reads each row of its
                                         // u tile before it writes that row of v_new, and no other block reads it
  // The output folded in (the matrix-unit kernel's kFoldOutput): o = scale qg round(S) + Aqk v_new per chunk; h and
  // v_new may then be null (not written).
  const void* qg = nullptr;              // [T,H,K] I/O type, contiguous: round(q exp2 G)
  const void* aqk_hi = nullptr;          // [T,H,BT] I/O type: round(Aqk)
  const void* aqk_lo = nullptr;          // [T,H,BT] I/O type: round(Aqk - round(Aqk))
  MutableTensorView o;                   // out [T,H,V]
  float scale = 1.0f;                    // the effective scale
  // The longest sequence state_short_mma_kernel takes (state_recurrence_short_mma.hpp); state_long_items_kernel,
  // launched beside it, takes the longer ones. In its short-only form: the caller's bound on every sequence.
  int short_rows = 0;
  // state_short_mma_kernel's kTickets form: a device word that is zero when it starts. Its blocks take their items
  // as they get to them (one atomic per item), so blocks that start late, behind the long sequences' chains, take
  // fewer; the plain form's block b of G takes items b, b + G, b + 2G, ...
  unsigned* short_items_taken = nullptr;
};

// Offset of element (0, 0) of the state of (slot, head h) in a pool of H heads of K x V states, either layout.
__device__ inline int64_t state_base_offset(int64_t slot, int h, int H, int K, int V) {
  return (slot * H + h) * int64_t(K) * V;
}
// Offset of state element (d, v) of (slot, head) in the chosen layout.
__device__ inline int64_t state_offset(const StateRecurrenceParams& p, int64_t slot, int h, int d, int v) {
  const int64_t base = state_base_offset(slot, h, p.num_heads, p.head_dim_k, p.head_dim_v);
  return p.layout == StateLayout::kKFirst ? base + int64_t(d) * p.head_dim_v + v
                                          : base + int64_t(v) * p.head_dim_k + d;
}

// What a block of sequence n needs before its first chunk: the clamped token range, the first global chunk id and
// count, NT, and the pool slot (-1: no state) with whether its initial state is read. Every index is loaded before
// any is checked: a check may report (an atomic), nothing after which can be hoisted above it, so checking between
// the loads made them dependent round trips (ncu, spec256x8: ~14 % of the 64-column state kernel's stall samples
// sat behind them). A slot past the pool, a malformed cu_seqlens and a chunk_offsets entry that disagrees with it
// are reported; the slot is then treated as "no state" and the range clamped.
struct SequenceChunks {
  int64_t bos, eos, first_chunk, num_chunks, nt;
  int64_t slot;
  bool load_initial;
};
// sequence_chunks in two halves, for a kernel that loads a later sequence's indices early and looks at them only
// once they have arrived (state_recurrence_short_mma.hpp): the loads, then the checks.
struct SequenceIndices {
  int64_t n, b, e, first, next, slot;
  bool flagged;
};
__device__ inline SequenceIndices load_sequence_indices(const StateRecurrenceParams& p, int64_t n) {
  SequenceIndices x;
  x.n = n;
  x.b = detail::load_index(p.chunks.cu_seqlens, n);
  x.e = detail::load_index(p.chunks.cu_seqlens, n + 1);
  x.first = detail::load_index(p.chunks.chunk_offsets, n);
  x.next = detail::load_index(p.chunks.chunk_offsets, n + 1);
  x.slot = p.state_indices.data != nullptr ? detail::load_index(p.state_indices, n) : n;
  x.flagged = p.has_initial_state == nullptr || p.has_initial_state[n] != 0;
  return x;
}
template <int BT>
__device__ inline SequenceChunks resolve_sequence_chunks(const StateRecurrenceParams& p, const SequenceIndices& x) {
  int64_t slot = x.slot;
  SequenceChunks s;
  s.nt = p.chunks.num_chunks();
  p.chunks.clamp_range(x.n, x.b, x.e, &s.bos, &s.eos);
  s.first_chunk = x.first;
  s.num_chunks = (s.eos - s.bos + BT - 1) / BT;
  if (threadIdx.x == 0 && x.next - x.first != s.num_chunks) p.chunks.report(detail::kDeviceStatusBadChunkTable);
  if (slot >= p.state_pool_size) {
    if (threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusBadStateIndex);
    slot = -1;
  }
  s.slot = slot < 0 ? -1 : slot;
  s.load_initial = p.initial_state != nullptr && s.slot >= 0 && x.flagged;
  return s;
}
template <int BT>
__device__ inline SequenceChunks sequence_chunks(const StateRecurrenceParams& p, int64_t n) {
  return resolve_sequence_chunks<BT>(p, load_sequence_indices(p, n));
}

template <typename E, int BT>
__global__ void __launch_bounds__(kStateThreads) state_recurrence_kernel(StateRecurrenceParams p) {
  constexpr int kSlice = 32;
  constexpr int kVnPerThread = BT * kStateTileV / kStateThreads;
  __shared__ float s_s[kStateMaxK][kStateTileV];
  __shared__ float tile_s[BT][kSlice + 1];   // w or kg slice
  __shared__ float vn_s[BT][kStateTileV + 1];
  __shared__ float glast_s[kStateMaxK];

  const int num_v_tiles = p.head_dim_v / kStateTileV;
  const int vt = blockIdx.x % num_v_tiles;
  const int h = (blockIdx.x / num_v_tiles) % p.num_heads;
  const int64_t n = int64_t(blockIdx.x) / (int64_t(num_v_tiles) * p.num_heads);
  if (n >= p.chunks.num_sequences) return;
  const int v0 = vt * kStateTileV;
  const int K = p.head_dim_k;
  const E* w = static_cast<const E*>(p.w);
  const E* u = static_cast<const E*>(p.u);
  const E* kg = static_cast<const E*>(p.kg);
  E* h_out = static_cast<E*>(p.h);
  E* vnew_out = static_cast<E*>(p.v_new);

  // The sequence's chunks and which pool slot it reads and writes (out-of-range slots: "no state").
  const SequenceChunks seq = sequence_chunks<BT>(p, n);
  const int64_t slot = seq.slot;
  const bool load_initial = seq.load_initial;
  for (int e = threadIdx.x; e < K * kStateTileV; e += kStateThreads) {
    const int d = e / kStateTileV, v = e % kStateTileV;
    s_s[d][v] = load_initial ? p.initial_state[state_offset(p, slot, h, d, v0 + v)] : 0.0f;
  }

  const int64_t bos = seq.bos, eos = seq.eos, first_chunk = seq.first_chunk, nt = seq.nt,
                num_chunks = seq.num_chunks;
  const int vn_v = threadIdx.x % kStateTileV;
  const int vn_i0 = threadIdx.x / kStateTileV;

  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t gid = first_chunk + c;
    if (gid < 0 || gid >= nt) {  // tables disagree with cu_seqlens: never write outside h
      if (threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusBadChunkTable);
      break;
    }
    const int64_t start = bos + c * BT;
    const int length = static_cast<int>(eos - start < BT ? eos - start : BT);
    __syncthreads();  // S is final for the previous chunk
    for (int e = threadIdx.x; e < K * kStateTileV; e += kStateThreads) {
      const int d = e / kStateTileV, v = e % kStateTileV;
      h_out[((gid * p.num_heads + h) * K + d) * p.head_dim_v + v0 + v] = numeric::from_float<E>(s_s[d][v]);
    }
    for (int d = threadIdx.x; d < K; d += kStateThreads) {
      glast_s[d] = p.G_last != nullptr ? p.G_last[(gid * p.num_heads + h) * K + d]
                                       : p.G[((start + length - 1) * p.num_heads + h) * K + d];
    }

    // v_new = u - w S, one d-slice of w at a time.
    float dot[kVnPerThread] = {};
    for (int d0 = 0; d0 < K; d0 += kSlice) {
      __syncthreads();
      for (int e = threadIdx.x; e < BT * kSlice; e += kStateThreads) {
        const int i = e / kSlice, d = e % kSlice;
        tile_s[i][d] = i < length ? numeric::to_float(w[((start + i) * p.num_heads + h) * K + d0 + d]) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kVnPerThread; ++r) {
        const int i = vn_i0 + r * (kStateThreads / kStateTileV);
        for (int d = 0; d < kSlice; ++d) dot[r] += tile_s[i][d] * numeric::round_to<E>(s_s[d0 + d][vn_v]);
      }
    }
#pragma unroll
    for (int r = 0; r < kVnPerThread; ++r) {
      const int i = vn_i0 + r * (kStateThreads / kStateTileV);
      float vn = 0.0f;
      if (i < length) {
        const int64_t off = ((start + i) * p.num_heads + h) * p.head_dim_v + v0 + vn_v;
        const E rounded = numeric::from_float<E>(numeric::to_float(u[off]) - dot[r]);
        vnew_out[off] = rounded;
        vn = numeric::to_float(rounded);
      }
      vn_s[i][vn_v] = vn;
    }

    // S = exp2(G_last) S + kg^T v_new, one d-slice of kg at a time.
    for (int d0 = 0; d0 < K; d0 += kSlice) {
      __syncthreads();
      for (int e = threadIdx.x; e < BT * kSlice; e += kStateThreads) {
        const int i = e / kSlice, d = e % kSlice;
        tile_s[i][d] = i < length ? numeric::to_float(kg[((start + i) * p.num_heads + h) * K + d0 + d]) : 0.0f;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kSlice * kStateTileV; e += kStateThreads) {
        const int d = e / kStateTileV, v = e % kStateTileV;
        float acc = 0.0f;
        for (int i = 0; i < length; ++i) acc += tile_s[i][d] * vn_s[i][v];
        s_s[d0 + d][v] = exp2f(glast_s[d0 + d]) * s_s[d0 + d][v] + acc;
      }
    }
  }

  __syncthreads();
  if (p.final_state != nullptr && slot >= 0) {
    for (int e = threadIdx.x; e < K * kStateTileV; e += kStateThreads) {
      const int d = e / kStateTileV, v = e % kStateTileV;
      p.final_state[state_offset(p, slot, h, d, v0 + v)] = s_s[d][v];
    }
  }
}

}  // namespace kda::kernels
