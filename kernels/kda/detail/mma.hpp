// Matrix-unit primitive: one warp (NVIDIA, 32 lanes) or wavefront (AMD, 64 lanes) computes a 16x16 fp32 tile
// D += A * B with A 16x16 (rows x k) and B 16x16 (k x cols) in bf16 or fp16.
//
//   NVIDIA:  two mma.sync.m16n8k16 (bf16/fp16 in, fp32 accumulate), 8 accumulators per lane.
//   AMD:     one v_mfma_f32_16x16x16 (bf16_1k / f16), 4 accumulators per lane; mma_k32 uses gfx950's
//            v_mfma_f32_16x16x32 where it exists and two 16x16x16 steps elsewhere.
//
// Stage code never touches a register layout directly: it asks where fragment element e of lane l lives
// (a_coord / b_coord / acc_coord), loads fragments from shared memory with load_a / load_b, multiplies with mma,
// and reads accumulators back through acc_coord. The layout functions are constexpr and host-callable, so a CPU
// test checks that they describe a correct matrix product (tests/cpu/test_mma_layout.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kda/numeric.hpp"

namespace kda::detail::mma {

struct Coord {
  int row, col;
};

// ---- Layouts (from the PTX ISA "mma.m16n8k16" fragment figures and AMD's MFMA 16x16 operand layouts) ----------
namespace nvidia {
constexpr int kLanes = 32, kAPerLane = 8, kBPerLane = 8, kAccPerLane = 8;
// A: a0..a7 of lane l (group g = l/4, thread t = l%4): rows g / g+8, k columns 2t, 2t+1 (+8 for a4..a7).
KDA_HOST_DEVICE constexpr Coord a_coord(int lane, int e) {
  return {lane / 4 + 8 * ((e >> 1) & 1), 2 * (lane % 4) + (e & 1) + 8 * (e >> 2)};
}
// B (16x16 = two n8 halves): element e of half e/4: k rows 2t, 2t+1 (+8), column g (+8 for the second half).
KDA_HOST_DEVICE constexpr Coord b_coord(int lane, int e) {
  return {2 * (lane % 4) + (e & 1) + 8 * ((e >> 1) & 1), lane / 4 + 8 * (e >> 2)};
}
// Accumulators: c0..c3 of the first n8 half, c4..c7 of the second.
KDA_HOST_DEVICE constexpr Coord acc_coord(int lane, int e) {
  return {lane / 4 + 8 * ((e >> 1) & 1), 2 * (lane % 4) + (e & 1) + 8 * (e >> 2)};
}
}  // namespace nvidia

namespace amd {
constexpr int kLanes = 64, kAPerLane = 4, kBPerLane = 4, kAccPerLane = 4;
// v_mfma_f32_16x16x16: lane l holds A[l%16][4*(l/16) + e], B[4*(l/16) + e][l%16], D[4*(l/16) + e][l%16].
KDA_HOST_DEVICE constexpr Coord a_coord(int lane, int e) { return {lane % 16, 4 * (lane / 16) + e}; }
KDA_HOST_DEVICE constexpr Coord b_coord(int lane, int e) { return {4 * (lane / 16) + e, lane % 16}; }
KDA_HOST_DEVICE constexpr Coord acc_coord(int lane, int e) { return {4 * (lane / 16) + e, lane % 16}; }
}  // namespace amd

#if defined(__CUDACC__) && !defined(__HIP__)
namespace arch = nvidia;
#else
namespace arch = amd;
#endif

constexpr int kAPerLane = arch::kAPerLane;
constexpr int kBPerLane = arch::kBPerLane;
constexpr int kAccPerLane = arch::kAccPerLane;
KDA_HOST_DEVICE constexpr Coord a_coord(int lane, int e) { return arch::a_coord(lane, e); }
KDA_HOST_DEVICE constexpr Coord b_coord(int lane, int e) { return arch::b_coord(lane, e); }
KDA_HOST_DEVICE constexpr Coord acc_coord(int lane, int e) { return arch::acc_coord(lane, e); }

// Whether every lane's accumulator elements 2i and 2i+1 are neighbours in one row, the first at an even column: true
// for mma.sync's layout, false for MFMA's (a lane's elements run down a column). Where it holds, kernels move an
// accumulator pair as one 8-byte (fp32) or 4-byte (16-bit) access.
template <typename CoordFn>
KDA_HOST_DEVICE constexpr bool acc_pairs_in_rows(CoordFn coord, int lanes, int per_lane) {
  for (int lane = 0; lane < lanes; ++lane) {
    for (int e = 0; e + 1 < per_lane; e += 2) {
      const Coord a = coord(lane, e), b = coord(lane, e + 1);
      if (a.col % 2 != 0 || b.row != a.row || b.col != a.col + 1) return false;
    }
  }
  return per_lane % 2 == 0;
}
constexpr bool kAccPairsInRows = acc_pairs_in_rows(arch::acc_coord, arch::kLanes, arch::kAccPerLane);

// Whether a lane's accumulator coordinates are its element 0's plus a lane-independent offset per element:
// coord(lane, e) = coord(lane, 0) + coord(0, e). Where it holds (both layouts), a thread addresses all its
// elements from one corner with constant offsets.
template <typename CoordFn>
KDA_HOST_DEVICE constexpr bool acc_coords_separable(CoordFn coord, int lanes, int per_lane) {
  for (int lane = 0; lane < lanes; ++lane) {
    for (int e = 0; e < per_lane; ++e) {
      const Coord c = coord(lane, e), l = coord(lane, 0), k = coord(0, e);
      if (c.row != l.row + k.row || c.col != l.col + k.col) return false;
    }
  }
  return true;
}

// Tiles of 16-bit values stored in rows of exactly 16 elements (32 bytes, no padding) where, in rows 4-7 of every 8,
// the two 16-byte halves of a row trade places: the 8 row segments one ldmatrix phase reads then lie in 8 distinct
// 16-byte bank groups. Rows count from a multiple of 8. Element (row, col) of such a tile:
// (The swap depends only on the row's bit 2, so row r + 8 m is row r moved by 128 m elements.)
KDA_HOST_DEVICE constexpr int swizzled16(int row, int col) {
  return row * 16 + (((col >> 3) ^ (row >> 2)) & 1) * 8 + (col & 7);
}

#if defined(__CUDACC__) || defined(__HIP__) || defined(__HIPCC__)

struct FragA {
  uint16_t x[kAPerLane];
};
struct FragB {
  uint16_t x[kBPerLane];
};
struct Acc {
  float x[kAccPerLane];
};

__device__ inline void zero(Acc& c) {
#pragma unroll
  for (int e = 0; e < kAccPerLane; ++e) c.x[e] = 0.0f;
}

// Gathers the kCount fragment elements of `lane` from a 16x16 tile of 16-bit values: element e sits at
// coordinate(lane, e) = (row, col), stored at tile[row * ld + col], or at tile[col * ld + row] when kTransposed.
template <int kCount, bool kTransposed>
__device__ inline void gather(uint16_t (&out)[kCount], const uint16_t* tile, int ld, int lane,
                              Coord (*coordinate)(int, int)) {
#pragma unroll
  for (int e = 0; e < kCount; ++e) {
    const Coord c = coordinate(lane, e);
    out[e] = kTransposed ? tile[c.col * ld + c.row] : tile[c.row * ld + c.col];
  }
}

// Fragment loads. Tiles live in shared memory with every 8-element row segment 16-byte aligned (ld a multiple of 8,
// tile address 16-byte aligned); the kernels static_assert their strides and align their buffers.
//
// NVIDIA: one ldmatrix.x4 per fragment. The four 8x8 matrices it returns are, in register order, the quadrants of the
// 16x16 fragment at (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) — the order of
// the mma.sync A registers and of the two B halves' registers — and lane l names the row that starts matrix l / 8,
// row l % 8. Stored row-major in the fragment's own orientation, a tile loads plainly; stored transposed, it loads
// with .trans, which hands each lane the column pair instead of the row pair. Elements are bit-identical to gather.
// AMD: the gather (ds_read_u16); the MFMA operand of a lane is 4 consecutive k values of one row or column.
// Whether a tile row stride (in 16-bit elements) keeps every 8-element row segment 16-byte aligned.
KDA_HOST_DEVICE constexpr bool fragment_stride_ok(int ld) { return ld % 8 == 0; }

#if defined(__CUDACC__) && !defined(__HIP__)
template <bool kTrans>
__device__ inline void ldmatrix_x4(uint16_t (&out)[8], const uint16_t* row_start) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_start));
  uint32_t r[4];
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = uint16_t(r[i] & 0xffffu);
    out[2 * i + 1] = uint16_t(r[i] >> 16);
  }
}
// The row address lane l hands to ldmatrix, for quadrant q = l / 8 starting at stored (row block q % 2, column block
// q / 2)...
__device__ inline const uint16_t* quadrant_row_a(const uint16_t* tile, int ld, int lane) {
  return tile + (lane % 8 + 8 * ((lane / 8) % 2)) * ld + 8 * (lane / 16);
}
// ... or at stored (row block q / 2, column block q % 2).
__device__ inline const uint16_t* quadrant_row_b(const uint16_t* tile, int ld, int lane) {
  return tile + (lane % 8 + 8 * (lane / 16)) * ld + 8 * ((lane / 8) % 2);
}
#endif

