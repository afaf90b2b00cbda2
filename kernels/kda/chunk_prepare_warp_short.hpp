// chunk_kda_fwd's first launch where the caller bounds every sequence at kWarpShortRows tokens (speculative batches'
// drafts, decodes; ChunkMetadataArgs::max_sequence_tokens), K = V = 128, NVIDIA: one warp per (chunk, head) and no
// block barrier. The short-only kernel (chunk_prepare_inputs_short_only_mma_kernel) takes four warps per item through
// eight block barriers and ~9,000 warp instructions, most of them fixed cost for an 8-row chunk.
//
// The same bits as that kernel (and so as the long path and the stage pipeline) for every output: each value is
// formed by the same expressions in the same order, only the work is laid out differently. Lane l holds channels
// 4 l .. 4 l + 3 of all 8 rows of q, k, v and the raw gate in registers, which is exactly one 4-channel group of one
// 16-channel slice (slice l / 4, group l % 4):
//   - l2norm: the l2norm stage's thread of 8 channels is lanes 2t, 2t + 1 here; the odd lane continues the even lane's
//     FMA chain, then the butterfly runs over lane masks 16 .. 2 (the stage's thread masks 8 .. 1);
//   - G: the running sum down the lane's own rows (one kGateSumSegment), so G, G_last, qg, kg and the right-hand sides
//     of w and u are the short path's expressions;
//   - the exact pairs: exact_pair_sums16 adds four 4-channel group sums per slice from zero, then the slices from
//     zero. Each lane forms its group's sum for all 64 (pair, kk / qk) values with the same FMA chain; they meet in
//     shared memory transposed, and lane l adds up values l and l + 32 in that order;
//   - Tinv: diagonal_tile_inverse_column<8>, split into hi + lo with the same masking;
//   - w, u: the same m16n8k16 products as the short path's 16x16 jobs (Tinv hi, then lo, on the right-hand sides),
//     with the operand values at the same positions: rows and columns 8-15, zero there, are zero registers here.
// Tests (tests/gpu/test_pipeline.cu): ChunkKdaBitIdentity.FusedPrepareWarpShortMatchesShortOnly (every byte against the
// short-only kernel) and ChunkKdaShortState.SequenceOverTheWarpShortBoundIsReportedAndSkipped. The launcher runs it
// wherever it can (ActiveTuning::kWarpShortDefaultForm; see docs/performance.md, "Warp-per-item prepare").
#pragma once

#include "kda/intra_chunk_mma.hpp"
#include "kda/prepare_inputs.hpp"
#include "kda/recompute_w_u.hpp"
#include "kda/detail/chunk_table.hpp"
#include "kda/detail/device_common.hpp"
#include "kda/detail/mma.hpp"
#include "kda/detail/tril_inverse.hpp"
#include "kda/tuning.hpp"

