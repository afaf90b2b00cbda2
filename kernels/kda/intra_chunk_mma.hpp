// Stage 2 on the matrix units: the same contract as intra_chunk.hpp (Akk, Aqk in fp32, [T,H,BT]) with far fewer
// exponentials, for any K that is a multiple of 16.
//
// The chunk splits into 16-row blocks. For rows i of block a and columns j of an earlier block b < a, with r the
// first row of block a,
//     exp2(G_i - G_j) = exp2(G_i - G_r) * exp2(G_r - G_j),      both factors <= 1 (G is non-increasing),
// so the off-diagonal tiles are products of two factor matrices: L_i = x_i exp2(G_i - G_r) (x = k or q) and
// R_j = k_j exp2(G_r - G_j). No exponent is ever positive, so no finite gate overflows. The factors enter the
// matrix units as single fp16 values whatever the I/O type (IntraFactor: 11 significant bits, one product per tile;
// q and k are L2-normalised, so every factor is at most 1 in magnitude, inside fp16's range). Against hi + lo pairs
// (three products and a second rounding per factor) this moves the end-to-end errors by under 1e-6
// (see docs/performance.md, "Intra-chunk factor precision").
//
// Each diagonal tile splits the same way once more, at its middle row m = r + 8: its lower-left 8x8 quarter (rows
// m.., columns ..m-1) is the product of L'_i = x_i exp2(G_i - G_m) and R'_j = k_j exp2(G_m - G_j), again both <= 1.
// One matrix-unit product serves both matrices: its A operand stacks the 8 k rows over the 8 q rows. What is left,
// the two 8-row triangles of each diagonal tile (where a shared reference row would need exp2 of a positive number),
// is summed exactly per element: exp2(G_i - G_j) with j <= i.
//
// One block of kIntraMmaWarps warps per (chunk, head). K is walked in slices of 16 channels staged in shared memory
// with 16-byte loads: q and k must be vector_aligned (the launcher checks; otherwise it runs intra_chunk_kernel, the
// per-element form of the same contract). Per slice the whole block computes the factors and the exact triangle sums
// (the work is spread evenly over the threads), then the matrix products run, spread evenly over the warps: the
// off-diagonal (tile, matrix) products in contiguous runs of kSlots per warp, and one diagonal quarter per warp.
//
// With p.Tinv set, the block goes on to invert I + Akk while Akk is still in shared memory (detail::tril_inverse, the
// function the solve_tril stage runs), which saves the solve_tril launch and its round trip through memory. Then
// p.Akk may be null: chunk_kda_fwd reads only Tinv and Aqk, so Akk never leaves the chip.
#pragma once

#include "kda/detail/mma.hpp"
#include "kda/detail/stage_rows.hpp"
#include "kda/detail/tril_inverse.hpp"
#include "kda/intra_chunk.hpp"
#include "kda/prepare_inputs.hpp"
#include "kda/tuning.hpp"

