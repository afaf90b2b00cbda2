// The prepare of a chunk of at most 16 rows (decodes, speculative batches' 8-token chunks, the tails of sequences), in
// both prepare kernels: the staged one (chunk_prepare_mma_kernel) and, from the raw inputs, the fused one for
// batches of short sequences (chunk_prepare_inputs_short_mma_kernel). Same outputs as the long-chunk path
// (intra_chunk_mma_block, then tril_inverse, then recompute_w_u_mma_block), bit for bit, with far less fixed work
// per block.
//
// Why a path of its own: the long-chunk path walks K in 16-channel slices, each staged, summed and multiplied between
// block barriers (three or four per slice), and then runs the inverse and the w/u part over a 64-row layout. For an
// 8-token chunk almost all of that is fixed cost: ncu put a speculative batch's block at ~3,400 instructions per warp
// and ~22 µs, most of it waiting at barriers and on one slice's loads after another. Here the chunk's 16 rows of q,
// k, G and v are loaded at once (one round trip), and each phase runs over all K channels between two barriers.
//
// Why the bits agree: every value is formed by the same expressions in the same order.
//   - Exact pairs (both 8-row triangles): exact_pair_sums16 per 16-channel slice, then the slices' sums added in
//     slice order from zero, as the slice loop's running sum does. The (pair, slice) sums run on separate threads
//     and meet in shared memory.
//   - The diagonal tile's lower-left quarter (chunks of 9-16 rows): the same R' / L' factors (decay_exp2_pair,
//     store_factor_pair), in the same swizzled tile layout, and one warp's products in the same slice order.
//   - Akk, Aqk, Tinv: the same masking and scaling; Tinv by diagonal_tile_inverse_column, the code tril_inverse runs
//     for each diagonal tile (over 8 rows for chunks of at most 8: the 16-row result's first rows, bit for bit).
//   - w, u, kg: the same right-hand sides, rounded to E, and the same hi + lo products of row tile 0.
//   - From the raw inputs: the row norms, the gate and its chunk-local sum, qg, as the l2norm, gate and output
//     stages form them (prepare_short_chunk's note).
// Tests, on chunks of every length 1-17: launch_chunk_prepare against the two stage launches (test_stages.cu); the
// staged form against the fused form, and the fused kernel's short path against its long one (test_pipeline.cu,
// FusedPrepareMatchesStagedForm and FusedPrepareShortPathMatchesLongPath).
#pragma once

#include "kda/intra_chunk_mma.hpp"
#include "kda/recompute_w_u_mma.hpp"