namespace kda::kernels {

// Rows of the chunks this kernel takes (a chunk of more rows is reported and left unwritten). Items (warps) per
// block and blocks per multiprocessor (the template parameter kMinBlocks: form 1 or 2) come from ActiveTuning
// (see docs/performance.md, "Warp-per-item prepare").
constexpr int kWarpShortRows = 8;

#if defined(KDA_PLATFORM_CUDA)

namespace warp_short {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kRows = kWarpShortRows;
constexpr int kValues = 64;           // 36 qk pairs (j <= i) and 28 kk pairs (j < i) of an 8-row chunk
constexpr int kLdX = kValues + 1;     // a lane's row of group sums: one bank apart, so that no access conflicts
constexpr int kLdRhs = 128 + 8;       // 16-bit right-hand-side rows: 8 rows at this stride hit 8 bank groups

// Value slots: qk(i, j) for j <= i at i (i + 1) / 2 + j, kk(i, j) for j < i at 36 + i (i - 1) / 2 + j.
__host__ __device__ constexpr int qk_slot(int i, int j) { return i * (i + 1) / 2 + j; }
__host__ __device__ constexpr int kk_slot(int i, int j) { return 36 + i * (i - 1) / 2 + j; }

// Shared memory of one warp: the right-hand sides, the group sums, the pair totals, Akk and Tinv.
struct WarpShared {
  uint16_t rhs[2][kRows * kLdRhs];  // round(beta k exp2 G) and round(beta v), rows 0-7
  float x[32 * kLdX];               // x[l * kLdX + slot]: lane l's 4-channel group sum of value `slot`
  float pairs[kValues];
  float akk[kRows * kRows];
  float tinv[kRows * kRows];
};

template <typename E>
__device__ __forceinline__ void unpack4(uint2 raw, float out[4]) {
  numeric::unpack2<E>(raw.x, &out[0], &out[1]);
  numeric::unpack2<E>(raw.y, &out[2], &out[3]);
}
template <typename E>
__device__ __forceinline__ uint2 pack4(const float v[4]) {
  return make_uint2(numeric::pack2<E>(v[0], v[1]), numeric::pack2<E>(v[2], v[3]));
}

// Elements (t, h, d .. d + 3) of a 16-bit view as raw bits: one 8-byte load when `vector` (vector_aligned, d a
// multiple of 4), else per element, out of line so that the cold path stays out of the hot code.
__device__ __noinline__ inline uint2 load4_elementwise(TensorView view, int64_t t, int h, int d) {
  const uint16_t* p = static_cast<const uint16_t*>(view.data) + detail::element_offset(view, t, h, d);
  return make_uint2(uint32_t(p[0]) | uint32_t(p[1]) << 16, uint32_t(p[2]) | uint32_t(p[3]) << 16);
}
__device__ __forceinline__ uint2 load4(TensorView view, int64_t t, int h, int d) {
  return *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(view.data) +
                                         detail::element_offset(view, t, h, d));
}
__device__ __forceinline__ void store4(MutableTensorView view, int64_t t, int h, int d, uint2 raw) {
  *reinterpret_cast<uint2*>(static_cast<uint16_t*>(view.data) + detail::element_offset(view, t, h, d)) = raw;
}
__device__ __forceinline__ void store2(MutableTensorView view, int64_t t, int h, int d, uint32_t raw) {
  *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(view.data) + detail::element_offset(view, t, h, d)) = raw;
}
// The raw gates (t, h, d .. d + 3) as floats, for a gate type known at run time, per element.
__device__ __noinline__ inline float4 load_gate4_elementwise(TensorView view, ScalarType type, int64_t t, int h,
                                                             int d) {
  return make_float4(detail::load_scalar(view, type, t, h, d), detail::load_scalar(view, type, t, h, d + 1),
                     detail::load_scalar(view, type, t, h, d + 2), detail::load_scalar(view, type, t, h, d + 3));
}

// One 4-channel group of exact_pair_sums16: sum_c a[c] b[c] as its FMA chain evaluates it (the product of channel 1
// first, then channels 0, 2, 3; NVVM's contraction of that expression, which the bits depend on).
__device__ __forceinline__ float group_dot(const float a[4], const float b[4]) {
  return __fmaf_rn(a[3], b[3], __fmaf_rn(a[2], b[2], __fmaf_rn(a[0], b[0], __fmul_rn(a[1], b[1]))));
}

// Lane `lane`'s share of w = Tinv rhs (or u): with the A registers holding Tinv's hi / lo (row g = lane / 4, columns
// 2t, 2t + 1: the only nonzero ones), each 16-column tile is the short path's job on it, its values rounded to E and
// stored at row g (only lanes with g < len store).
template <typename E>
__device__ __forceinline__ void tinv_times_rhs(const uint16_t* rhs_s, uint32_t a_hi, uint32_t a_lo, int lane,
                                               bool store, MutableTensorView out, int64_t t, int h) {
  namespace m = detail::mma;
  const int tq = lane % 4;
  m::FragA hi{}, lo{};
  hi.x[0] = uint16_t(a_hi & 0xffffu), hi.x[1] = uint16_t(a_hi >> 16);
  lo.x[0] = uint16_t(a_lo & 0xffffu), lo.x[1] = uint16_t(a_lo >> 16);
#pragma unroll
  for (int quad = 0; quad < 4; ++quad) {  // 32 columns: four 8x8 blocks of rows 0-7, transposed into B registers
    uint16_t b8[8];
    detail::mma::ldmatrix_x4<true>(b8, rhs_s + (lane % 8) * kLdRhs + 32 * quad + 8 * (lane / 8));
#pragma unroll
    for (int tile = 0; tile < 2; ++tile) {
      m::FragB b{};
      b.x[0] = b8[4 * tile], b.x[1] = b8[4 * tile + 1];  // k rows 2t, 2t + 1 of column g
      b.x[4] = b8[4 * tile + 2], b.x[5] = b8[4 * tile + 3];  // the same of column g + 8
      m::Acc acc;
      m::zero(acc);
      m::mma<E>(acc, hi, b);
      m::mma<E>(acc, lo, b);
      if (store) {
        const int col = 32 * quad + 16 * tile + 2 * tq;
        store2(out, t, h, col, numeric::pack2<E>(acc.x[0], acc.x[1]));
        store2(out, t, h, col + 8, numeric::pack2<E>(acc.x[4], acc.x[5]));
      }
    }
  }
}

}  // namespace warp_short