namespace kda::kernels {

constexpr int kIntraMmaWarps = 4;

// Shared memory of one block: during the K loop the fp32 q/k/G slice and the factor tiles, afterwards Akk and Aqk
// (then Tinv) in fp32 rows of kLdO floats and tril_inverse's scratch. Kernels that run this stage declare
// kWorkBytes and pass it in.
template <int BT>
struct IntraMmaLayout {
  static constexpr int kBlocks = BT / 16;             // 16-row blocks
  static constexpr int kSlice = 16;                   // channels per step
  static constexpr int kLdS = detail::StageRows<kSlice, false>::kLd;  // room for either form of the staging rows
  static constexpr int kTiles = kBlocks * (kBlocks - 1) / 2;  // off-diagonal 16x16 tiles
  // Factor memory, in rows of 16 fp16 values. Per 16-row block b: L (q, k; 16 rows each), the quarter's R' (8 rows)
  // and L' (16 rows: k rows over q rows). Then R of every block (16 b rows for block b). R' comes before L' so that
  // the 8 rows a 16-row fragment load reads past R' are real memory (their products are masked out).
  static constexpr int kRowsPerBlock = 2 * 16 + 8 + 16;
  static constexpr int kRRows = 16 * kTiles > 0 ? 16 * kTiles : 16;
  static constexpr int kFactorHalves = (kBlocks * kRowsPerBlock + kRRows) * 16;
  static constexpr int kStageFloats = 3 * BT * kLdS;
  static constexpr int kLdO = BT + 4;                 // fp32 output rows (16-byte aligned for tril_inverse)
  static constexpr int kOutFloats = 2 * BT * kLdO + detail::tril_inverse_scratch_floats<BT>();
  static constexpr int kSliceBytes = kStageFloats * 4 + kFactorHalves * 2;
  static constexpr int kWorkBytes = kSliceBytes > kOutFloats * 4 ? kSliceBytes : kOutFloats * 4;
  // The fused prepare (kFromInputs) also keeps the next slice's raw q, k (16 bytes per 8 channels of a row) and g (up
  // to 32) past the factors during the slice loop; at BT = 64 that still fits in kWorkBytes.
  static constexpr int kRawBytes = BT * 2 * (16 + 16 + 32);
  static constexpr int kFusedWorkBytes = kSliceBytes + kRawBytes > kWorkBytes ? kSliceBytes + kRawBytes : kWorkBytes;
  static constexpr int kTinvOffsetFloats = BT * kLdO;  // where the block leaves Tinv (after Akk's rows)
  static_assert((kStageFloats * 4) % 16 == 0 && kRowsPerBlock % 8 == 0 && kRRows % 8 == 0,
                "fragment rows 16-byte aligned; swizzled tiles start at multiples of 8 rows");
};

// How many triangular numbers k (k + 1) / 2, k >= 1, are <= x (0 <= x < 64): the row i of pair x when the pairs
// (i, j), j <= i, of a triangle are numbered i (i + 1) / 2 + j. One population count instead of a loop of up to
// eight steps per exact pair slot (~150 instructions per warp before the slice loop, ~4 % of a speculative batch's
// 8-row chunk). (The same form for the product slots' tile rows, a loop of at most three steps, made ptxas spill
// three times as much in the fused prepare kernel, so that loop stays.)
__device__ inline int triangular_count(int x) {
  constexpr unsigned long long kTriangular = (1ull << 1) | (1ull << 3) | (1ull << 6) | (1ull << 10) | (1ull << 15) |
                                             (1ull << 21) | (1ull << 28) | (1ull << 36) | (1ull << 45) | (1ull << 55);
  return __popcll(kTriangular & ((2ull << x) - 1));
}

// The arithmetic both prepare paths share (this file's slice loop and chunk_prepare_short_mma.hpp), written once so
// that the two give the same bits.
//
// exp2(from - to) per channel of a pair.
__device__ inline float2 decay_exp2_pair(float2 from, float2 to) {
  return make_float2(detail::decay_exp2(from.x - to.x), detail::decay_exp2(from.y - to.y));
}
// The element type of the factor products, for every I/O type: fp16 carries three more significant bits than bf16,
// and the factors (at most 1 in magnitude) need none of bf16's range.
using IntraFactor = fp16_t;
// Two neighbouring channels' factors x0, x1 of one tile row: one paired rounding to IntraFactor and one 32-bit store
// into the swizzled16 tile.
__device__ inline void store_factor_pair(float x0, float x1, uint16_t* tile, int row, int d) {
  *reinterpret_cast<uint32_t*>(&tile[detail::mma::swizzled16(row, d)]) = numeric::pack2<IntraFactor>(x0, x1);
}
// One exact pair (row i, column j <= i) over 16 channels: sum_d k_i[d] k_j[d] exp2(G_i[d] - G_j[d]) and the same with
// q_i, from fp32 staging rows of the form Rows (detail::StageRows, or PlainRows) whose slice starts at elements
// `oi`, `oj` of q_s, k_s, g_s (16-byte aligned). Four channels per 16-byte shared load, summed in the same order
// whatever the rows' quarter permutation.
struct ExactPairSums {
  float kk, qk;
};
// Rows of 16 channels in order: the short path's staging (its offsets already hold the slice's first channel).
struct PlainRows {
  __device__ static constexpr int quarter(int row_start, int d) { return row_start + d; }
};
template <typename Rows>
__device__ inline ExactPairSums exact_pair_sums16(const float* q_s, const float* k_s, const float* g_s, int oi,
                                                  int oj) {
  float kk = 0.0f, qk = 0.0f;
#pragma unroll
  for (int d = 0; d < 16; d += 4) {
    const int qi = Rows::quarter(oi, d), qj = Rows::quarter(oj, d);
    const float4 kj4 = *reinterpret_cast<const float4*>(&k_s[qj]);
    const float4 gj4 = *reinterpret_cast<const float4*>(&g_s[qj]);
    const float4 gi4 = *reinterpret_cast<const float4*>(&g_s[qi]);
    const float4 ki4 = *reinterpret_cast<const float4*>(&k_s[qi]);
    const float4 qi4 = *reinterpret_cast<const float4*>(&q_s[qi]);
    const float kj[4] = {kj4.x * detail::decay_exp2(gi4.x - gj4.x), kj4.y * detail::decay_exp2(gi4.y - gj4.y),
                         kj4.z * detail::decay_exp2(gi4.z - gj4.z), kj4.w * detail::decay_exp2(gi4.w - gj4.w)};
    kk += ki4.x * kj[0] + ki4.y * kj[1] + ki4.z * kj[2] + ki4.w * kj[3];
    qk += qi4.x * kj[0] + qi4.y * kj[1] + qi4.z * kj[2] + qi4.w * kj[3];
  }
  return {kk, qk};
}
// exact_pair_sums16's qk for a pair on the diagonal (j = i), whose decay exp2(0) is exactly 1: the same sums in the
// same order without the exp2 and the products by 1, so the bits are those of exact_pair_sums16(.., oi, oi).qk
// (FusedPrepareShortPathMatchesLongPath compares them with the short path, which still takes the general form). Its
// kk would be Akk's diagonal, which is not stored.
template <typename Rows>
__device__ inline float exact_diagonal_qk16(const float* q_s, const float* k_s, int oi) {
  float qk = 0.0f;
#pragma unroll
  for (int d = 0; d < 16; d += 4) {
    const int qi = Rows::quarter(oi, d);
    const float4 ki4 = *reinterpret_cast<const float4*>(&k_s[qi]);
    const float4 qi4 = *reinterpret_cast<const float4*>(&q_s[qi]);
    qk += qi4.x * ki4.x + qi4.y * ki4.y + qi4.z * ki4.z + qi4.w * ki4.w;
  }
  return qk;
}

// Four Aqk values at element `at` of [T,H,BT]: fp32, or the hi + lo pair in E (8 bytes each; the output stage's split,
// done once here) when p.aqk_hi is set.
template <typename E, typename Params>
__device__ inline void store_aqk4(const Params& p, int64_t at, float4 aqk) {
  if (p.aqk_hi != nullptr) {
    detail::store_hi_lo4<E>(static_cast<uint16_t*>(p.aqk_hi) + at, static_cast<uint16_t*>(p.aqk_lo) + at, aqk);
  } else {
    *reinterpret_cast<float4*>(&p.Aqk[at]) = aqk;
  }
}

// Columns at or past the chunk's end are zero; the others are scaled.
__device__ inline float4 mask_columns(float4 v, int j, int length, float scale) {
  return make_float4(j < length ? scale * v.x : 0.0f, j + 1 < length ? scale * v.y : 0.0f,
                     j + 2 < length ? scale * v.z : 0.0f, j + 3 < length ? scale * v.w : 0.0f);
}

// The stage for one located (chunk, head) in a block of kIntraMmaWarps warps: writes Aqk (and Akk unless p.Akk is
// null). With `invert`, it goes on to Tinv = (I + Akk)^-1 and leaves it in smem at kTinvOffsetFloats, fp32 rows of
// kLdO, visible to the whole block. Only rows and columns below the chunk's length are meaningful there (the
// tiles past it hold leftovers): read it through mask_columns, as the Tinv write does. smem holds
// IntraMmaLayout<BT>::kWorkBytes; beta_s BT floats (left holding the activated betas).
//
// kFromInputs (the fused prepare of chunk_kda_fwd): p.q, p.k are the raw inputs and p.G is unused. Each slice is
// normalised with the row norms in inputs_s (when in->qk_l2norm) and its G formed from in->g (gate, then the
// chunk-local sum), and the block writes that slice of in->qg, of kg (to kg_out), of w's right-hand side
// round(beta k exp2 G) (to w_out, where the w/u part reads it back) and of in->G_last. inputs_s: inverse norms of
// the q rows [BT] and k rows [BT] (filled by qk_row_inv_norms when in->qk_l2norm), then G of the last row [K]
// (written here), dt_bias [K] (filled by the caller, zeros without one) and the gate sum's segment totals
// [BT / kGateSumSegment x 16] (PrepareInputsShared<BT, K>::kFloats in all). kGateSumFromRaw (NVIDIA, kFromInputs):
// the gate sum's threads activate the raw gates themselves (kRawGateSum below).
template <typename E, int BT, bool kFromInputs = false, bool kDiagonalSlots = true, bool kGateSumFromRaw = false>
__device__ inline void intra_chunk_mma_block(const IntraChunkParams& p, const detail::ChunkCoords& chunk, int h,
                                             unsigned char* smem, float* beta_s, bool invert,
                                             const PrepareInputsParams* in = nullptr, float* inputs_s = nullptr,
                                             MutableTensorView w_out = {}, MutableTensorView kg_out = {}) {
  namespace m = detail::mma;
  using L = IntraMmaLayout<BT>;
  constexpr int kThreads = kIntraMmaWarps * kWarpSize;
  constexpr int kBlocks = L::kBlocks, kSlice = L::kSlice, kLdS = L::kLdS, kRowsPerBlock = L::kRowsPerBlock;
  using S = detail::StageRows<kSlice, /*kSwizzled=*/kFromInputs>;  // the staging rows' form (stage_rows.hpp)
  constexpr int kStageFloats = L::kStageFloats, kLdO = L::kLdO, kTiles = L::kTiles;
  // Exact triangles: two per diagonal tile, 8 rows each, 36 pairs (i, j), j <= i.
  constexpr int kTrianglePairs = 8 * 9 / 2;
  // Off-diagonal products: (tile (a, b), b < a) x (Akk, Aqk), in runs of kSlots per warp.
  constexpr int kProducts = 2 * kTiles;
  constexpr int kSlots = kProducts > 0 ? (kProducts + kIntraMmaWarps - 1) / kIntraMmaWarps : 1;
  static_assert(kBlocks <= kIntraMmaWarps, "one diagonal quarter per warp");
  float* q_s = reinterpret_cast<float*>(smem);
  float* k_s = q_s + BT * kLdS;
  float* g_s = k_s + BT * kLdS;
  uint16_t* factors = reinterpret_cast<uint16_t*>(smem + kStageFloats * 4);

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  auto rows = [&](int row) { return factors + row * 16; };  // the factor tile starting at this row
  auto lq = [&](int b) { return rows(b * kRowsPerBlock); };
  auto lk = [&](int b) { return rows(b * kRowsPerBlock + 16); };
  auto rq = [&](int b) { return rows(b * kRowsPerBlock + 32); };   // R' of block b's diagonal quarter
  auto lqr = [&](int b) { return rows(b * kRowsPerBlock + 40); };  // L' (k rows 0-7, q rows 8-15)
  auto r = [&](int b) { return rows(kBlocks * kRowsPerBlock + 8 * b * (b - 1)); };
  for (int i = threadIdx.x; i < BT; i += kThreads) {
    const float raw = i < chunk.length ? detail::load_scalar(p.beta, p.beta_type, chunk.start + i, h, 0) : 0.0f;
    beta_s[i] = i < chunk.length ? detail::activate_beta(raw, p.beta_activation) : 0.0f;
  }

  // This warp's off-diagonal products: product n = warp * kSlots + s is matrix n / kTiles (0 Akk, 1 Aqk) at tile
  // n % kTiles, tiles numbered row by row: (1,0), (2,0), (2,1), (3,0), ...
  int slot_a[kSlots], slot_b[kSlots], slot_m[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int n = warp * kSlots + s, t = n % (kTiles > 0 ? kTiles : 1);
    int a = 1;
    while (a * (a + 1) / 2 <= t) ++a;
    slot_a[s] = n < kProducts ? a : BT;  // BT: no product
    slot_b[s] = t - a * (a - 1) / 2;
    slot_m[s] = n / (kTiles > 0 ? kTiles : 1);
  }
  m::Acc acc[kSlots], acc_quarter;
#pragma unroll
  for (int s = 0; s < kSlots; ++s) m::zero(acc[s]);
  m::zero(acc_quarter);
  const int qb = kIntraMmaWarps - 1 - warp;  // this warp's diagonal quarter: block qb (none when qb >= kBlocks)
  const bool has_quarter = qb < kBlocks && 16 * qb + 8 < chunk.length;

  // Exact triangle pairs, decoded once into the starts of their staging rows packed as S::at(row_i, 0) | S::at(row_j,
  // 0) << 16 (-1: no pair), so that a slice reaches each quarter of a row by one S::quarter instead of decoding the
  // rows again (see docs/performance.md, "Exact triangle pairs").
  // The first kGeneralSlots slots hold task tid + x * kThreads of the pairs exact_pair_sums16 forms: with
  // kDiagonalSlots those below the diagonals (triangle task / 28, pair i (i - 1) / 2 + j, j < i), else all of them
  // (triangle task / 36, pair i (i + 1) / 2 + j, j <= i). With kDiagonalSlots the rest hold the diagonals (task
  // kThreads - 1 - tid + (x - kGeneralSlots) * kThreads: triangle task / 8, i = j), which need no exp2
  // (exact_diagonal_qk16): a slot's kind is known at compile time, and the diagonals go to the last warps first, which
  // have the fewest pairs below (at BT = 64 with 128 threads: warps 0 and 1 two pairs below, warp 2 two and a diagonal,
  // warp 3 one and a diagonal). Without kDiagonalSlots keep the task arithmetic as it is: in the fused prepare at
  // 128 registers a rewrite computing the same values made ptxas spill in the slice loop (12 / 24 -> 64 / 76 bytes).
  constexpr int kGeneralPairs = 2 * kBlocks * (kDiagonalSlots ? kTrianglePairs - 8 : kTrianglePairs);
  constexpr int kDiagonalPairs = kDiagonalSlots ? 2 * kBlocks * 8 : 0;
  constexpr int kGeneralSlots = (kGeneralPairs + kThreads - 1) / kThreads;
  constexpr int kPairSlots = kGeneralSlots + (kDiagonalPairs + kThreads - 1) / kThreads;
  int pair_rows[kPairSlots];
  float diag_kk[kPairSlots] = {}, diag_qk[kPairSlots] = {};
  if constexpr (kDiagonalSlots) {
#pragma unroll
    for (int x = 0; x < kPairSlots; ++x) {
      if (x < kGeneralSlots) {
        const int task = threadIdx.x + x * kThreads, pair = task % (kTrianglePairs - 8);
        const int i = triangular_count(pair) + 1, base = 8 * (task / (kTrianglePairs - 8));
        pair_rows[x] =
            task < kGeneralPairs ? S::at(base + i, 0) | (S::at(base + pair - i * (i - 1) / 2, 0) << 16) : -1;
      } else {
        const int row = kThreads - 1 - threadIdx.x + (x - kGeneralSlots) * kThreads;  // diagonal task = its row
        pair_rows[x] = row < kDiagonalPairs ? S::at(row, 0) | (S::at(row, 0) << 16) : -1;
      }
    }
  } else {
#pragma unroll
    for (int x = 0; x < kPairSlots; ++x) {
      const int task = threadIdx.x + x * kThreads, pair = task % kTrianglePairs;
      const int i = triangular_count(pair);
      const int base = 8 * (task / kTrianglePairs);
      pair_rows[x] =
          task < kGeneralPairs ? S::at(base + i, 0) | (S::at(base + pair - i * (i + 1) / 2, 0) << 16) : -1;
    }
  }

  // Slice staging: 16 channels of a row are two 16-byte vectors of q and of k and four of G. The next slice's loads
  // are issued right after the current slice is staged, so they fly while it is computed (ncu: waiting on these
  // loads was ~16 % of the kernel's stall samples when each slice loaded on its own).
  constexpr int kQkUnits = BT * 2, kGUnits = BT * 4;
  constexpr int kQkPerThread = (kQkUnits + kThreads - 1) / kThreads;
  constexpr int kGPerThread = (kGUnits + kThreads - 1) / kThreads;
  // kFromInputs: g[2 x] and g[2 x + 1] are the raw gates of q/k unit x's 8 channels.
  constexpr int kGRegs = kFromInputs ? 2 * kQkPerThread : kGPerThread;
  struct SliceRegs {
    uint4 q[kQkPerThread], k[kQkPerThread];  // raw 16-bit values
    float4 g[kGRegs];
  };
  const float a_log_exp = kFromInputs && in->A_log != nullptr ? expf(in->A_log[h]) : 1.0f;
  const float* inv_q_s = inputs_s;
  const float* inv_k_s = kFromInputs ? inputs_s + BT : nullptr;
  float* glast_s = kFromInputs ? inputs_s + 2 * BT : nullptr;
  const float* bias_s = kFromInputs ? inputs_s + 2 * BT + p.head_dim : nullptr;
  // Short chunks (decodes, speculative batches): after the first slice, a warp whose units of group x all lie past
  // the chunk neither loads nor stores them; their staging rows keep the first slice's zeros (nothing else writes
  // them during the slice loop). Uniform over the warp.
  auto warp_past_chunk = [&](int d0, int x, int units_per_row) {
    return d0 > 0 && (warp * kWarpSize + x * kThreads) / units_per_row >= chunk.length;
  };
  auto load_slice = [&](int d0, SliceRegs& r) {
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      if (warp_past_chunk(d0, x, 2)) continue;
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = d0 + (u % 2) * 8;
      const bool valid = u < kQkUnits && i < chunk.length;
      if constexpr (kFromInputs) {
        const bool vec = in->qk_vector;
        r.q[x] = valid ? detail::load16_any(p.q, vec, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
        r.k[x] = valid ? detail::load16_any(p.k, vec, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
        float graw[8] = {};
        if (valid) detail::load_scalar8(in->g, in->g_type, in->g_vector, chunk.start + i, h, d, graw);
        r.g[2 * x] = make_float4(graw[0], graw[1], graw[2], graw[3]);
        r.g[2 * x + 1] = make_float4(graw[4], graw[5], graw[6], graw[7]);
      } else {
        r.q[x] = valid ? detail::load16(p.q, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
        r.k[x] = valid ? detail::load16(p.k, chunk.start + i, h, d) : make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (!kFromInputs) {
#pragma unroll
      for (int x = 0; x < kGPerThread; ++x) {
        if (warp_past_chunk(d0, x, 4)) continue;
        const int u = threadIdx.x + x * kThreads, i = u / 4, d = d0 + (u % 4) * 4;
        r.g[x] = u < kGUnits && i < chunk.length
                     ? *reinterpret_cast<const float4*>(&p.G[((chunk.start + i) * p.num_heads + h) * p.head_dim + d])
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  };
  // NVIDIA, kFromInputs: the next slice's raw q, k and g travel to shared memory by asynchronous copies (cp.async)
  // instead of registers, so that no registers hold them across the slice's work (smem holds
  // IntraMmaLayout::kFusedWorkBytes). Views that are not 16-byte aligned take per-element loads stored there. Each
  // thread stages its own q, k units. raw_g without kRawGateSum: two planes of float4 (channels 0-3 and 4-7 of each
  // unit), or in the first the 16 bytes of a 16-bit gate, each read back by the thread that copied it, so its own
  // wait suffices. With kRawGateSum (the long-only fused prepare): 16 channels per row, fp32 or the raw 16-bit values,
  // rows in detail::raw_gate_row_start's order; the gates are read across threads (by the gate sum's (segment,
  // channel) threads), so every thread waits for its copies before the slice's last barrier and the next slice's
  // copies are issued after its first.
#if defined(KDA_PLATFORM_CUDA)
  constexpr bool kRawInShared = kFromInputs;
#else
  constexpr bool kRawInShared = false;  // no asynchronous copy: the registers keep the loads in flight
#endif
  constexpr bool kRawGateSum = kRawInShared && kGateSumFromRaw;
  uint4* raw_q = reinterpret_cast<uint4*>(smem + L::kSliceBytes);
  uint4* raw_k = raw_q + kQkUnits;
  float4* raw_g = reinterpret_cast<float4*>(raw_k + kQkUnits);
  const bool g16 = kFromInputs && in->g_vector && in->g_type != ScalarType::kFloat32;
  float* raw_gf = reinterpret_cast<float*>(raw_g);
  uint16_t* raw_g16 = reinterpret_cast<uint16_t*>(raw_g);
  auto issue_slice = [&](int d0) {
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      if (warp_past_chunk(d0, x, 2)) continue;
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = d0 + (u % 2) * 8;
      if (u >= kQkUnits) continue;
      const bool valid = i < chunk.length;
      const int64_t t = chunk.start + (valid ? i : 0);
      if (in->qk_vector) {
        const uint16_t* q = static_cast<const uint16_t*>(p.q.data) + detail::element_offset(p.q, t, h, d);
        const uint16_t* k = static_cast<const uint16_t*>(p.k.data) + detail::element_offset(p.k, t, h, d);
        detail::copy16_async_zfill(&raw_q[u], q, valid);
        detail::copy16_async_zfill(&raw_k[u], k, valid);
      } else {
        raw_q[u] = valid ? detail::load16_elementwise(p.q, t, h, d) : make_uint4(0, 0, 0, 0);
        raw_k[u] = valid ? detail::load16_elementwise(p.k, t, h, d) : make_uint4(0, 0, 0, 0);
      }
      const int64_t off = detail::element_offset(in->g, t, h, d);
      // Where the unit's gates go: channels 0-3 and 4-7 as float4 (fp32), or its 16 bytes at the first (16-bit).
      // Without kRawGateSum two planes of float4 units; with it whole 16-channel rows in raw_gate_row_start's order.
      const int at = detail::raw_gate_row_start(i) + (u % 2) * 8;
      float4* g_lo = kRawGateSum ? reinterpret_cast<float4*>(&raw_gf[at]) : &raw_g[u];
      float4* g_hi = kRawGateSum ? reinterpret_cast<float4*>(&raw_gf[at + 4]) : &raw_g[kQkUnits + u];
      void* g_raw16 = kRawGateSum ? static_cast<void*>(&raw_g16[at]) : static_cast<void*>(&raw_g[u]);
      if (in->g_vector && !g16) {
        const float* src = static_cast<const float*>(in->g.data) + off;
        detail::copy16_async_zfill(g_lo, src, valid);
        detail::copy16_async_zfill(g_hi, src + 4, valid);
      } else if (g16) {
        detail::copy16_async_zfill(g_raw16, static_cast<const uint16_t*>(in->g.data) + off, valid);
      } else {
        float graw[8] = {};
        if (valid) detail::load_scalar8(in->g, in->g_type, false, t, h, d, graw);
        *g_lo = make_float4(graw[0], graw[1], graw[2], graw[3]);
        *g_hi = make_float4(graw[4], graw[5], graw[6], graw[7]);
      }
    }
  };
  // The thread's q, k copies of this slice as SliceRegs, for store_slice (the same values load_slice would give; the
  // copies have landed: waited for before the last barrier). The gates stay in raw_g for gate_local_sums.
  auto landed_slice = [&](int d0, SliceRegs& r) {
    if constexpr (!kRawGateSum) detail::copy16_async_wait();  // the thread's own copies suffice here
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      if (warp_past_chunk(d0, x, 2)) continue;
      const int u = threadIdx.x + x * kThreads;
      if (u >= kQkUnits) continue;
      r.q[x] = raw_q[u];
      r.k[x] = raw_k[u];
      if constexpr (!kRawGateSum) {
        if (g16) {
          float graw[8];
          detail::widen16x8(*reinterpret_cast<const uint4*>(&raw_g[u]), in->g_type, graw);  // as load_scalar8
          r.g[2 * x] = make_float4(graw[0], graw[1], graw[2], graw[3]);
          r.g[2 * x + 1] = make_float4(graw[4], graw[5], graw[6], graw[7]);
        } else {
          r.g[2 * x] = raw_g[u];
          r.g[2 * x + 1] = raw_g[kQkUnits + u];
        }
      }
    }
  };
  auto store_slice = [&](const SliceRegs& r, int d0) {
#pragma unroll
    for (int x = 0; x < kQkPerThread; ++x) {
      const int u = threadIdx.x + x * kThreads, i = u / 2, d = (u % 2) * 8;
      if (u >= kQkUnits || warp_past_chunk(d0, x, 2)) continue;
      float qv[8], kv[8];
      detail::unpack8<E>(r.q[x], qv);
      detail::unpack8<E>(r.k[x], kv);
      if constexpr (kFromInputs) {
        if (in->qk_l2norm && i < chunk.length) {  // as qk_l2norm_vec_kernel: scale, then round to the I/O type
#pragma unroll
          for (int c = 0; c < 8; c += 2) {  // round_to, two values per packed conversion
            numeric::unpack2<E>(numeric::pack2<E>(qv[c] * inv_q_s[i], qv[c + 1] * inv_q_s[i]), &qv[c], &qv[c + 1]);
            numeric::unpack2<E>(numeric::pack2<E>(kv[c] * inv_k_s[i], kv[c + 1] * inv_k_s[i]), &kv[c], &kv[c + 1]);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < 8; c += 4) {
        *reinterpret_cast<float4*>(&q_s[S::at(i, d + c)]) = make_float4(qv[c], qv[c + 1], qv[c + 2], qv[c + 3]);
        *reinterpret_cast<float4*>(&k_s[S::at(i, d + c)]) = make_float4(kv[c], kv[c + 1], kv[c + 2], kv[c + 3]);
      }
      if constexpr (kFromInputs && !kRawGateSum) {
        // The activated gate of each channel; the chunk-local sum follows once the whole slice is here. Formed four
        // channels at a time after q and k are stored, so that few values are live at once: formed beside them, eight
        // at a time, it made ptxas spill the slice loop's accumulators at 128 registers, reloaded in every slice
        // (see docs/performance.md, "Slice loop at the register cap").
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float4 graw = r.g[2 * x + half];
          float4 gv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (i < chunk.length) {  // rows past the chunk: zeros, and no gate work
            const float* bias = &bias_s[d0 + d + 4 * half];
            gv.x = detail::gate_value(graw.x + bias[0], in->gate, a_log_exp, in->lower_bound);
            gv.y = detail::gate_value(graw.y + bias[1], in->gate, a_log_exp, in->lower_bound);
            gv.z = detail::gate_value(graw.z + bias[2], in->gate, a_log_exp, in->lower_bound);
            gv.w = detail::gate_value(graw.w + bias[3], in->gate, a_log_exp, in->lower_bound);
          }
          *reinterpret_cast<float4*>(&g_s[S::at(i, d + 4 * half)]) = gv;
        }
      }
    }
    if constexpr (!kFromInputs) {
#pragma unroll
      for (int x = 0; x < kGPerThread; ++x) {
        const int u = threadIdx.x + x * kThreads, i = u / 4, d = (u % 4) * 4;
        if (u < kGUnits && !warp_past_chunk(d0, x, 4)) *reinterpret_cast<float4*>(&g_s[S::at(i, d)]) = r.g[x];
      }
    }
  };
  // kFromInputs: G = RCP_LN2 * (chunk-local running sum of the activated gates), in detail::kGateSumSegment's order
  // (the gate stage's, so the bits agree), into g_s, and G of the last row kept in glast_s (written to in->G_last
  // after the slice loop). Thread (seg, c) sums segment seg of channel c: local running sums over the segment's rows,
  // its total to seg_s, a barrier, then base = the earlier segments' totals in order and G = RCP_LN2 (base + local).
  // Rows past the chunk add zeros and are stored as zeros. Then, in the same phase as the factors, this slice of qg,
  // kg and w's right-hand side leaves in 16-byte row segments (write_slice_outputs).
  constexpr int kSeg = detail::kGateSumSegment, kSegs = BT / kSeg;
  static_assert(!kFromInputs || (BT % kSeg == 0 && kSegs * kSlice <= kThreads), "a thread per (segment, channel)");
  float* seg_s = kFromInputs ? inputs_s + 2 * BT + 2 * p.head_dim : nullptr;  // [kSegs][kSlice] segment totals
  const int gate_c = threadIdx.x % kSlice, gate_seg = threadIdx.x / kSlice, gate_row0 = gate_seg * kSeg;
  const bool gate_active = gate_seg < kSegs && gate_row0 < chunk.length;
  // G of row i (in this thread's segment and channel) from its segment-local running sum.
  auto store_gate = [&](int d0, int i, float base, float local) {
    const float g = detail::gate_cumsum_add(base, local) * kRcpLn2;
    g_s[S::at(i, gate_c)] = i < chunk.length ? g : 0.0f;
    if (i == chunk.length - 1) glast_s[d0 + gate_c] = g;
  };
  auto segment_base = [&]() {  // constant trip count, predicated rather than branched (the sum keeps its order)
    float base = 0.0f;
#pragma unroll
    for (int k = 0; k < kSegs - 1; ++k)
      if (k < gate_seg) base = detail::gate_cumsum_add(base, seg_s[k * kSlice + gate_c]);
    return base;
  };
  // kRawGateSum (NVIDIA, the long-only fused prepare): the (segment, channel) thread also activates its rows' raw
  // gates, read from raw_g, and leaves its running sums in g_s for itself: one barrier per slice fewer than
  // form_gate_sum, and no pass of the activated gates through g_s between threads. Faster in that kernel, slower in
  // the kernel with the short path (96 registers) (see docs/performance.md, "Gate sum").
  auto gate_local_sums = [&](int d0) {
    if (gate_active) {
      // All eight raw gates first, then the eight activations, then the running sum: no branch between them, so
      // their exponentials and logarithms overlap. Rows past the chunk read zeros and add their activations too: a
      // running sum depends only on the rows before it, gate_finish stores zeros for those rows, and the total of
      // the segment that holds the chunk's end reaches only segments past it, which form nothing (checking each row
      // against the chunk's length cost ~26 instructions per slice).
      float x[kSeg];
#pragma unroll
      for (int r = 0; r < kSeg; ++r) {
        const int at = detail::raw_gate_row_start(gate_row0 + r) + gate_c;
        x[r] = g16 ? detail::widen16(raw_g16[at], in->g_type) : raw_gf[at];
      }
      const float bias = bias_s[d0 + gate_c];
#pragma unroll
      for (int r = 0; r < kSeg; ++r) x[r] = detail::gate_value(x[r] + bias, in->gate, a_log_exp, in->lower_bound);
      float run = 0.0f;
#pragma unroll
      for (int r = 0; r < kSeg; ++r) {
        run = detail::gate_cumsum_add(run, x[r]);
        g_s[S::at(gate_row0 + r, gate_c)] = run;  // the running sum, until gate_finish forms G from it
      }
      seg_s[gate_seg * kSlice + gate_c] = run;
    } else if (gate_seg < kSegs && d0 == 0) {  // a segment past the chunk: zero rows, as the staging leaves them
#pragma unroll
      for (int r = 0; r < kSeg; ++r) g_s[S::at(gate_row0 + r, gate_c)] = 0.0f;
    }
  };
  auto gate_finish = [&](int d0) {
    if (!gate_active) return;
    const float base = segment_base();
    const int rows = chunk.length - gate_row0;  // of this segment inside the chunk (at least 1)
    if (rows >= kSeg) {  // the whole segment (every segment of a full chunk): store_gate without its per-row checks
#pragma unroll
      for (int r = 0; r < kSeg; ++r) {
        float* at = &g_s[S::at(gate_row0 + r, gate_c)];
        const float g = detail::gate_cumsum_add(base, *at) * kRcpLn2;
        *at = g;
        if (r == kSeg - 1 && rows == kSeg) glast_s[d0 + gate_c] = g;  // the chunk's last row
      }
    } else {
#pragma unroll
      for (int r = 0; r < kSeg; ++r) store_gate(d0, gate_row0 + r, base, g_s[S::at(gate_row0 + r, gate_c)]);
    }
  };
  // Without kRawGateSum (AMD, the kernels with the short path): store_slice left the activated gates in g_s; two
  // barriers, the totals then G (the running sums are formed again rather than held: registers are the bound here).
  // Keep it word for word, so that those kernels' code does not move.
  auto form_gate_sum = [&](int d0) {
    // seg_s's address, formed here as before: taken from seg_s above, the kernels with the short path compiled to 40
    // more instructions (scripts/profiling/cubin_compare.py).
    float* totals_s = inputs_s + 2 * BT + 2 * p.head_dim;  // [kSegs][kSlice] segment totals
    const int c = threadIdx.x % kSlice, seg = threadIdx.x / kSlice, row0 = seg * kSeg;
    const bool active = seg < kSegs && row0 < chunk.length;
    if (active) {
      float total = 0.0f;
#pragma unroll
      for (int r = 0; r < kSeg; ++r) total = detail::gate_cumsum_add(total, g_s[S::at(row0 + r, c)]);
      totals_s[seg * kSlice + c] = total;
    }
    __syncthreads();
    if (active) {  // constant trip counts, predicated rather than branched (the sums keep their order)
      float base = 0.0f, local = 0.0f;
#pragma unroll
      for (int k = 0; k < kSegs - 1; ++k)
        if (k < seg) base = detail::gate_cumsum_add(base, totals_s[k * kSlice + c]);
#pragma unroll
      for (int r = 0; r < kSeg; ++r) {
        const int i = row0 + r;  // rows past the chunk (zeros) are summed but not stored
        local = detail::gate_cumsum_add(local, g_s[S::at(i, c)]);
        const float g = detail::gate_cumsum_add(base, local) * kRcpLn2;
        if (i < chunk.length) g_s[S::at(i, c)] = g;
        if (i == chunk.length - 1) glast_s[d0 + c] = g;  // to in->G_last after the slice loop
      }
    }
  };
  // Channels d .. d + 7 (d a multiple of 8) of staged row i: two whole quarters, one 16-byte load each.
  auto load_staged8 = [&](const float* base, int i, int d, float (&out)[8]) {
    detail::load8(&base[S::at(i, d)], &base[S::at(i, d + 4)], out);
  };
  auto write_slice_outputs = [&](int d0) {
    for (int u = threadIdx.x; u < kQkUnits; u += kThreads) {
      const int i = u / 2, d = (u % 2) * 8;
      if (i >= chunk.length) continue;
      float qs[8], ks[8], gs[8], qg[8], rhs[8], kg[8];
      load_staged8(q_s, i, d, qs);
      load_staged8(k_s, i, d, ks);
      load_staged8(g_s, i, d, gs);
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const float g = gs[c], k = ks[c], decay = detail::decay_exp2(g);
        qg[c] = qs[c] * decay;                            // the output stage's qg
        rhs[c] = beta_s[i] * k * decay;                   // the w/u stage's right-hand side of w
        kg[c] = k * detail::decay_exp2(glast_s[d0 + d + c] - g);  // the w/u stage's kg
      }
      const int64_t t = chunk.start + i;
      detail::store16(in->qg, t, h, d0 + d, detail::pack8<E>(qg));
      detail::store16(w_out, t, h, d0 + d, detail::pack8<E>(rhs));
      detail::store16(kg_out, t, h, d0 + d, detail::pack8<E>(kg));
    }
  };
  // Staged form with qg asked for (chunk_kda_fwd, whose state kernel then forms the output): this slice of qg =
  // round(q exp2 G), write_slice_outputs' and the output stage's expression, from the staged q and G.
  auto write_slice_qg = [&](int d0) {
    for (int u = threadIdx.x; u < kQkUnits; u += kThreads) {
      const int i = u / 2, d = (u % 2) * 8;
      if (i >= chunk.length) continue;
      float qs[8], gs[8], qg[8];
      load_staged8(q_s, i, d, qs);
      load_staged8(g_s, i, d, gs);
#pragma unroll
      for (int c = 0; c < 8; ++c) qg[c] = qs[c] * detail::decay_exp2(gs[c]);
      detail::store16(p.qg, chunk.start + i, h, d0 + d, detail::pack8<E>(qg));
    }
  };
  SliceRegs next;
  if constexpr (kRawInShared) {
    issue_slice(0);
  } else {
    load_slice(0, next);
  }
  for (int d0 = 0; d0 < p.head_dim; d0 += kSlice) {
    // The previous slice's readers of the staged rows (outputs, factors, exact pairs) all ran before its "factors are
    // written" barrier, and its products read only the factor tiles, which this slice writes after the barrier below.
    // So only the first slice waits here: for the row norms, biases and betas written before the loop (and, with
    // kRawGateSum, every thread's copies of the first slice).
    if (d0 == 0) {
      if constexpr (kRawGateSum) detail::copy16_async_wait();
      __syncthreads();
    }
    if constexpr (kRawGateSum) {
      SliceRegs here;
      landed_slice(d0, here);
      store_slice(here, d0);
      gate_local_sums(d0);
    } else if constexpr (kRawInShared) {
      SliceRegs here;
      landed_slice(d0, here);
      store_slice(here, d0);
      if (d0 + kSlice < p.head_dim) issue_slice(d0 + kSlice);
    } else {
      store_slice(next, d0);
      if (d0 + kSlice < p.head_dim) load_slice(d0 + kSlice, next);
    }
    __syncthreads();
    if constexpr (kRawGateSum) {
      // Every thread's reads of raw_g are behind the barrier above: the next slice's copies may overwrite it.
      if (d0 + kSlice < p.head_dim) issue_slice(d0 + kSlice);
      gate_finish(d0);
      __syncthreads();
      write_slice_outputs(d0);
    } else if constexpr (kFromInputs) {
      form_gate_sum(d0);
      __syncthreads();
      write_slice_outputs(d0);
    } else {
      if (p.qg.data != nullptr) write_slice_qg(d0);
    }
    // Factors. Thread t owns the channel pair d, d + 1 (d = 2 (t % 8)) and one row group grp = t / 8, so the loops
    // have fixed trip counts, each thread reads its reference-row gates once, and every factor store is two channels
    // wide. With 16 groups (NVIDIA: 128 threads) every group makes one L row and one row of the diagonal quarter per
    // block; with 32 (AMD: 256 threads) groups 0-15 make the L rows and 16-31 the quarter. Rows past the chunk get
    // zero factors (never exp2 of garbage).
    //
    // Every row a thread touches is its own row r16 = grp % 16 of some 16-row block: block b's L row and quarter row
    // are row 16 b + r16, and its R rows are rows 16 c + r16 of earlier blocks c. So the addresses are formed once per
    // thread (own_s in the staging rows, own_t in a factor tile) and moved by whole blocks (S::block, 256 halves per
    // 16 tile rows): the row arithmetic per access was ~6 % of the kernel's instructions
    // (see docs/performance.md, "Factor loop").
    {
      constexpr int kPairsPerRow = kSlice / 2, kRowGroups = kThreads / kPairsPerRow;
      static_assert(kRowGroups == 16 || kRowGroups == 32, "whole L rows and quarter rows per group");
      const int d = 2 * (threadIdx.x % kPairsPerRow), grp = threadIdx.x / kPairsPerRow, r16 = grp % 16;
      // This group's row of the quarter: R' rows 0-7, then L' rows 8-15 (warp 0, which also holds the exact pairs'
      // odd third slot, gets the one-factor R' rows); negative: none. When there is one, it is r16.
      const int quarter_row = grp - (kRowGroups - 16);
      const int own_s = S::at(r16, d), own_t = m::swizzled16(r16, d);
      auto ld2 = [&](const float* base, int at) { return *reinterpret_cast<const float2*>(&base[at]); };
      auto put = [&](uint16_t* tile, int at, float2 x, float2 decay) {
        *reinterpret_cast<uint32_t*>(&tile[at]) = numeric::pack2<IntraFactor>(x.x * decay.x, x.y * decay.y);
      };
      // Unrolled, so that every offset below is a constant added to own_s or own_t: with the row arithmetic hoisted,
      // the unrolled loop runs faster than the rolled one (see docs/performance.md, "Factor loop").
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        const int ref = 16 * b;
        if (ref >= chunk.length) continue;  // uniform: the block has no rows
        const int own = S::block(b) + own_s, row = ref + r16;  // this thread's row of block b
        const float2 g_ref = ld2(g_s, S::block(b) + S::at(0, d));
        const float2 g_own = ld2(g_s, own), k_own = ld2(k_s, own);
        if (grp < 16 && b > 0) {  // L of block b: row ref + grp against the reference row (block 0's L would
                                  // serve no product: every off-diagonal tile has a row block a >= 1)
          const float2 decay = row < chunk.length ? decay_exp2_pair(g_own, g_ref) : make_float2(0.0f, 0.0f);
          put(lq(b), own_t, ld2(q_s, own), decay);
          put(lk(b), own_t, k_own, decay);
        }
        // The diagonal quarter against the middle row mid: R' (rows ref + i) and L' (rows mid + i, k and q).
        const int mid = ref + 8;
        if (mid < chunk.length && quarter_row >= 0) {  // uniform over a warp
          const float2 g_mid = ld2(g_s, S::block(b) + S::at(8, d));
          if (quarter_row < 8) {  // R' row quarter_row: row ref + r16, before mid
            put(rq(b), own_t, k_own, decay_exp2_pair(g_mid, g_own));
          } else {  // L' rows i = quarter_row - 8 (k) and 8 + i (q): row mid + i = ref + r16; tile row i is own_t - 128
            const float2 decay = row < chunk.length ? decay_exp2_pair(g_own, g_mid) : make_float2(0.0f, 0.0f);
            put(lqr(b), own_t - 128, k_own, decay);
            put(lqr(b), own_t, ld2(q_s, own), decay);
          }
        }
        // R of block b: the rows j = 16 m + r16 before it (j = grp, grp + kRowGroups, ...), against its reference row.
        // With 16 groups grp / 16 is 0: written as a constant so that the loop unrolls with b.
        for (int c = kRowGroups == 16 ? 0 : grp / 16; c < b; c += kRowGroups / 16) {
          const int at = S::block(c) + own_s;
          put(r(b), 256 * c + own_t, ld2(k_s, at), decay_exp2_pair(g_ref, ld2(g_s, at)));
        }
      }
    }
    // The 8-row triangles, exactly.
#pragma unroll
    for (int x = 0; x < kPairSlots; ++x) {
      const int oi = pair_rows[x] & 0xffff, oj = pair_rows[x] >> 16;
      if (pair_rows[x] < 0 || oi >= chunk.length * S::kLd) continue;  // no pair, or no such token
      // The threads of a warp touch few distinct rows, so each 16-byte load is about one shared-memory wavefront.
      if (x >= kGeneralSlots) {
        diag_qk[x] += exact_diagonal_qk16<S>(q_s, k_s, oi);
        continue;
      }
      const ExactPairSums sums = exact_pair_sums16<S>(q_s, k_s, g_s, oi, oj);
      diag_kk[x] += sums.kk;
      diag_qk[x] += sums.qk;
    }
    // kRawGateSum: the next slice's copies (issued after this slice's first barrier) have landed, and the barrier
    // below publishes them to the gate sum's threads.
    if constexpr (kRawGateSum) detail::copy16_async_wait();
    __syncthreads();  // factors are written
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int a = slot_a[s], b = slot_b[s];
      if (16 * a >= chunk.length) continue;  // no product, or its row block has no rows (uniform over the warp)
      const m::FragA l = m::load_a_swizzled16(slot_m[s] == 0 ? lk(a) : lq(a), lane);
      m::mma<IntraFactor>(acc[s], l, m::load_b_transposed_swizzled16(r(a) + 16 * b * 16, lane));
    }
    if (has_quarter) {
      m::FragB rf = m::load_b_transposed_swizzled16(rq(qb), lane);
      m::keep_b_columns_0_to_7(rf, lane);  // R' has 8 rows: the 8 the load reads past them are masked out
      m::mma<IntraFactor>(acc_quarter, m::load_a_swizzled16(lqr(qb), lane), rf);
    }
  }

  if constexpr (kFromInputs) {  // G of the last row, whole (the last slice's G barrier made glast_s complete)
    for (int d = threadIdx.x; d < p.head_dim; d += kThreads)
      in->G_last[(detail::block_chunk_id() * p.num_heads + h) * p.head_dim + d] = glast_s[d];
  }
  // Assemble both matrices in shared memory (zeros above the diagonal and past the chunk), then write whole rows.
  __syncthreads();
  float* akk_s = reinterpret_cast<float*>(smem);
  float* aqk_s = akk_s + BT * kLdO;
  for (int e = threadIdx.x; e < 2 * BT * kLdO / 4; e += kThreads)
    reinterpret_cast<float4*>(akk_s)[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    const int a = slot_a[s], b = slot_b[s];
    if (16 * a >= chunk.length) continue;
    float* dst = slot_m[s] == 0 ? akk_s : aqk_s;
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; ++e) {
      const m::Coord c = m::acc_coord(lane, e);
      dst[(16 * a + c.row) * kLdO + 16 * b + c.col] = acc[s].x[e];
    }
  }
  if (has_quarter) {  // rows 0-7 of the product are Akk's, rows 8-15 Aqk's; columns 8-15 are masked out
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; ++e) {
      const m::Coord c = m::acc_coord(lane, e);
      if (c.col >= 8) continue;
      float* dst = c.row < 8 ? akk_s : aqk_s;
      dst[(16 * qb + 8 + c.row % 8) * kLdO + 16 * qb + c.col] = acc_quarter.x[e];
    }
  }
#pragma unroll
  for (int x = 0; x < kPairSlots; ++x) {
    const int i = S::row_of(pair_rows[x] & 0xffff), j = S::row_of(pair_rows[x] >> 16);
    if (pair_rows[x] < 0 || i >= chunk.length) continue;
    if (j < i) akk_s[i * kLdO + j] = diag_kk[x];
    aqk_s[i * kLdO + j] = diag_qk[x];
  }
  __syncthreads();
  // Whole rows leave as 16-byte vectors: element e covers columns 4 (e % (BT / 4)) .. + 3 of row e / (BT / 4).
  constexpr int kRowVecs = BT / 4;
  auto masked = [&](float4 v, int j, float scale) { return mask_columns(v, j, chunk.length, scale); };
  for (int e = threadIdx.x; e < chunk.length * kRowVecs; e += kThreads) {
    const int i = e / kRowVecs, j = 4 * (e % kRowVecs);
    const int64_t row = ((chunk.start + i) * p.num_heads + h) * BT;
    const float4 akk = masked(*reinterpret_cast<const float4*>(&akk_s[i * kLdO + j]), j, beta_s[i]);
    *reinterpret_cast<float4*>(&akk_s[i * kLdO + j]) = akk;  // the Akk the solve_tril stage would read back
    if (p.Akk != nullptr) *reinterpret_cast<float4*>(&p.Akk[row + j]) = akk;  // null: only Tinv is wanted
    const float4 aqk = masked(*reinterpret_cast<const float4*>(&aqk_s[i * kLdO + j]), j, p.scale);
    store_aqk4<E>(p, row + j, aqk);
  }
  if (!invert) return;  // uniform over the block
  // solve_tril fused: Akk is still in shared memory; Aqk's space holds the inverse. Rows past the chunk are zero in
  // Akk, so they invert to identity rows.
  __syncthreads();
  detail::tril_inverse<BT, kThreads>(akk_s, aqk_s, akk_s + 2 * BT * kLdO, kLdO, chunk.length);  // ends synced
}

template <typename E, int BT>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize, ActiveTuning::kIntraMmaMinBlocks)
    intra_chunk_mma_kernel(IntraChunkParams p) {
  using L = IntraMmaLayout<BT>;
  __shared__ __align__(16) unsigned char smem[L::kWorkBytes];
  __shared__ float beta_s[BT];  // activated beta of each row
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(p.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  intra_chunk_mma_block<E, BT>(p, chunk, h, smem, beta_s, p.Tinv != nullptr);
  if (p.Tinv == nullptr) return;
  // Rows past the chunk (identity rows of the inverse) are not written.
  const float* t_s = reinterpret_cast<const float*>(smem) + L::kTinvOffsetFloats;
  constexpr int kRowVecs = BT / 4;
  for (int e = threadIdx.x; e < chunk.length * kRowVecs; e += kIntraMmaWarps * kWarpSize) {
    const int i = e / kRowVecs, j = 4 * (e % kRowVecs);
    *reinterpret_cast<float4*>(&p.Tinv[((chunk.start + i) * p.num_heads + h) * BT + j]) =
        mask_columns(*reinterpret_cast<const float4*>(&t_s[i * L::kLdO + j]), j, chunk.length, 1.0f);
  }
}

}  // namespace kda::kernels
