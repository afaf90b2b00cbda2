// Stage 4 on the matrix units: the same contract as recompute_w_u.hpp, for K, V in {64, 128}.
//
// One block of kWuMmaWarps warps per (chunk, head). Tinv (fp32) enters the product as a hi + lo pair of 16-bit
// matrices (hi = round(Tinv), lo = round(Tinv - hi)), which keeps ~16 significant bits; the right-hand sides
// round(beta k exp2 G) and round(beta v) are 16-bit by contract. Warp w computes row tile w of w and of u; the tiles
// go through shared memory so that every global store is a 16-byte row segment. kg = round(k exp2(G_last - G)) is
// produced while the keys are staged for pass 0, from the same loads. The chunk's v rows are copied to shared memory
// asynchronously (copy16_async) when the block starts, so pass 1 finds them there instead of waiting on its loads.
// k, v, w, u and kg are moved 16 bytes at a time, so they must be vector_aligned (the launcher checks; otherwise it
// runs the scalar recompute_w_u_kernel).
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/recompute_w_u.hpp"

namespace kda::kernels {

constexpr int kWuMmaWarps = 4;

// Dynamic shared memory of one block (above 48 KiB it needs the launcher's opt-in on NVIDIA): Tinv hi and lo, the
// right-hand side (then the rounded w or u tile) and the raw v rows, in 16-bit elements.
template <int BT, int K, int V>
constexpr size_t recompute_w_u_mma_shared_bytes() {
  constexpr int kD = K > V ? K : V;
  return sizeof(uint16_t) * (2 * BT * (BT + 8) + BT * (kD + 8) + BT * (V + 8));
}

template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kWuMmaWarps * kWarpSize) recompute_w_u_mma_kernel(RecomputeWuParams p) {
  namespace m = detail::mma;
  constexpr int kThreads = kWuMmaWarps * kWarpSize;
  constexpr int kLdT = BT + 8;
  constexpr int kD = K > V ? K : V;
  constexpr int kLdR = kD + 8;
  constexpr int kLdV = V + 8;
  static_assert(m::fragment_stride_ok(kLdT) && m::fragment_stride_ok(kLdR) && m::fragment_stride_ok(kLdV),
                "fragment rows must be 16-byte aligned");
  extern __shared__ __align__(16) uint16_t wu_smem[];
  uint16_t* t_hi = wu_smem;
  uint16_t* t_lo = t_hi + BT * kLdT;
  uint16_t* rhs_s = t_lo + BT * kLdT;
  uint16_t* v_s = rhs_s + BT * kLdR;  // raw v rows of the chunk (zeros past it), read by pass 1
  __shared__ float beta_s[BT];
  __shared__ float glast_s[K];  // G of the chunk's last token

  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  auto row_of = [&](int i) { return (chunk.start + i) * p.num_heads + h; };  // (t, h) row index

  // The v rows start on their way to shared memory first; pass 1 waits for them.
  for (int u = threadIdx.x; u < BT * (V / 8); u += kThreads) {
    const int j = u / (V / 8), d = (u % (V / 8)) * 8;
    uint16_t* dst = &v_s[j * kLdV + d];
    if (j < chunk.length) {
      detail::copy16_async(dst, static_cast<const uint16_t*>(p.v.data) + (chunk.start + j) * p.v.token_stride +
                                    int64_t(h) * p.v.head_stride + d);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    }
  }

  // Tinv rows are contiguous fp32 [BT]: 16-byte loads, all issued before any use.
  constexpr int kTVecs = (BT * BT / 4 + kThreads - 1) / kThreads;
  float4 tv[kTVecs];
#pragma unroll
  for (int x = 0; x < kTVecs; ++x) {
    const int e = threadIdx.x + x * kThreads, i = e / (BT / 4), j = (e % (BT / 4)) * 4;
    tv[x] = e < BT * BT / 4 && i < chunk.length ? *reinterpret_cast<const float4*>(&p.Tinv[row_of(i) * BT + j])
                                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // G of the last row and beta load while the Tinv loads are in flight.
  for (int d = threadIdx.x; d < K; d += kThreads) glast_s[d] = p.G[row_of(chunk.length - 1) * K + d];
  for (int i = threadIdx.x; i < BT; i += kThreads) {
    beta_s[i] = i < chunk.length ? detail::activate_beta(detail::load_scalar(p.beta, p.beta_type, chunk.start + i, h, 0),
                                                          p.beta_activation)
                                 : 0.0f;
  }
#pragma unroll
  for (int x = 0; x < kTVecs; ++x) {
    const int e = threadIdx.x + x * kThreads, i = e / (BT / 4), j = (e % (BT / 4)) * 4;
    if (e >= BT * BT / 4) continue;
    const float t4[4] = {tv[x].x, tv[x].y, tv[x].z, tv[x].w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const E hi = numeric::from_float<E>(t4[c]);
      t_hi[i * kLdT + j + c] = hi.bits;
      t_lo[i * kLdT + j + c] = numeric::from_float<E>(t4[c] - numeric::to_float(hi)).bits;
    }
  }

  // pass 0: w = Tinv round(beta k exp2 G) over K columns; pass 1: u = Tinv round(beta v) over V columns.
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    constexpr int kMaxTiles = kD / 16;
    const int dim = pass == 0 ? K : V;
    if (pass == 1) detail::copy16_async_wait();  // this thread's v copies have landed; the barrier publishes them
    __syncthreads();  // Tinv / beta ready; the previous pass is done with rhs_s
    // Right-hand side rows in units of 8 columns (one 16-byte load of k or v, two of G), in groups whose loads are
    // all issued before any is used.
    constexpr int kUnitsMax = BT * kD / 8;
    constexpr int kPerThread = (kUnitsMax + kThreads - 1) / kThreads;
    constexpr int kGroup = kPerThread < 4 ? kPerThread : 4;
    const int units = BT * dim / 8;
    for (int x0 = 0; x0 < kPerThread; x0 += kGroup) {
      float x_in[kGroup][8], g_in[kGroup][8];
#pragma unroll
      for (int x = 0; x < kGroup; ++x) {
        const int u = threadIdx.x + (x0 + x) * kThreads, j = u / (dim / 8), d = (u % (dim / 8)) * 8;
        const bool valid = u < units && j < chunk.length;
        if (valid && pass == 0) {
          detail::load8<E>(p.k, chunk.start + j, h, d, x_in[x]);
          detail::load8(&p.G[row_of(j) * K + d], g_in[x]);
        } else if (valid) {
          detail::unpack8<E>(*reinterpret_cast<const uint4*>(&v_s[j * kLdV + d]), x_in[x]);
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
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const float r =
              pass == 0 ? beta_s[j] * x_in[x][c] * detail::decay_exp2(g_in[x][c]) : beta_s[j] * x_in[x][c];
          rhs_s[j * kLdR + d + c] = numeric::from_float<E>(r).bits;
        }
        if (pass == 0 && j < chunk.length) {  // kg, from the same k and G
          float kg[8];
#pragma unroll
          for (int c = 0; c < 8; ++c) kg[c] = x_in[x][c] * detail::decay_exp2(glast_s[d + c] - g_in[x][c]);
          detail::store16(p.kg, chunk.start + j, h, d, detail::pack8<E>(kg));
        }
      }
    }
    __syncthreads();
    const int rt = warp;  // BT / 16 <= kWuMmaWarps: one row tile per warp
    m::Acc acc[kMaxTiles];
#pragma unroll
    for (int ct = 0; ct < kMaxTiles; ++ct) m::zero(acc[ct]);
    if (rt < BT / 16 && rt * 16 < chunk.length) {  // row tiles past the chunk stay zero and are never stored
      // Tinv is lower triangular: column tiles past the row tile are zero.
      for (int kt = 0; kt <= rt; ++kt) {
        const m::FragA hi = m::load_a(&t_hi[rt * 16 * kLdT + kt * 16], kLdT, lane);
        const m::FragA lo = m::load_a(&t_lo[rt * 16 * kLdT + kt * 16], kLdT, lane);
#pragma unroll
        for (int ct = 0; ct < kMaxTiles; ++ct) {
          if (ct * 16 >= dim) continue;
          const m::FragB b = m::load_b(&rhs_s[kt * 16 * kLdR + ct * 16], kLdR, lane);
          m::mma<E>(acc[ct], hi, b);
          m::mma<E>(acc[ct], lo, b);
        }
      }
    }
    // The rounded tiles replace the right-hand side in shared memory, then leave as 16-byte row segments.
    __syncthreads();
    if (rt < BT / 16) {
#pragma unroll
      for (int ct = 0; ct < kMaxTiles; ++ct) {
        if (ct * 16 >= dim) continue;
#pragma unroll
        for (int e = 0; e < m::kAccPerLane; ++e) {
          const m::Coord c = m::acc_coord(lane, e);
          rhs_s[(rt * 16 + c.row) * kLdR + ct * 16 + c.col] = numeric::from_float<E>(acc[ct].x[e]).bits;
        }
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

}  // namespace kda::kernels
