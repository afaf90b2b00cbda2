// The C ABI on the GPU (label gpu): kda_chunk_kda_fwd through kda_c.h / libkda_capi.so, with the chunk tables
// uploaded by kda_upload_chunk_metadata and without tables, must give the same bytes as the C++ kda::chunk_kda_fwd
// on the same inputs, and meet the float64 recurrence's bar (RMS relative error <= 5e-3 for o and final state).
//
// The C++ API is used only to prepare inputs (tests/gpu helpers) and as the bit-exact comparison; every call under
// test goes through the C functions. C codes are spelled out here (not cast from the C++ enums), so a wrong code
// mapping in the library shows up as a mismatch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/device_problem.hpp"
#include "kda/kda_c.h"
#include "reference/error_metrics.hpp"
#include "reference/problem_generator.hpp"
#include "reference/recurrent_reference.hpp"

namespace kda::test {
namespace {

constexpr double kRmsBar = 5e-3;
const std::vector<int64_t> kCu = {0, 100, 100, 229};  // a zero-length sequence in the middle, T not a multiple of 64
constexpr int kH = 2, kK = 64, kV = 64;

#define KDA_ASSERT_C_OK(call) ASSERT_EQ((call), KDA_STATUS_OK) << #call << ": " << kda_last_error_message()

int c_dtype(DType d) { return d == DType::kBF16 ? KDA_DTYPE_BF16 : KDA_DTYPE_FP16; }
int c_index(IndexType t) { return t == IndexType::kInt32 ? KDA_INDEX_INT32 : KDA_INDEX_INT64; }
int c_layout(StateLayout l) { return l == StateLayout::kKFirst ? KDA_STATE_K_FIRST : KDA_STATE_V_FIRST; }
int c_scalar(ScalarType t) {
  return t == ScalarType::kFloat32 ? KDA_SCALAR_FLOAT32 : t == ScalarType::kBFloat16 ? KDA_SCALAR_BFLOAT16 : KDA_SCALAR_FLOAT16;
}
int c_gate(GateKind g) {
  return g == GateKind::kPrecomputed ? KDA_GATE_PRECOMPUTED : g == GateKind::kSoftplus ? KDA_GATE_SOFTPLUS : KDA_GATE_LOWER_BOUND;
}
int c_beta(BetaActivation b) {
  return b == BetaActivation::kNone ? KDA_BETA_NONE : b == BetaActivation::kSigmoid ? KDA_BETA_SIGMOID
                                                                                      : KDA_BETA_SIGMOID_TIMES_TWO;
}

struct Config {
  std::string name;
  DType io;
  GateKind gate;
  DeviceProblemOptions opt;  // index type, state layout, g/beta storage types, chunk size (mode: ignored)
};

std::vector<Config> configs() {
  DeviceProblemOptions a;  // bf16, int32, K-first, fp32 g and beta, BT 64
  DeviceProblemOptions b;
  b.index_type = IndexType::kInt64;
  b.state_layout = StateLayout::kVFirst;
  b.g_type = ScalarType::kFloat16;
  b.beta_type = ScalarType::kFloat16;
  b.chunk_size = 32;
  DeviceProblemOptions c;
  c.g_type = ScalarType::kBFloat16;
  c.beta_type = ScalarType::kBFloat16;
  return {{"bf16_softplus_int32_kfirst_bt64", DType::kBF16, GateKind::kSoftplus, a},
          {"fp16_lowerbound_int64_vfirst_bt32", DType::kFP16, GateKind::kLowerBound, b},
          {"bf16_precomputed_bf16inputs", DType::kBF16, GateKind::kPrecomputed, c}};
}

ref::KdaProblem make_problem(const Config& c, uint64_t seed, const std::vector<int64_t>& cu = kCu) {
  ref::ProblemOptions o;
  o.with_initial_state = true;
  o.zero_gate_fraction = 0.02;
  o.extreme_gate_fraction = 0.01;
  if (c.gate != GateKind::kPrecomputed) {  // Kimi's layer: l2norm, sigmoid beta and the gate in the kernel
    o.qk_l2norm_in_kernel = true;
    o.beta_activation = BetaActivation::kSigmoid;
    o.with_dt_bias = true;
    o.with_A_log = c.gate == GateKind::kSoftplus;
  }
  return ref::make_random_problem(cu, kH, kK, kV, c.io, c.gate, seed, o);
}

// The C arguments for dp's inputs, writing `o` and the state pool `final_state`.
kda_chunk_kda_args c_args(const DeviceProblem& dp, void* o, const float* initial_state, float* final_state) {
  const ref::KdaProblem& p = dp.problem;
  kda_chunk_kda_args a;
  EXPECT_EQ(kda_chunk_kda_args_init(&a, sizeof a), KDA_STATUS_OK);
  a.num_sequences = p.num_sequences();
  a.total_tokens = p.T;
  a.num_heads = p.H;
  a.head_dim_k = p.K;
  a.head_dim_v = p.V;
  a.chunk_size = dp.options.chunk_size;
  a.dtype = c_dtype(p.io_dtype);
  a.cu_seqlens_type = c_index(dp.options.index_type);
  a.cu_seqlens = dp.cu.get();
  a.g_type = c_scalar(dp.options.g_type);
  a.beta_type = c_scalar(dp.options.beta_type);
  a.gate = c_gate(p.gate);
  a.beta_activation = c_beta(p.beta_activation);
  a.qk_l2norm = p.qk_l2norm ? 1 : 0;
  a.lower_bound = p.lower_bound;
  a.scale = p.scale;
  a.q = kda_tensor_view{dp.q.get(), int64_t(p.H) * p.K, p.K};
  a.k = kda_tensor_view{dp.k.get(), int64_t(p.H) * p.K, p.K};
  a.v = kda_tensor_view{dp.v.get(), int64_t(p.H) * p.V, p.V};
  a.g = kda_tensor_view{dp.g.get(), int64_t(p.H) * p.K, p.K};
  a.beta = kda_tensor_view{dp.beta.get(), p.H, 1};
  a.o = kda_mutable_tensor_view{o, int64_t(p.H) * p.V, p.V};
  a.A_log = dp.A_log.as<float>();
  a.dt_bias = dp.dt_bias.as<float>();
  a.initial_state = initial_state;
  a.final_state = final_state;
  a.state_layout = c_layout(dp.options.state_layout);
  return a;
}

// Host-built tables uploaded through the C ABI; owns the staging and device buffers until the copy is done.
struct UploadedTables {
  void* staging = nullptr;
  DeviceBuffer device;
  kda_device_chunk_metadata meta{};
  ~UploadedTables() {
    if (staging != nullptr) (void)hipHostFree(staging);
  }
};

void upload_tables(const DeviceProblem& dp, hipStream_t stream, UploadedTables* t) {
  const int type = c_index(dp.options.index_type);
  std::vector<int32_t> cu32(dp.problem.cu_seqlens.begin(), dp.problem.cu_seqlens.end());
  const void* cu = type == KDA_INDEX_INT32 ? static_cast<const void*>(cu32.data())
                                           : static_cast<const void*>(dp.problem.cu_seqlens.data());
  const int64_t n = dp.problem.num_sequences();
  int64_t nt = -1;
  KDA_ASSERT_C_OK(kda_count_chunks(cu, type, n, dp.options.chunk_size, dp.problem.T, &nt, nullptr));
  ASSERT_EQ(nt, dp.num_chunks);
  size_t bytes = 0;
  KDA_ASSERT_C_OK(kda_chunk_metadata_bytes(nt, n, type, &bytes));
  KDA_ASSERT_RT(hipHostMalloc(&t->staging, bytes, 0));
  t->device.allocate(bytes);
  ASSERT_NE(t->device.get(), nullptr);
  KDA_ASSERT_C_OK(kda_upload_chunk_metadata(cu, type, n, dp.options.chunk_size, dp.problem.T, type, t->staging, bytes,
                                            t->device.get(), bytes, stream, &t->meta));
  EXPECT_EQ(t->meta.num_chunks, nt);
  EXPECT_EQ(t->meta.bytes, bytes);
  EXPECT_EQ(t->meta.type, type);
  EXPECT_EQ(t->meta.chunk_indices, t->device.get());
}

struct Outputs {
  std::vector<uint8_t> o, state;
};

// One kda_chunk_kda_fwd through the C ABI on its own stream; `a` gets the tables when `with_tables`. The call's
// device status word (byte 0 of the workspace, kda_c.h) goes to *device_status when given.
void run_c(kda_chunk_kda_args a, const DeviceProblem& dp, bool with_tables, uint32_t* device_status = nullptr) {
  hipStream_t stream = nullptr;
  KDA_ASSERT_RT(hipStreamCreate(&stream));
  UploadedTables tables;
  if (with_tables) {
    upload_tables(dp, stream, &tables);
    if (::testing::Test::HasFatalFailure()) return;
    a.chunk_indices = tables.meta.chunk_indices;
    a.chunk_offsets = tables.meta.chunk_offsets;
    a.num_chunks = tables.meta.num_chunks;
    a.chunk_table_type = tables.meta.type;
  }
  size_t bytes = 0;
  KDA_ASSERT_C_OK(kda_chunk_kda_workspace_size(&a, &bytes));
  DeviceBuffer ws(bytes);
  KDA_ASSERT_C_OK(kda_chunk_kda_fwd(&a, ws.get(), bytes, stream));
  KDA_ASSERT_RT(hipStreamSynchronize(stream));
  KDA_ASSERT_RT(hipStreamDestroy(stream));
  if (device_status != nullptr) KDA_ASSERT_RT(hipMemcpy(device_status, ws.get(), sizeof(uint32_t), hipMemcpyDeviceToHost));
}

// Final states (fp32, layout `l`) -> K-first [N,H,K,V] floats.
std::vector<float> k_first_states(const std::vector<uint8_t>& raw, StateLayout l, int64_t slots) {
  std::vector<float> x(raw.size() / sizeof(float));
  std::memcpy(x.data(), raw.data(), raw.size());
  if (l == StateLayout::kKFirst) return x;
  std::vector<float> out(x.size());
  for (int64_t s = 0; s < slots * kH; ++s)
    for (int d = 0; d < kK; ++d)
      for (int e = 0; e < kV; ++e) out[(s * kK + d) * kV + e] = x[(s * kV + e) * kK + d];
  return out;
}

std::vector<float> o_floats(const std::vector<uint8_t>& raw, DType dt) {
  std::vector<uint16_t> bits(raw.size() / 2);
  std::memcpy(bits.data(), raw.data(), raw.size());
  return from_dtype_bits(bits, dt);
}

void expect_close_to_f64(const ref::KdaProblem& p, const std::vector<float>& o, const std::vector<float>& state,
                         const std::string& what) {
  const ref::KdaOutput want = ref::recurrent_kda_f64(p);
  const double o_err = ref::rms_relative_error(want.o, o), s_err = ref::rms_relative_error(want.final_state, state);
  EXPECT_LE(o_err, kRmsBar) << what << ": o";
  EXPECT_LE(s_err, kRmsBar) << what << ": final state";
  std::printf("  %-50s o %.2e  ht %.2e\n", what.c_str(), o_err, s_err);
}

// ---- Tests ---------------------------------------------------------------------------------------------------

TEST(CapiGpu, MatchesCppApiBitForBitAndFloat64Reference) {
  ASSERT_TRUE(have_gpu());
  ASSERT_EQ(kda_abi_version(), KDA_C_ABI_VERSION);
  uint64_t seed = 9000;
  for (const Config& c : configs()) {
    SCOPED_TRACE(c.name);
    const ref::KdaProblem p = make_problem(c, ++seed);
    DeviceProblemOptions opt = c.opt;
    opt.mode = MetadataMode::kHostBuilder;
    auto dp = make_device_problem(p, opt);
    ASSERT_NE(dp, nullptr);
    const size_t o_bytes = size_t(p.T) * p.H * p.V * 2, state_bytes = dp->state_out.bytes();

    // The C++ API: the bytes to match.
    KDA_ASSERT_OK(run_chunk_kda(*dp));  // from NaN-filled outputs (poison_outputs)
    KDA_ASSERT_RT(hipDeviceSynchronize());
    const Outputs want{download_raw(dp->o.get(), o_bytes), dp->state_out.download_bytes()};

    for (bool with_tables : {true, false}) {
      const std::string what = c.name + (with_tables ? " C ABI, uploaded tables" : " C ABI, derived tables");
      SCOPED_TRACE(what);
      DeviceBuffer o(o_bytes), state(state_bytes);
      KDA_ASSERT_RT(hipMemsetAsync(o.get(), 0xff, o_bytes, nullptr));  // stale bytes must not survive
      KDA_ASSERT_RT(hipMemsetAsync(state.get(), 0xff, state_bytes, nullptr));
      KDA_ASSERT_RT(hipDeviceSynchronize());
      run_c(c_args(*dp, o.get(), dp->state_in.as<float>(), state.as<float>()), *dp, with_tables);
      if (HasFatalFailure()) return;
      const Outputs got{download_raw(o.get(), o_bytes), state.download_bytes()};
      EXPECT_TRUE(got.o == want.o) << "o differs from the C++ API";
      EXPECT_TRUE(got.state == want.state) << "final state differs from the C++ API";
      expect_close_to_f64(p, o_floats(got.o, p.io_dtype),
                          k_first_states(got.state, opt.state_layout, p.num_sequences()), what);
    }
  }
}

// The state-pool fields (state_indices + type, has_initial_state, pool_size, in-place update) through the C ABI.
TEST(CapiGpu, StatePoolInPlace) {
  ASSERT_TRUE(have_gpu());
  const Config c = configs()[0];
  ref::KdaProblem p = make_problem(c, 77);
  const int64_t P = 5, kv = int64_t(kH) * kK * kV;
  const std::vector<int64_t> slots = {4, 1, 2};   // sequence n uses pool slot slots[n]
  const std::vector<uint8_t> has_initial = {1, 0, 1};
  std::vector<float> pool(size_t(P * kv));
  ref::TestRng rng(5);
  for (float& x : pool) x = float(rng.normal());
  for (int64_t n = 0; n < 3; ++n) {  // what the reference starts from
    for (int64_t i = 0; i < kv; ++i) p.initial_state[size_t(n * kv + i)] = has_initial[n] ? pool[size_t(slots[n] * kv + i)] : 0.0f;
  }

  DeviceProblemOptions opt = c.opt;
  auto dp = make_device_problem(p, opt);
  ASSERT_NE(dp, nullptr);
  DeviceBuffer d_slots = upload_indices(slots, IndexType::kInt64);
  DeviceBuffer d_has(has_initial.size());
  d_has.upload(has_initial.data(), has_initial.size());
  const size_t o_bytes = size_t(p.T) * p.H * p.V * 2;

  // C++ API on its own copy of the pool.
  DeviceBuffer pool_cpp = upload_floats(pool);
  dp->args.state.initial_state = pool_cpp.as<float>();
  dp->args.state.final_state = pool_cpp.as<float>();
  dp->args.state.state_indices = IndexSpan{d_slots.get(), IndexType::kInt64};
  dp->args.state.has_initial_state = d_has.as<uint8_t>();
  dp->args.state.pool_size = P;
  KDA_ASSERT_OK(run_chunk_kda(*dp));
  KDA_ASSERT_RT(hipDeviceSynchronize());
  const std::vector<uint8_t> want_o = download_raw(dp->o.get(), o_bytes), want_pool = pool_cpp.download_bytes();

  for (bool with_tables : {true, false}) {
    SCOPED_TRACE(with_tables ? "uploaded tables" : "derived tables");
    DeviceBuffer pool_c = upload_floats(pool), o(o_bytes);
    kda_chunk_kda_args a = c_args(*dp, o.get(), pool_c.as<float>(), pool_c.as<float>());
    a.state_indices = d_slots.get();
    a.state_indices_type = KDA_INDEX_INT64;
    a.has_initial_state = d_has.as<uint8_t>();
    a.pool_size = P;
    run_c(a, *dp, with_tables);
    if (HasFatalFailure()) return;
    const std::vector<uint8_t> got_pool = pool_c.download_bytes();
    EXPECT_TRUE(download_raw(o.get(), o_bytes) == want_o) << "o differs from the C++ API";
    EXPECT_TRUE(got_pool == want_pool) << "pool differs from the C++ API";

    // Against the float64 reference: slots 4, 1, 2 hold sequences 0, 1, 2's final states; 0 and 3 are untouched.
    const std::vector<float> got = k_first_states(got_pool, StateLayout::kKFirst, P);
    std::vector<float> finals(size_t(3 * kv));
    for (int64_t n = 0; n < 3; ++n) std::copy_n(got.begin() + slots[n] * kv, kv, finals.begin() + n * kv);
    for (int64_t s : {0, 3}) {
      EXPECT_TRUE(std::equal(got.begin() + s * kv, got.begin() + (s + 1) * kv, pool.begin() + s * kv)) << "slot " << s;
    }
    expect_close_to_f64(p, o_floats(download_raw(o.get(), o_bytes), p.io_dtype), finals,
                        std::string("state pool, ") + (with_tables ? "uploaded" : "derived"));
  }
}

// Version 2's bound on the sequence lengths through the C ABI, on batches of short sequences (the kernels for short
// sequences alone): the same bytes as the C++ API without a bound, and a sequence over the bound is left untouched
// and reported in the device status word.
TEST(CapiGpu, SequenceBoundGivesTheSameBitsAndReportsASequenceOverIt) {
  ASSERT_TRUE(have_gpu());
  const Config c = configs()[0];  // bf16, chunks of 64, K-first
  // Lengths 8, 0, 16, 9, 8; then the same with 20 tokens in the third sequence (over a bound of 16).
  for (const std::vector<int64_t>& cu : {std::vector<int64_t>{0, 8, 8, 24, 33, 41}, std::vector<int64_t>{0, 8, 8, 28, 37, 45}}) {
    const bool over = cu[3] - cu[2] > 16;
    SCOPED_TRACE(over ? "one sequence over the bound" : "every sequence within the bound");
    const ref::KdaProblem p = make_problem(c, over ? 41 : 40, cu);
    auto dp = make_device_problem(p, c.opt);
    ASSERT_NE(dp, nullptr);
    const int64_t n = p.num_sequences();
    const size_t o_bytes = size_t(p.T) * p.H * p.V * 2, state_bytes = dp->state_out.bytes();
    const size_t row_bytes = size_t(p.H) * p.V * 2, slot_bytes = state_bytes / size_t(n);

    // The C++ API without a bound: the bytes to match.
    KDA_ASSERT_OK(run_chunk_kda(*dp));  // from NaN-filled outputs (poison_outputs)
    KDA_ASSERT_RT(hipDeviceSynchronize());
    const Outputs want{download_raw(dp->o.get(), o_bytes), dp->state_out.download_bytes()};

    int64_t longest = -1;
    KDA_ASSERT_C_OK(kda_longest_sequence(cu.data(), KDA_INDEX_INT64, n, p.T, &longest, nullptr));
    ASSERT_EQ(longest, over ? 20 : 16);
    for (bool with_tables : {true, false}) {
      SCOPED_TRACE(with_tables ? "uploaded tables" : "derived tables");
      DeviceBuffer o(o_bytes), state(state_bytes);
      KDA_ASSERT_RT(hipMemsetAsync(o.get(), 0xff, o_bytes, nullptr));
      KDA_ASSERT_RT(hipMemsetAsync(state.get(), 0xff, state_bytes, nullptr));
      KDA_ASSERT_RT(hipDeviceSynchronize());
      kda_chunk_kda_args a = c_args(*dp, o.get(), dp->state_in.as<float>(), state.as<float>());
      a.max_sequence_tokens = 16;
      uint32_t status = 0xdead;
      run_c(a, *dp, with_tables, &status);
      if (HasFatalFailure()) return;
      const Outputs got{download_raw(o.get(), o_bytes), state.download_bytes()};
      if (!over) {
        EXPECT_EQ(status, 0u);
        EXPECT_TRUE(got.o == want.o) << "o differs from the C++ API without a bound";
        EXPECT_TRUE(got.state == want.state) << "final state differs from the C++ API without a bound";
        continue;
      }
      EXPECT_EQ(status, uint32_t(KDA_DEVICE_STATUS_SEQUENCE_OVER_BOUND));
      for (int64_t s = 0; s < n; ++s) {
        const size_t o_begin = size_t(cu[size_t(s)]) * row_bytes, o_end = size_t(cu[size_t(s + 1)]) * row_bytes;
        const size_t st_begin = size_t(s) * slot_bytes, st_end = st_begin + slot_bytes;
        if (s == 2) {  // not computed: o and the final state keep their 0xff fill
          EXPECT_TRUE(std::all_of(got.o.begin() + o_begin, got.o.begin() + o_end, [](uint8_t x) { return x == 0xff; }));
          EXPECT_TRUE(std::all_of(got.state.begin() + st_begin, got.state.begin() + st_end,
                                  [](uint8_t x) { return x == 0xff; }));
        } else {
          const SequenceBytesEqual eq =
              sequence_bytes_equal(cu, size_t(s), got.o, want.o, row_bytes, got.state, want.state, slot_bytes);
          EXPECT_TRUE(eq.o) << "o, sequence " << s;
          EXPECT_TRUE(eq.state) << "final state, sequence " << s;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kda::test