// A tile with element (r, k) at tile[r * ld + k]; _transposed: at tile[k * ld + r] (e.g. A = K^T from row-major K).
__device__ inline FragA load_a(const uint16_t* tile, int ld, int lane) {
  FragA f;
#if defined(__CUDACC__) && !defined(__HIP__)
  ldmatrix_x4<false>(f.x, quadrant_row_a(tile, ld, lane));
#else
  gather<kAPerLane, false>(f.x, tile, ld, lane, a_coord);
#endif
  return f;
}
__device__ inline FragA load_a_transposed(const uint16_t* tile, int ld, int lane) {
  FragA f;
#if defined(__CUDACC__) && !defined(__HIP__)
  // Stored rows are k: quadrant q = (r-block q % 2, k-block q / 2) starts at stored row 8 * (q / 2), column 8 * (q % 2).
  ldmatrix_x4<true>(f.x, quadrant_row_b(tile, ld, lane));
#else
  gather<kAPerLane, true>(f.x, tile, ld, lane, a_coord);
#endif
  return f;
}
// B tile with element (k, n) at tile[k * ld + n]; _transposed: at tile[n * ld + k] (e.g. B = K^T from row-major K).
__device__ inline FragB load_b(const uint16_t* tile, int ld, int lane) {
  FragB f;
#if defined(__CUDACC__) && !defined(__HIP__)
  // B registers hold quadrants (k-block q % 2, n-block q / 2); stored rows are k, so that is the A addressing.
  ldmatrix_x4<true>(f.x, quadrant_row_a(tile, ld, lane));
#else
  gather<kBPerLane, false>(f.x, tile, ld, lane, b_coord);
#endif
  return f;
}
__device__ inline FragB load_b_transposed(const uint16_t* tile, int ld, int lane) {
  FragB f;
#if defined(__CUDACC__) && !defined(__HIP__)
  // Stored rows are n: quadrant q = (k-block q % 2, n-block q / 2) starts at stored row 8 * (q / 2), column 8 * (q % 2).
  ldmatrix_x4<false>(f.x, quadrant_row_b(tile, ld, lane));
#else
  gather<kBPerLane, true>(f.x, tile, ld, lane, b_coord);
#endif
  return f;
}

