// Stage 5 with the output folded in, the state held transposed in registers (NVIDIA mma.sync only): the same contract
// as state_recurrence_mma.hpp's kFoldOutput form without h or v_new (chunk_kda_fwd's use), within the output tolerance
// but not bit for bit (its sums run in another order).
//
// Why a second form: state_recurrence_mma.hpp splits S [K, TileV] into 16x16 tiles over its warps, so every chunk
// step writes round(S) to shared memory as the B operand of w round(S), and v_new as the B operand of kg^T v_new, with
// block barriers between the products; per multiprocessor it forms ~16 state columns per microsecond (H200: ~2 us
// per step of a 32-column tile). Here each warp owns 16 columns of V for all K rows, as S^T
// [16, K] in its accumulators. On mma.sync an accumulator tile's layout is the A operand's (a_coord == acc_coord),
// so rounding S^T's tiles gives the A operand of
//     v_new^T = u^T - S^T w^T          (B = w^T: rows of w, as ldmatrix reads them),
//     o^T     = scale S^T qg^T + v_new^T Aqk^T,
// and rounding v_new^T's accumulators gives the A operand of
//     S^T     = S^T diag(exp2(G_last)) + v_new^T kg.
// A warp's chain needs nothing from the other warps: per chunk the block stages only the operands all warps share
// (w, kg, qg, Aqk's hi and lo, the block's u columns), two buffers deep, one barrier per chunk. o^T leaves through a
// small per-warp tile in shared memory (stmatrix .trans writes it as rows of o) and 16-byte stores.
//
// One block of Warps warps per (sequence, head, 16 Warps columns of V). Requirements (the launcher checks):
// K in {64, 128}; V a multiple of 16 Warps; o 16-byte aligned with token and head strides multiples of 8 elements;
// the operands vector aligned (every chunk_kda_fwd workspace is).
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/state_recurrence.hpp"

namespace kda::kernels {

// Shared memory of state_recurrence_regs_kernel (dynamic): two buffers of the chunk's shared operands, exp2(G_last)
// for each, and one o^T tile per warp.
template <int BT, int K, int Warps>
struct StateRegsLayout {
  static constexpr int kCols = 16 * Warps;      // columns of V per block
  static constexpr int kLd = K + 8;             // rows of w, kg, qg (16-bit; padded against bank conflicts)
  static constexpr int kLdA = BT + 8;           // rows of Aqk's hi and lo
  static constexpr int kLdU = kCols + 8;        // rows of the block's u columns
  static constexpr int kLdO = 16 + 8;           // rows of a warp's o tile
  static constexpr int kW = 0, kKg = kW + BT * kLd, kQg = kKg + BT * kLd, kHi = kQg + BT * kLd, kLo = kHi + BT * kLdA,
                       kU = kLo + BT * kLdA;
  static constexpr int kBufferElems = kU + BT * kLdU;  // 16-bit elements per buffer
  static constexpr size_t kDecayOffset = 2 * sizeof(uint16_t) * size_t(kBufferElems);
  static constexpr size_t kOutOffset = kDecayOffset + 2 * sizeof(float) * K;
  static constexpr size_t kBytes = kOutOffset + sizeof(uint16_t) * size_t(Warps) * BT * kLdO;
  static_assert(kBufferElems % 8 == 0 && kLd % 8 == 0 && kLdA % 8 == 0 && kLdU % 8 == 0 && kLdO % 8 == 0,
                "16-byte aligned rows and buffers");
};

// The property the form rests on: on mma.sync an accumulator element and the A operand element of the same index sit
// at the same (row, column) of their 16x16 tile, so a rounded accumulator tile is an A operand as it stands.
KDA_HOST_DEVICE constexpr bool mma_sync_acc_is_a() {
  for (int lane = 0; lane < detail::mma::nvidia::kLanes; ++lane) {
    for (int e = 0; e < detail::mma::nvidia::kAccPerLane; ++e) {
      const detail::mma::Coord a = detail::mma::nvidia::a_coord(lane, e), c = detail::mma::nvidia::acc_coord(lane, e);
      if (a.row != c.row || a.col != c.col) return false;
    }
  }
  return true;
}
static_assert(mma_sync_acc_is_a(), "mma.sync: accumulator and A operand layouts agree");

#if defined(__CUDACC__) && !defined(__HIP__)
namespace state_regs {
namespace m = detail::mma;

// The A operand of a product from an accumulator tile: round each element (mma.sync: the same coordinates).
template <typename E>
__device__ __forceinline__ m::FragA round_to_a(const m::Acc& acc) {
  static_assert(m::kAPerLane == m::kAccPerLane, "one A element per accumulator element");
  m::FragA f;
#pragma unroll
  for (int e = 0; e < m::kAccPerLane; e += 2) {
    const uint32_t pair = numeric::pack2<E>(acc.x[e], acc.x[e + 1]);
    f.x[e] = uint16_t(pair & 0xffffu);
    f.x[e + 1] = uint16_t(pair >> 16);
  }
  return f;
}
__device__ __forceinline__ m::FragA negated(const m::FragA& a) {
  m::FragA f;
#pragma unroll
  for (int e = 0; e < m::kAPerLane; ++e) f.x[e] = uint16_t(a.x[e] ^ 0x8000u);  // sign bit of bf16 and fp16 alike
  return f;
}
// Writes the 16x16 accumulator tile `acc` (element (r, c) of the fragment) transposed, as 16-bit E, to
// tile[c * ld + r]: four 8x8 matrices by one stmatrix .trans.
template <typename E>
__device__ __forceinline__ void store_transposed(uint16_t* tile, int ld, const m::Acc& acc, int lane) {
  uint32_t r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = numeric::pack2<E>(acc.x[2 * i], acc.x[2 * i + 1]);
  // Register i holds fragment quadrant (row block i % 2, column block i / 2); transposed, its rows are the fragment's
  // columns 8 (i / 2) + j at column 8 (i % 2). Lane l gives row j = l % 8 of matrix i = l / 8.
  const int i = lane / 8, j = lane % 8;
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile + (8 * (i / 2) + j) * ld + 8 * (i % 2)));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
}  // namespace state_regs

