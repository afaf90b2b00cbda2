// A tiny front-to-back reader of fuzzer bytes, shared by the fuzz targets. Past the end it yields zeros, so every
// input (including the empty one) decodes to some request. Little-endian, so seeds are easy to write by hand
// (tests/fuzz/make_seeds.py).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

// Known input-validation gaps G1..G10 (docs/input_validation.md), bit n for Gn. A tolerated gap's inputs are kept
// away from it and its check is skipped, so that a run finds only new problems. KDA_FUZZ_TOLERATED_GAPS overrides
// the mask at build time: 0 finds every known gap, clearing one bit finds that one (scripts/sanitize passes it
// through from the environment). Once a gap is fixed, drop its bit here and the fuzzer guards the fix.
// G1..G11 are fixed. Bit 10 stays set: G10's inputs are impossible allocations, which libFuzzer's own malloc limit
// reports as a crash before the builder can turn std::bad_alloc into a Status; tests/cpu/test_chunk_metadata.cpp
// covers that path instead (ChunkMetadataBatchKinds.ImpossibleAllocationIsAStatusNotAThrow).
#define KDA_FUZZ_KNOWN_GAPS 0x400u
#ifndef KDA_FUZZ_TOLERATED_GAPS
#define KDA_FUZZ_TOLERATED_GAPS KDA_FUZZ_KNOWN_GAPS
#endif

namespace kda_fuzz {

constexpr bool tolerate(int gap) { return ((KDA_FUZZ_TOLERATED_GAPS) >> gap) & 1u; }

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return uint16_t(u8() | (uint16_t(u8()) << 8)); }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(u8()) << (8 * i);
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(u8()) << (8 * i);
    return v;
  }
  int64_t i64() { return int64_t(u64()); }  // two's complement reinterpretation (well defined since C++20, and in practice)
  int32_t i32() { return int32_t(u32()); }
  float f32() {
    const uint32_t bits = u32();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  bool empty() const { return pos_ >= size_; }

  // One of `values` when the selector byte indexes it, else a raw value read from the stream. Lets the fuzzer hit
  // the interesting boundary values with one byte while still reaching every bit pattern.
  template <typename T, size_t N>
  T pick(const T (&values)[N], T (Input::*raw)()) {
    const uint8_t sel = u8();
    return sel < N ? values[sel] : (this->*raw)();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Aborts the fuzz target with a message; libFuzzer then saves the input as a crash reproducer.
[[noreturn]] inline void fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "\nkda fuzz invariant violated at %s:%d: %s\n", file, line, what);
  std::fflush(stderr);
  __builtin_trap();
}

// Outcome counters, printed at exit when built with -DKDA_FUZZ_STATS (to see that a corpus reaches both the ok
// and the error paths: tests/fuzz/README.md).
#if defined(KDA_FUZZ_STATS)
struct Stats {
  static constexpr int kMax = 64;
  const char* names[kMax] = {};
  long counts[kMax] = {};
  ~Stats() {
    for (int i = 0; i < kMax && names[i] != nullptr; ++i) std::fprintf(stderr, "kda fuzz stat %-40s %ld\n", names[i], counts[i]);
  }
  void bump(const char* name) {
    for (int i = 0; i < kMax; ++i) {
      if (names[i] == nullptr) names[i] = name;
      if (std::strcmp(names[i], name) == 0) {
        ++counts[i];
        return;
      }
    }
  }
};
inline Stats& stats() {
  static Stats s;
  return s;
}
#define KDA_FUZZ_STAT(name) ::kda_fuzz::stats().bump(name)
#else
#define KDA_FUZZ_STAT(name) ((void)0)
#endif

}  // namespace kda_fuzz

#define KDA_FUZZ_CHECK(cond)                                         \
  do {                                                               \
    if (!(cond)) ::kda_fuzz::fail(#cond, __FILE__, __LINE__);        \
  } while (0)
