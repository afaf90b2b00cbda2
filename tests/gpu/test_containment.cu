// Device-side containment: what the host cannot check without a sync (a malformed device cu_seqlens, tables that
// disagree with it, state indices past the pool) is clamped inside the kernels and reported in the device status
// word; and NaN/Inf inputs stay inside the sequence that holds them. Run under compute-sanitizer memcheck on the GPU
// machine to prove nothing is read or written out of bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "device_problem.hpp"
#include "reference/problem_generator.hpp"

namespace kda::test {
namespace {

ref::KdaProblem problem(const std::vector<int64_t>& cu, uint64_t seed) {
  ref::ProblemOptions opt;
  opt.qk_l2norm_in_kernel = true;
  opt.beta_activation = BetaActivation::kSigmoid;
  opt.with_dt_bias = true;
  opt.with_initial_state = true;
  return ref::make_random_problem(cu, 2, 64, 64, DType::kBF16, GateKind::kSoftplus, seed, opt);
}

uint32_t run_and_read_status(DeviceProblem& dp) {
  const Status s = run_chunk_kda(dp);
  EXPECT_TRUE(s.is_ok()) << s.message();
  uint32_t bits = 0xffffffffu;
  EXPECT_TRUE(read_device_status(chunk_kda_device_status(dp.workspace.get()), nullptr, &bits).is_ok());
  return bits;
}

// Overwrites the device cu_seqlens (int32) after the host built its view of the batch.
void poison_cu(DeviceProblem& dp, const std::vector<int32_t>& cu) {
  ASSERT_EQ(dp.options.index_type, IndexType::kInt32);
  ASSERT_EQ(dp.cu.bytes(), cu.size() * sizeof(int32_t));
  dp.cu.upload(cu.data(), dp.cu.bytes());
}

// The status word reports on one call: every bit a previous call (or garbage in a fresh workspace) left there is
// cleared, by the derivation kernel in the derived mode and by a memset with host tables.
TEST(DeviceContainment, WellFormedBatchReportsNothing) {
  ASSERT_TRUE(have_gpu());
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    DeviceProblemOptions opt;
    opt.mode = mode;
    auto dp = make_device_problem(problem({0, 0, 100, 164, 164}, 1), opt);
    ASSERT_NE(dp, nullptr);
    const uint32_t stale = 0xffffffffu;
    KDA_ASSERT_RT(hipMemcpy(const_cast<uint32_t*>(chunk_kda_device_status(dp->workspace.get())), &stale,
                            sizeof(stale), hipMemcpyHostToDevice));
    EXPECT_EQ(run_and_read_status(*dp), 0u) << mode_name(mode);
  }
}

TEST(DeviceContainment, MalformedDeviceCuSeqlensIsClampedAndReported) {
  ASSERT_TRUE(have_gpu());
  const std::vector<std::vector<int32_t>> bad = {
      {0, 150, 60, 200},     // decreasing
      {0, 100, 100, 9000},   // past T
      {-50, 100, 150, 200},  // negative start
      {0, 100, 150, 180},    // cu[N] != T
  };
  // A well-formed cu_seqlens that disagrees with host tables built for {0,100,150,200}: only the host-table mode
  // can be inconsistent; derived tables follow it, so that mode must report nothing.
  const std::vector<int32_t> disagrees_with_tables = {0, 200, 200, 200};
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    {
      DeviceProblemOptions opt;
      opt.mode = mode;
      auto dp = make_device_problem(problem({0, 100, 150, 200}, 2), opt);
      ASSERT_NE(dp, nullptr);
      poison_cu(*dp, disagrees_with_tables);
      const uint32_t bits = run_and_read_status(*dp);
      if (mode == MetadataMode::kHostBuilder) {
        EXPECT_NE(bits & detail::kDeviceStatusBadChunkTable, 0u) << "host tables disagree with cu_seqlens";
      } else {
        EXPECT_EQ(bits, 0u) << "derived tables always agree with a well-formed cu_seqlens";
      }
    }
    for (const auto& cu : bad) {
      DeviceProblemOptions opt;
      opt.mode = mode;
      auto dp = make_device_problem(problem({0, 100, 150, 200}, 2), opt);
      ASSERT_NE(dp, nullptr);
      poison_cu(*dp, cu);
      const uint32_t bits = run_and_read_status(*dp);
      EXPECT_NE(bits & (detail::kDeviceStatusBadCuSeqlens | detail::kDeviceStatusBadChunkTable), 0u)
          << mode_name(mode) << " cu[1]=" << cu[1] << " cu[2]=" << cu[2];
      EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);  // no fault
    }
  }
}

