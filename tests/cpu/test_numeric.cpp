// numeric.hpp: fp32 <-> bf16 / fp16 conversions. fp16 is checked against the compiler's _Float16 conversion
// (IEEE round to nearest even); bf16 against an independent nearest-even rounding done in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kda/numeric.hpp"

namespace kda::numeric {
namespace {

static_assert(sizeof(_Float16) == 2, "the fp16 oracle needs the compiler's _Float16");

uint16_t compiler_fp16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float compiler_fp16_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

bool is_nan_fp16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_nan_bf16(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// fp32 -> fp16 must agree with _Float16 bit for bit, except that any NaN may come out as any NaN.
void expect_fp16_matches_compiler(float f) {
  const uint16_t ours = float_to_fp16(f), theirs = compiler_fp16_bits(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(is_nan_fp16(ours)) << std::hex << float_bits(f);
    return;
  }
  ASSERT_EQ(ours, theirs) << "f = " << f << " (bits 0x" << std::hex << float_bits(f) << ")";
}

// Nearest bf16 by direct comparison in double (exact for these magnitudes), ties to the even mantissa; a value at
// or beyond max + half an ulp goes to inf (the next "bf16" above max is 2^128).
uint16_t reference_bf16(float f) {
  const uint32_t u = float_bits(f);
  if (std::isnan(f)) return 0x7fc0u;
  const uint32_t sign = u & 0x80000000u, magnitude = u & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return uint16_t((sign | 0x7f800000u) >> 16);
  const uint32_t down = magnitude & 0xffff0000u, up = down + 0x10000u;
  const double x = double(bits_float(magnitude));
  const double below = double(bits_float(down));
  const double above = up >= 0x7f800000u ? std::ldexp(1.0, 128) : double(bits_float(up));
  uint32_t chosen;
  if (x - below < above - x)
    chosen = down;
  else if (x - below > above - x)
    chosen = up;
  else
    chosen = ((down >> 16) & 1u) ? up : down;
  return uint16_t((sign | chosen) >> 16);
}

void expect_bf16_matches_reference(float f) {
  const uint16_t ours = float_to_bf16(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(is_nan_bf16(ours));
    return;
  }
  ASSERT_EQ(ours, reference_bf16(f)) << "f = " << f << " (bits 0x" << std::hex << float_bits(f) << ")";
}

// splitmix64
struct Rng {
  uint64_t s;
  uint32_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return uint32_t((z ^ (z >> 31)) >> 32);
  }
};

// ---- bf16 -----------------------------------------------------------------------------------------------------------

TEST(Bf16, ExactValuesRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16_to_float(uint16_t(b));
    ASSERT_EQ(float_bits(f), b << 16);
    if (!is_nan_bf16(uint16_t(b))) {
      ASSERT_EQ(float_to_bf16(f), b);
    }
  }
}

TEST(Bf16, TiesGoToEven) {
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80u);  // 1 + 2^-8: halfway, 0x3f80 is even
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82u);  // halfway between 0x3f81 and 0x3f82: up to even
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81u);  // just above halfway
  EXPECT_EQ(float_to_bf16(bits_float(0x3f817fffu)), 0x3f81u);  // just below halfway
  EXPECT_EQ(float_to_bf16(bits_float(0xbf808000u)), 0xbf80u);  // negative tie
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000u);  // subnormal tie to zero
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002u);  // subnormal tie up to even
  EXPECT_EQ(round_to<bf16_t>(1.00390625f), 1.0f);
}

TEST(Bf16, InfNanAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_bf16(inf), 0x7f80u);
  EXPECT_EQ(float_to_bf16(-inf), 0xff80u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);  // beyond max + half ulp: inf
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f7fffu)), 0x7f7fu);            // below the halfway point: max bf16
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f810000u, 0xffc12345u}) {
    const uint16_t b = float_to_bf16(bits_float(nan));
    EXPECT_TRUE(is_nan_bf16(b)) << std::hex << nan;  // even a payload only in the low 16 bits stays NaN
    EXPECT_TRUE(std::isnan(bf16_to_float(b)));
    EXPECT_TRUE(std::isnan(round_to<bf16_t>(bits_float(nan))));
  }
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000u);
}

