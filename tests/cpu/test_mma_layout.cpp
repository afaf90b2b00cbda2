// The matrix-unit fragment layouts of kernels/kda/detail/mma.hpp, checked on the host: every layout covers its
// 16x16 tile exactly once across the lanes and matches the documented positions (PTX ISA m16n8k16 figures; AMD
// v_mfma_f32_16x16x16 operand layout). Whether the hardware agrees is checked on the GPU by tests/gpu/test_mma.cu.
#include <gtest/gtest.h>

#include <array>

#include "kda/detail/mma.hpp"

namespace kda::detail::mma {
namespace {

template <typename CoordFn>
void expect_covers_tile_once(CoordFn coord, int lanes, int per_lane, const char* what) {
  std::array<int, 256> seen{};
  for (int l = 0; l < lanes; ++l)
    for (int e = 0; e < per_lane; ++e) {
      const Coord c = coord(l, e);
      ASSERT_TRUE(c.row >= 0 && c.row < 16 && c.col >= 0 && c.col < 16) << what;
      ++seen[c.row * 16 + c.col];
    }
  for (int i = 0; i < 256; ++i) EXPECT_EQ(seen[i], 1) << what << " element " << i;
}

TEST(MmaLayout, NvidiaFragmentsCoverTilesOnce) {
  expect_covers_tile_once(nvidia::a_coord, nvidia::kLanes, nvidia::kAPerLane, "nvidia A");
  expect_covers_tile_once(nvidia::b_coord, nvidia::kLanes, nvidia::kBPerLane, "nvidia B");
  expect_covers_tile_once(nvidia::acc_coord, nvidia::kLanes, nvidia::kAccPerLane, "nvidia acc");
}

TEST(MmaLayout, AmdFragmentsCoverTilesOnce) {
  expect_covers_tile_once(amd::a_coord, amd::kLanes, amd::kAPerLane, "amd A");
  expect_covers_tile_once(amd::b_coord, amd::kLanes, amd::kBPerLane, "amd B");
  expect_covers_tile_once(amd::acc_coord, amd::kLanes, amd::kAccPerLane, "amd acc");
}

// The state kernel moves accumulator pairs as one access only where this holds (NVIDIA); on AMD it must not claim it.
TEST(MmaLayout, AccumulatorPairsSitInRowsOnNvidiaOnly) {
  EXPECT_TRUE(acc_pairs_in_rows(nvidia::acc_coord, nvidia::kLanes, nvidia::kAccPerLane));
  EXPECT_FALSE(acc_pairs_in_rows(amd::acc_coord, amd::kLanes, amd::kAccPerLane));
}

// swizzled16 stores a 16x16 tile in 256 elements without padding, each element once, and the 8 rows that one
// ldmatrix phase reads (any 8 consecutive rows from a multiple of 8, one 16-byte half each) fall in 8 distinct
// 16-byte bank groups of a 128-byte bank line.
TEST(MmaLayout, Swizzled16IsABijectionAndConflictFree) {
  std::array<int, 512> seen{};
  for (int r = 0; r < 32; ++r)
    for (int c = 0; c < 16; ++c) {
      const int at = swizzled16(r, c);
      ASSERT_TRUE(at >= 0 && at < 512);
      ++seen[at];
      EXPECT_EQ(at / 16, r) << "stays in its row";
      EXPECT_EQ(swizzled16(r, c) - swizzled16(r, c & ~7), c & 7) << "8-element halves stay contiguous";
    }
  for (int i = 0; i < 512; ++i) EXPECT_EQ(seen[i], 1) << "element " << i;
  for (int r0 = 0; r0 < 32; r0 += 8)
    for (int half = 0; half < 2; ++half) {
      std::array<int, 8> groups{};
      for (int r = r0; r < r0 + 8; ++r) ++groups[(swizzled16(r, 8 * half) * 2 / 16) % 8];
      for (int g = 0; g < 8; ++g) EXPECT_EQ(groups[g], 1) << "rows " << r0 << "+, half " << half << ", group " << g;
    }
}

// The intra-chunk factor loop forms a thread's tile offset swizzled16(r, c) once and reaches rows r + 8 m by adding
// 128 m (the swap depends only on bit 2 of the row).
TEST(MmaLayout, Swizzled16RowsEightApartAreOneShiftApart) {
  for (int r = 0; r < 16; ++r)
    for (int m = -(r / 8); m < 8; ++m)
      for (int c = 0; c < 16; ++c)
        EXPECT_EQ(swizzled16(r + 8 * m, c), swizzled16(r, c) + 128 * m) << "row " << r << " + 8 x " << m << " col " << c;
}

TEST(MmaLayout, NvidiaMatchesPtxFigures) {
  // Lane 5: groupID 1, threadID_in_group 1.
  EXPECT_EQ(nvidia::a_coord(5, 0).row, 1);
  EXPECT_EQ(nvidia::a_coord(5, 0).col, 2);
  EXPECT_EQ(nvidia::a_coord(5, 2).row, 9);  // a2: row groupID + 8
  EXPECT_EQ(nvidia::a_coord(5, 5).col, 11);  // a5: col 2*tid + 1 + 8
  EXPECT_EQ(nvidia::b_coord(5, 1).row, 3);  // b1: k = 2*tid + 1
  EXPECT_EQ(nvidia::b_coord(5, 1).col, 1);  // n = groupID
  EXPECT_EQ(nvidia::b_coord(5, 2).row, 10);  // b2: k = 2*tid + 8
  EXPECT_EQ(nvidia::acc_coord(5, 3).row, 9);  // c3: row groupID + 8, col 2*tid + 1
  EXPECT_EQ(nvidia::acc_coord(5, 3).col, 3);
}

TEST(MmaLayout, AmdMatchesMfmaOperandLayout) {
  EXPECT_EQ(amd::a_coord(17, 2).row, 1);  // lane 17: row 17 % 16, k = 4 * (17 / 16) + 2
  EXPECT_EQ(amd::a_coord(17, 2).col, 6);
  EXPECT_EQ(amd::b_coord(40, 3).row, 11);
  EXPECT_EQ(amd::b_coord(40, 3).col, 8);
  EXPECT_EQ(amd::acc_coord(63, 3).row, 15);
  EXPECT_EQ(amd::acc_coord(63, 3).col, 15);
}

}  // namespace
}  // namespace kda::detail::mma