// The swizzled16 form of gather: element e at coordinate(lane, e) = (row, col), stored at tile[swizzled16(row, col)]
// or, when kTransposed, at tile[swizzled16(col, row)].
template <int kCount, bool kTransposed>
__device__ inline void gather_swizzled16(uint16_t (&out)[kCount], const uint16_t* tile, int lane,
                                         Coord (*coordinate)(int, int)) {
#pragma unroll
  for (int e = 0; e < kCount; ++e) {
    const Coord c = coordinate(lane, e);
    out[e] = kTransposed ? tile[swizzled16(c.col, c.row)] : tile[swizzled16(c.row, c.col)];
  }
}

// A tile with element (r, k) at tile[swizzled16(r, k)].
__device__ inline FragA load_a_swizzled16(const uint16_t* tile, int lane) {
  FragA f;
#if defined(__CUDACC__) && !defined(__HIP__)
  ldmatrix_x4<false>(f.x, tile + swizzled16(lane % 8 + 8 * ((lane / 8) % 2), 8 * (lane / 16)));
#else
  gather_swizzled16<kAPerLane, false>(f.x, tile, lane, a_coord);
#endif
  return f;
}
// B tile with element (k, n) at tile[swizzled16(n, k)] (stored rows are n, as in load_b_transposed).
__device__ inline FragB load_b_transposed_swizzled16(const uint16_t* tile, int lane) {
  FragB f;
#if defined(__CUDACC__) && !defined(__HIP__)
  ldmatrix_x4<false>(f.x, tile + swizzled16(lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)));
#else
  gather_swizzled16<kBPerLane, true>(f.x, tile, lane, b_coord);
#endif
  return f;
}

// Zeroes the elements of columns 8-15 of a B operand, for a product with only 8 columns: columns 8-15 of the result
// then get nothing. The load before it may have read anything there (it must still be real shared memory).
__device__ inline void keep_b_columns_0_to_7(FragB& f, int lane) {
#pragma unroll
  for (int e = 0; e < kBPerLane; ++e) {
    if (b_coord(lane, e).col >= 8) f.x[e] = 0;
  }
}

