// Stage 6 on the matrix units: the same contract as chunk_output.hpp, for K, V in {64, 128}.
//
// One block of kOutputMmaWarps warps per (chunk, head); warp w owns row tile w of o across all V columns.
// Phase 1: inter = qg h with qg = round(q exp2 G). The whole of the chunk's h [K,V] is copied to shared memory
// asynchronously (copy16_async) before qg is computed, so its load latency overlaps that work (ncu: the kernel waited
// on these loads, 55 % of its stall cycles, when h came in two halves each loaded and waited on). Phase 2 (the same
// shared memory reused): intra = Aqk v_new with Aqk (fp32) as a hi + lo pair of 16-bit matrices. Phase 3: the
// rounded o tile is written out in 16-byte row segments. q and o are moved 16 bytes at a time, so they must be vector_aligned (the
// launcher checks; otherwise it runs the scalar chunk_output_kernel).
#pragma once

#include "kda/chunk_output.hpp"
#include "kda/detail/mma.hpp"

namespace kda::kernels {

constexpr int kOutputMmaWarps = 4;

// Shared memory of one block in 16-bit elements (dynamic; above 48 KiB it needs the launcher's opt-in on NVIDIA):
// phase 1 (qg + all of h), phase 2 (Aqk hi, lo + v_new) and phase 3 (the o tile) reuse one buffer.
template <int BT, int K, int V>
constexpr int chunk_output_mma_shared_elems() {
  constexpr int kPhase1 = BT * (K + 8) + K * (V + 8);
  constexpr int kPhase2 = 2 * BT * (BT + 8) + BT * (V + 8);
  constexpr int kPhase3 = BT * (V + 8);
  constexpr int kPhase12 = kPhase1 > kPhase2 ? kPhase1 : kPhase2;
  return kPhase12 > kPhase3 ? kPhase12 : kPhase3;
}
template <int BT, int K, int V>
constexpr size_t chunk_output_mma_shared_bytes() {
  return sizeof(uint16_t) * chunk_output_mma_shared_elems<BT, K, V>();
}

template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kOutputMmaWarps * kWarpSize) chunk_output_mma_kernel(ChunkOutputParams p) {
  namespace m = detail::mma;
  constexpr int kThreads = kOutputMmaWarps * kWarpSize;
  constexpr int kLdQ = K + 8, kLdV = V + 8, kLdA = BT + 8;
  static_assert(m::fragment_stride_ok(kLdQ) && m::fragment_stride_ok(kLdV) && m::fragment_stride_ok(kLdA),
                "fragment rows must be 16-byte aligned");
  extern __shared__ __align__(16) uint16_t output_smem[];
  uint16_t* smem = output_smem;
  uint16_t* qg_s = smem;
  uint16_t* h_s = smem + BT * kLdQ;
  uint16_t* a_hi = smem;
  uint16_t* a_lo = smem + BT * kLdA;
  uint16_t* vn_s = smem + 2 * BT * kLdA;
  uint16_t* o_s = smem;

  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const uint16_t* h_in = static_cast<const uint16_t*>(p.h) + (int64_t(blockIdx.x) * p.num_heads + h) * K * V;
  const uint16_t* vn_in = static_cast<const uint16_t*>(p.v_new);
  auto row_of = [&](int i) { return (chunk.start + i) * p.num_heads + h; };
  constexpr int kColTiles = V / 16;
  const int rt = warp;  // BT / 16 <= kOutputMmaWarps
  const bool has_rows = rt < BT / 16 && rt * 16 < chunk.length;  // tiles past the chunk are never stored

  m::Acc acc[kColTiles];
#pragma unroll
  for (int ct = 0; ct < kColTiles; ++ct) m::zero(acc[ct]);

  // All of h [K,V] starts on its way to shared memory now; qg is built while it flies.
  for (int e = threadIdx.x; e < K * (V / 8); e += kThreads) {
    const int d = e / (V / 8), v = (e % (V / 8)) * 8;
    detail::copy16_async(&h_s[d * kLdV + v], h_in + d * V + v);
  }

  // qg = round(q exp2 G) in units of 8 columns (one 16-byte load of q, two of G), in groups whose loads are all
  // issued before any is used.
  constexpr int kUnits = BT * K / 8;
  constexpr int kPerThread = (kUnits + kThreads - 1) / kThreads;
  constexpr int kGroup = kPerThread < 4 ? kPerThread : 4;
  if (p.q_gated) {  // q is the fused prepare's qg: copied as is
    for (int u = threadIdx.x; u < kUnits; u += kThreads) {
      const int i = u / (K / 8), d = (u % (K / 8)) * 8;
      *reinterpret_cast<uint4*>(&qg_s[i * kLdQ + d]) =
          i < chunk.length ? detail::load16(p.q, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
    }
  }
  for (int x0 = 0; x0 < kPerThread && !p.q_gated; x0 += kGroup) {
    float q_in[kGroup][8], g_in[kGroup][8];
#pragma unroll
    for (int x = 0; x < kGroup; ++x) {
      const int u = threadIdx.x + (x0 + x) * kThreads, i = u / (K / 8), d = (u % (K / 8)) * 8;
      const bool valid = u < kUnits && i < chunk.length;
      if (valid) {
        detail::load8<E>(p.q, chunk.start + i, h, d, q_in[x]);
        detail::load8(&p.G[row_of(i) * K + d], g_in[x]);
      }
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        if (!valid) q_in[x][c] = g_in[x][c] = 0.0f;
      }
    }
#pragma unroll
    for (int x = 0; x < kGroup; ++x) {
      const int u = threadIdx.x + (x0 + x) * kThreads, i = u / (K / 8), d = (u % (K / 8)) * 8;
      if (u >= kUnits) continue;
#pragma unroll
      for (int c = 0; c < 8; ++c)
        qg_s[i * kLdQ + d + c] = numeric::from_float<E>(q_in[x][c] * detail::decay_exp2(g_in[x][c])).bits;
    }
  }
  detail::copy16_async_wait();
  __syncthreads();  // qg and h are in shared memory
  if (has_rows) {
#pragma unroll
    for (int kt = 0; kt < K / 16; ++kt) {
      const m::FragA a = m::load_a(&qg_s[rt * 16 * kLdQ + kt * 16], kLdQ, lane);
#pragma unroll
      for (int ct = 0; ct < kColTiles; ++ct) {
        m::mma<E>(acc[ct], a, m::load_b(&h_s[kt * 16 * kLdV + ct * 16], kLdV, lane));
      }
    }
  }
#pragma unroll
  for (int ct = 0; ct < kColTiles; ++ct)
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; ++e) acc[ct].x[e] *= p.scale;

  __syncthreads();  // phase 1 is done with qg_s / h_s
  constexpr int kAVecs = (BT * BT / 4 + kThreads - 1) / kThreads;
  float4 av[kAVecs];
