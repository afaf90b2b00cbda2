// Where the intra-chunk slice loop keeps element (row, col) of its fp32 staging rows of q, k and G (16 channels per
// row), in one of two forms with the same values. Constexpr and host-callable, so a CPU test checks that every row is
// a permutation of its 16 slots and that the access patterns below fall in the banks claimed
// (tests/cpu/test_stage_rows.cpp; 32 banks of 4 bytes, as on NVIDIA).
//  - padded (kSwizzled false): rows of kSlice + 4 floats. Eight consecutive rows reading one 16-byte quarter (the
//    exact pairs) fall in disjoint banks; two consecutive rows read whole as 8-byte pairs (a half-warp of the factor
//    loop) share 4 banks, and so do some of the 4 rows x 2 quarters that a quarter-warp of the staging stores and
//    slice outputs touches: those accesses take two passes.
//  - swizzled (true): rows of kSlice floats whose four quarters are permuted per row, quarter c of row i at quarter
//    c ^ (i / 2 % 4). Both patterns above fall in disjoint banks; the price is an XOR per quarter where a thread walks
//    a whole row (the exact pairs). The fused prepare runs faster with it; the staged prepare, at 96 registers,
//    slower, so it keeps the padded rows (see docs/performance.md, "Staging rows").
// Each of those accesses reads one array (q, k or G rows), and a common offset moves every bank alike, so the claims
// need the arrays only 16-byte aligned (for the 16-byte accesses), not aligned to the banks.
#pragma once

#include "kda/numeric.hpp"

namespace kda::detail {

template <int kSlice, bool kSwizzled>
struct StageRows {
  static_assert(kSlice == 16, "four 16-byte quarters per row");
  static constexpr int kLd = kSwizzled ? kSlice : kSlice + 4;
  KDA_HOST_DEVICE static constexpr int swizzle(int row) { return kSwizzled ? (row & 6) << 1 : 0; }
  KDA_HOST_DEVICE static constexpr int at(int row, int col) { return row * kLd + (col ^ swizzle(row)); }
  // Row 16 m + r (0 <= r < 16) is row r moved by 16 m rows: at(16 m + r, col) == block(m) + at(r, col), since the
  // swizzle depends only on the row's bits 1-2. So a thread that walks rows r, r + 16, ... forms at(r, col) once.
  KDA_HOST_DEVICE static constexpr int block(int m) { return 16 * m * kLd; }
  // Element (row, 4 q) from the row's start at(row, 0) and q's first channel d = 4 q: the swizzle leaves a row's
  // start at row * kLd plus its own permutation of quarter 0, and row * kLd has no bits below 16, so one XOR moves
  // it to any quarter. A thread that walks whole rows (the exact pairs) keeps only the starts.
  KDA_HOST_DEVICE static constexpr int quarter(int row_start, int d) {
    return kSwizzled ? row_start ^ d : row_start + d;
  }
  // The row whose start is at(row, 0).
  KDA_HOST_DEVICE static constexpr int row_of(int row_start) { return row_start / kLd; }
};

// Where row `row` of the long-only fused prepare's raw gate slice starts (16 channels per row, in elements: floats,
// or 16-bit values for 16-bit gates): rows i and i + 8 of each 16-row group side by side. A warp of its gate sum is
// two segments of 8 rows x 16 channels (detail::kGateSumSegment); reading one row of each, rows r and r + 8 of a
// 16-row group, it covers 32 consecutive elements: 32 distinct banks in fp32, 16 words in 16-bit (two threads per
// word), where plain rows (row * 16) would put both segments' rows in the same 16 banks (checked in
// tests/cpu/test_stage_rows.cpp).
KDA_HOST_DEVICE constexpr int raw_gate_row_start(int row) {
  return 16 * ((row & ~15) + ((row & 7) << 1) + ((row >> 3) & 1));
}

}  // namespace kda::detail