TEST(DeviceContainment, StateIndexPastPoolIsReportedAndIgnored) {
  ASSERT_TRUE(have_gpu());
  ref::KdaProblem p = problem({0, 70, 140}, 3);
  auto dp = make_device_problem(p, {});
  ASSERT_NE(dp, nullptr);
  const size_t slot_elems = size_t(p.H) * p.K * p.V;
  std::vector<float> pool(2 * slot_elems, 1.0f);
  DeviceBuffer d_pool = upload_floats(pool);
  DeviceBuffer d_slots = upload_indices({0, 7}, IndexType::kInt32);  // slot 7 does not exist
  dp->args.state.initial_state = d_pool.as<float>();
  dp->args.state.final_state = d_pool.as<float>();
  dp->args.state.state_indices = IndexSpan{d_slots.get(), IndexType::kInt32};
  dp->args.state.pool_size = 2;
  EXPECT_EQ(run_and_read_status(*dp), uint32_t(detail::kDeviceStatusBadStateIndex));
  const std::vector<float> got = download_floats(d_pool.get(), pool.size());
  EXPECT_EQ(std::vector<float>(got.begin() + slot_elems, got.end()),
            std::vector<float>(pool.begin() + slot_elems, pool.end()))
      << "slot 1 belongs to nobody and must stay untouched";
}

// NaN or Inf inside one sequence never reaches the others: their outputs and final states are bit-identical to a
// clean run.
TEST(DeviceContainment, NonFiniteInputsStayInTheirSequence) {
  ASSERT_TRUE(have_gpu());
  const std::vector<int64_t> cu = {0, 90, 200, 333};  // sequence 1 shares chunks' neighbourhood with 0 and 2
  const ref::KdaProblem clean = problem(cu, 4);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const size_t K = clean.K, V = clean.V, H = clean.H;
  struct Poison {
    const char* what;
    std::vector<float> ref::KdaProblem::*field;
    size_t dim;
    float value;
  };
  const Poison poisons[] = {{"q NaN", &ref::KdaProblem::q, K, nan}, {"k Inf", &ref::KdaProblem::k, K, inf},
                            {"v NaN", &ref::KdaProblem::v, V, nan}, {"g NaN", &ref::KdaProblem::g, K, nan},
                            {"g -Inf", &ref::KdaProblem::g, K, -inf}, {"beta NaN", &ref::KdaProblem::beta, 1, nan}};
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    DeviceProblemOptions opt;
    opt.mode = mode;
    auto base = make_device_problem(clean, opt);
    ASSERT_TRUE(run_chunk_kda(*base).is_ok());
    const std::vector<float> o0 = base->read_o(), s0 = base->read_final_state();
    for (const Poison& poison : poisons) {
      ref::KdaProblem bad = clean;
      (bad.*poison.field)[(130 * H + 1) * poison.dim] = poison.value;  // token 130 (sequence 1), head 1
      auto dp = make_device_problem(bad, opt);
      ASSERT_TRUE(run_chunk_kda(*dp).is_ok());
      const std::vector<float> o = dp->read_o(), s = dp->read_final_state();
      // Bytes [from, to) of two runs are identical.
      auto same = [](const std::vector<float>& a, const std::vector<float>& b, size_t from, size_t to) {
        return std::memcmp(a.data() + from, b.data() + from, (to - from) * sizeof(float)) == 0;
      };
      const size_t o_row = H * V, s_seq = H * K * V;
      EXPECT_TRUE(same(o0, o, 0, 90 * o_row)) << poison.what << " leaked into sequence 0 (" << mode_name(mode) << ")";
      EXPECT_TRUE(same(o0, o, 200 * o_row, 333 * o_row)) << poison.what << " leaked into sequence 2";
      EXPECT_TRUE(same(s0, s, 0, s_seq)) << poison.what << " leaked into final state 0";
      EXPECT_TRUE(same(s0, s, 2 * s_seq, 3 * s_seq)) << poison.what << " leaked into final state 2";
    }
  }
}

}  // namespace
}  // namespace kda::test
