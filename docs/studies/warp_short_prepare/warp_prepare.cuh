// The probe's kernel (see probe.cu), apart so that it compiles without the library's launchers:
//   nvcc -O3 -std=c++17 -arch=sm_90a -Iinclude -Ikernels -ptx -x cu docs/studies/warp_short_prepare/warp_prepare.cuh
#pragma once

#include "kda/detail/device_common.hpp"
#include "kda/detail/tril_inverse.hpp"

namespace probe {
using namespace kda;

constexpr int K = 128, V = 128, BT = 64, kRows = 8, kWarps = 8;
using E = bf16_t;

struct Params {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const float* g;     // raw gate, fp32 [T,H,K]
  const float* beta;  // raw beta, fp32 [T,H]
  const float* A_log;
  const float* dt_bias;
  const int32_t* cu;
  int N, H;
  float scale;
  uint16_t *w, *u, *kg, *qg, *aqk_hi, *aqk_lo;
  float* G_last;  // [N,H,K]: chunk n is sequence n
};

__device__ __forceinline__ float4 bf16x4_to_float4(uint2 r) {
  float4 f;
  numeric::unpack2<E>(r.x, &f.x, &f.y);
  numeric::unpack2<E>(r.y, &f.z, &f.w);
  return f;
}
__device__ __forceinline__ uint2 float4_to_bf16x4(float a, float b, float c, float d) {
  return make_uint2(numeric::pack2<E>(a, b), numeric::pack2<E>(c, d));
}
__device__ __forceinline__ float round_e(float x) { return numeric::round_to<E>(x); }

// Index of a pair value in the 64 the warp reduces: qk(i, j) for j <= i at i(i+1)/2 + j, kk(i, j) for j < i at
// 36 + i(i-1)/2 + j.
__host__ __device__ constexpr int qk_index(int i, int j) { return i * (i + 1) / 2 + j; }
__host__ __device__ constexpr int kk_index(int i, int j) { return 36 + i * (i - 1) / 2 + j; }

// One step of the warp's reduce-scatter of kN values: lanes whose bit kN / 4 is set keep the upper half and add
// their partner's, the others the lower half; acc[0 .. kN / 2) then holds the kept half.
template <int kN>
__device__ __forceinline__ void reduce_scatter_step(float* acc, int lane) {
  constexpr int kHalf = kN / 2, kMask = kN / 4;
  const bool up = (lane & kMask) != 0;
#pragma unroll
  for (int x = 0; x < kHalf; ++x) {
    const float lo = acc[x], hi = acc[x + kHalf];
    const float send = up ? lo : hi;
    const float keep = up ? hi : lo;
    acc[x] = keep + __shfl_xor_sync(0xffffffffu, send, kMask);
  }
}

// kMinBlocks: blocks of kWarps warps per SM that ptxas must fit (1: up to 255 registers; 2: 128; 3: 80).
template <int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) warp_prepare_kernel(Params p) {
  __shared__ float pairs_s[kWarps][64];
  __shared__ float akk_s[kWarps][kRows * kRows];
  __shared__ float tinv_s[kWarps][kRows * kRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
  if (item >= int64_t(p.N) * p.H) return;  // warp-uniform; no block barrier below
  const int n = int(item / p.H), h = int(item % p.H);
  const int bos = p.cu[n], len = min(p.cu[n + 1] - bos, kRows);
  const int d0 = 4 * lane;
  const int H = p.H;

  // 1. Every load at once: 4 channels of each row per lane (8-byte q, k, v; 16-byte raw g), beta of row `lane`.
  uint2 qr[kRows], kr[kRows], vr[kRows];
  float4 gr[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const bool valid = i < len;
    const int64_t row = int64_t(bos + i) * H + h;
    qr[i] = valid ? *reinterpret_cast<const uint2*>(p.q + row * K + d0) : make_uint2(0, 0);
    kr[i] = valid ? *reinterpret_cast<const uint2*>(p.k + row * K + d0) : make_uint2(0, 0);
    vr[i] = valid ? *reinterpret_cast<const uint2*>(p.v + row * V + d0) : make_uint2(0, 0);
    gr[i] = valid ? *reinterpret_cast<const float4*>(p.g + row * K + d0) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const float beta_raw = lane < len ? p.beta[int64_t(bos + lane) * H + h] : 0.0f;
  const float a_log_exp = expf(p.A_log[h]);
  const float4 bias = *reinterpret_cast<const float4*>(p.dt_bias + int64_t(h) * K + d0);
  const float beta_lane = lane < len ? detail::activate_beta(beta_raw, BetaActivation::kSigmoid) : 0.0f;

  // 2. l2norm of q and k rows (sum of squares per lane, then a butterfly over the 32 lanes), rounded to E.
  float q[kRows][4], k[kRows][4];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float4 qf = bf16x4_to_float4(qr[i]), kf = bf16x4_to_float4(kr[i]);
    // The library's order (sum_squares8 over 8 channels, then masks 8..1 over 16 threads per row): its thread t
    // holds our lanes 2t and 2t + 1, so the odd lane continues the even lane's chain, then masks 16..2.
    auto chain = [](float s, float4 x) {
      s = fmaf(x.x, x.x, s);
      s = fmaf(x.y, x.y, s);
      s = fmaf(x.z, x.z, s);
      return fmaf(x.w, x.w, s);
    };
    float qs = chain(0.0f, qf), ks = chain(0.0f, kf);
    qs = chain(__shfl_xor_sync(0xffffffffu, qs, 1), qf);  // odd lanes: the 8-channel sum
    ks = chain(__shfl_xor_sync(0xffffffffu, ks, 1), kf);
    qs = __shfl_sync(0xffffffffu, qs, lane | 1);
    ks = __shfl_sync(0xffffffffu, ks, lane | 1);
#pragma unroll
    for (int m = 16; m > 1; m /= 2) {
      qs += __shfl_xor_sync(0xffffffffu, qs, m);
      ks += __shfl_xor_sync(0xffffffffu, ks, m);
    }
    const float iq = detail::l2_inv_norm(qs), ik = detail::l2_inv_norm(ks);
    q[i][0] = round_e(qf.x * iq), q[i][1] = round_e(qf.y * iq), q[i][2] = round_e(qf.z * iq), q[i][3] = round_e(qf.w * iq);
    k[i][0] = round_e(kf.x * ik), k[i][1] = round_e(kf.y * ik), k[i][2] = round_e(kf.z * ik), k[i][3] = round_e(kf.w * ik);
  }

  // 3. G = RCP_LN2 * the running sum of the activated gates down the rows (the gate stage's order for <= 8 rows).
  float G[kRows][4], glast[4] = {0.f, 0.f, 0.f, 0.f};
  {
    const float b4[4] = {bias.x, bias.y, bias.z, bias.w};
    float run[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float g4[4] = {gr[i].x, gr[i].y, gr[i].z, gr[i].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float gv = detail::gate_value(g4[c] + b4[c], GateKind::kSoftplus, a_log_exp, -5.0f);
        if (i < len) run[c] = detail::gate_cumsum_add(run[c], gv);
        const float g = detail::gate_cumsum_add(0.0f, run[c]) * kRcpLn2;
        G[i][c] = i < len ? g : 0.0f;
        glast[c] = i < len ? g : glast[c];  // a select per row: an index by len would put G in local memory
      }
    }
  }
  *reinterpret_cast<float4*>(p.G_last + (int64_t(n) * H + h) * K + d0) = make_float4(glast[0], glast[1], glast[2], glast[3]);

  // 4. qg, kg out; w's and u's right-hand sides (rounded to E), kept packed.
  uint2 rhs_w[kRows], rhs_u[kRows];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float b = __shfl_sync(0xffffffffu, beta_lane, i);
    float qg[4], kg[4], rw[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      qg[c] = q[i][c] * detail::decay_exp2(G[i][c]);
      kg[c] = k[i][c] * detail::decay_exp2(glast[c] - G[i][c]);
      rw[c] = b * k[i][c] * detail::decay_exp2(G[i][c]);
    }
    const float4 vf = bf16x4_to_float4(vr[i]);
    rhs_w[i] = float4_to_bf16x4(rw[0], rw[1], rw[2], rw[3]);
    rhs_u[i] = float4_to_bf16x4(b * vf.x, b * vf.y, b * vf.z, b * vf.w);
    if (i < len) {
      const int64_t row = int64_t(bos + i) * H + h;
      *reinterpret_cast<uint2*>(p.qg + row * K + d0) = float4_to_bf16x4(qg[0], qg[1], qg[2], qg[3]);
      *reinterpret_cast<uint2*>(p.kg + row * K + d0) = float4_to_bf16x4(kg[0], kg[1], kg[2], kg[3]);
    }
  }

  // 5. The 64 pair sums over this lane's 4 channels, then reduced over the warp: after the butterfly lane L holds
  //    values 2L and 2L + 1 (each step keeps the half its lane bit names and adds the partner's other half).
  float acc[64];
#pragma unroll
  for (int x = 0; x < 64; ++x) acc[x] = 0.0f;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j <= i; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float t = k[j][c] * detail::decay_exp2(G[i][c] - G[j][c]);
        acc[qk_index(i, j)] = fmaf(q[i][c], t, acc[qk_index(i, j)]);
        if (j < i) acc[kk_index(i, j)] = fmaf(k[i][c], t, acc[kk_index(i, j)]);
      }
    }
  }
  reduce_scatter_step<64>(acc, lane);
  reduce_scatter_step<32>(acc, lane);
  reduce_scatter_step<16>(acc, lane);
  reduce_scatter_step<8>(acc, lane);
  reduce_scatter_step<4>(acc, lane);
  pairs_s[warp][2 * lane] = acc[0];
  pairs_s[warp][2 * lane + 1] = acc[1];
  __syncwarp();

  // 6. Akk = beta_i kk (j < i < len) and Aqk = scale qk (j <= i, j < len); Aqk's rows out as hi + lo over BT columns.
  const float* pr = pairs_s[warp];
