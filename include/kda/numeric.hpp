// Bit-exact conversions between fp32 and the 16-bit I/O types, usable on the host and on the device.
//
// The device kernels and the CPU float32 reference round through these same functions, so both sides round to
// bf16/fp16 identically (round to nearest even, NaN kept NaN). No GPU headers are needed.
//
// In NVIDIA device code float_to_bf16 / float_to_fp16 are one cvt.rn instruction each instead of the portable
// integer sequence (the kernels convert millions of values; the sequence was a large share of their instructions).
// Both round to nearest even with subnormals kept and overflow to inf, so they agree bit for bit on every input
// that is not a NaN (a GPU test sweeps all 2^32 fp32 patterns); a NaN stays a NaN with a possibly different payload.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define KDA_HOST_DEVICE __host__ __device__
#else
#define KDA_HOST_DEVICE
#endif

namespace kda {

// 16-bit storage types. Plain bit containers so host code needs no vendor headers.
struct bf16_t {
  uint16_t bits;
};
struct fp16_t {
  uint16_t bits;
};

namespace numeric {

KDA_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);  // the builtin works in host and device code on every compiler
  return u;
}
KDA_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

KDA_HOST_DEVICE inline float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

KDA_HOST_DEVICE inline uint16_t float_to_bf16_portable(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
  return uint16_t(u >> 16);
}

KDA_HOST_DEVICE inline uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
#else
  return float_to_bf16_portable(f);
#endif
}

KDA_HOST_DEVICE inline float fp16_to_float_portable(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in fp32
    const float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// fp16 -> fp32 is exact. In NVIDIA device code one cvt.f32.f16 instead of the portable form's ~15 instructions and
// two branches (every 16-bit load of the fp16 kernels, and every raw fp16 gate, went through them). The bits agree on
// every non-NaN input, a NaN stays a NaN (tests/gpu/test_mma.cu sweeps all 65,536 patterns).
KDA_HOST_DEVICE inline float fp16_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return fp16_to_float_portable(h);
#endif
}

// Round to nearest even; overflow gives inf, NaN stays NaN. Relies on fp32 addition rounding to nearest even,
// which holds on every target we build for (no fast-math flags).
KDA_HOST_DEVICE inline uint16_t float_to_fp16_portable(float f) {
  uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  uint16_t out;
  if (u >= (143u << 23)) {  // >= 65536 (rounds to inf) or inf/NaN
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < (113u << 23)) {  // below the smallest normal: let the fp32 adder do the subnormal rounding
    const float magic = bits_float(126u << 23);  // 0.5
    const float sum = bits_float(u) + magic;
    out = uint16_t(float_bits(sum) - (126u << 23));
  } else {
    const uint32_t odd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xfffu + odd;
    out = uint16_t(u >> 13);
  }
  return uint16_t(out | sign);
}

KDA_HOST_DEVICE inline uint16_t float_to_fp16(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return float_to_fp16_portable(f);
#endif
}

KDA_HOST_DEVICE inline float to_float(bf16_t x) { return bf16_to_float(x.bits); }
KDA_HOST_DEVICE inline float to_float(fp16_t x) { return fp16_to_float(x.bits); }
KDA_HOST_DEVICE inline float to_float(float x) { return x; }

template <typename T>
KDA_HOST_DEVICE inline T from_float(float f);
template <>
KDA_HOST_DEVICE inline bf16_t from_float<bf16_t>(float f) { return bf16_t{float_to_bf16(f)}; }
template <>
KDA_HOST_DEVICE inline fp16_t from_float<fp16_t>(float f) { return fp16_t{float_to_fp16(f)}; }
template <>
KDA_HOST_DEVICE inline float from_float<float>(float f) { return f; }

// x as a pair of 16-bit T values whose sum carries ~16 significant bits: hi = round(x), lo = round(x - hi). The
// matrix units take a fp32 operand this way (hi * y + lo * y). Raw bits.
struct HiLoBits {
  uint16_t hi, lo;
};
template <typename T>
KDA_HOST_DEVICE inline HiLoBits split_hi_lo(float x) {
  const T hi = from_float<T>(x);
  return {hi.bits, from_float<T>(x - to_float(hi)).bits};
}

// x0 and x1 rounded to T (bf16_t or fp16_t) and packed as the low and high 16-bit halves of one word. In NVIDIA
// device code that is one cvt.rn ...x2 instruction (its first source goes to the high half), elsewhere two
// from_float; the bits are the same (tests/gpu/test_mma.cu sweeps them against each other).
template <typename T>
KDA_HOST_DEVICE inline uint32_t pack2(float x0, float x1) {
  static_assert(sizeof(T) == 2, "a 16-bit type");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(__HIP__)
  uint32_t r;
  if constexpr (std::is_same_v<T, bf16_t>) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
  }
  return r;
#else
  return uint32_t(from_float<T>(x0).bits) | (uint32_t(from_float<T>(x1).bits) << 16);
#endif
}

// The two T values of a pack2 word as floats: x0 from the low half, x1 from the high half.
template <typename T>
KDA_HOST_DEVICE inline void unpack2(uint32_t pair, float* x0, float* x1) {
  *x0 = to_float(T{uint16_t(pair & 0xffffu)});
  *x1 = to_float(T{uint16_t(pair >> 16)});
}

// split_hi_lo of two neighbours x0, x1 as two pack2 words (x0 in the low halves): the same bits, one paired
// rounding for both his and one for both los.
struct HiLoWords {
  uint32_t hi, lo;
};
template <typename T>
KDA_HOST_DEVICE inline HiLoWords split_hi_lo2(float x0, float x1) {
  const uint32_t hi = pack2<T>(x0, x1);
  float h0, h1;
  unpack2<T>(hi, &h0, &h1);
  return {hi, pack2<T>(x0 - h0, x1 - h1)};
}

// Rounds an fp32 value to the precision of T and back: the value a T-typed store would later load as.
template <typename T>
KDA_HOST_DEVICE inline float round_to(float f) { return to_float(from_float<T>(f)); }

}  // namespace numeric

// log2(e): the chunk path stores cumulative gates multiplied by this, so that exp2(G) == exp(g) (KDA_SPEC §1.1).
constexpr float kRcpLn2 = 1.4426950216f;

}  // namespace kda
