// The per-tile products of one chunk step of the state recurrence with the output folded in, shared by the general
// state kernel (state_recurrence_mma.hpp) and the short-sequence one (state_recurrence_short_mma.hpp). Both must
// give the same bits, so each 16x16 tile is formed here once, in one order of products:
//   v_new tile (rt, ct):  w round(S), K in two chains (even and odd 32-wide steps) added at the end;
//   o tile (rt, ct):      qg round(S) over K in order, times scale, then Aqk v_new with Aqk as hi + lo over the
//                         chunk's tiles kt <= rt (Aqk is lower triangular).
// Operands live in shared memory as 16-bit rows: w and qg [rows, ldk], round(S) and v_new [*, ldv], Aqk's hi and lo
// [rows, lda]; a tile's corner is at row 16 * rt (chunk rows) or 16 * kt (state rows) and column 16 * ct.
#pragma once

#include "kda/detail/device_common.hpp"
#include "kda/detail/mma.hpp"

namespace kda::kernels::state_tile {

namespace m = detail::mma;

// acc = w round(S) for tile (rt, ct): the product on the chain from one chunk to the next, as two independent
// accumulation chains so that its latency is half as long.
template <typename E, int K>
__device__ __forceinline__ m::Acc w_times_state(const uint16_t* w_s, int ldk, const uint16_t* state_s, int ldv, int rt,
                                                int ct, int lane) {
  m::Acc acc, odd;
  m::zero(acc);
  m::zero(odd);
#pragma unroll
  for (int kt = 0; kt < K / 32; ++kt) {
    m::mma_k32<E, false>(kt % 2 == 0 ? acc : odd, &w_s[rt * 16 * ldk + kt * 32], ldk, &state_s[kt * 32 * ldv + ct * 16],
                         ldv, lane);
  }
#pragma unroll
  for (int e = 0; e < m::kAccPerLane; ++e) acc.x[e] += odd.x[e];
  return acc;
}

// v_new = round(u - acc) written over u (uv_s) for tile (rt, ct); rows at or past `length` get 0, so that they add
// nothing to the state update.
template <typename E>
__device__ __forceinline__ void store_v_new(uint16_t* uv_s, int ldv, const m::Acc& acc, int length, int rt, int ct,
                                            int lane) {
  if constexpr (m::kAccPairsInRows) {  // a pair of neighbours: one 4-byte load, paired rounding, one 4-byte store
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; e += 2) {
      const m::Coord cc = m::acc_coord(lane, e);
      const int i = rt * 16 + cc.row;
      uint32_t& cell = *reinterpret_cast<uint32_t*>(&uv_s[i * ldv + ct * 16 + cc.col]);
      float u0, u1;
      numeric::unpack2<E>(cell, &u0, &u1);
      const uint32_t rounded = numeric::pack2<E>(u0 - acc.x[e], u1 - acc.x[e + 1]);
      cell = i < length ? rounded : 0u;
    }
  } else {
#pragma unroll
    for (int e = 0; e < m::kAccPerLane; ++e) {
      const m::Coord cc = m::acc_coord(lane, e);
      const int i = rt * 16 + cc.row;
      uint16_t& cell = uv_s[i * ldv + ct * 16 + cc.col];
      const E rounded = numeric::from_float<E>(numeric::to_float(E{cell}) - acc.x[e]);
      cell = i < length ? rounded.bits : uint16_t(0);
    }
  }
}

// o = qg round(S) for tile (rt, ct), over K in order.
template <typename E, int K>
__device__ __forceinline__ void qg_times_state(m::Acc& o, const uint16_t* qg_s, int ldk, const uint16_t* state_s,
                                               int ldv, int rt, int ct, int lane) {
  m::zero(o);
#pragma unroll
  for (int kt = 0; kt < K / 16; ++kt) {
    m::mma<E>(o, m::load_a(&qg_s[rt * 16 * ldk + kt * 16], ldk, lane),
              m::load_b(&state_s[kt * 16 * ldv + ct * 16], ldv, lane));
  }
}

// o = scale o + Aqk v_new for tile (rt, ct), once o holds qg round(S).
template <typename E>
__device__ __forceinline__ void add_aqk_v_new(m::Acc& o, float scale, const uint16_t* hi_s, const uint16_t* lo_s,
                                              int lda, const uint16_t* vn_s, int ldv, int rt, int ct, int lane) {
#pragma unroll
  for (int e = 0; e < m::kAccPerLane; ++e) o.x[e] *= scale;
  for (int kt = 0; kt <= rt; ++kt) {  // Aqk is lower triangular
    const m::FragA hi = m::load_a(&hi_s[rt * 16 * lda + kt * 16], lda, lane);
    const m::FragA lo = m::load_a(&lo_s[rt * 16 * lda + kt * 16], lda, lane);
    const m::FragB vn = m::load_b(&vn_s[kt * 16 * ldv + ct * 16], ldv, lane);
    m::mma<E>(o, hi, vn);
    m::mma<E>(o, lo, vn);
  }
}

// Whether o's rows can leave as 4-byte pairs (the accumulator layout and o's alignment allow it).
__device__ __forceinline__ bool output_pairs_ok(const MutableTensorView& o) {
  return m::kAccPairsInRows && reinterpret_cast<uintptr_t>(o.data) % 4 == 0 && o.token_stride % 2 == 0 &&
         o.head_stride % 2 == 0;
}

// Stores the rows of output tile (rt, ct) that lie in the chunk (chunk row i < length) at token start + i, head h,
// columns v0 + 16 ct: as 4-byte pairs when `pairs`, else one element at a time.
template <typename E>
__device__ __forceinline__ void store_output(const MutableTensorView& out, bool pairs, const m::Acc& o, int64_t start,
                                             int length, int h, int v0, int rt, int ct, int lane) {
  uint16_t* o_out = static_cast<uint16_t*>(out.data);
  const int64_t tile_at = detail::element_offset(out, start + rt * 16, h, v0 + ct * 16);  // the tile's corner
#pragma unroll
  for (int e = 0; e < m::kAccPerLane; e += 2) {
    const m::Coord c0 = m::acc_coord(lane, e), c1 = m::acc_coord(lane, e + 1);
    const int i0 = rt * 16 + c0.row, i1 = rt * 16 + c1.row;
    const uint32_t pair = numeric::pack2<E>(o.x[e], o.x[e + 1]);  // round(o.x[e]) in the low half
    const uint16_t b0 = uint16_t(pair & 0xffffu), b1 = uint16_t(pair >> 16);
    if (pairs) {
      const int64_t off0 = tile_at + detail::index_times(c0.row, out.token_stride) + c0.col;
      if (i0 < length) *reinterpret_cast<uint32_t*>(&o_out[off0]) = pair;
    } else {
      if (i0 < length) o_out[detail::element_offset(out, start + i0, h, v0 + ct * 16 + c0.col)] = b0;
      if (i1 < length) o_out[detail::element_offset(out, start + i1, h, v0 + ct * 16 + c1.col)] = b1;
    }
  }
}

}  // namespace kda::kernels::state_tile
