// The matrix-unit primitive on the hardware: random 16x16 tiles multiplied through load_a / load_b /
// load_a_transposed / load_b_transposed / mma / mma_k32 and read back through acc_coord equal a scalar product.
// Also the device-side fp32 -> bf16/fp16 rounding, which the matrix-unit kernels lean on: the hardware conversion
// numeric.hpp uses in device code equals the portable integer form on every non-NaN fp32 value; and the fp16 -> fp32
// widening on every fp16 value.
#include <gtest/gtest.h>

#include <random>

#include "gpu_test_utils.hpp"
#include "kda/detail/mma.hpp"

namespace kda::test {
namespace {

// D (16x16) = A (16x32) * B (32x16) with A row-major [16][32]; B as [32][16] or, when transposed, [16][32].
// Fragment loads read shared memory: copies n elements of a global tile into a 16-byte aligned shared buffer.
__device__ void stage(uint16_t* dst, const uint16_t* src, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
}

template <typename E, bool kTransposed, bool kUseK32>
__global__ void mma_probe_kernel(const uint16_t* A_global, const uint16_t* B_global, float* D) {
  namespace m = detail::mma;
  const int lane = threadIdx.x;
  __shared__ __align__(16) uint16_t A[16 * 32], B[32 * 16];
  stage(A, A_global, 16 * 32);
  stage(B, B_global, 32 * 16);
  m::Acc acc;
  m::zero(acc);
  if (kUseK32) {
    m::mma_k32<E, kTransposed>(acc, A, 32, B, kTransposed ? 32 : 16, lane);
  } else {
    for (int step = 0; step < 2; ++step) {
      const m::FragA a = m::load_a(A + 16 * step, 32, lane);
      const m::FragB b = kTransposed ? m::load_b_transposed(B + 16 * step, 32, lane)
                                     : m::load_b(B + 16 * step * 16, 16, lane);
      m::mma<E>(acc, a, b);
    }
  }
  for (int e = 0; e < m::kAccPerLane; ++e) {
    const m::Coord c = m::acc_coord(lane, e);
    D[c.row * 16 + c.col] = acc.x[e];
  }
}

// C (16x16) = A^T * B where A is stored [16 (k)][16 (rows)]: exercises load_a_transposed.
template <typename E>
__global__ void mma_transposed_a_kernel(const uint16_t* A_global, const uint16_t* B_global, float* D) {
  namespace m = detail::mma;
  const int lane = threadIdx.x;
  __shared__ __align__(16) uint16_t A[256], B[256];
  stage(A, A_global, 256);
  stage(B, B_global, 256);
  m::Acc acc;
  m::zero(acc);
  m::mma<E>(acc, m::load_a_transposed(A, 16, lane), m::load_b(B, 16, lane));
  for (int e = 0; e < m::kAccPerLane; ++e) {
    const m::Coord c = m::acc_coord(lane, e);
    D[c.row * 16 + c.col] = acc.x[e];
  }
}

// Every fragment form, loaded from a padded tile (row stride 24, as the kernels pad), holds exactly the elements the
// layout functions name: out[(form * kWarpSize + lane) * 8 + e] for the load, the same offset + 4096 for the gather.
__global__ void fragment_vs_gather_kernel(const uint16_t* tile_global, uint16_t* out) {
  namespace m = detail::mma;
  constexpr int kLd = 24;
  const int lane = threadIdx.x;
  __shared__ __align__(16) uint16_t tile[16 * kLd];
  stage(tile, tile_global, 16 * kLd);
  uint16_t loaded[4][8] = {}, gathered[4][8] = {};
  const m::FragA a = m::load_a(tile, kLd, lane), at = m::load_a_transposed(tile, kLd, lane);
  const m::FragB b = m::load_b(tile, kLd, lane), bt = m::load_b_transposed(tile, kLd, lane);
  for (int e = 0; e < m::kAPerLane; ++e) {
    loaded[0][e] = a.x[e];
    loaded[1][e] = at.x[e];
  }
  for (int e = 0; e < m::kBPerLane; ++e) {
    loaded[2][e] = b.x[e];
    loaded[3][e] = bt.x[e];
  }
  m::gather<m::kAPerLane, false>(reinterpret_cast<uint16_t(&)[m::kAPerLane]>(gathered[0]), tile, kLd, lane, m::a_coord);
  m::gather<m::kAPerLane, true>(reinterpret_cast<uint16_t(&)[m::kAPerLane]>(gathered[1]), tile, kLd, lane, m::a_coord);
  m::gather<m::kBPerLane, false>(reinterpret_cast<uint16_t(&)[m::kBPerLane]>(gathered[2]), tile, kLd, lane, m::b_coord);
  m::gather<m::kBPerLane, true>(reinterpret_cast<uint16_t(&)[m::kBPerLane]>(gathered[3]), tile, kLd, lane, m::b_coord);
  for (int form = 0; form < 4; ++form)
    for (int e = 0; e < 8; ++e) {
      out[(form * kWarpSize + lane) * 8 + e] = loaded[form][e];
      out[4096 + (form * kWarpSize + lane) * 8 + e] = gathered[form][e];
    }
}

TEST(MatrixUnit, FragmentLoadsMatchTheLayoutGather) {
  std::vector<uint16_t> tile(16 * 24);
  for (size_t i = 0; i < tile.size(); ++i) tile[i] = uint16_t(i * 2654435761u >> 7);  // distinct-ish bit patterns
  DeviceBuffer d_tile(tile.size() * 2), d_out(8192 * 2);
  ASSERT_EQ(hipMemcpy(d_tile.get(), tile.data(), tile.size() * 2, hipMemcpyHostToDevice), hipSuccess);
  fragment_vs_gather_kernel<<<1, kWarpSize>>>(d_tile.as<uint16_t>(), d_out.as<uint16_t>());
  ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
  std::vector<uint16_t> out(8192);
  ASSERT_EQ(hipMemcpy(out.data(), d_out.get(), out.size() * 2, hipMemcpyDeviceToHost), hipSuccess);
  const char* names[4] = {"load_a", "load_a_transposed", "load_b", "load_b_transposed"};
  int checked = 0;
  for (int form = 0; form < 4; ++form)
    for (int lane = 0; lane < kWarpSize; ++lane)
      for (int e = 0; e < 8; ++e) {
        const int i = (form * kWarpSize + lane) * 8 + e;
        ASSERT_EQ(out[i], out[4096 + i]) << names[form] << " lane " << lane << " element " << e;
        checked += out[i] != 0;
      }
  EXPECT_GT(checked, 4 * kWarpSize * detail::mma::kAPerLane / 2);  // the comparison saw real data, not zeros
}

// The swizzled loads hold the elements the layout functions name in a swizzled16 tile, and the B mask zeroes
// exactly the elements of columns 8-15.
__global__ void swizzled_vs_gather_kernel(const uint16_t* tile_global, uint16_t* out) {
  namespace m = detail::mma;
  const int lane = threadIdx.x;
  __shared__ __align__(16) uint16_t tile[256];
  stage(tile, tile_global, 256);
  const m::FragA a = m::load_a_swizzled16(tile, lane);
  const m::FragB b = m::load_b_transposed_swizzled16(tile, lane);
  m::FragB b8 = b;
  m::keep_b_columns_0_to_7(b8, lane);
  for (int e = 0; e < m::kAPerLane; ++e) {
    const m::Coord c = m::a_coord(lane, e);
    out[(0 * kWarpSize + lane) * 8 + e] = a.x[e];
    out[4096 + (0 * kWarpSize + lane) * 8 + e] = tile[m::swizzled16(c.row, c.col)];
  }
  for (int e = 0; e < m::kBPerLane; ++e) {
    const m::Coord c = m::b_coord(lane, e);  // (k, n), stored at row n
    out[(1 * kWarpSize + lane) * 8 + e] = b.x[e];
    out[4096 + (1 * kWarpSize + lane) * 8 + e] = tile[m::swizzled16(c.col, c.row)];
    out[(2 * kWarpSize + lane) * 8 + e] = b8.x[e];
    out[4096 + (2 * kWarpSize + lane) * 8 + e] = c.col < 8 ? tile[m::swizzled16(c.col, c.row)] : uint16_t(0);
  }
}

TEST(MatrixUnit, SwizzledFragmentLoadsMatchTheLayoutGather) {
  std::vector<uint16_t> tile(256);
  for (size_t i = 0; i < tile.size(); ++i) tile[i] = uint16_t(1 + (i * 2654435761u >> 9) % 65000);  // nonzero
  DeviceBuffer d_tile(tile.size() * 2), d_out(8192 * 2);
  ASSERT_EQ(hipMemcpy(d_tile.get(), tile.data(), tile.size() * 2, hipMemcpyHostToDevice), hipSuccess);
  std::vector<uint16_t> out(8192, 0);  // entries past a lane's elements stay zero on both sides
  ASSERT_EQ(hipMemcpy(d_out.get(), out.data(), out.size() * 2, hipMemcpyHostToDevice), hipSuccess);
  swizzled_vs_gather_kernel<<<1, kWarpSize>>>(d_tile.as<uint16_t>(), d_out.as<uint16_t>());
  ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
  ASSERT_EQ(hipMemcpy(out.data(), d_out.get(), out.size() * 2, hipMemcpyDeviceToHost), hipSuccess);
  const char* names[3] = {"load_a_swizzled16", "load_b_transposed_swizzled16", "keep_b_columns_0_to_7"};
  int zeros = 0;
  for (int form = 0; form < 3; ++form)
    for (int lane = 0; lane < kWarpSize; ++lane)
      for (int e = 0; e < (form == 0 ? detail::mma::kAPerLane : detail::mma::kBPerLane); ++e) {
        const int i = (form * kWarpSize + lane) * 8 + e;
        ASSERT_EQ(out[i], out[4096 + i]) << names[form] << " lane " << lane << " element " << e;
        zeros += out[i] == 0;
      }
  // Only the masked half of the third form is zero: the tile holds no zeros.
  EXPECT_EQ(zeros, kWarpSize * detail::mma::kBPerLane / 2);
}

template <typename E>
void check_all_forms(DType dtype) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> a(16 * 32), b(32 * 16);
  for (float& x : a) x = numeric::round_to<E>(dist(rng));
  for (float& x : b) x = numeric::round_to<E>(dist(rng));
  std::vector<float> bt(16 * 32);  // b transposed: [16 (n)][32 (k)]
  for (int k = 0; k < 32; ++k)
    for (int n = 0; n < 16; ++n) bt[n * 32 + k] = b[k * 16 + n];
  std::vector<float> want(256, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      for (int k = 0; k < 32; ++k) want[r * 16 + c] += a[r * 32 + k] * b[k * 16 + c];

  DeviceBuffer dA = upload_dtype(a, dtype), dB = upload_dtype(b, dtype), dBt = upload_dtype(bt, dtype), dD(256 * 4);
  auto check = [&](auto kernel, const DeviceBuffer& bmat, const char* what) {
    kernel<<<1, kWarpSize>>>(dA.as<uint16_t>(), bmat.as<uint16_t>(), dD.as<float>());
    ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
    const std::vector<float> got = download_floats(dD.get(), 256);
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(got[i], want[i], 1e-4f * (1 + std::fabs(want[i]))) << what << " " << i;
  };
  check(mma_probe_kernel<E, false, false>, dB, "k16 steps");
  check(mma_probe_kernel<E, true, false>, dBt, "k16 steps, B transposed");
  check(mma_probe_kernel<E, false, true>, dB, "mma_k32");
  check(mma_probe_kernel<E, true, true>, dBt, "mma_k32, B transposed");

  // A^T * B with A stored k-major.
  std::vector<float> at(256), b16(256), want_t(256, 0.0f);
  for (float& x : at) x = numeric::round_to<E>(dist(rng));
  for (float& x : b16) x = numeric::round_to<E>(dist(rng));
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      for (int k = 0; k < 16; ++k) want_t[r * 16 + c] += at[k * 16 + r] * b16[k * 16 + c];
  DeviceBuffer dAt = upload_dtype(at, dtype), dB16 = upload_dtype(b16, dtype);
  mma_transposed_a_kernel<E><<<1, kWarpSize>>>(dAt.as<uint16_t>(), dB16.as<uint16_t>(), dD.as<float>());
  ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
  const std::vector<float> got = download_floats(dD.get(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(got[i], want_t[i], 1e-4f * (1 + std::fabs(want_t[i]))) << "A^T " << i;
}

TEST(MatrixUnit, Bf16FormsMatchScalarProduct) {
  ASSERT_TRUE(have_gpu());
  check_all_forms<bf16_t>(DType::kBF16);
}

TEST(MatrixUnit, Fp16FormsMatchScalarProduct) {
  ASSERT_TRUE(have_gpu());
  check_all_forms<fp16_t>(DType::kFP16);
}

// counts[0] / counts[1]: bf16 / fp16 results that differ from the portable rounding (NaN inputs: that are not NaN);
// counts[2]: values checked; counts[3] / counts[4]: bf16 / fp16 pack2 words (this value low, a scrambled partner
// high) that differ from the two single roundings; first[0..3]: the first input bits that differed.
__global__ void rounding_sweep_kernel(unsigned long long* counts, unsigned int* first) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  unsigned long long bad_bf16 = 0, bad_fp16 = 0, seen = 0, bad_pack_bf16 = 0, bad_pack_fp16 = 0;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t(1) << 32); i += stride) {
    const uint32_t bits = static_cast<uint32_t>(i);
    const float f = numeric::bits_float(bits);
    const uint16_t b = numeric::float_to_bf16(f), h = numeric::float_to_fp16(f);
    const float partner = numeric::bits_float(bits * 2654435761u + 0x9e3779b9u);
    if (numeric::pack2<bf16_t>(f, partner) !=
        (uint32_t(b) | (uint32_t(numeric::float_to_bf16(partner)) << 16))) {
      ++bad_pack_bf16;
      atomicCAS(&first[2], 0u, bits);
    }
    if (numeric::pack2<fp16_t>(f, partner) !=
        (uint32_t(h) | (uint32_t(numeric::float_to_fp16(partner)) << 16))) {
      ++bad_pack_fp16;
      atomicCAS(&first[3], 0u, bits);
    }
    bool ok_b, ok_h;
    if (f != f) {
      ok_b = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
      ok_h = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    } else {
      ok_b = b == numeric::float_to_bf16_portable(f);
      ok_h = h == numeric::float_to_fp16_portable(f);
    }
    if (!ok_b) {
      ++bad_bf16;
      atomicCAS(&first[0], 0u, bits);
    }
    if (!ok_h) {
      ++bad_fp16;
      atomicCAS(&first[1], 0u, bits);
    }
    ++seen;
  }
  atomicAdd(&counts[0], bad_bf16);
  atomicAdd(&counts[1], bad_fp16);
  atomicAdd(&counts[2], seen);
  atomicAdd(&counts[3], bad_pack_bf16);
  atomicAdd(&counts[4], bad_pack_fp16);
}

TEST(DeviceNumeric, RoundingMatchesPortableFormOnEveryFloat) {
  ASSERT_TRUE(have_gpu());
  DeviceBuffer counts(5 * sizeof(unsigned long long)), first(4 * sizeof(unsigned int));
  const std::vector<uint8_t> zeros(40, 0);
  ASSERT_EQ(hipMemcpy(counts.get(), zeros.data(), 40, hipMemcpyHostToDevice), hipSuccess);
  ASSERT_EQ(hipMemcpy(first.get(), zeros.data(), 16, hipMemcpyHostToDevice), hipSuccess);
  rounding_sweep_kernel<<<1024, 256>>>(counts.as<unsigned long long>(), first.as<unsigned int>());
  ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
  unsigned long long got[5];
  unsigned int where[4];
  ASSERT_EQ(hipMemcpy(got, counts.get(), sizeof got, hipMemcpyDeviceToHost), hipSuccess);
  ASSERT_EQ(hipMemcpy(where, first.get(), sizeof where, hipMemcpyDeviceToHost), hipSuccess);
  EXPECT_EQ(got[2], 1ull << 32);  // every pattern was visited
  EXPECT_EQ(got[0], 0ull) << "bf16: first differing input 0x" << std::hex << where[0];
  EXPECT_EQ(got[1], 0ull) << "fp16: first differing input 0x" << std::hex << where[1];
  EXPECT_EQ(got[3], 0ull) << "pack2 bf16: first differing input 0x" << std::hex << where[2];
  EXPECT_EQ(got[4], 0ull) << "pack2 fp16: first differing input 0x" << std::hex << where[3];
}

// bad[0]: fp16 patterns whose device widening (numeric::fp16_to_float, one cvt in NVIDIA device code) differs from the
// portable form (NaN patterns: that are not NaN); bad[1]: patterns checked; first: the first differing pattern + 1.
__global__ void fp16_widening_sweep_kernel(unsigned* bad, unsigned* first) {
  const unsigned h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= 65536u) return;
  const float device = numeric::fp16_to_float(uint16_t(h)), portable = numeric::fp16_to_float_portable(uint16_t(h));
  const bool ok = portable != portable ? device != device
                                       : numeric::float_bits(device) == numeric::float_bits(portable);
  if (!ok) {
    atomicAdd(&bad[0], 1u);
    atomicCAS(first, 0u, h + 1u);
  }
  atomicAdd(&bad[1], 1u);
}

TEST(DeviceNumeric, Fp16WideningMatchesPortableFormOnEveryHalf) {
  ASSERT_TRUE(have_gpu());
  DeviceBuffer bad(2 * sizeof(unsigned)), first(sizeof(unsigned));
  const unsigned zeros[2] = {0u, 0u};
  bad.upload(zeros, sizeof zeros);
  first.upload(zeros, sizeof(unsigned));
  fp16_widening_sweep_kernel<<<256, 256>>>(bad.as<unsigned>(), first.as<unsigned>());
  ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
  unsigned got[2], where = 0;
  ASSERT_EQ(hipMemcpy(got, bad.get(), sizeof got, hipMemcpyDeviceToHost), hipSuccess);
  ASSERT_EQ(hipMemcpy(&where, first.get(), sizeof where, hipMemcpyDeviceToHost), hipSuccess);
  EXPECT_EQ(got[1], 65536u);  // every pattern was visited
  EXPECT_EQ(got[0], 0u) << "first differing pattern 0x" << std::hex << (where - 1u);
}

}  // namespace
}  // namespace kda::test