// round(acc) into a 16x16 tile of 16-bit E in shared memory (rows of ld elements). Where an accumulator pair is two
// neighbours in a row (mma.sync), one paired rounding and one 4-byte store per pair instead of two of each.
template <typename E>
__device__ inline void store_rounded(uint16_t* tile, int ld, const Acc& acc, int lane) {
  if constexpr (kAccPairsInRows) {
#pragma unroll
    for (int e = 0; e < kAccPerLane; e += 2) {
      const Coord c = acc_coord(lane, e);
      *reinterpret_cast<uint32_t*>(&tile[c.row * ld + c.col]) = numeric::pack2<E>(acc.x[e], acc.x[e + 1]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kAccPerLane; ++e) {
      const Coord c = acc_coord(lane, e);
      tile[c.row * ld + c.col] = numeric::from_float<E>(acc.x[e]).bits;
    }
  }
}

// D += A * B. E selects bf16 (bf16_t) or fp16 (fp16_t) inputs.
template <typename E>
__device__ inline void mma(Acc& d, const FragA& a, const FragB& b) {
#if defined(__CUDACC__) && !defined(__HIP__)
  uint32_t ar[4], br[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    ar[i] = uint32_t(a.x[2 * i]) | (uint32_t(a.x[2 * i + 1]) << 16);
    br[i] = uint32_t(b.x[2 * i]) | (uint32_t(b.x[2 * i + 1]) << 16);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float* c = d.x + 4 * half;
    if constexpr (std::is_same_v<E, bf16_t>) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[2 * half]), "r"(br[2 * half + 1]));
    } else {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[2 * half]), "r"(br[2 * half + 1]));
    }
  }
#else
  typedef short short4_t __attribute__((ext_vector_type(4)));
  typedef _Float16 half4_t __attribute__((ext_vector_type(4)));
  typedef float float4_t __attribute__((ext_vector_type(4)));
  float4_t c = {d.x[0], d.x[1], d.x[2], d.x[3]};
  if constexpr (std::is_same_v<E, bf16_t>) {
    short4_t av, bv;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      av[e] = short(a.x[e]);
      bv[e] = short(b.x[e]);
    }
    c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(av, bv, c, 0, 0, 0);
  } else {
    half4_t av, bv;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      av[e] = __builtin_bit_cast(_Float16, a.x[e]);
      bv[e] = __builtin_bit_cast(_Float16, b.x[e]);
    }
    c = __builtin_amdgcn_mfma_f32_16x16x16f16(av, bv, c, 0, 0, 0);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) d.x[e] = c[e];
#endif
}

// D += A * B over a 16 x 32 by 32 x 16 slab: two k16 steps (tiles at k offsets 0 and 16), or one
// v_mfma_f32_16x16x32 on gfx950. A element (r, k) at a_tile[r * lda + k]; B element (k, n) at b_tile[k * ldb + n]
// (or b_tile[n * ldb + k] when B_TRANSPOSED).
template <typename E, bool B_TRANSPOSED>
__device__ inline void mma_k32(Acc& d, const uint16_t* a_tile, int lda, const uint16_t* b_tile, int ldb, int lane) {
#if defined(__gfx950__)
  typedef __bf16 bf16x8_t __attribute__((ext_vector_type(8)));
  typedef _Float16 half8_t __attribute__((ext_vector_type(8)));
  typedef float float4_t __attribute__((ext_vector_type(4)));
  uint16_t av[8], bv[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {  // lane l holds A[l%16][8*(l/16) + e] and B[8*(l/16) + e][l%16]
    const int r = lane % 16, k = 8 * (lane / 16) + e;
    av[e] = a_tile[r * lda + k];
    bv[e] = B_TRANSPOSED ? b_tile[r * ldb + k] : b_tile[k * ldb + r];
  }
  float4_t c = {d.x[0], d.x[1], d.x[2], d.x[3]};
  if constexpr (std::is_same_v<E, bf16_t>) {
    bf16x8_t a8, b8;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      a8[e] = __builtin_bit_cast(__bf16, av[e]);
      b8[e] = __builtin_bit_cast(__bf16, bv[e]);
    }
    c = __builtin_amdgcn_mfma_f32_16x16x32_bf16(a8, b8, c, 0, 0, 0);
  } else {
    half8_t a8, b8;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      a8[e] = __builtin_bit_cast(_Float16, av[e]);
      b8[e] = __builtin_bit_cast(_Float16, bv[e]);
    }
    c = __builtin_amdgcn_mfma_f32_16x16x32_f16(a8, b8, c, 0, 0, 0);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) d.x[e] = c[e];
#else
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    const FragA a = load_a(a_tile + 16 * step, lda, lane);
    const FragB b = B_TRANSPOSED ? load_b_transposed(b_tile + 16 * step, ldb, lane)
                                 : load_b(b_tile + 16 * step * ldb, ldb, lane);
    mma<E>(d, a, b);
  }
#endif
}

#endif  // GPU compiler

}  // namespace kda::detail::mma
