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
// One block of kIntraMmaWarps warps per (chunk, head); warp a owns row block a. K is walked in slices of 16 channels
// staged in shared memory with 16-byte loads: q and k must be vector_aligned (the launcher checks; otherwise it runs
// intra_chunk_kernel, the per-element form of the same contract).
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/intra_chunk.hpp"

namespace kda::kernels {

constexpr int kIntraMmaWarps = 4;

template <typename E, int BT>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize) intra_chunk_mma_kernel(IntraChunkParams p) {
  namespace m = detail::mma;
  constexpr int kThreads = kIntraMmaWarps * kWarpSize;
  constexpr int kBlocks = BT / 16;             // row blocks; warp a < kBlocks owns block a
  constexpr int kSlice = 16;                   // channels per step
  constexpr int kLdS = kSlice + 1;             // fp32 staging row
  constexpr int kLdF = kSlice + 8;             // 16-bit factor row
  constexpr int kDiagPairs = 16 * 17 / 2;      // (i, j), j <= i, inside one block
  constexpr int kPairsPerLane = (kDiagPairs + kWarpSize - 1) / kWarpSize;
  constexpr int kMaxLeft = kBlocks - 1;        // off-diagonal tiles of the last block

  // Per slice: staging (fp32 q, k, G) and per-warp factors. After the last slice the same memory holds the output.
  constexpr int kStageFloats = 3 * BT * kLdS;
  constexpr int kFactorHalves = kIntraMmaWarps * (4 * 16 * kLdF + 2 * (BT - 16 > 0 ? BT - 16 : 16) * kLdF);
  constexpr int kOutFloats = 2 * BT * (BT + 1);
  constexpr int kWorkBytes = (kStageFloats * 4 + kFactorHalves * 2) > kOutFloats * 4 ? kStageFloats * 4 + kFactorHalves * 2
                                                                                     : kOutFloats * 4;
  __shared__ __align__(16) unsigned char smem[kWorkBytes];
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
  // Warp-private factor storage: L hi/lo for q and k (16 rows each), R hi/lo (rows 0 .. r-1).
  uint16_t* my = factors + warp * (4 * 16 * kLdF + 2 * (BT - 16 > 0 ? BT - 16 : 16) * kLdF);
  uint16_t* lq_hi = my;
  uint16_t* lq_lo = lq_hi + 16 * kLdF;
  uint16_t* lk_hi = lq_lo + 16 * kLdF;
  uint16_t* lk_lo = lk_hi + 16 * kLdF;
  uint16_t* r_hi = lk_lo + 16 * kLdF;
  uint16_t* r_lo = r_hi + (BT - 16 > 0 ? BT - 16 : 16) * kLdF;

  m::Acc acc_kk[kMaxLeft > 0 ? kMaxLeft : 1], acc_qk[kMaxLeft > 0 ? kMaxLeft : 1];
#pragma unroll
  for (int b = 0; b < (kMaxLeft > 0 ? kMaxLeft : 1); ++b) {
    m::zero(acc_kk[b]);
    m::zero(acc_qk[b]);
  }
  float diag_kk[kPairsPerLane] = {}, diag_qk[kPairsPerLane] = {};

  auto split = [](float x, uint16_t* hi, uint16_t* lo) {
    const E h16 = numeric::from_float<E>(x);
    *hi = h16.bits;
    *lo = numeric::from_float<E>(x - numeric::to_float(h16)).bits;
  };

  // Each lane's diagonal pairs (i, j), j <= i, decoded once: pair = i (i + 1) / 2 + j.
  int pair_i[kPairsPerLane], pair_j[kPairsPerLane];
#pragma unroll
  for (int x = 0; x < kPairsPerLane; ++x) {
    const int pair = lane + x * kWarpSize;
    int i = 0;
    while ((i + 1) * (i + 2) / 2 <= pair) ++i;
    pair_i[x] = pair < kDiagPairs ? i : 16;  // 16: no pair
    pair_j[x] = pair - i * (i + 1) / 2;
  }

  // Slice staging: 16 channels of a row are two 16-byte vectors of q and of k and four of G; every load of the
  // slice is issued before any is used.
  constexpr int kQkUnits = BT * 2, kGUnits = BT * 4;
  constexpr int kQkPerThread = (kQkUnits + kThreads - 1) / kThreads;
  constexpr int kGPerThread = (kGUnits + kThreads - 1) / kThreads;
  for (int d0 = 0; d0 < p.head_dim; d0 += kSlice) {
    float qv[kQkPerThread][8], kv[kQkPerThread][8], gv[kGPerThread][4];
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = d0 + (u % 2) * 8;
      if (u < kQkUnits && i < chunk.length) {
        detail::load8<E>(p.q, chunk.start + i, h, d, qv[x]);
        detail::load8<E>(p.k, chunk.start + i, h, d, kv[x]);
      } else {
#pragma unroll
        for (int c = 0; c < 8; ++c) qv[x][c] = kv[x][c] = 0.0f;
      }
    }
#pragma unroll
    for (int x = 0; x < kGPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 4, d = d0 + (u % 4) * 4;
      const float4 g4 = u < kGUnits && i < chunk.length
                            ? *reinterpret_cast<const float4*>(&p.G[((chunk.start + i) * p.num_heads + h) * p.head_dim + d])
                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      gv[x][0] = g4.x; gv[x][1] = g4.y; gv[x][2] = g4.z; gv[x][3] = g4.w;
    }
    __syncthreads();  // the previous slice is consumed
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = (u % 2) * 8;
      if (u >= kQkUnits) continue;
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        q_s[i * kLdS + d + c] = qv[x][c];
        k_s[i * kLdS + d + c] = kv[x][c];
      }
    }
