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

}  // namespace
}  // namespace kda::detail