#pragma unroll
  for (int e = lane; e < kRows * kRows; e += 32) {
    const int i = e / kRows, j = e % kRows;
    const float b = __shfl_sync(0xffffffffu, beta_lane, i);
    akk_s[warp][e] = j < i && i < len ? b * pr[kk_index(i, j < i ? j : 0)] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (i >= len) continue;
    const int c0 = 2 * lane;
    const float a0 = c0 <= i && c0 < len ? p.scale * pr[qk_index(i, c0 <= i ? c0 : 0)] : 0.0f;
    const float a1 = c0 + 1 <= i && c0 + 1 < len ? p.scale * pr[qk_index(i, c0 + 1 <= i ? c0 + 1 : 0)] : 0.0f;
    const numeric::HiLoWords s = numeric::split_hi_lo2<E>(a0, a1);
    const int64_t row = (int64_t(bos + i) * H + h) * BT;
    reinterpret_cast<uint32_t*>(p.aqk_hi + row)[lane] = s.hi;
    reinterpret_cast<uint32_t*>(p.aqk_lo + row)[lane] = s.lo;
  }
  __syncwarp();

  // 7. Tinv = (I + Akk)^-1 (the library's 8-row substitution, a column per lane), masked past the chunk, as hi + lo.
  if (lane < kRows) detail::diagonal_tile_inverse_column<kRows>(akk_s[warp], tinv_s[warp], kRows, 0, lane);
  __syncwarp();
  float T[kRows * (kRows + 1) / 2];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int j = 0; j <= i; ++j) {
      const float t = i < len && j < len ? tinv_s[warp][i * kRows + j] : 0.0f;
      const numeric::HiLoBits s = numeric::split_hi_lo<E>(t);
      T[qk_index(i, j)] = numeric::to_float(E{s.hi}) + numeric::to_float(E{s.lo});
    }
  }

  // 8. w = Tinv rhs_w, u = Tinv rhs_u (fp32 FMAs), rounded to E. The right-hand sides are widened once.
  float rw[kRows][4], ru[kRows][4];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const float4 a = bf16x4_to_float4(rhs_w[j]), b = bf16x4_to_float4(rhs_u[j]);
    rw[j][0] = a.x, rw[j][1] = a.y, rw[j][2] = a.z, rw[j][3] = a.w;
    ru[j][0] = b.x, ru[j][1] = b.y, ru[j][2] = b.z, ru[j][3] = b.w;
  }
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    float w4[4] = {0.f, 0.f, 0.f, 0.f}, u4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j <= i; ++j) {
      const float t = T[qk_index(i, j)];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        w4[c] = fmaf(t, rw[j][c], w4[c]);
        u4[c] = fmaf(t, ru[j][c], u4[c]);
      }
    }
    if (i < len) {
      const int64_t row = int64_t(bos + i) * H + h;
      *reinterpret_cast<uint2*>(p.w + row * K + d0) = float4_to_bf16x4(w4[0], w4[1], w4[2], w4[3]);
      *reinterpret_cast<uint2*>(p.u + row * V + d0) = float4_to_bf16x4(u4[0], u4[1], u4[2], u4[3]);
    }
  }
}

// Deterministic fills: U[0,1) for q, k, v (bf16), N(0,1)-ish for g, beta, dt_bias, log U[1,16) for A_log.
__device__ __forceinline__ float hash01(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return float(x >> 40) * (1.0f / 16777216.0f);
}
__global__ void fill_bf16_uniform(uint16_t* p, size_t n, uint64_t seed) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x)
    p[e] = numeric::float_to_bf16(hash01(seed * 0x9e3779b97f4a7c15ull + e));
}
__global__ void fill_f32_normalish(float* p, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const float a = hash01(seed * 0x9e3779b97f4a7c15ull + 2 * e), b = hash01(seed * 0x9e3779b97f4a7c15ull + 2 * e + 1);
    p[e] = lo < hi ? logf(1.0f + a * 15.0f) : (a + b - 1.0f) * 2.45f;  // sum of two uniforms: var ~1
  }
}

}  // namespace probe
