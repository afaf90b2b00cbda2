// Random benchmark inputs generated on the device (no host RNG, no large uploads): a counter-based generator, so
// the values depend only on (seed, element index) and every run benchmarks the same inputs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kda/platform.hpp"

namespace kda::bench {

enum class Distribution {
  kUniform01,       // U[0, 1): FLA's torch.rand for q, k, v
  kNormal,          // N(0, 1): raw gate, raw beta, dt_bias, initial state
  kLogUniform1To16, // log(U[1, 16)): A_log, as in FLA's varlen test
};

enum class FillType { kFloat32, kBFloat16, kFloat16 };

// Enqueues the fill of `count` elements on `stream`; returns the launch error, if any.
hipError_t fill_random(void* out, size_t count, FillType type, Distribution dist, uint64_t seed, hipStream_t stream);

}  // namespace kda::bench
