// The intra-chunk slice loop's staging rows (kernels/kda/detail/stage_rows.hpp), checked on the host: each row's
// 16 channels land on 16 distinct slots of that row with 16-byte quarters kept whole (so the kernels' float4 and
// float2 accesses read the right channels), and the access patterns the kernel's comments name fall in the banks they
// claim (32 banks of 4 bytes; a warp's 8-byte accesses are served per half-warp, its 16-byte ones per quarter-warp).
// Whether the kernels give the same bits with either form is checked on the GPU (ChunkKdaBitIdentity.
// FusedPrepareMatchesStagedForm: the fused prepare uses the swizzled rows, the staged one the padded rows).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "kda/detail/stage_rows.hpp"

namespace kda::detail {
namespace {

constexpr int kBanks = 32;
using Padded = StageRows<16, false>;
using Swizzled = StageRows<16, true>;

// One phase of shared-memory accesses: each is `width` consecutive floats from float index `at`. Returns the
// largest number of distinct 4-byte words that fall in one bank (1: one pass).
int max_words_per_bank(const std::vector<std::pair<int, int>>& accesses) {
  std::vector<std::set<int>> bank(kBanks);
  for (const auto& [at, width] : accesses)
    for (int w = 0; w < width; ++w) bank[(at + w) % kBanks].insert(at + w);
  size_t most = 0;
  for (const auto& b : bank) most = b.size() > most ? b.size() : most;
  return int(most);
}

template <typename S>
void expect_rows_are_permutations(const char* what) {
  for (int row = 0; row < 64; ++row) {
    std::set<int> slots;
    for (int col = 0; col < 16; ++col) {
      const int at = S::at(row, col);
      EXPECT_GE(at, row * S::kLd) << what << " row " << row << " col " << col;
      EXPECT_LT(at, row * S::kLd + 16) << what << " row " << row << " col " << col;
      slots.insert(at);
      // A 16-byte quarter stays whole and in order: float4 and float2 accesses at its first channel.
      EXPECT_EQ(at, S::at(row, col & ~3) + (col & 3)) << what << " row " << row << " col " << col;
    }
    EXPECT_EQ(slots.size(), 16u) << what << " row " << row;
  }
}

TEST(StageRows, EveryRowIsAPermutationOfItsSlotsWithWholeQuarters) {
  expect_rows_are_permutations<Padded>("padded");
  expect_rows_are_permutations<Swizzled>("swizzled");
}

// The intra-chunk factor loop forms at(r, col) once per thread (r < 16) and reaches row 16 m + r through block(m).
template <typename S>
void expect_block_shifts(const char* what) {
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 16; ++col)
        EXPECT_EQ(S::at(16 * m + r, col), S::block(m) + S::at(r, col)) << what << " row 16 x " << m << " + " << r;
}

TEST(StageRows, RowsSixteenApartAreOneBlockShiftApart) {
  expect_block_shifts<Padded>("padded");
  expect_block_shifts<Swizzled>("swizzled");
}

// The exact pairs keep only each row's start at(row, 0) and reach its quarters through quarter(), and the assembly
// gets the row back through row_of().
template <typename S>
void expect_quarters_from_row_start(const char* what) {
  for (int row = 0; row < 64; ++row) {
    const int start = S::at(row, 0);
    EXPECT_EQ(S::row_of(start), row) << what << " row " << row;
    for (int length = 0; length <= 64; ++length)  // the pairs' "no such token" test on the start
      EXPECT_EQ(start >= length * S::kLd, row >= length) << what << " row " << row << " length " << length;
    for (int d = 0; d < 16; d += 4)
      for (int c = 0; c < 4; ++c)
        EXPECT_EQ(S::quarter(start, d) + c, S::at(row, d + c)) << what << " row " << row << " channel " << d + c;
  }
}

TEST(StageRows, QuartersFollowFromTheRowStart) {
  expect_quarters_from_row_start<Padded>("padded");
  expect_quarters_from_row_start<Swizzled>("swizzled");
}

// The exact pairs: a quarter-warp's 8 threads read one quarter of up to 8 consecutive rows as float4.
template <typename S>
int eight_rows_one_quarter(int first_row, int quarter) {
  std::vector<std::pair<int, int>> a;
  for (int r = 0; r < 8; ++r) a.push_back({S::at(first_row + r, 4 * quarter), 4});
  return max_words_per_bank(a);
}

TEST(StageRows, EightConsecutiveRowsReadingOneQuarterTakeOnePass) {
  for (int first = 0; first + 8 <= 64; ++first)
    for (int q = 0; q < 4; ++q) {
      EXPECT_EQ(eight_rows_one_quarter<Padded>(first, q), 1) << "padded, rows from " << first << " quarter " << q;
      EXPECT_EQ(eight_rows_one_quarter<Swizzled>(first, q), 1) << "swizzled, rows from " << first << " quarter " << q;
    }
}

// The factor loop: a half-warp's 16 threads read two consecutive rows whole, 8 bytes each (channels d, d + 1).
template <typename S>
int two_rows_as_pairs(int first_row) {
  std::vector<std::pair<int, int>> a;
  for (int r = 0; r < 2; ++r)
    for (int d = 0; d < 16; d += 2) a.push_back({S::at(first_row + r, d), 2});
  return max_words_per_bank(a);
}

TEST(StageRows, TwoConsecutiveRowsReadAsPairsTakeOnePassOnlySwizzled) {
  for (int first = 0; first + 2 <= 64; ++first) {
    EXPECT_EQ(two_rows_as_pairs<Swizzled>(first), 1) << "rows from " << first;
    EXPECT_EQ(two_rows_as_pairs<Padded>(first), 2) << "rows from " << first;  // why the swizzled form exists
  }
}

// The staging stores and the slice outputs: thread u takes row u / 2 at channels 8 (u % 2) + c, c in {0, 4}, as
// float4; a quarter-warp is 8 neighbouring threads (u from a multiple of 8).
template <typename S>
int staging_quarter_warp(int u0, int c) {
  std::vector<std::pair<int, int>> a;
  for (int u = u0; u < u0 + 8; ++u) a.push_back({S::at(u / 2, 8 * (u % 2) + c), 4});
  return max_words_per_bank(a);
}

TEST(StageRows, StagingStoresAndSliceOutputsTakeOnePassSwizzled) {
  int padded_worst = 0;
  for (int u0 = 0; u0 < 128; u0 += 8)
    for (int c : {0, 4}) {
      EXPECT_EQ(staging_quarter_warp<Swizzled>(u0, c), 1) << "units from " << u0 << " channel offset " << c;
      const int p = staging_quarter_warp<Padded>(u0, c);
      padded_worst = p > padded_worst ? p : padded_worst;
    }
  EXPECT_EQ(padded_worst, 2);  // the padded rows' two passes the comment names
}

// The long-only fused prepare's raw gate slice (raw_gate_row_start): every row of a chunk of 64 starts at its own
// multiple of 16 inside its 16-row group, so the 64 rows of 16 channels fill the slice exactly once.
TEST(RawGateRows, EveryRowStartsAtItsOwnSixteenElementsInsideItsGroup) {
  std::set<int> starts;
  for (int row = 0; row < 64; ++row) {
    const int at = raw_gate_row_start(row);
    EXPECT_EQ(at % 16, 0) << "row " << row;
    EXPECT_GE(at, 16 * (row & ~15)) << "row " << row;
    EXPECT_LT(at, 16 * ((row & ~15) + 16)) << "row " << row;
    starts.insert(at);
  }
  EXPECT_EQ(starts.size(), 64u);
}

// The gate sum's reads: a warp is segments 2w and 2w + 1 (rows 16w .. 16w + 15) x 16 channels, thread (segment,
// channel) reading row r of its segment, one element each. `bytes` 4 (fp32 gates) or 2 (16-bit gates: two threads
// share a word, which is one access, not a conflict). Returns the most distinct words one bank serves.
template <typename RowStart>
int gate_sum_warp_read(RowStart row_start, int w, int r, int bytes) {
  std::vector<std::pair<int, int>> a;
  for (int seg = 0; seg < 2; ++seg)
    for (int c = 0; c < 16; ++c) {
      const int element = row_start(16 * w + 8 * seg + r) + c;
      a.push_back({element * bytes / 4, 1});  // the word holding it
    }
  return max_words_per_bank(a);
}

TEST(RawGateRows, GateSumWarpReadsTakeOnePass) {
  auto plain = [](int row) { return 16 * row; };  // rows one after the other
  for (int w = 0; w < 4; ++w)
    for (int r = 0; r < 8; ++r) {
      EXPECT_EQ(gate_sum_warp_read(raw_gate_row_start, w, r, 4), 1) << "fp32, warp " << w << " row " << r;
      EXPECT_EQ(gate_sum_warp_read(raw_gate_row_start, w, r, 2), 1) << "16-bit, warp " << w << " row " << r;
      // Why the order exists: plain rows put the two segments' rows (8 apart, 128 floats) in the same 16 banks.
      EXPECT_EQ(gate_sum_warp_read(plain, w, r, 4), 2) << "plain fp32, warp " << w << " row " << r;
    }
}

}  // namespace
}  // namespace kda::detail