#pragma unroll
    for (int x = 0; x < kGPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 4, d = (u % 4) * 4;
      if (u >= kGUnits) continue;
#pragma unroll
      for (int c = 0; c < 4; ++c) g_s[i * kLdS + d + c] = gv[x][c];
    }
    __syncthreads();
    if (active) {
      // Factors of this warp's block. Rows past the chunk get zero factors (never exp2 of garbage).
      for (int e = lane; e < 16 * kSlice; e += kWarpSize) {
        const int i = e / kSlice, d = e % kSlice, row = r + i;
        const float decay = row < chunk.length ? exp2f(g_s[row * kLdS + d] - g_s[r * kLdS + d]) : 0.0f;
        split(q_s[row * kLdS + d] * decay, &lq_hi[i * kLdF + d], &lq_lo[i * kLdF + d]);
        split(k_s[row * kLdS + d] * decay, &lk_hi[i * kLdF + d], &lk_lo[i * kLdF + d]);
      }
      for (int e = lane; e < r * kSlice; e += kWarpSize) {
        const int j = e / kSlice, d = e % kSlice;
        split(k_s[j * kLdS + d] * exp2f(g_s[r * kLdS + d] - g_s[j * kLdS + d]), &r_hi[j * kLdF + d],
              &r_lo[j * kLdF + d]);
      }
      // Diagonal block, exactly: each lane owns a few (i, j) pairs.
#pragma unroll
      for (int x = 0; x < kPairsPerLane; ++x) {
        const int ri = r + pair_i[x], rj = r + pair_j[x];
        if (pair_i[x] >= 16 || ri >= chunk.length) continue;  // no pair, or no such token
        float kk = 0.0f, qk = 0.0f;
#pragma unroll
        for (int d = 0; d < kSlice; ++d) {
          const float kj = k_s[rj * kLdS + d] * exp2f(g_s[ri * kLdS + d] - g_s[rj * kLdS + d]);
          kk += k_s[ri * kLdS + d] * kj;
          qk += q_s[ri * kLdS + d] * kj;
        }
        diag_kk[x] += kk;
        diag_qk[x] += qk;
      }
    }
    __syncthreads();  // factors are written (warp-private, but the matrix loads read other lanes' stores)
    if (active) {
#pragma unroll
      for (int b = 0; b < kMaxLeft; ++b) {
        if (b >= a) continue;
        const m::FragB rh = m::load_b_transposed(&r_hi[16 * b * kLdF], kLdF, lane);
        const m::FragB rl = m::load_b_transposed(&r_lo[16 * b * kLdF], kLdF, lane);
        const m::FragA kh = m::load_a(lk_hi, kLdF, lane), kl = m::load_a(lk_lo, kLdF, lane);
        const m::FragA qh = m::load_a(lq_hi, kLdF, lane), ql = m::load_a(lq_lo, kLdF, lane);
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
  float* aqk_s = akk_s + BT * (BT + 1);
  for (int e = threadIdx.x; e < 2 * BT * (BT + 1); e += kThreads) akk_s[e] = 0.0f;
  __syncthreads();
  if (active) {
#pragma unroll
    for (int b = 0; b < kMaxLeft; ++b) {
      if (b >= a) continue;
#pragma unroll
      for (int e = 0; e < m::kAccPerLane; ++e) {
        const m::Coord c = m::acc_coord(lane, e);
        akk_s[(r + c.row) * (BT + 1) + 16 * b + c.col] = acc_kk[b].x[e];
        aqk_s[(r + c.row) * (BT + 1) + 16 * b + c.col] = acc_qk[b].x[e];
      }
    }
#pragma unroll
    for (int x = 0; x < kPairsPerLane; ++x) {
      const int i = pair_i[x], j = pair_j[x];
      if (i >= 16) continue;
      if (j < i) akk_s[(r + i) * (BT + 1) + r + j] = diag_kk[x];
      aqk_s[(r + i) * (BT + 1) + r + j] = diag_qk[x];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < chunk.length * BT; e += kThreads) {
    const int i = e / BT, j = e % BT;
    const int64_t t = chunk.start + i;
    const float beta_i = detail::activate_beta(detail::load_scalar(p.beta, p.beta_type, t, h, 0), p.beta_activation);
    const bool in_chunk = j < chunk.length;
    p.Akk[(t * p.num_heads + h) * BT + j] = in_chunk ? beta_i * akk_s[i * (BT + 1) + j] : 0.0f;
    p.Aqk[(t * p.num_heads + h) * BT + j] = in_chunk ? p.scale * aqk_s[i * (BT + 1) + j] : 0.0f;
  }
}

}  // namespace kda::kernels