// ip, wp, in as chunk_prepare_inputs_short_only_mma_kernel takes them (ip.q, ip.k raw; ip.G, wp.G unused; ip.Akk
// null: the launcher passes none); the grid is one-dimensional over (chunk id, head) items, chunk-major,
// ActiveTuning::kWarpShortWarps per block.
template <typename E, int BT, int K, int V, int kMinBlocks>
__global__ void __launch_bounds__(ActiveTuning::kWarpShortWarps * 32, kMinBlocks)
    chunk_prepare_inputs_warp_short_kernel(const KDA_GRID_CONSTANT IntraChunkParams ip,
                                           const KDA_GRID_CONSTANT RecomputeWuParams wp,
                                           const KDA_GRID_CONSTANT PrepareInputsParams in, bool v_vector) {
  using namespace warp_short;
  static_assert(BT == 64 && K == 128 && V == 128, "a lane holds 4 channels of K = V = 128; Aqk rows of 64 columns");
  static_assert(kRows <= detail::kGateSumSegment, "one gate-sum segment: the running sum from the first row");
  __shared__ __align__(16) WarpShared shared[ActiveTuning::kWarpShortWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  WarpShared& ws = shared[warp];
  const int H = ip.num_heads;
  const int64_t item = int64_t(blockIdx.x) * ActiveTuning::kWarpShortWarps + warp;
  const int64_t chunk_id = item / H;
  const int h = int(item % H);
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(ip.chunks, chunk_id, &chunk)) return;  // warp-uniform; no block barrier below
  if (chunk.index > 0 || chunk.length > kRows) {
    if (lane == 0) ip.chunks.report(detail::kDeviceStatusSequenceOverBound);
    return;
  }
  const int len = chunk.length, d0 = 4 * lane;
  const int64_t t0 = chunk.start;

  // 1. Every load at once: 4 channels of each row per lane, beta of row `lane`. Rows past the chunk are zeros.
  uint2 q_raw[kRows], k_raw[kRows], v_raw[kRows];
  float4 g_raw[kRows];
  {
    const TensorView qv = ip.q, kv = ip.k, vv = wp.v, gv = in.g;
    if (in.qk_vector) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        q_raw[i] = i < len ? load4(qv, t0 + i, h, d0) : make_uint2(0, 0);
        k_raw[i] = i < len ? load4(kv, t0 + i, h, d0) : make_uint2(0, 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        q_raw[i] = i < len ? load4_elementwise(qv, t0 + i, h, d0) : make_uint2(0, 0);
        k_raw[i] = i < len ? load4_elementwise(kv, t0 + i, h, d0) : make_uint2(0, 0);
      }
    }
    if (v_vector) {
#pragma unroll
      for (int i = 0; i < kRows; ++i) v_raw[i] = i < len ? load4(vv, t0 + i, h, d0) : make_uint2(0, 0);
    } else {
#pragma unroll
      for (int i = 0; i < kRows; ++i) v_raw[i] = i < len ? load4_elementwise(vv, t0 + i, h, d0) : make_uint2(0, 0);
    }
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (in.g_vector && in.g_type == ScalarType::kFloat32) {
#pragma unroll
      for (int i = 0; i < kRows; ++i)
        g_raw[i] = i < len ? *reinterpret_cast<const float4*>(static_cast<const float*>(gv.data) +
                                                               detail::element_offset(gv, t0 + i, h, d0))
                           : zero4;
    } else if (in.g_vector) {
      uint2 bits[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) bits[i] = i < len ? load4(gv, t0 + i, h, d0) : make_uint2(0, 0);
      const ScalarType type = in.g_type;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const uint16_t b0 = uint16_t(bits[i].x & 0xffffu), b1 = uint16_t(bits[i].x >> 16);
        const uint16_t b2 = uint16_t(bits[i].y & 0xffffu), b3 = uint16_t(bits[i].y >> 16);
        g_raw[i] = make_float4(detail::widen16(b0, type), detail::widen16(b1, type), detail::widen16(b2, type),
                               detail::widen16(b3, type));
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRows; ++i) g_raw[i] = i < len ? load_gate4_elementwise(gv, in.g_type, t0 + i, h, d0) : zero4;
    }
  }
  const float beta_lane =
      lane < len ? detail::activate_beta(detail::load_scalar(ip.beta, ip.beta_type, t0 + lane, h, 0),
                                         ip.beta_activation)
                 : 0.0f;
  const float a_log_exp = in.A_log != nullptr ? expf(in.A_log[h]) : 1.0f;
  float b4[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // dt_bias: per element (the caller's pointer may be only 4-byte aligned)
  if (in.dt_bias != nullptr) {
#pragma unroll
    for (int c = 0; c < 4; ++c) b4[c] = in.dt_bias[int64_t(h) * K + d0 + c];
  }

  // 2. q and k as the l2norm stage leaves them (see the top).
  float q[kRows][4], k[kRows][4];
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    unpack4<E>(q_raw[i], q[i]);
    unpack4<E>(k_raw[i], k[i]);
  }
  if (in.qk_l2norm) {
    auto chain = [](float s, const float x[4]) {  // sum_squares8's FMA chain, four channels of it
#pragma unroll
      for (int c = 0; c < 4; ++c) s = fmaf(x[c], x[c], s);
      return s;
    };
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      float qs = chain(0.0f, q[i]), ks = chain(0.0f, k[i]);
      qs = chain(__shfl_xor_sync(kFull, qs, 1), q[i]);  // odd lanes: the 8-channel sum of lanes 2t, 2t + 1
      ks = chain(__shfl_xor_sync(kFull, ks, 1), k[i]);
      qs = __shfl_sync(kFull, qs, lane | 1);
      ks = __shfl_sync(kFull, ks, lane | 1);
#pragma unroll
      for (int m = 16; m > 1; m /= 2) {
        qs += __shfl_xor_sync(kFull, qs, m);
        ks += __shfl_xor_sync(kFull, ks, m);
      }
      const float iq = detail::l2_inv_norm(qs), ik = detail::l2_inv_norm(ks);
      float qn[4], kn[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) qn[c] = q[i][c] * iq, kn[c] = k[i][c] * ik;
      unpack4<E>(pack4<E>(qn), q[i]);
      unpack4<E>(pack4<E>(kn), k[i]);
    }
  }

  // 3. G = RCP_LN2 * the running sum of the activated gates down the rows; G_last by chunk id (the state's decay).
  float G[kRows][4], glast[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  {
    const GateKind gate = in.gate;
    const float lower_bound = in.lower_bound;
    float run[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const float g4[4] = {g_raw[i].x, g_raw[i].y, g_raw[i].z, g_raw[i].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float gv = detail::gate_value(g4[c] + b4[c], gate, a_log_exp, lower_bound);
        if (i < len) run[c] = detail::gate_cumsum_add(run[c], gv);
        const float g = detail::gate_cumsum_add(0.0f, run[c]) * kRcpLn2;
        G[i][c] = i < len ? g : 0.0f;
        glast[c] = i < len ? g : glast[c];  // a select per row: indexing G by len would put it in local memory
      }
    }
  }
  *reinterpret_cast<float4*>(in.G_last + (chunk_id * H + h) * K + d0) =
      make_float4(glast[0], glast[1], glast[2], glast[3]);

  // 4. qg, kg out; the right-hand sides of w and u rounded to E, to shared memory: rows 0-7, the B operands of step 9.
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const float b = __shfl_sync(kFull, beta_lane, i);
    float qg[4], kg[4], rw[4], ru[4], vf[4];
    unpack4<E>(v_raw[i], vf);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      qg[c] = q[i][c] * detail::decay_exp2(G[i][c]);
      kg[c] = k[i][c] * detail::decay_exp2(glast[c] - G[i][c]);
      rw[c] = b * k[i][c] * detail::decay_exp2(G[i][c]);
      ru[c] = b * vf[c];
    }
    *reinterpret_cast<uint2*>(&ws.rhs[0][i * kLdRhs + d0]) = pack4<E>(rw);
    *reinterpret_cast<uint2*>(&ws.rhs[1][i * kLdRhs + d0]) = pack4<E>(ru);
    if (i < len) {
      if (in.qg.data != nullptr) store4(in.qg, t0 + i, h, d0, pack4<E>(qg));
      store4(wp.kg, t0 + i, h, d0, pack4<E>(kg));
    }
  }

  // 5. The group sums of every pair (exact_pair_sums16's expressions), to shared memory as this lane's row.
  {
    float* x = &ws.x[lane * kLdX];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int j = 0; j <= i; ++j) {
        float kj[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) kj[c] = __fmul_rn(k[j][c], detail::decay_exp2(__fsub_rn(G[i][c], G[j][c])));
        x[qk_slot(i, j)] = group_dot(q[i], kj);
        if (j < i) x[kk_slot(i, j)] = group_dot(k[i], kj);
      }
    }
  }

  __syncwarp();

  // 6. Values lane and lane + 32: each slice's four group sums added from zero, then the slices from zero.
  {
    float total[2] = {0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      float part[2] = {0.0f, 0.0f};
#pragma unroll
      for (int gq = 0; gq < 4; ++gq) {
        const float* row = &ws.x[(4 * s + gq) * kLdX];
        part[0] += row[lane];
        part[1] += row[lane + 32];
      }
      total[0] += part[0];
      total[1] += part[1];
    }
    ws.pairs[lane] = total[0];
    ws.pairs[lane + 32] = total[1];
  }
  __syncwarp();

  // 7. Akk = beta_i kk for the inverse, Aqk = scale qk out over all BT columns (hi + lo in E, or fp32), with the short
  //    path's masking: zero above the diagonal before the scaling, zero past the chunk after it.
  const float* pairs = ws.pairs;
