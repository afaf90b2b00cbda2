#include "random_fill.hpp"

#include "kda/numeric.hpp"

namespace kda::bench {
namespace {

__device__ inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) from the 53 high bits.
__device__ inline double to_unit(uint64_t x) { return double(x >> 11) * 0x1.0p-53; }

__global__ void fill_random_kernel(void* out, size_t count, FillType type, Distribution dist, uint64_t seed) {
  const uint64_t key = splitmix64(seed);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint64_t r = splitmix64(key ^ (uint64_t(i) * 0xd1342543de82ef95ull));
    double x;
    switch (dist) {
      case Distribution::kUniform01: x = to_unit(r); break;
      case Distribution::kLogUniform1To16: x = log(1.0 + 15.0 * to_unit(r)); break;
      default: {  // Box-Muller; 1 - u is in (0, 1], so the log is finite
        const double u1 = to_unit(r), u2 = to_unit(splitmix64(r));
        x = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        break;
      }
    }
    if (type == FillType::kBFloat16) {
      static_cast<uint16_t*>(out)[i] = numeric::float_to_bf16(float(x));
    } else if (type == FillType::kFloat16) {
      static_cast<uint16_t*>(out)[i] = numeric::float_to_fp16(float(x));
    } else {
      static_cast<float*>(out)[i] = float(x);
    }
  }
}

}  // namespace

hipError_t fill_random(void* out, size_t count, FillType type, Distribution dist, uint64_t seed, hipStream_t stream) {
  if (count == 0) return hipSuccess;
  constexpr unsigned kThreads = 256;
  const size_t blocks_needed = (count + kThreads - 1) / kThreads;
  const unsigned blocks = unsigned(blocks_needed < 65536 ? blocks_needed : 65536);
  fill_random_kernel<<<blocks, kThreads, 0, stream>>>(out, count, type, dist, seed);
  return hipGetLastError();
}

}  // namespace kda::bench
