// Stage 4 on the matrix units: the same contract as recompute_w_u.hpp, for K, V in {64, 128}.
//
// One block of kWuMmaWarps warps per (chunk, head). Tinv (fp32) enters the product as a hi + lo pair of 16-bit
// matrices (hi = round(Tinv), lo = round(Tinv - hi)), which keeps ~16 significant bits; the right-hand sides
// round(beta k exp2 G) and round(beta v) are 16-bit by contract. At BT = 64 each warp computes two row tiles of w and
// of u over half the columns, paired so that every warp has the same share of Tinv's triangle (at BT = 32, one row
// tile over all columns); the tiles go through shared memory so that every global store is a 16-byte row segment.
// kg = round(k exp2(G_last - G)) is produced while the keys are staged for pass 0, from the same loads. The chunk's
// v rows are copied to shared memory asynchronously (copy16_async) when the block starts, so pass 1 finds them there
// instead of waiting on its loads.
// k, v, w, u and kg are moved 16 bytes at a time, so they must be vector_aligned (the launcher checks; otherwise it
// runs the scalar recompute_w_u_kernel). The block's work is recompute_w_u_mma_block, which the fused
// chunk_prepare_mma_kernel runs too, with Tinv from its own shared memory.
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/recompute_w_u.hpp"

namespace kda::kernels {

constexpr int kWuMmaWarps = 4;

// Shared memory of one block, in 16-bit elements: Tinv hi and lo, the right-hand side (then the rounded w or u tile)
// and, with kStageV, the raw v rows.
template <int BT, int K, int V, bool kStageV>
struct WuMmaLayout {
  static constexpr int kLdT = BT + 8;
  static constexpr int kD = K > V ? K : V;
  static constexpr int kLdR = kD + 8;
  static constexpr int kLdV = V + 8;
  static constexpr int kTHi = 0, kTLo = BT * kLdT, kRhs = 2 * BT * kLdT, kV = kRhs + BT * kLdR;
  static constexpr size_t kBytes = sizeof(uint16_t) * (kV + (kStageV ? BT * kLdV : 0));
};

// Dynamic shared memory of one recompute_w_u_mma_kernel block (above 48 KiB it needs the launcher's opt-in on
// NVIDIA).
template <int BT, int K, int V>
constexpr size_t recompute_w_u_mma_shared_bytes() {
  return WuMmaLayout<BT, K, V, true>::kBytes;
}

// The stage for one located (chunk, head) in a block of kWuMmaWarps warps. tinv_row4(i, j) gives Tinv[i, j .. j + 3]
// for rows i below the chunk's length (16-byte aligned j); with kTinvShared it reads shared memory that this
// block's own buffers may overlap, so every thread reads all of it before anything is written. kStageV: the v rows
// go to shared memory by asynchronous copies when the block starts (v must then be vector_aligned); otherwise pass
// 1 loads them, 16 bytes at a time when v_vector, else per element. kGroup: right-hand-side units whose loads are
// issued together (fewer registers when smaller; the results are the same). With beta_ready, beta_s already holds
// the activated betas of the chunk's rows (zeros past it). kRhsInW (the fused prepare from raw inputs): p.w already
// holds w's right-hand side round(beta k exp2 G) for the chunk's rows and kg is already written, so pass 0 reads
// p.w instead of k and G (then overwrites it with w), and neither p.G nor glast_s is used.
// kPairRowTiles (BT = 64): each warp takes two row tiles over half the columns (see the products below); false: one
// row tile over all columns, for a caller whose register allocation the paired form upsets. The bits are the same.
// v_pre (not with kStageV): the chunk's v rows already in shared memory, V 16-bit values per row, zeros past the
// chunk, visible to the block (the fused prepare copies them when its block starts); null: pass 1 loads them.
template <typename E, int BT, int K, int V, bool kStageV, bool kTinvShared, int kGroupMax, bool kRhsInW = false,
          bool kPairRowTiles = true, typename TinvRow4>
__device__ inline void recompute_w_u_mma_block(const RecomputeWuParams& p, const detail::ChunkCoords& chunk, int h,
                                               uint16_t* smem, float* beta_s, bool beta_ready, float* glast_s,
                                               TinvRow4 tinv_row4, bool v_vector, const uint16_t* v_pre = nullptr) {
  namespace m = detail::mma;
  using L = WuMmaLayout<BT, K, V, kStageV>;
  constexpr int kThreads = kWuMmaWarps * kWarpSize;
  constexpr int kLdT = L::kLdT, kD = L::kD, kLdR = L::kLdR, kLdV = L::kLdV;
  static_assert(m::fragment_stride_ok(kLdT) && m::fragment_stride_ok(kLdR) && m::fragment_stride_ok(kLdV),
                "fragment rows must be 16-byte aligned");
  uint16_t* t_hi = smem + L::kTHi;
  uint16_t* t_lo = smem + L::kTLo;
  uint16_t* rhs_s = smem + L::kRhs;
  uint16_t* v_s = smem + L::kV;  // kStageV: raw v rows of the chunk (zeros past it), read by pass 1
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  auto row_of = [&](int i) { return (chunk.start + i) * p.num_heads + h; };  // (t, h) row index

  // The v rows start on their way to shared memory first; pass 1 waits for them.
  if constexpr (kStageV) {
    for (int u = threadIdx.x; u < BT * (V / 8); u += kThreads) {
      const int j = u / (V / 8), d = (u % (V / 8)) * 8;
      uint16_t* dst = &v_s[j * kLdV + d];
      if (j < chunk.length) {
        detail::copy16_async(dst, static_cast<const uint16_t*>(p.v.data) +
                                      detail::element_offset(p.v, chunk.start + j, h, d));
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  }

  // Tinv rows, 16 bytes at a time, all issued before any use.
  constexpr int kTVecs = (BT * BT / 4 + kThreads - 1) / kThreads;
  float4 tv[kTVecs];
#pragma unroll
  for (int x = 0; x < kTVecs; ++x) {
    const int e = threadIdx.x + x * kThreads, i = e / (BT / 4), j = (e % (BT / 4)) * 4;
    tv[x] = e < BT * BT / 4 && i < chunk.length ? tinv_row4(i, j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // G of the last row and beta load while the Tinv loads are in flight.
  if constexpr (!kRhsInW) {
    for (int d = threadIdx.x; d < K; d += kThreads) glast_s[d] = p.G[row_of(chunk.length - 1) * K + d];
  }
  if (!beta_ready) {
    for (int i = threadIdx.x; i < BT; i += kThreads) {
      beta_s[i] = i < chunk.length ? detail::activate_beta(detail::load_scalar(p.beta, p.beta_type, chunk.start + i,
                                                                               h, 0),
                                                            p.beta_activation)
                                   : 0.0f;
    }
  }
  if constexpr (kTinvShared) __syncthreads();  // every thread has read Tinv before t_hi / t_lo may overwrite it
  // Only the row tiles that hold the chunk are read by the products below (a short chunk, e.g. a speculative
  // batch's 8 tokens, has one); past them the split, the right-hand side and the products stop (uniform exits).
  const int used_rows = 16 * ((chunk.length + 15) / 16);
#pragma unroll
  for (int x = 0; x < kTVecs; ++x) {
    const int e = threadIdx.x + x * kThreads, i = e / (BT / 4), j = (e % (BT / 4)) * 4;
    if (x * kThreads / (BT / 4) >= used_rows) break;  // uniform: this and later passes hold no row it reads
    if (e >= BT * BT / 4) continue;
    detail::store_hi_lo4<E>(&t_hi[i * kLdT + j], &t_lo[i * kLdT + j], tv[x]);
  }

  // pass 0: w = Tinv round(beta k exp2 G) over K columns; pass 1: u = Tinv round(beta v) over V columns.
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    constexpr int kMaxTiles = kD / 16;
    const int dim = pass == 0 ? K : V;
    if (kStageV && pass == 1) detail::copy16_async_wait();  // this thread's v copies have landed; the barrier
                                                             // publishes them
    __syncthreads();  // Tinv / beta ready; the previous pass is done with rhs_s
    // Right-hand side rows in units of 8 columns (one 16-byte load of k or v, two of G), in groups whose loads are
    // all issued before any is used.
    constexpr int kUnitsMax = BT * kD / 8;
    constexpr int kPerThread = (kUnitsMax + kThreads - 1) / kThreads;
    constexpr int kGroup = kPerThread < kGroupMax ? kPerThread : kGroupMax;
    const int units = used_rows * dim / 8;  // rows past the chunk inside its last row tile are written as zeros
    if (kRhsInW && pass == 0) {
      // Written by this block's own threads before a barrier: plain loads (never the non-coherent read-only path).
      for (int u = threadIdx.x; u < units; u += kThreads) {
        const int j = u / (K / 8), d = (u % (K / 8)) * 8;
        const uint16_t* src =
            static_cast<const uint16_t*>(p.w.data) + detail::element_offset(p.w, chunk.start + j, h, d);
        *reinterpret_cast<uint4*>(&rhs_s[j * kLdR + d]) =
            j < chunk.length ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
      }
    }
    for (int x0 = 0; x0 < kPerThread && x0 * kThreads < units && !(kRhsInW && pass == 0); x0 += kGroup) {
      float x_in[kGroup][8], g_in[kGroup][8];
#pragma unroll
      for (int x = 0; x < kGroup; ++x) {
        const int u = threadIdx.x + (x0 + x) * kThreads, j = u / (dim / 8), d = (u % (dim / 8)) * 8;
        const bool valid = u < units && j < chunk.length;
        if (valid && pass == 0) {
          detail::load8<E>(p.k, chunk.start + j, h, d, x_in[x]);
          detail::load8(&p.G[row_of(j) * K + d], g_in[x]);
        } else if (valid && kStageV) {
          detail::unpack8<E>(*reinterpret_cast<const uint4*>(&v_s[j * kLdV + d]), x_in[x]);
        } else if (valid && v_pre != nullptr) {
          detail::unpack8<E>(*reinterpret_cast<const uint4*>(&v_pre[j * V + d]), x_in[x]);
        } else if (valid && v_vector) {
          detail::load8<E>(p.v, chunk.start + j, h, d, x_in[x]);
        } else if (valid) {
#pragma unroll
          for (int c = 0; c < 8; ++c) x_in[x][c] = detail::load_elem<E>(p.v, chunk.start + j, h, d + c);
        }
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          if (!valid) x_in[x][c] = 0.0f;
          if (!valid || pass != 0) g_in[x][c] = 0.0f;
        }
      }
#pragma unroll
      for (int x = 0; x < kGroup; ++x) {
        const int u = threadIdx.x + (x0 + x) * kThreads, j = u / (dim / 8), d = (u % (dim / 8)) * 8;
        if (u >= units) continue;
        float r[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          r[c] = pass == 0 ? beta_s[j] * x_in[x][c] * detail::decay_exp2(g_in[x][c]) : beta_s[j] * x_in[x][c];
        }
        *reinterpret_cast<uint4*>(&rhs_s[j * kLdR + d]) = detail::pack8<E>(r);
        if (pass == 0 && j < chunk.length) {  // kg, from the same k and G
          float kg[8];
#pragma unroll
          for (int c = 0; c < 8; ++c) kg[c] = x_in[x][c] * detail::decay_exp2(glast_s[d + c] - g_in[x][c]);
          detail::store16(p.kg, chunk.start + j, h, d, detail::pack8<E>(kg));
        }
      }
    }
    __syncthreads();
    // Tinv is lower triangular, so row tile r has r + 1 column tiles of products. At BT = 64 warp w takes the row
    // tiles {w / 2, 3 - w / 2} (five steps together) over column half w % 2: 40 products per warp instead of 16 for
    // warp 0 and 64 for warp 3, which the barrier below waited for. Otherwise warp w takes row tile w, all columns.
    // Either way each accumulator sums the same products in the same order (kt ascending, hi before lo): same bits.
    constexpr bool kPaired = kPairRowTiles && BT == 64 && kWuMmaWarps == 4;
    constexpr int kRowTiles = kPaired ? 2 : 1;
    constexpr int kColTiles = kPaired ? kMaxTiles / 2 : kMaxTiles;
    static_assert(kPaired || BT / 16 <= kWuMmaWarps, "one row tile per warp");
    const int col_tiles = kPaired ? dim / 32 : dim / 16;  // this warp's column tiles in this pass
    const int ct0 = kPaired ? (warp % 2) * col_tiles : 0;
    auto row_tile = [&](int r) { return kPaired ? (r == 0 ? warp / 2 : 3 - warp / 2) : warp; };
    m::Acc acc[kRowTiles][kColTiles];
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
#pragma unroll
      for (int c = 0; c < kColTiles; ++c) m::zero(acc[r][c]);
    }
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      const int rt = row_tile(r);
      if (rt >= BT / 16 || rt * 16 >= chunk.length) continue;  // row tiles past the chunk stay zero
      // Column tiles of Tinv past the row tile are zero.
      for (int kt = 0; kt <= rt; ++kt) {
        const m::FragA hi = m::load_a(&t_hi[rt * 16 * kLdT + kt * 16], kLdT, lane);
        const m::FragA lo = m::load_a(&t_lo[rt * 16 * kLdT + kt * 16], kLdT, lane);
#pragma unroll
        for (int c = 0; c < kColTiles; ++c) {
          if (c >= col_tiles) continue;
          const m::FragB b = m::load_b(&rhs_s[kt * 16 * kLdR + (ct0 + c) * 16], kLdR, lane);
          m::mma<E>(acc[r][c], hi, b);
          m::mma<E>(acc[r][c], lo, b);
        }
      }
    }
    // The rounded tiles replace the right-hand side in shared memory, then leave as 16-byte row segments.
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowTiles; ++r) {
      const int rt = row_tile(r);
      if (rt >= BT / 16) continue;
#pragma unroll
      for (int c = 0; c < kColTiles; ++c) {
        if (c >= col_tiles) continue;
        m::store_rounded<E>(&rhs_s[rt * 16 * kLdR + (ct0 + c) * 16], kLdR, acc[r][c], lane);
      }
    }
    __syncthreads();
    const MutableTensorView out = pass == 0 ? p.w : p.u;
    for (int u = threadIdx.x; u < chunk.length * (dim / 8); u += kThreads) {
      const int i = u / (dim / 8), d = (u % (dim / 8)) * 8;
      detail::store16(out, chunk.start + i, h, d, *reinterpret_cast<const uint4*>(&rhs_s[i * kLdR + d]));
    }
  }
}

template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kWuMmaWarps * kWarpSize) recompute_w_u_mma_kernel(RecomputeWuParams p) {
  extern __shared__ __align__(16) uint16_t wu_smem[];
  __shared__ float beta_s[BT];
  __shared__ float glast_s[K];  // G of the chunk's last token
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  auto tinv_row4 = [&](int i, int j) {  // Tinv rows are contiguous fp32 [BT]
    return *reinterpret_cast<const float4*>(&p.Tinv[((chunk.start + i) * p.num_heads + h) * BT + j]);
  };
  recompute_w_u_mma_block<E, BT, K, V, /*kStageV=*/true, /*kTinvShared=*/false, /*kGroupMax=*/4>(
      p, chunk, h, wu_smem, beta_s, /*beta_ready=*/false, glast_s, tinv_row4, /*v_vector=*/true);
}

}  // namespace kda::kernels