#pragma unroll
  for (int e = lane; e < kRows * kRows; e += 32) {
    const int i = e / kRows, j = e % kRows;
    const float b = __shfl_sync(kFull, beta_lane, i);
    ws.akk[e] = i < len && j < len ? b * (j < i ? pairs[kk_slot(i, j < i ? j : 0)] : 0.0f) : 0.0f;
  }
  const float scale = ip.scale;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (i >= len) continue;
    const int c0 = 2 * lane, c1 = c0 + 1;
    const float a0 = c0 < len ? scale * (c0 <= i ? pairs[qk_slot(i, c0 <= i ? c0 : 0)] : 0.0f) : 0.0f;
    const float a1 = c1 < len ? scale * (c1 <= i ? pairs[qk_slot(i, c1 <= i ? c1 : 0)] : 0.0f) : 0.0f;
    const int64_t row = ((t0 + i) * H + h) * BT;
    if (ip.aqk_hi != nullptr) {
      const numeric::HiLoWords s = numeric::split_hi_lo2<E>(a0, a1);
      static_cast<uint32_t*>(ip.aqk_hi)[row / 2 + lane] = s.hi;
      static_cast<uint32_t*>(ip.aqk_lo)[row / 2 + lane] = s.lo;
    } else {
      detail::store_float2(ip.Aqk + row + c0, a0, a1);
    }
  }
  __syncwarp();

  // 8. Tinv = (I + Akk)^-1 (a column per lane), then lane (g, t)'s A registers: Tinv's row g, columns 2t, 2t + 1,
  //    masked past the chunk, as hi and lo.
  if (lane < kRows) detail::diagonal_tile_inverse_column<kRows>(ws.akk, ws.tinv, kRows, 0, lane);
  __syncwarp();
  const int g = lane / 4, c0 = 2 * (lane % 4);
  const float t0v = g < len && c0 < len ? ws.tinv[g * kRows + c0] : 0.0f;
  const float t1v = g < len && c0 + 1 < len ? ws.tinv[g * kRows + c0 + 1] : 0.0f;
  const numeric::HiLoWords a = numeric::split_hi_lo2<E>(t0v, t1v);

  // 9. w = Tinv rhs_w, u = Tinv rhs_u on the matrix units, row g of each out.
  tinv_times_rhs<E>(ws.rhs[0], a.hi, a.lo, lane, g < len, wp.w, t0 + g, h);
  tinv_times_rhs<E>(ws.rhs[1], a.hi, a.lo, lane, g < len, wp.u, t0 + g, h);
}

#endif  // KDA_PLATFORM_CUDA

}  // namespace kda::kernels
