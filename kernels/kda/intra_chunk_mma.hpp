// Stage 2 on the matrix units: the same contract as intra_chunk.hpp (Akk, Aqk in fp32, [T,H,BT]) with far fewer
// exponentials, for any K that is a multiple of 16.
//
// The chunk splits into 16-row blocks. For rows i of block a and columns j of an earlier block b < a, with r the
// first row of block a,
//     exp2(G_i - G_j) = exp2(G_i - G_r) * exp2(G_r - G_j),      both factors <= 1 (G is non-increasing),
// so the off-diagonal tiles are products of two factor matrices: L_i = x_i exp2(G_i - G_r) (x = k or q) and
// R_j = k_j exp2(G_r - G_j). No exponent is ever positive, so no finite gate overflows. The factors enter the
// matrix units as hi + lo pairs of 16-bit values (hi*hi + hi*lo + lo*hi keeps ~16 significant bits). The diagonal
// tiles, where a shared reference row would need exp2 of a positive number, are summed exactly per element:
// exp2(G_i - G_j) with j <= i.
//
// One block of kIntraMmaWarps warps per (chunk, head). K is walked in slices of 16 channels staged in shared memory
// with 16-byte loads: q and k must be vector_aligned (the launcher checks; otherwise it runs intra_chunk_kernel, the
// per-element form of the same contract). Per slice the whole block computes the factors and the diagonal sums (the
// work is spread evenly; later row blocks have more R factors), then warp a multiplies the factors of row block a.
//
// With p.Tinv set, the block goes on to invert I + Akk while Akk is still in shared memory (detail::tril_inverse, the
// function the solve_tril stage runs), which saves the solve_tril launch and its round trip through memory.
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/detail/tril_inverse.hpp"
#include "kda/intra_chunk.hpp"