template <typename E, int BT, int K, int Warps>
__global__ void __launch_bounds__(Warps * kWarpSize, 1) state_recurrence_regs_kernel(StateRecurrenceParams p) {
  namespace m = detail::mma;
  using L = StateRegsLayout<BT, K, Warps>;
  constexpr int kThreads = Warps * kWarpSize, kCols = L::kCols;
  constexpr int kKT = K / 16, kRT = BT / 16;  // 16-wide tiles of K and of the chunk
  constexpr int kLd = L::kLd, kLdA = L::kLdA, kLdU = L::kLdU, kLdO = L::kLdO;
  static_assert(m::kAccPairsInRows, "mma.sync layouts");
  extern __shared__ __align__(16) unsigned char regs_smem[];
  uint16_t* const buffers = reinterpret_cast<uint16_t*>(regs_smem);
  float* const decay_s = reinterpret_cast<float*>(regs_smem + L::kDecayOffset);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  uint16_t* const out_s = reinterpret_cast<uint16_t*>(regs_smem + L::kOutOffset) + warp * BT * kLdO;

  const int num_v_tiles = p.head_dim_v / kCols;
  const unsigned item = blockIdx.x;
  const int vt = int(item % unsigned(num_v_tiles));
  const int h = int((item / unsigned(num_v_tiles)) % unsigned(p.num_heads));
  const int64_t n = int64_t(item) / (int64_t(num_v_tiles) * p.num_heads);
  if (n >= p.chunks.num_sequences) return;
  const int V = p.head_dim_v;
  const int v_block = vt * kCols, v_warp = v_block + 16 * warp;  // the block's and this warp's first column

  const SequenceChunks seq = sequence_chunks<BT>(p, n);
  const int64_t bos = seq.bos, eos = seq.eos, first_chunk = seq.first_chunk, nt = seq.nt, num_chunks = seq.num_chunks;

  // S^T [16 columns of V, K]: ST[kt] holds rows v_warp .. +15, columns (state rows d) 16 kt .. +15.
  m::Acc ST[kKT];
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt) m::zero(ST[kt]);
  auto for_each_state = [&](auto&& f) {  // f(element, state row d, column v)
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt) {
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) {
        const m::Coord c = m::acc_coord(lane, e);
        f(ST[kt].x[e], kt * 16 + c.col, v_warp + c.row);
      }
    }
  };
  if (seq.load_initial) {
    for_each_state([&](float& s, int d, int v) { s = p.initial_state[state_offset(p, seq.slot, h, d, v)]; });
  }

  // Offsets of [T, H, width] workspace rows.
  auto row_offset = [&](int64_t t, int width) {
    return detail::index_times(t, int64_t(p.num_heads) * width) + int64_t(h) * width;
  };
  auto chunk_length = [&](int64_t c) {
    const int64_t start = bos + c * BT;
    return static_cast<int>(eos - start < BT ? eos - start : BT);
  };
  // Chunk c's shared operands into buffer b, as one group of asynchronous copies (rows past the chunk are zeros, so
  // that they add nothing to v_new or S), and its G_last into a register per thread (exp2 taken at the step's end).
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const uint16_t* kg = static_cast<const uint16_t*>(p.kg);
  const uint16_t* qg = static_cast<const uint16_t*>(p.qg);
  const uint16_t* hi = static_cast<const uint16_t*>(p.aqk_hi);
  const uint16_t* lo = static_cast<const uint16_t*>(p.aqk_lo);
  const uint16_t* u = static_cast<const uint16_t*>(p.u);
  constexpr int kGLast = (K + kThreads - 1) / kThreads;
  float glast[kGLast];
  auto issue_chunk = [&](int64_t c, int b) {
    const int64_t start = bos + c * BT, gid = first_chunk + c;
    const int length = chunk_length(c);
    uint16_t* buf = buffers + b * L::kBufferElems;
    constexpr int kRowVecs = K / 8;  // 16-byte pieces of a row of w, kg, qg
    for (int e = threadIdx.x; e < BT * kRowVecs; e += kThreads) {
      const int i = e / kRowVecs, d = (e % kRowVecs) * 8;
      const bool valid = i < length;
      const int64_t at = valid ? row_offset(start + i, K) + d : 0;
      detail::copy16_async_zfill(&buf[L::kW + i * kLd + d], w + at, valid);
      detail::copy16_async_zfill(&buf[L::kKg + i * kLd + d], kg + at, valid);
      detail::copy16_async_zfill(&buf[L::kQg + i * kLd + d], qg + at, valid);
    }
    constexpr int kAVecs = BT / 8;
    for (int e = threadIdx.x; e < BT * kAVecs; e += kThreads) {
      const int i = e / kAVecs, j = (e % kAVecs) * 8;
      const bool valid = i < length;
      const int64_t at = valid ? row_offset(start + i, BT) + j : 0;
      detail::copy16_async_zfill(&buf[L::kHi + i * kLdA + j], hi + at, valid);
      detail::copy16_async_zfill(&buf[L::kLo + i * kLdA + j], lo + at, valid);
    }
    constexpr int kUVecs = kCols / 8;
    for (int e = threadIdx.x; e < BT * kUVecs; e += kThreads) {
      const int i = e / kUVecs, j = (e % kUVecs) * 8;
      const bool valid = i < length;
      const int64_t at = valid ? row_offset(start + i, V) + v_block + j : 0;
      detail::copy16_async_zfill(&buf[L::kU + i * kLdU + j], u + at, valid);
    }
    detail::copy16_async_commit();
#pragma unroll
    for (int x = 0; x < kGLast; ++x) {
      const int d = threadIdx.x + x * kThreads;
      if (p.G_last != nullptr) {
        glast[x] = d < K && gid >= 0 && gid < nt ? p.G_last[row_offset(gid, K) + d] : 0.0f;
      } else {
        glast[x] = d < K ? p.G[row_offset(start + length - 1, K) + d] : 0.0f;
      }
    }
  };
  auto store_decay = [&](int b) {
#pragma unroll
    for (int x = 0; x < kGLast; ++x) {
      const int d = threadIdx.x + x * kThreads;
      if (d < K) decay_s[b * K + d] = detail::decay_exp2(glast[x]);
    }
  };

  // Launched beside chunk_kda_fwd's prepare, the block has its initial state; from here on it reads what the prepare
  // wrote (a no-op for a plain launch).
  detail::wait_for_prior_grid();
  uint16_t* o_out = static_cast<uint16_t*>(p.o.data);
  if (num_chunks > 0) {
    issue_chunk(0, 0);
    store_decay(0);
  }
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t gid = first_chunk + c;
    if (gid < 0 || gid >= nt) {
      if (threadIdx.x == 0) p.chunks.report(detail::kDeviceStatusBadChunkTable);
      break;
    }
    const int b = int(c % 2);
    const int64_t start = bos + c * BT;
    const int length = chunk_length(c);
    // Chunk c's copies are in (this thread's); the barrier publishes everyone's, and says that every warp is done
    // with chunk c - 1, whose buffer the next copies take.
    detail::copy16_async_wait();
    __syncthreads();
    if (c + 1 < num_chunks) issue_chunk(c + 1, 1 - b);
    const uint16_t* buf = buffers + b * L::kBufferElems;
    const uint16_t* w_s = buf + L::kW;
    const uint16_t* kg_s = buf + L::kKg;
    const uint16_t* qg_s = buf + L::kQg;
    const uint16_t* hi_s = buf + L::kHi;
    const uint16_t* lo_s = buf + L::kLo;
    const uint16_t* u_s = buf + L::kU + 16 * warp;

    // Every row tile runs, whatever the chunk's length: rows past it are zeros and add nothing (a test of the length
    // per tile made each tile's products a branch of their own, whose B loads could not be issued ahead of them).
    // The launcher runs this kernel on long sequences, whose chunks are full but for the last.
    // v_new^T = u^T - round(S)^T w^T and o^T = round(S)^T qg^T, over K in order, from the same A operands.
    m::Acc VN[kRT], O[kRT];
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt) {
      const m::FragA ut = m::load_a_transposed(&u_s[rt * 16 * kLdU], kLdU, lane);  // (v, token) = u[token][v]
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) VN[rt].x[e] = numeric::to_float(E{ut.x[e]});
      m::zero(O[rt]);
    }
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt) {
      const m::FragA a = state_regs::round_to_a<E>(ST[kt]);
      const m::FragA neg = state_regs::negated(a);
#pragma unroll
      for (int rt = 0; rt < kRT; ++rt) {
        m::mma<E>(VN[rt], neg, m::load_b_transposed(&w_s[rt * 16 * kLd + kt * 16], kLd, lane));
        m::mma<E>(O[rt], a, m::load_b_transposed(&qg_s[rt * 16 * kLd + kt * 16], kLd, lane));
      }
    }
    // v_new^T rounded: the A operand of Aqk's and the update's products.
    m::FragA VA[kRT];
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt) VA[rt] = state_regs::round_to_a<E>(VN[rt]);
    // o^T = scale (qg round(S))^T + v_new^T Aqk^T (Aqk as hi + lo, lower block triangle), then out through out_s.