#pragma unroll
  for (int x = 0; x < kAVecs; ++x) {
    const int e = threadIdx.x + x * kThreads, i = e / (BT / 4), j = (e % (BT / 4)) * 4;
    av[x] = e < BT * BT / 4 && i < chunk.length ? *reinterpret_cast<const float4*>(&p.Aqk[row_of(i) * BT + j])
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int x = 0; x < kAVecs; ++x) {
    const int e = threadIdx.x + x * kThreads, i = e / (BT / 4), j = (e % (BT / 4)) * 4;
    if (e < BT * BT / 4) detail::store_hi_lo4<E>(&a_hi[i * kLdA + j], &a_lo[i * kLdA + j], av[x]);  // 8-byte rows
  }
  for (int e = threadIdx.x; e < BT * (V / 8); e += kThreads) {
    const int j = e / (V / 8), v = (e % (V / 8)) * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (j < chunk.length) x = *reinterpret_cast<const uint4*>(vn_in + row_of(j) * V + v);
    *reinterpret_cast<uint4*>(&vn_s[j * kLdV + v]) = x;
  }
  __syncthreads();
  if (has_rows) {
    for (int kt = 0; kt <= rt; ++kt) {  // Aqk is lower triangular
      const m::FragA hi = m::load_a(&a_hi[rt * 16 * kLdA + kt * 16], kLdA, lane);
      const m::FragA lo = m::load_a(&a_lo[rt * 16 * kLdA + kt * 16], kLdA, lane);
#pragma unroll
      for (int ct = 0; ct < kColTiles; ++ct) {
        const m::FragB b = m::load_b(&vn_s[kt * 16 * kLdV + ct * 16], kLdV, lane);
        m::mma<E>(acc[ct], hi, b);
        m::mma<E>(acc[ct], lo, b);
      }
    }
  }
  // Phase 3: the rounded o tile goes through shared memory so that every global store is a 16-byte row segment.
  __syncthreads();
  if (has_rows) {
#pragma unroll
    for (int ct = 0; ct < kColTiles; ++ct) m::store_rounded<E>(&o_s[rt * 16 * kLdV + ct * 16], kLdV, acc[ct], lane);
  }
  __syncthreads();
  for (int u = threadIdx.x; u < chunk.length * (V / 8); u += kThreads) {
    const int i = u / (V / 8), v = (u % (V / 8)) * 8;
    detail::store16(p.o, chunk.start + i, h, v, *reinterpret_cast<const uint4*>(&o_s[i * kLdV + v]));
  }
}

}  // namespace kda::kernels
