// The matrix-unit primitive on the hardware: random 16x16 tiles multiplied through load_a / load_b /
// load_a_transposed / load_b_transposed / mma / mma_k32 and read back through acc_coord equal a scalar product.
#include <gtest/gtest.h>

#include <random>

#include "gpu_test_utils.hpp"
#include "kda/detail/mma.hpp"

namespace kda::test {
namespace {

// D (16x16) = A (16x32) * B (32x16) with A row-major [16][32]; B as [32][16] or, when transposed, [16][32].
template <typename E, bool kTransposed, bool kUseK32>
__global__ void mma_probe_kernel(const uint16_t* A, const uint16_t* B, float* D) {
  namespace m = detail::mma;
  const int lane = threadIdx.x;
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
__global__ void mma_transposed_a_kernel(const uint16_t* A, const uint16_t* B, float* D) {
  namespace m = detail::mma;
  const int lane = threadIdx.x;
  m::Acc acc;
  m::zero(acc);
  m::mma<E>(acc, m::load_a_transposed(A, 16, lane), m::load_b(B, 16, lane));
  for (int e = 0; e < m::kAccPerLane; ++e) {
    const m::Coord c = m::acc_coord(lane, e);
    D[c.row * 16 + c.col] = acc.x[e];
  }
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

}  // namespace
}  // namespace kda::test