#pragma unroll
    for (int rt = 0; rt < kRT; ++rt) {
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) O[rt].x[e] *= p.scale;
#pragma unroll
      for (int st = 0; st <= rt; ++st) {
        m::mma<E>(O[rt], VA[st], m::load_b_transposed(&hi_s[rt * 16 * kLdA + st * 16], kLdA, lane));
        m::mma<E>(O[rt], VA[st], m::load_b_transposed(&lo_s[rt * 16 * kLdA + st * 16], kLdA, lane));
      }
      state_regs::store_transposed<E>(&out_s[rt * 16 * kLdO], kLdO, O[rt], lane);
    }
    // S^T = S^T diag(exp2(G_last)) + v_new^T kg.
    const float* decay = decay_s + b * K;
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt) {
      const m::Coord c0 = m::acc_coord(lane, 0);
      const float2 lo_pair = *reinterpret_cast<const float2*>(&decay[kt * 16 + c0.col]);
      const float2 hi_pair = *reinterpret_cast<const float2*>(&decay[kt * 16 + c0.col + 8]);
      ST[kt].x[0] *= lo_pair.x;
      ST[kt].x[1] *= lo_pair.y;
      ST[kt].x[2] *= lo_pair.x;
      ST[kt].x[3] *= lo_pair.y;
      ST[kt].x[4] *= hi_pair.x;
      ST[kt].x[5] *= hi_pair.y;
      ST[kt].x[6] *= hi_pair.x;
      ST[kt].x[7] *= hi_pair.y;
#pragma unroll
      for (int st = 0; st < kRT; ++st) {
        m::mma<E>(ST[kt], VA[st], m::load_b(&kg_s[st * 16 * kLd + kt * 16], kLd, lane));
      }
    }
    // o's rows of this chunk: 16 columns (32 bytes) per token row of this warp's tile.
    __syncwarp();
    for (int e = lane; e < length * 2; e += kWarpSize) {
      const int i = e / 2, part = (e % 2) * 8;
      *reinterpret_cast<uint4*>(&o_out[detail::element_offset(p.o, start + i, h, v_warp + part)]) =
          *reinterpret_cast<const uint4*>(&out_s[i * kLdO + part]);
    }
    __syncwarp();
    if (c + 1 < num_chunks) store_decay(1 - b);  // read after the next barrier
  }
  detail::copy16_async_wait();  // none left in flight (a bad table ends the loop early)
  if (p.final_state != nullptr && seq.slot >= 0) {
    for_each_state([&](float& s, int d, int v) { p.final_state[state_offset(p, seq.slot, h, d, v)] = s; });
  }
}
#endif

}  // namespace kda::kernels