namespace kda::kernels {

constexpr int kIntraMmaWarps = 4;

// Four blocks per multiprocessor caps the kernel at 128 registers; ptxas then spills a few dozen bytes, and that
// measured faster than 3 blocks without spills (0.53 against 0.57 ms on single8k, H200; docs/performance.md).
template <typename E, int BT>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize, 4) intra_chunk_mma_kernel(IntraChunkParams p) {
  namespace m = detail::mma;
  constexpr int kThreads = kIntraMmaWarps * kWarpSize;
  constexpr int kBlocks = BT / 16;             // row blocks; warp a < kBlocks owns block a
  constexpr int kSlice = 16;                   // channels per step
  constexpr int kLdS = kSlice + 4;             // fp32 staging row: 16-byte aligned, and 8 consecutive rows read as
                                               // float4 hit disjoint banks
  constexpr int kLdF = kSlice + 8;             // 16-bit factor row
  constexpr int kDiagPairs = 16 * 17 / 2;      // (i, j), j <= i, inside one block
  constexpr int kPairsPerThread = (kBlocks * kDiagPairs + kThreads - 1) / kThreads;
  constexpr int kFactorsPerBlock = 4 * 16 * kLdF + 2 * (BT - 16 > 0 ? BT - 16 : 16) * kLdF;  // halves
  constexpr int kGroups = kThreads / kSlice;   // threads sharing one channel of a slice (factor loops)
  static_assert(kThreads % kSlice == 0 && 16 % (kThreads / kSlice) == 0, "whole channel groups, whole rows");
  constexpr int kMaxLeft = kBlocks - 1;        // off-diagonal tiles of the last block

  // Per slice: staging (fp32 q, k, G) and the factors of each row block. After the last slice the same memory holds
  // the output.
  constexpr int kStageFloats = 3 * BT * kLdS;
  constexpr int kFactorHalves = kIntraMmaWarps * kFactorsPerBlock;
  constexpr int kLdO = BT + 4;                 // fp32 output rows (16-byte aligned for tril_inverse)
  constexpr int kOutFloats = 2 * BT * kLdO + detail::tril_inverse_scratch_floats<BT>();
  constexpr int kSliceBytes = kStageFloats * 4 + kFactorHalves * 2;
  constexpr int kWorkBytes = kSliceBytes > kOutFloats * 4 ? kSliceBytes : kOutFloats * 4;
  static_assert(m::fragment_stride_ok(kLdF) && (kStageFloats * 4) % 16 == 0 && kFactorsPerBlock % 8 == 0,
                "fragment rows must be 16-byte aligned");
  static_assert(kBlocks <= kIntraMmaWarps, "one warp per row block for the matrix products");
  __shared__ __align__(16) unsigned char smem[kWorkBytes];
  __shared__ float beta_s[BT];  // activated beta of each row
  float* q_s = reinterpret_cast<float*>(smem);
  float* k_s = q_s + BT * kLdS;
  float* g_s = k_s + BT * kLdS;
  uint16_t* factors = reinterpret_cast<uint16_t*>(smem + kStageFloats * 4);

  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int a = warp;                            // this warp's row block
  const int r = 16 * a;                          // its reference row
  const bool active = a < kBlocks && r < chunk.length;
  // Factor storage of row block b: L hi/lo for q and k (16 rows each), R hi/lo (rows 0 .. 16 b - 1).
  auto lq_hi = [&](int b) { return factors + b * kFactorsPerBlock; };
  auto lq_lo = [&](int b) { return lq_hi(b) + 16 * kLdF; };
  auto lk_hi = [&](int b) { return lq_hi(b) + 2 * 16 * kLdF; };
  auto lk_lo = [&](int b) { return lq_hi(b) + 3 * 16 * kLdF; };
  auto r_hi = [&](int b) { return lq_hi(b) + 4 * 16 * kLdF; };
  auto r_lo = [&](int b) { return r_hi(b) + (BT - 16 > 0 ? BT - 16 : 16) * kLdF; };
  for (int i = threadIdx.x; i < BT; i += kThreads) {
    const float raw = i < chunk.length ? detail::load_scalar(p.beta, p.beta_type, chunk.start + i, h, 0) : 0.0f;
    beta_s[i] = i < chunk.length ? detail::activate_beta(raw, p.beta_activation) : 0.0f;
  }

  m::Acc acc_kk[kMaxLeft > 0 ? kMaxLeft : 1], acc_qk[kMaxLeft > 0 ? kMaxLeft : 1];
#pragma unroll
  for (int b = 0; b < (kMaxLeft > 0 ? kMaxLeft : 1); ++b) {
    m::zero(acc_kk[b]);
    m::zero(acc_qk[b]);
  }
  float diag_kk[kPairsPerThread] = {}, diag_qk[kPairsPerThread] = {};

  auto split = [](float x, uint16_t* hi, uint16_t* lo) {
    const E h16 = numeric::from_float<E>(x);
    *hi = h16.bits;
    *lo = numeric::from_float<E>(x - numeric::to_float(h16)).bits;
  };

  // Every slice's work is spread over the whole block, not over each row block's warp (the later blocks have more
  // R factors, and a per-warp split left the first warps waiting at the barrier). Diagonal pairs: thread slot x holds
  // task tid + x * kThreads = (row block, pair), pair = i (i + 1) / 2 + j, decoded once into chunk rows.
  int pair_i[kPairsPerThread], pair_j[kPairsPerThread];
#pragma unroll
  for (int x = 0; x < kPairsPerThread; ++x) {
    const int task = threadIdx.x + x * kThreads, pair = task % kDiagPairs;
    int i = 0;
    while ((i + 1) * (i + 2) / 2 <= pair) ++i;
    const int base = 16 * (task / kDiagPairs);
    pair_i[x] = task < kBlocks * kDiagPairs ? base + i : BT;  // BT: no pair
    pair_j[x] = base + pair - i * (i + 1) / 2;
  }

  // Slice staging: 16 channels of a row are two 16-byte vectors of q and of k and four of G. The next slice's loads
  // are issued right after the current slice is staged, so they fly while it is computed (ncu: waiting on these
  // loads was ~16 % of the kernel's stall samples when each slice loaded on its own).
  constexpr int kQkUnits = BT * 2, kGUnits = BT * 4;
  constexpr int kQkPerThread = (kQkUnits + kThreads - 1) / kThreads;
  constexpr int kGPerThread = (kGUnits + kThreads - 1) / kThreads;
  struct SliceRegs {
    uint4 q[kQkPerThread], k[kQkPerThread];  // raw 16-bit values
    float4 g[kGPerThread];
  };
  auto load_slice = [&](int d0, SliceRegs& r) {
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = d0 + (u % 2) * 8;
      const bool valid = u < kQkUnits && i < chunk.length;
      r.q[x] = valid ? detail::load16(p.q, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
      r.k[x] = valid ? detail::load16(p.k, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int x = 0; x < kGPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 4, d = d0 + (u % 4) * 4;
      r.g[x] = u < kGUnits && i < chunk.length
                   ? *reinterpret_cast<const float4*>(&p.G[((chunk.start + i) * p.num_heads + h) * p.head_dim + d])
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  auto store_slice = [&](const SliceRegs& r) {
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = (u % 2) * 8;
      if (u >= kQkUnits) continue;
      float qv[8], kv[8];
      detail::unpack8<E>(r.q[x], qv);
      detail::unpack8<E>(r.k[x], kv);
#pragma unroll
      for (int c = 0; c < 8; c += 4) {
        *reinterpret_cast<float4*>(&q_s[i * kLdS + d + c]) = make_float4(qv[c], qv[c + 1], qv[c + 2], qv[c + 3]);
        *reinterpret_cast<float4*>(&k_s[i * kLdS + d + c]) = make_float4(kv[c], kv[c + 1], kv[c + 2], kv[c + 3]);
      }
    }
#pragma unroll
    for (int x = 0; x < kGPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 4, d = (u % 4) * 4;
      if (u < kGUnits) *reinterpret_cast<float4*>(&g_s[i * kLdS + d]) = r.g[x];
    }
  };
  SliceRegs next;
  load_slice(0, next);
  for (int d0 = 0; d0 < p.head_dim; d0 += kSlice) {
    __syncthreads();  // the previous slice is consumed
    store_slice(next);
    if (d0 + kSlice < p.head_dim) load_slice(d0 + kSlice, next);
    __syncthreads();
    // Factors. Thread t owns channel d = t % kSlice and rows t / kSlice + kGroups * n of every row block, so the
    // loops have fixed trip counts and each thread reads its reference-row gates once.
    {
      const int d = threadIdx.x % kSlice, grp = threadIdx.x / kSlice;
#pragma unroll 1
      for (int b = 0; b < kBlocks; ++b) {
        const int ref = 16 * b;
        if (ref >= chunk.length) continue;  // uniform: the block has no rows
        const float g_ref = g_s[ref * kLdS + d];
        // L of block b: rows past the chunk get zero factors (never exp2 of garbage).
#pragma unroll
        for (int n = 0; n < 16 / kGroups; ++n) {
          const int i = grp + n * kGroups, row = ref + i;
          const float decay = row < chunk.length ? detail::decay_exp2(g_s[row * kLdS + d] - g_ref) : 0.0f;
          split(q_s[row * kLdS + d] * decay, &lq_hi(b)[i * kLdF + d], &lq_lo(b)[i * kLdF + d]);
          split(k_s[row * kLdS + d] * decay, &lk_hi(b)[i * kLdF + d], &lk_lo(b)[i * kLdF + d]);
        }
        // R of block b: the rows before it, against its reference row.
        for (int n = 0; n < ref / kGroups; ++n) {
          const int j = grp + n * kGroups;
          split(k_s[j * kLdS + d] * detail::decay_exp2(g_ref - g_s[j * kLdS + d]), &r_hi(b)[j * kLdF + d],
                &r_lo(b)[j * kLdF + d]);
        }
      }
    }
    // Diagonal blocks, exactly.
#pragma unroll
    for (int x = 0; x < kPairsPerThread; ++x) {
      const int ri = pair_i[x], rj = pair_j[x];
      if (ri >= chunk.length) continue;  // no pair, or no such token
      // Four channels per 16-byte shared load: the threads of a warp touch few distinct rows, so each load is about
      // one shared-memory wavefront.
      float kk = 0.0f, qk = 0.0f;
#pragma unroll
      for (int d = 0; d < kSlice; d += 4) {
        const float4 kj4 = *reinterpret_cast<const float4*>(&k_s[rj * kLdS + d]);
        const float4 gj4 = *reinterpret_cast<const float4*>(&g_s[rj * kLdS + d]);
        const float4 gi4 = *reinterpret_cast<const float4*>(&g_s[ri * kLdS + d]);
        const float4 ki4 = *reinterpret_cast<const float4*>(&k_s[ri * kLdS + d]);
        const float4 qi4 = *reinterpret_cast<const float4*>(&q_s[ri * kLdS + d]);
        const float kj[4] = {kj4.x * detail::decay_exp2(gi4.x - gj4.x), kj4.y * detail::decay_exp2(gi4.y - gj4.y),
                             kj4.z * detail::decay_exp2(gi4.z - gj4.z), kj4.w * detail::decay_exp2(gi4.w - gj4.w)};
        kk += ki4.x * kj[0] + ki4.y * kj[1] + ki4.z * kj[2] + ki4.w * kj[3];
        qk += qi4.x * kj[0] + qi4.y * kj[1] + qi4.z * kj[2] + qi4.w * kj[3];
      }
      diag_kk[x] += kk;
      diag_qk[x] += qk;
    }
    __syncthreads();  // factors are written
    if (active) {  // warp a multiplies the factors of row block a
      const m::FragA kh = m::load_a(lk_hi(a), kLdF, lane), kl = m::load_a(lk_lo(a), kLdF, lane);
      const m::FragA qh = m::load_a(lq_hi(a), kLdF, lane), ql = m::load_a(lq_lo(a), kLdF, lane);
#pragma unroll
      for (int b = 0; b < kMaxLeft; ++b) {
        if (b >= a) continue;
        const m::FragB rh = m::load_b_transposed(&r_hi(a)[16 * b * kLdF], kLdF, lane);
        const m::FragB rl = m::load_b_transposed(&r_lo(a)[16 * b * kLdF], kLdF, lane);
        m::mma<E>(acc_kk[b], kh, rh);
        m::mma<E>(acc_kk[b], kh, rl);
        m::mma<E>(acc_kk[b], kl, rh);
        m::mma<E>(acc_qk[b], qh, rh);
        m::mma<E>(acc_qk[b], qh, rl);
        m::mma<E>(acc_qk[b], ql, rh);
      }
    }
  }

  // Assemble both matrices in shared memory (zeros above the diagonal and past the chunk), then write whole rows.
  __syncthreads();
  float* akk_s = reinterpret_cast<float*>(smem);
  float* aqk_s = akk_s + BT * kLdO;
  for (int e = threadIdx.x; e < 2 * BT * kLdO; e += kThreads) akk_s[e] = 0.0f;
  __syncthreads();
  if (active) {
#pragma unroll
    for (int b = 0; b < kMaxLeft; ++b) {
      if (b >= a) continue;
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) {
        const m::Coord c = m::acc_coord(lane, e);
        akk_s[(r + c.row) * kLdO + 16 * b + c.col] = acc_kk[b].x[e];
        aqk_s[(r + c.row) * kLdO + 16 * b + c.col] = acc_qk[b].x[e];
      }
    }
  }
#pragma unroll
  for (int x = 0; x < kPairsPerThread; ++x) {
    const int i = pair_i[x], j = pair_j[x];
    if (i >= chunk.length) continue;
    if (j < i) akk_s[i * kLdO + j] = diag_kk[x];
    aqk_s[i * kLdO + j] = diag_qk[x];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < chunk.length * BT; e += kThreads) {
    const int i = e / BT, j = e % BT;
    const int64_t t = chunk.start + i;
    const bool in_chunk = j < chunk.length;
    const float akk = in_chunk ? beta_s[i] * akk_s[i * kLdO + j] : 0.0f;
    akk_s[i * kLdO + j] = akk;  // the Akk the solve_tril stage would read back
    p.Akk[(t * p.num_heads + h) * BT + j] = akk;
    p.Aqk[(t * p.num_heads + h) * BT + j] = in_chunk ? p.scale * aqk_s[i * kLdO + j] : 0.0f;
  }
  if (p.Tinv == nullptr) return;  // uniform over the block
  // solve_tril fused: Akk is still in shared memory; Aqk's space holds the inverse. Rows past the chunk are zero in
  // Akk, so they invert to identity rows and are not written.
  __syncthreads();
  float* t_s = aqk_s;
  detail::tril_inverse<BT, kThreads>(akk_s, t_s, akk_s + 2 * BT * kLdO, kLdO, chunk.length);
  for (int e = threadIdx.x; e < chunk.length * BT; e += kThreads) {
    const int i = e / BT, j = e % BT;
    p.Tinv[((chunk.start + i) * p.num_heads + h) * BT + j] = j < chunk.length ? t_s[i * kLdO + j] : 0.0f;
  }
}

}  // namespace kda::kernels
