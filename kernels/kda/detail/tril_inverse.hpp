// T = (I + A)^-1 for one chunk's strictly lower triangular A (BT x BT, fp32, in shared memory), computed by a whole
// block. The solve_tril stage and the intra-chunk kernel (when it is asked for Tinv too) both call this one
// function, so the two paths give the same bits.
//
// Blocked over 16 x 16 tiles (FLA's solve_tril uses the same split):
//   1. diagonal tiles: T_aa = (I + A_aa)^-1 by forward substitution, one thread per column of each tile, the column
//      held in registers;
//   2. below the diagonal, one tile distance d = a - b at a time (d = 1 .. tiles - 1, so every T_cb it needs exists):
//        S_ab = sum_{c=b}^{a-1} A_ac T_cb,     T_ab = -T_aa S_ab,
//      each thread producing 4 adjacent columns of one row (one A load and one 16-byte T load per 4 FMAs).
// Only the tiles that hold rows of the chunk (16 a < length) are computed. Every sum runs in a fixed order, so the
// result is deterministic.
#pragma once

#include "kda/numeric.hpp"
#include "kda/platform.hpp"

namespace kda::detail {

// Shared floats the scratch of tril_inverse needs for chunk size BT.
template <int BT>
KDA_HOST_DEVICE constexpr int tril_inverse_scratch_floats() {
  return BT / 16 > 1 ? (BT / 16 - 1) * 256 : 4;
}

// Column c of T = (I + A)^-1 for the first R rows and columns of the diagonal tile at (base, base), by forward
// substitution with the column in registers. Entries above row c come out as exact zeros (every term they sum is a
// product with an earlier zero), so the loops need no bounds that depend on c. Row r's sum runs over m < r only, so
// R = 8 gives the first 8 rows of R = 16's result bit for bit (the short prepare path's chunks of at most 8 rows).
template <int R>
__device__ inline void diagonal_tile_inverse_column(const float* A, float* T, int ld, int base, int c) {
  static_assert(R == 8 || R == 16, "half or whole 16x16 tile");
  float t[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float* a_row = &A[(base + r) * ld + base];
    float x = r == c ? 1.0f : 0.0f;
#pragma unroll
    for (int m = 0; m < r; ++m) x -= a_row[m] * t[m];
    t[r] = x;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) T[(base + r) * ld + base + c] = t[r];
}

// A at A[i * ld + j] (entries on and above the diagonal are ignored), T written at T[i * ld + j] for i, j in the tiles
// that hold chunk rows, zeros above the diagonal included. ld must be a multiple of 4 and A, T, scratch 16-byte
// aligned. Every thread of the block (kThreads of them, at least BT) calls it with the same length; A must be visible
// to all of them before the call (the caller syncs), and T is visible to all of them after it returns. A, T and
// scratch must not overlap.
template <int BT, int kThreads>
__device__ inline void tril_inverse(const float* A, float* T, float* scratch, int ld, int length) {
  static_assert(BT % 16 == 0 && BT >= 16 && BT <= 64, "chunk size 16, 32 or 64");
  static_assert(kThreads >= BT, "one thread per column of the diagonal tiles");
  const int tiles = (length + 15) / 16;
  const int span = 16 * tiles;  // rows and columns computed
  const int tid = threadIdx.x;

  // Zeros above the diagonal tiles, 4 columns (inside one tile) per store; the index math has constant divisors.
  for (int e = tid; e < BT * BT / 4; e += kThreads) {
    const int i = e / (BT / 4), j = 4 * (e % (BT / 4));
    if (i < span && j < span && i / 16 < j / 16)
      *reinterpret_cast<float4*>(&T[i * ld + j]) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  // 1. Diagonal tiles: thread (tile, column c).
  if (tid < span) diagonal_tile_inverse_column<16>(A, T, ld, 16 * (tid / 16), tid % 16);
  __syncthreads();
  // 2. Off-diagonal tiles by distance; strip e = (pair b, row r, columns 4 q .. 4 q + 3).
  for (int d = 1; d < tiles; ++d) {
    const int strips = (tiles - d) * 64;
    for (int e = tid; e < strips; e += kThreads) {
      const int b = e / 64, r = (e % 64) / 4, q = e % 4, a = b + d;
      const float* a_row = &A[(16 * a + r) * ld];
      float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int m = 16 * b; m < 16 * a; ++m) {
        const float x = a_row[m];
        const float4 t4 = *reinterpret_cast<const float4*>(&T[m * ld + 16 * b + 4 * q]);
        s.x += x * t4.x;
        s.y += x * t4.y;
        s.z += x * t4.z;
        s.w += x * t4.w;
      }
      *reinterpret_cast<float4*>(&scratch[b * 256 + r * 16 + 4 * q]) = s;
    }
    __syncthreads();
    for (int e = tid; e < strips; e += kThreads) {
      const int b = e / 64, r = (e % 64) / 4, q = e % 4, a = b + d;
      const float* t_row = &T[(16 * a + r) * ld + 16 * a];
      float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int m = 0; m < 16; ++m) {
        const float x = t_row[m];
        const float4 p = *reinterpret_cast<const float4*>(&scratch[b * 256 + m * 16 + 4 * q]);
        s.x += x * p.x;
        s.y += x * p.y;
        s.z += x * p.z;
        s.w += x * p.w;
      }
      *reinterpret_cast<float4*>(&T[(16 * a + r) * ld + 16 * b + 4 * q]) = make_float4(-s.x, -s.y, -s.z, -s.w);
    }
    __syncthreads();
  }
}

}  // namespace kda::detail