namespace kda::kernels {

// On NVIDIA the short path is a function of its own (not inlined), so that ptxas allocates the long path's registers
// as it did without it: inlined, the long path spilled more and ran ~5 % slower on full chunks (see
// docs/performance.md, "Prepare kernel with the short path"). The kernel's parameters are KDA_GRID_CONSTANT, so the
// call passes their address instead of a copy on the stack.
#if defined(KDA_PLATFORM_CUDA)
#define KDA_SHORT_PATH_CALL __noinline__
#else
#define KDA_SHORT_PATH_CALL inline
#endif

// Chunks of at most this many rows take the short path (one 16-row tile: the diagonal tile only).
constexpr int kShortChunkRows = 16;

// Shared memory of the short path, in bytes. While the A matrices are formed: q, k, G as fp32 rows of K + 4 floats
// (16-byte aligned rows; eight rows read as float4 hit disjoint banks), the quarter's factor tiles for one round of
// kFactorSlices 16-channel slices (per slice R': 8 rows, then L': 16 rows, as intra_chunk_mma_block lays out one
// block's), and the exact pairs' per-slice sums. Afterwards Akk, Aqk, Tinv and
// Tinv's hi / lo tiles (over q's rows when they fit), and the right-hand sides of w and u (over the factors; k and G
// are still read while they are formed).
template <int K, int V>
struct ShortPrepareLayout {
  static constexpr int kRows = kShortChunkRows;
  static constexpr int kLdS = K + 4;
  static constexpr int kSlices = K / 16;
  static constexpr int kFactorSlices = kSlices < 8 ? kSlices : 8;  // per round: 6 KB of tiles
  static constexpr int kRounds = kSlices / kFactorSlices;
  static constexpr int kSliceRows = 8 + 16;
  static constexpr int kPairs = 2 * (8 * 9 / 2);  // both triangles of the diagonal tile
  static constexpr int kLdO = kRows + 4;           // fp32 rows of Akk, Aqk, Tinv (16-byte aligned)
  static constexpr int kLdT = kRows + 8;           // 16-bit rows of Tinv hi / lo
  static constexpr int kLdW = K + 8, kLdU = V + 8;  // 16-bit right-hand-side rows
  static constexpr int kStageBytes = kRows * kLdS * 4;
  static constexpr int kQ = 0, kK = kStageBytes, kG = 2 * kStageBytes, kFactors = 3 * kStageBytes;
  static constexpr int kPartial = kFactors + kFactorSlices * kSliceRows * 16 * 2;
  static constexpr int kEndA = kPartial + kSlices * kPairs * 8;
  static constexpr int kRhsW = kFactors, kRhsU = kRhsW + kRows * kLdW * 2;
  static constexpr int kEndRhs = kRhsU + kRows * kLdU * 2;
  static constexpr int kMatrixBytes = 3 * kRows * kLdO * 4 + 2 * kRows * kLdT * 2;
  static constexpr int kAkk = kMatrixBytes <= kStageBytes ? kQ : (kEndA > kEndRhs ? kEndA : kEndRhs);
  static constexpr int kAqk = kAkk + kRows * kLdO * 4, kTinv = kAqk + kRows * kLdO * 4;
  static constexpr int kTHi = kTinv + kRows * kLdO * 4, kTLo = kTHi + kRows * kLdT * 2;
  static constexpr int kEnd = kAkk + kMatrixBytes;
  static constexpr int kBytes = kEnd > kEndA ? (kEnd > kEndRhs ? kEnd : kEndRhs) : (kEndA > kEndRhs ? kEndA : kEndRhs);
  static_assert(kSlices % kFactorSlices == 0, "whole rounds of factor slices");
  static_assert(kStageBytes % 16 == 0 && kPartial % 16 == 0 && kRhsU % 16 == 0 && kAqk % 16 == 0 &&
                    kTHi % 16 == 0 && kTLo % 16 == 0,
                "16-byte aligned buffers");
};

// The prepare of one located (chunk, head) with chunk.length <= kShortChunkRows, in a block of kIntraMmaWarps warps:
// writes ip.Aqk (or its hi + lo pair), ip.Akk when set, ip.qg when set, and wp.w, wp.u, wp.kg, as
// chunk_prepare_mma_kernel's long path does. smem: ShortPrepareLayout<K, V>::kBytes; beta_s: >= 16 floats.
//
// kFromInputs (chunk_prepare_inputs_mma_kernel's short path; `in` is then its PrepareInputsParams): ip.q, ip.k are
// the raw inputs and ip.G is unused, as in intra_chunk_mma_block<..., kFromInputs>. The rows are normalised here
// (when in->qk_l2norm) with qk_l2norm_vec_kernel's arithmetic: the K / 8 threads that load a row hold it whole, so
// their butterfly is that kernel's. Thread d < K walks channel d's raw gates down the chunk and forms G in the gate
// stage's kGateSumSegment order, writing G of the last row to in->G_last; qg goes to in->qg once G is staged.
template <typename E, int BT, int K, int V, bool kFromInputs>
__device__ __forceinline__ void prepare_short_chunk(const IntraChunkParams& ip, const RecomputeWuParams& wp,
                                                    const PrepareInputsParams* in, const detail::ChunkCoords& chunk,
                                                    int h, unsigned char* smem, float* beta_s, bool v_vector) {
  namespace m = detail::mma;
  using L = ShortPrepareLayout<K, V>;
  constexpr int kThreads = kIntraMmaWarps * kWarpSize;
  constexpr int kRows = L::kRows, kLdS = L::kLdS, kSlices = L::kSlices, kLdO = L::kLdO, kLdT = L::kLdT;
  static_assert(K % 16 == 0 && V % 16 == 0 && BT > kRows, "whole 16-channel slices; a chunk longer than a tile");
  const int length = chunk.length, tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  float* q_s = reinterpret_cast<float*>(smem + L::kQ);
  float* k_s = reinterpret_cast<float*>(smem + L::kK);
  float* g_s = reinterpret_cast<float*>(smem + L::kG);
  uint16_t* factors = reinterpret_cast<uint16_t*>(smem + L::kFactors);
  float2* partial_s = reinterpret_cast<float2*>(smem + L::kPartial);  // [slice][pair]: (kk, qk)
  float* akk_s = reinterpret_cast<float*>(smem + L::kAkk);
  float* aqk_s = reinterpret_cast<float*>(smem + L::kAqk);
  float* tinv_s = reinterpret_cast<float*>(smem + L::kTinv);
  uint16_t* t_hi = reinterpret_cast<uint16_t*>(smem + L::kTHi);
  uint16_t* t_lo = reinterpret_cast<uint16_t*>(smem + L::kTLo);
  uint16_t* rhs_w = reinterpret_cast<uint16_t*>(smem + L::kRhsW);
  uint16_t* rhs_u = reinterpret_cast<uint16_t*>(smem + L::kRhsU);

  // 1. Every load of the chunk at once: q, k and v in 16-byte units of 8 channels, G as the two float4 of each q/k
  //    unit (so that the thread staging q can form qg), beta. Rows past the chunk are zeros. kFromInputs: the raw
  //    gates of channel tid (threads < K) instead of G.
  constexpr int kQkUnits = kRows * K / 8, kQkPer = (kQkUnits + kThreads - 1) / kThreads;
  constexpr int kVUnits = kRows * V / 8, kVPer = (kVUnits + kThreads - 1) / kThreads;
  static_assert(!kFromInputs || K <= kThreads, "a thread per channel walks the gates");
  uint4 q_raw[kQkPer], k_raw[kQkPer], v_raw[kVPer];
  float4 g_in[kFromInputs ? 1 : 2 * kQkPer];
  float g_raw[kFromInputs ? kRows : 1];
  // kFromInputs: the parameters (read through a reference here) are copied into registers once, and each branch on
  // a view's alignment is taken once around all its loads, so that the loads issue together: read as the staged
  // path reads them, each load waited on reloading its view
  // (see docs/performance.md, "Prepare kernel with the short path").
  if constexpr (kFromInputs) {
    const int64_t start = chunk.start;
    const TensorView q_view = ip.q, k_view = ip.k, v_view = wp.v;
    auto load_qk = [&](auto vector) {  // std::true_type: 16-byte loads; std::false_type: per element
#pragma unroll
      for (int x = 0; x < kQkPer; ++x) {
        const int u = tid + x * kThreads, i = u / (K / 8), d = (u % (K / 8)) * 8;
        q_raw[x] = k_raw[x] = make_uint4(0, 0, 0, 0);
        if (u < kQkUnits && i < length) {
          if constexpr (decltype(vector)::value) {
            q_raw[x] = detail::load16(q_view, start + i, h, d);
            k_raw[x] = detail::load16(k_view, start + i, h, d);
          } else {
            q_raw[x] = detail::load16_elementwise(q_view, start + i, h, d);
            k_raw[x] = detail::load16_elementwise(k_view, start + i, h, d);
          }
        }
      }
    };
    auto load_v = [&](auto vector) {
#pragma unroll
      for (int x = 0; x < kVPer; ++x) {
        const int u = tid + x * kThreads, j = u / (V / 8), d = (u % (V / 8)) * 8;
        v_raw[x] = make_uint4(0, 0, 0, 0);
        if (u < kVUnits && j < length) {
          if constexpr (decltype(vector)::value) v_raw[x] = detail::load16(v_view, start + j, h, d);
          else v_raw[x] = detail::load16_elementwise(v_view, start + j, h, d);
        }
      }
    };
    if (in->qk_vector) {
      load_qk(std::true_type{});
    } else {
      load_qk(std::false_type{});
    }
    if (v_vector) {
      load_v(std::true_type{});
    } else {
      load_v(std::false_type{});
    }
    // load_scalar's loads and conversions, with the type's branch taken once and every load issued before the first
    // conversion: converted row by row, the 16-bit rows' loads went one round trip at a time (PTX: the branch on
    // bf16 / fp16 after each load waited for it).
    if (tid < K) {
      const TensorView g = in->g;
      const ScalarType g_type = in->g_type;
      const int64_t step = g.token_stride, off = detail::element_offset(g, start, h, tid);
      if (g_type == ScalarType::kFloat32) {
        const float* p = static_cast<const float*>(g.data) + off;
#pragma unroll
        for (int i = 0; i < kRows; ++i) g_raw[i] = i < length ? p[i * step] : 0.0f;
      } else {
        const uint16_t* p = static_cast<const uint16_t*>(g.data) + off;
        uint16_t bits[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) bits[i] = i < length ? p[i * step] : uint16_t(0);
        if (g_type == ScalarType::kBFloat16) {
#pragma unroll
          for (int i = 0; i < kRows; ++i) g_raw[i] = numeric::bf16_to_float(bits[i]);
        } else {
#pragma unroll
          for (int i = 0; i < kRows; ++i) g_raw[i] = numeric::fp16_to_float(bits[i]);
        }
      }
    }
  } else {
#pragma unroll
    for (int x = 0; x < kQkPer; ++x) {
      const int u = tid + x * kThreads, i = u / (K / 8), d = (u % (K / 8)) * 8;
      const bool valid = u < kQkUnits && i < length;
      q_raw[x] = valid ? detail::load16(ip.q, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
      k_raw[x] = valid ? detail::load16(ip.k, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
      const float* g_row = &ip.G[((chunk.start + i) * ip.num_heads + h) * ip.head_dim + d];
      g_in[2 * x] = valid ? *reinterpret_cast<const float4*>(g_row) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      g_in[2 * x + 1] = valid ? *reinterpret_cast<const float4*>(g_row + 4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int x = 0; x < kVPer; ++x) {
      const int u = tid + x * kThreads, j = u / (V / 8), d = (u % (V / 8)) * 8;
      v_raw[x] = u < kVUnits && j < length ? detail::load16_any(wp.v, v_vector, chunk.start + j, h, d)
                                           : make_uint4(0, 0, 0, 0);
    }
  }
  for (int i = tid; i < kRows; i += kThreads) {
    const float raw = i < length ? detail::load_scalar(ip.beta, ip.beta_type, chunk.start + i, h, 0) : 0.0f;
    beta_s[i] = i < length ? detail::activate_beta(raw, ip.beta_activation) : 0.0f;
  }

  // 2. Staging as fp32, and qg = round(q exp2 G) (the slice loop's write_slice_qg) from the same registers.
  //    kFromInputs: q and k normalised first; G formed by the gate threads; qg waits for G (step 4).
  const bool qk_l2norm = kFromInputs && in->qk_l2norm;
#pragma unroll
  for (int x = 0; x < kQkPer; ++x) {
    const int u = tid + x * kThreads, i = u / (K / 8), d = (u % (K / 8)) * 8;
    if (u >= kQkUnits) continue;  // whole warps (AMD, K = 64): the butterfly below stays within full rows
    // A warp whose rows all lie past the chunk (their loads were skipped) stores zeros without the norms, the bits
    // the norms make of a zero row (its inverse norm is finite). Whole warps, so that the butterfly's shuffles stay
    // warp-wide; an 8-row chunk skips half of this loop at K = 128, a decode seven eighths.
    if ((warp * kWarpSize + x * kThreads) / (K / 8) >= length) {
#pragma unroll
      for (int c = 0; c < 8; c += 4) {
        *reinterpret_cast<float4*>(&q_s[i * kLdS + d + c]) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *reinterpret_cast<float4*>(&k_s[i * kLdS + d + c]) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if constexpr (!kFromInputs)
          *reinterpret_cast<float4*>(&g_s[i * kLdS + d + c]) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      continue;
    }
    float qv[8], kv[8];
    detail::unpack8<E>(q_raw[x], qv);
    detail::unpack8<E>(k_raw[x], kv);
    if constexpr (kFromInputs) {
      if (qk_l2norm) {  // as qk_l2norm_vec_kernel: the row's sum of squares, scale, then round to the I/O type
        float q_sq = detail::sum_squares8(qv), k_sq = detail::sum_squares8(kv);
        for (int mask = K / 16; mask > 0; mask /= 2) {
          q_sq += shfl_xor(q_sq, mask);
          k_sq += shfl_xor(k_sq, mask);
        }
        const float inv_q = detail::l2_inv_norm(q_sq), inv_k = detail::l2_inv_norm(k_sq);
#pragma unroll
        for (int c = 0; c < 8; c += 2) {
          numeric::unpack2<E>(numeric::pack2<E>(qv[c] * inv_q, qv[c + 1] * inv_q), &qv[c], &qv[c + 1]);
          numeric::unpack2<E>(numeric::pack2<E>(kv[c] * inv_k, kv[c + 1] * inv_k), &kv[c], &kv[c + 1]);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < 8; c += 4) {
      *reinterpret_cast<float4*>(&q_s[i * kLdS + d + c]) = make_float4(qv[c], qv[c + 1], qv[c + 2], qv[c + 3]);
      *reinterpret_cast<float4*>(&k_s[i * kLdS + d + c]) = make_float4(kv[c], kv[c + 1], kv[c + 2], kv[c + 3]);
    }
    if constexpr (!kFromInputs) {
      const float gv[8] = {g_in[2 * x].x,     g_in[2 * x].y,     g_in[2 * x].z,     g_in[2 * x].w,
                           g_in[2 * x + 1].x, g_in[2 * x + 1].y, g_in[2 * x + 1].z, g_in[2 * x + 1].w};
#pragma unroll
      for (int c = 0; c < 8; c += 4)
        *reinterpret_cast<float4*>(&g_s[i * kLdS + d + c]) = make_float4(gv[c], gv[c + 1], gv[c + 2], gv[c + 3]);
      if (ip.qg.data != nullptr && i < length) {
        float qg[8];
#pragma unroll
        for (int c = 0; c < 8; ++c) qg[c] = qv[c] * detail::decay_exp2(gv[c]);
        detail::store16(ip.qg, chunk.start + i, h, d, detail::pack8<E>(qg));
      }
    }
  }
  if constexpr (kFromInputs) {
    // G = RCP_LN2 * the chunk-local running sum of the activated gates, as gate_chunk_cumsum_kernel sums them; rows
    // past the chunk stay zeros.
    if (tid < K) {
      const float a_log_exp = in->A_log != nullptr ? expf(in->A_log[h]) : 1.0f;
      const float bias = in->dt_bias != nullptr ? in->dt_bias[int64_t(h) * K + tid] : 0.0f;
      const GateKind gate = in->gate;
      const float lower_bound = in->lower_bound;
      float* const g_last = in->G_last + (detail::block_chunk_id() * ip.num_heads + h) * K + tid;
      constexpr int kSeg = detail::kGateSumSegment;
      static_assert(kRows % kSeg == 0, "whole segments");
      float base = 0.0f;  // the earlier segments' totals
#pragma unroll
      for (int s = 0; s < kRows; s += kSeg) {
        float local = 0.0f;
#pragma unroll
        for (int i = s; i < s + kSeg; ++i) {
          float g = 0.0f;
          if (i < length) {
            local = detail::gate_cumsum_add(local, detail::gate_value(g_raw[i] + bias, gate, a_log_exp, lower_bound));
            g = detail::gate_cumsum_add(base, local) * kRcpLn2;
          }
          g_s[i * kLdS + tid] = g;
          if (i == length - 1) *g_last = g;
        }
        base = detail::gate_cumsum_add(base, local);
      }
    }
  }
  __syncthreads();

  // 3. The quarter's factors for slices [s0, s0 + kFactorSlices): the tasks (slice, quarter row, channel pair) of
  //    intra_chunk_mma_block's factor loop for block 0 with mid = 8: R' rows 0-7, then L' rows (k rows 8-15 over
  //    q rows 8-15). Only chunks longer than 8 rows have a quarter.
  const bool has_quarter = length > 8;
  auto form_factors = [&](int s0) {
    constexpr int kTasks = L::kFactorSlices * 16 * 8;
    for (int e = tid; e < kTasks; e += kThreads) {
      const int s = e / (16 * 8), quarter_row = (e / 8) % 16, d = 2 * (e % 8), c = 16 * (s0 + s) + d;
      uint16_t* tile = factors + s * L::kSliceRows * 16;
      auto ld2 = [&](const float* base, int row) { return *reinterpret_cast<const float2*>(&base[row * kLdS + c]); };
      const float2 g_mid = ld2(g_s, 8);
      if (quarter_row < 8) {
        const int col = quarter_row;
        const float2 decay = decay_exp2_pair(g_mid, ld2(g_s, col)), k = ld2(k_s, col);
        store_factor_pair(k.x * decay.x, k.y * decay.y, tile, quarter_row, d);
      } else {
        const int i = quarter_row - 8, row = 8 + i;
        const float2 decay = row < length ? decay_exp2_pair(ld2(g_s, row), g_mid) : make_float2(0.0f, 0.0f);
        const float2 q = ld2(q_s, row), k = ld2(k_s, row);
        store_factor_pair(k.x * decay.x, k.y * decay.y, tile + 8 * 16, i, d);
        store_factor_pair(q.x * decay.x, q.y * decay.y, tile + 8 * 16, 8 + i, d);
      }
    }
  };
  if (has_quarter) form_factors(0);

  // 4. Exact pairs: (pair, slice) tasks, pairs numbered as in the slice loop (triangle t = pair / 36 holds rows
  //    8 t .. 8 t + 7, pair i (i + 1) / 2 + j within it). Chunks of at most 8 rows have only the first triangle.
  const int pairs = has_quarter ? L::kPairs : L::kPairs / 2;
  auto pair_rows = [&](int pair, int* ri, int* rj) {
    const int t = pair / 36, x = pair % 36, i = triangular_count(x);
    *ri = 8 * t + i;
    *rj = 8 * t + x - i * (i + 1) / 2;
  };
  for (int e = tid; e < pairs * kSlices; e += kThreads) {
    const int pair = e % pairs, s = e / pairs;
    int ri, rj;
    pair_rows(pair, &ri, &rj);
    if (ri >= length) continue;
    const int c = 16 * s;
    const ExactPairSums sums = exact_pair_sums16<PlainRows>(q_s, k_s, g_s, ri * kLdS + c, rj * kLdS + c);
    partial_s[s * L::kPairs + pair] = make_float2(sums.kk, sums.qk);
  }
  if constexpr (kFromInputs) {  // qg = round(q exp2 G), write_slice_outputs' expression, now that G is staged
    const MutableTensorView qg_out = in->qg;
    for (int u = tid; u < length * (K / 8); u += kThreads) {
      const int i = u / (K / 8), d = (u % (K / 8)) * 8;
      float qg[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) qg[c] = q_s[i * kLdS + d + c] * detail::decay_exp2(g_s[i * kLdS + d + c]);
      detail::store16(qg_out, chunk.start + i, h, d, detail::pack8<E>(qg));
    }
  }
  __syncthreads();

  // 5. Each pair's total in slice order from zero (the slice loop's diag_kk += kk); the quarter's products, one warp,
  //    round after round.
  float pair_kk = 0.0f, pair_qk = 0.0f;
  int pair_ri = -1, pair_rj = 0;  // this thread's pair (threads < pairs), -1: none
  if (tid < pairs) {
    pair_rows(tid, &pair_ri, &pair_rj);
    if (pair_ri < length) {
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        const float2 part = partial_s[s * L::kPairs + tid];
        pair_kk += part.x;
        pair_qk += part.y;
      }
    } else {
      pair_ri = -1;
    }
  }
  const bool quarter_warp = has_quarter && warp == kIntraMmaWarps - 1;  // uniform over the warp
  m::Acc acc_quarter;
  m::zero(acc_quarter);
  for (int round = 0; has_quarter && round < L::kRounds; ++round) {
    if (round > 0) {
      form_factors(round * L::kFactorSlices);
      __syncthreads();
    }
    if (quarter_warp) {
#pragma unroll
      for (int s = 0; s < L::kFactorSlices; ++s) {
        const uint16_t* tile = factors + s * L::kSliceRows * 16;
        m::FragB rf = m::load_b_transposed_swizzled16(tile, lane);
        m::keep_b_columns_0_to_7(rf, lane);  // R' has 8 rows: the 8 the load reads past them (L') are masked out
        m::mma<IntraFactor>(acc_quarter, m::load_a_swizzled16(tile + 8 * 16, lane), rf);
      }
    }
    __syncthreads();  // the tiles are read before the next round (or the right-hand sides) overwrite them
  }
  if (!has_quarter) __syncthreads();  // the pair sums are read before the right-hand sides overwrite them

  // 6. Akk and Aqk in shared memory: zeros, then the pairs and the quarter (rows 0-7 of its product are Akk's rows
  //    8-15, rows 8-15 Aqk's; columns 8-15 are masked out). Meanwhile the right-hand sides: w's round(beta k exp2 G)
  //    and kg = round(k exp2(G_last - G)) from the staged k and G, u's round(beta v) from the registers.
  for (int e = tid; e < 2 * kRows * kLdO / 4; e += kThreads)
    reinterpret_cast<float4*>(akk_s)[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  static_assert(L::kAqk == L::kAkk + kRows * kLdO * 4, "Akk and Aqk rows are zeroed as one range");
  // Rows past the chunk are zeros (what beta = 0 makes of them), written without the arithmetic: for an 8-row chunk
  // that is half of this phase's instructions.
  for (int u = tid; u < kRows * K / 8; u += kThreads) {
    const int j = u / (K / 8), d = (u % (K / 8)) * 8;
    if (j >= length) {
      *reinterpret_cast<uint4*>(&rhs_w[j * L::kLdW + d]) = make_uint4(0, 0, 0, 0);
      continue;
    }
    float k[8], g[8], g_last[8], rhs[8], kg[8];
    detail::load8(&k_s[j * kLdS + d], k);
    detail::load8(&g_s[j * kLdS + d], g);
    detail::load8(&g_s[(length - 1) * kLdS + d], g_last);
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      rhs[c] = beta_s[j] * k[c] * detail::decay_exp2(g[c]);
      kg[c] = k[c] * detail::decay_exp2(g_last[c] - g[c]);
    }
    *reinterpret_cast<uint4*>(&rhs_w[j * L::kLdW + d]) = detail::pack8<E>(rhs);
    detail::store16(wp.kg, chunk.start + j, h, d, detail::pack8<E>(kg));
  }
#pragma unroll
  for (int x = 0; x < kVPer; ++x) {
    const int u = tid + x * kThreads, j = u / (V / 8), d = (u % (V / 8)) * 8;
    if (u >= kVUnits) continue;
    if (j >= length) {
      *reinterpret_cast<uint4*>(&rhs_u[j * L::kLdU + d]) = make_uint4(0, 0, 0, 0);
      continue;
    }
    float v[8];
    detail::unpack8<E>(v_raw[x], v);
#pragma unroll
    for (int c = 0; c < 8; ++c) v[c] = beta_s[j] * v[c];
    *reinterpret_cast<uint4*>(&rhs_u[j * L::kLdU + d]) = detail::pack8<E>(v);
  }
  __syncthreads();
  if (pair_ri >= 0) {
    if (pair_rj < pair_ri) akk_s[pair_ri * kLdO + pair_rj] = pair_kk;
    aqk_s[pair_ri * kLdO + pair_rj] = pair_qk;
  }
  if (quarter_warp) {
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; ++e) {
      const m::Coord c = m::acc_coord(lane, e);
      if (c.col >= 8) continue;
      float* dst = c.row < 8 ? akk_s : aqk_s;
      dst[(8 + c.row % 8) * kLdO + c.col] = acc_quarter.x[e];
    }
  }
  __syncthreads();

  // 7. Whole rows of Aqk (and Akk) leave as 16-byte vectors over all BT columns (zeros past the tile); Akk, masked
  //    and scaled by beta, stays for the inverse.
  constexpr int kRowVecs = BT / 4;
  for (int e = tid; e < length * kRowVecs; e += kThreads) {
    const int i = e / kRowVecs, j = 4 * (e % kRowVecs);
    const int64_t row = ((chunk.start + i) * ip.num_heads + h) * BT;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 akk =
        j < kRows ? mask_columns(*reinterpret_cast<const float4*>(&akk_s[i * kLdO + j]), j, length, beta_s[i]) : zero;
    if (j < kRows) *reinterpret_cast<float4*>(&akk_s[i * kLdO + j]) = akk;
    if (ip.Akk != nullptr) *reinterpret_cast<float4*>(&ip.Akk[row + j]) = akk;
    const float4 aqk =
        j < kRows ? mask_columns(*reinterpret_cast<const float4*>(&aqk_s[i * kLdO + j]), j, length, ip.scale) : zero;
    store_aqk4<E>(ip, row + j, aqk);
  }
  __syncthreads();

  // 8. Tinv = (I + Akk)^-1 of the one tile (tril_inverse's diagonal-tile code: rows past the chunk are zero in Akk,
  //    identity rows), then its hi + lo split with columns past the chunk masked, as the w/u part reads it. A chunk
  //    of at most 8 rows (a speculative batch's) needs the first 8 rows and columns only: the split reads no other,
  //    and the 8-row substitution is the 16-row one's first half bit for bit (28 instead of 120 dependent steps).
  if (length <= 8) {
    if (tid < 8) detail::diagonal_tile_inverse_column<8>(akk_s, tinv_s, kLdO, 0, tid);
  } else if (tid < kRows) {
    detail::diagonal_tile_inverse_column<kRows>(akk_s, tinv_s, kLdO, 0, tid);
  }
  __syncthreads();
  for (int e = tid; e < kRows * kRows / 4; e += kThreads) {
    const int i = e / (kRows / 4), j = 4 * (e % (kRows / 4));
    const float4 t = i < length ? mask_columns(*reinterpret_cast<const float4*>(&tinv_s[i * kLdO + j]), j, length, 1.0f)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    detail::store_hi_lo4<E>(&t_hi[i * kLdT + j], &t_lo[i * kLdT + j], t);
  }
  __syncthreads();

  // 9. w = Tinv round(beta k exp2 G), u = Tinv round(beta v): one 16x16 output tile per job (w's column tiles, then
  //    u's), each rounded to E into the right-hand-side tile it read (only its own warp reads that tile).
  constexpr int kWTiles = K / 16, kJobs = K / 16 + V / 16;
  for (int job = warp; job < kJobs; job += kIntraMmaWarps) {
    uint16_t* tile = job < kWTiles ? &rhs_w[job * 16] : &rhs_u[(job - kWTiles) * 16];
    const int ld = job < kWTiles ? L::kLdW : L::kLdU;
    const m::FragA hi = m::load_a(t_hi, kLdT, lane), lo = m::load_a(t_lo, kLdT, lane);
    const m::FragB b = m::load_b(tile, ld, lane);
    m::Acc acc;
    m::zero(acc);
    m::mma<E>(acc, hi, b);
    m::mma<E>(acc, lo, b);
    sync_warp();  // every lane has its operand before any lane overwrites the tile
    m::store_rounded<E>(tile, ld, acc, lane);
  }
  __syncthreads();
  for (int u = tid; u < length * (K / 8); u += kThreads) {
    const int i = u / (K / 8), d = (u % (K / 8)) * 8;
    detail::store16(wp.w, chunk.start + i, h, d, *reinterpret_cast<const uint4*>(&rhs_w[i * L::kLdW + d]));
  }
  for (int u = tid; u < length * (V / 8); u += kThreads) {
    const int i = u / (V / 8), d = (u % (V / 8)) * 8;
    detail::store16(wp.u, chunk.start + i, h, d, *reinterpret_cast<const uint4*>(&rhs_u[i * L::kLdU + d]));
  }
}

// chunk_prepare_mma_kernel's short path: q, k normalised and G formed by the earlier stages.
template <typename E, int BT, int K, int V>
__device__ KDA_SHORT_PATH_CALL void chunk_prepare_short_block(const IntraChunkParams& ip, const RecomputeWuParams& wp,
                                                              const detail::ChunkCoords& chunk, int h,
                                                              unsigned char* smem, float* beta_s, bool v_vector) {
  prepare_short_chunk<E, BT, K, V, /*kFromInputs=*/false>(ip, wp, nullptr, chunk, h, smem, beta_s, v_vector);
}

// chunk_prepare_inputs_mma_kernel's short path: from the raw q, k and g, writing qg and G_last too. kMinBlocks: the
// calling kernel's blocks per SM, so that each register budget gets a function of its own (one function called
// from kernels of different budgets is allocated for the smallest).
template <typename E, int BT, int K, int V, int kMinBlocks = ActiveTuning::kIntraMmaMinBlocks>
__device__ KDA_SHORT_PATH_CALL void chunk_prepare_inputs_short_block(const IntraChunkParams& ip,
                                                                     const RecomputeWuParams& wp,
                                                                     const PrepareInputsParams& in,
                                                                     const detail::ChunkCoords& chunk, int h,
                                                                     unsigned char* smem, float* beta_s,
                                                                     bool v_vector) {
  prepare_short_chunk<E, BT, K, V, /*kFromInputs=*/true>(ip, wp, &in, chunk, h, smem, beta_s, v_vector);
}

}  // namespace kda::kernels