TEST(Bf16, AgreesWithNearestEvenOnEveryHighHalfAndTieNeighbourhoods) {
  // Every bf16 value (the high 16 bits) with the low halves that decide rounding: 0, the tie, its neighbours, the
  // extremes, and a few random ones.
  Rng rng{1};
  for (uint32_t high = 0; high < 0x10000u; ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, rng.next() & 0xffffu})
      expect_bf16_matches_reference(bits_float((high << 16) | low));
  for (int i = 0; i < 2000000; ++i) expect_bf16_matches_reference(bits_float(rng.next()));
}

// ---- fp16 -----------------------------------------------------------------------------------------------------------

TEST(Fp16, AllHalfValuesConvertExactlyAndRoundTrip) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float ours = fp16_to_float(uint16_t(h)), theirs = compiler_fp16_to_float(uint16_t(h));
    if (is_nan_fp16(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << h;
      ASSERT_TRUE(is_nan_fp16(float_to_fp16(ours))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(float_bits(ours), float_bits(theirs)) << std::hex << h;
    ASSERT_EQ(float_to_fp16(ours), h) << std::hex << h;
    ASSERT_EQ(round_to<fp16_t>(ours), ours);
  }
}

TEST(Fp16, BoundaryCases) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> cases = {
      0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, -65520.0f, inf, -inf,
      std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
      std::ldexp(1.0f, -14),                                         // smallest fp16 normal
      std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25),                 // halfway from the largest subnormal to it
      std::ldexp(1023.0f, -24),                                      // largest subnormal
      std::ldexp(1.0f, -24),                                         // smallest subnormal
      std::ldexp(1.0f, -25),                                         // tie with zero: rounds to 0
      std::nextafter(std::ldexp(1.0f, -25), 1.0f),                   // just above: the smallest subnormal
      std::nextafter(std::ldexp(1.0f, -25), 0.0f),                   // just below: 0
      std::ldexp(3.0f, -25),                                         // tie between 1 and 2 ulps: 2 (even)
      std::ldexp(5.0f, -25),                                         // tie between 2 and 3 ulps: 2 (even)
      std::ldexp(1.0f, -26), 1e-30f, -1e-30f,                        // tiny: signed zero
      1.0f + std::ldexp(1.0f, -11),                                  // tie: 1
      1.0f + 3.0f * std::ldexp(1.0f, -11),                           // tie: 1 + 2^-9 (even)
      std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f),            // just above the tie
      2048.0f + 1.0f, 2048.0f + 3.0f, 4096.0f + 2.0f, 0.1f, 1.0f / 3.0f, 3.14159265f, -2.71828183f,
      std::ldexp(1.0f, 15) * 1.99951171875f,                        // 65504 again from the other direction
      std::nextafter(65520.0f, 0.0f),                                // largest value that still rounds to 65504
  };
  for (float f : cases) expect_fp16_matches_compiler(f);
  EXPECT_EQ(float_to_fp16(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000u);
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002u);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f801000u})
    EXPECT_TRUE(is_nan_fp16(float_to_fp16(bits_float(nan)))) << std::hex << nan;
}

TEST(Fp16, TieNeighbourhoodsAtEveryExponentAndBitPosition) {
  // For every fp32 exponent and every mantissa bit position s, mantissas whose low bits are exactly 1 << s (a tie
  // when s is the rounding position), and one above and below, under a few random high parts.
  Rng rng{2};
  for (uint32_t exponent = 0; exponent < 256; ++exponent)
    for (uint32_t s = 0; s < 23; ++s)
      for (int r = 0; r < 6; ++r) {
        const uint32_t high = (rng.next() << (s + 1)) & 0x7fffffu;
        for (uint32_t mantissa : {high | (1u << s), (high | (1u << s)) + 1u, (high | (1u << s)) - 1u})
          for (uint32_t sign : {0u, 0x80000000u})
            expect_fp16_matches_compiler(bits_float(sign | (exponent << 23) | (mantissa & 0x7fffffu)));
      }
}

TEST(Fp16, TenMillionRandomFloats) {
  Rng rng{3};
  for (int i = 0; i < 5000000; ++i) expect_fp16_matches_compiler(bits_float(rng.next()));  // every exponent
  for (int i = 0; i < 5000000; ++i) {  // concentrated on fp16's range, subnormals included (2^-26 .. 2^17)
    const uint32_t exponent = 101u + rng.next() % 43u;
    expect_fp16_matches_compiler(bits_float((rng.next() & 0x807fffffu) | (exponent << 23)));
  }
}

}  // namespace
}  // namespace kda::numeric
