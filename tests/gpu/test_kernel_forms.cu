// Every kernel form the launcher can choose (kernel_forms.hpp), end to end on a batch that selects it by default:
// the selection itself, accuracy against the float64 recurrence and against the rounded float32 chunked reference
// per (sequence, head), bit identity between the metadata modes, NaN isolation, containment of bad state indices and
// malformed cu_seqlens, and graph replay on batches of other lengths. Every run starts from NaN-filled outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernel_forms.hpp"
#include "parallel_reference.hpp"
#include "reference/localized_errors.hpp"

namespace kda::test {
namespace {

// Against the float64 recurrence: FLA's 5e-3 on the whole tensor in bf16; per (sequence, head) and for the largest
// single error, bars that one wrong token row or state column cannot pass (LocalizedErrors' own test shows the sizes).
// fp16 keeps three more mantissa bits, and its bars are tighter by about that. Measured on an H100 (docs/validation.md,
// "The hardened suite"): bf16 at worst 4.3e-3 / 4.5e-3 / 0.081, fp16 5.2e-4 / 5.4e-4 / 0.0085.
// Against the rounded chunked reference, which follows the kernels' formulas and rounding points: what remains is the
// order of fp32 sums and the fp16 factors of the intra-chunk tiles (up to ~1e-4 with signed q and k), whose bf16 flips
// of w, u and kg carry down the chunks: bf16 at worst 1.8e-3 / 2.0e-3 / 0.056, fp16 3.8e-4 / 4.0e-4 / 0.006.
ref::ErrorBars float64_bars(DType io) {
  return io == DType::kFP16 ? ref::ErrorBars{1e-3, 2e-3, 0.03} : ref::ErrorBars{5e-3, 1e-2, 0.15};
}
ref::ErrorBars chunked_bars(DType io) {
  return io == DType::kFP16 ? ref::ErrorBars{1e-3, 1e-3, 0.02} : ref::ErrorBars{2.5e-3, 3e-3, 0.08};
}

const std::vector<KernelForm>& forms() {
  static const std::vector<KernelForm> all = kernel_forms();
  return all;
}

struct Outputs {
  std::vector<float> o, state;             // o as floats; the final state K-first
  std::vector<uint8_t> o_bytes, state_bytes;
  uint32_t status = 0xffffffffu;
};

Outputs read_outputs(const DeviceProblem& dp) {
  Outputs r;
  r.o = dp.read_o();
  r.state = dp.read_final_state();
  r.o_bytes = download_raw(dp.options.o_aliases_v ? dp.v.get() : dp.o.get(),
                           size_t(dp.problem.T) * dp.problem.H * dp.problem.V * 2);
  r.state_bytes = dp.state_out.download_bytes();
  (void)hipMemcpy(&r.status, chunk_kda_device_status(dp.workspace.get()), sizeof(r.status), hipMemcpyDeviceToHost);
  return r;
}

Outputs run_form(DeviceProblem& dp) {
  const Status s = run_chunk_kda(dp);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
  return read_outputs(dp);
}

// o and final state of `got` against `want` within `bars`, per (sequence, head); prints the figures.
void expect_within(const ref::KdaProblem& p, const ref::KdaOutput& want, const Outputs& got, const ref::ErrorBars& bars,
                   const std::string& what) {
  const ref::LocalizedErrors eo = ref::token_errors(want.o, got.o, p.cu_seqlens, p.H, size_t(p.V));
  const ref::LocalizedErrors es =
      ref::sequence_errors(want.final_state, got.state, p.num_sequences(), p.H, size_t(p.K) * p.V);
  EXPECT_TRUE(ref::within(eo, bars)) << what << ": o " << eo.describe();
  EXPECT_TRUE(ref::within(es, bars)) << what << ": final state " << es.describe();
  std::printf("  %-58s o %.2e/%.2e/%.2e  ht %.2e/%.2e/%.2e\n", what.c_str(), eo.rms_rel, eo.worst_slice_rms_rel,
              eo.max_abs_rel, es.rms_rel, es.worst_slice_rms_rel, es.max_abs_rel);
}

void expect_selected(const DeviceProblem& dp, const FormSelection& want, const std::string& what) {
#if defined(KDA_PLATFORM_CUDA)
  EXPECT_EQ(to_string(selection_of(dp)), to_string(want)) << what << ": the launcher picked another form";
#else
  (void)dp, (void)want, (void)what;  // the expected selections are NVIDIA's (kernel_forms.hpp)
#endif
}

class KernelForms : public ::testing::TestWithParam<int> {
 protected:
  const KernelForm& form() const { return forms()[size_t(GetParam())]; }
};

// The selection, accuracy against both references per (sequence, head), a clear device status, and the same bits
// from both metadata modes.
TEST_P(KernelForms, SelectedAndAccurate) {
  ASSERT_TRUE(have_gpu());
  const KernelForm& f = form();
  const ref::KdaProblem p = form_problem(f, 7000 + uint64_t(GetParam()));
  const ref::KdaOutput exact = recurrent_f64_parallel(p), chunked = chunked_parallel(p, f.chunk_size);
  Outputs by_mode[2];
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    auto dp = make_device_problem(p, form_options(f, mode));
    ASSERT_NE(dp, nullptr);
    const std::string what = f.name + " " + mode_name(mode);
    expect_selected(*dp, mode == MetadataMode::kHostBuilder ? f.builder : f.derived, what);
    const Outputs r = run_form(*dp);
    EXPECT_EQ(r.status, 0u) << what << ": device status";
    expect_within(p, exact, r, float64_bars(p.io_dtype), what + " vs f64");
    expect_within(p, chunked, r, chunked_bars(p.io_dtype), what + " vs chunked");
    by_mode[int(mode)] = r;
  }
  EXPECT_EQ(by_mode[0].o_bytes, by_mode[1].o_bytes) << f.name << ": o differs between metadata modes";
  EXPECT_EQ(by_mode[0].state_bytes, by_mode[1].state_bytes) << f.name << ": final state differs between modes";
}

// NaN or Inf at one token of one head of a middle sequence: every other sequence's o rows and final state are the
// clean run's bytes, and the poisoned sequence itself did go non-finite where the value must propagate.
TEST_P(KernelForms, NonFiniteInputsStayInTheirSequence) {
  ASSERT_TRUE(have_gpu());
  const KernelForm& f = form();
  const ref::KdaProblem clean = form_problem(f, 7100 + uint64_t(GetParam()));
  const int64_t N = clean.num_sequences();
  int64_t victim = N / 2;  // a middle sequence with tokens
  while (victim < N && clean.cu_seqlens[size_t(victim) + 1] == clean.cu_seqlens[size_t(victim)]) ++victim;
  ASSERT_LT(victim, N);
  const int64_t first = clean.cu_seqlens[size_t(victim)], last = clean.cu_seqlens[size_t(victim) + 1];
  const int64_t token = (first + last) / 2;
  const int head = clean.H - 1;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Poison {
    const char* what;
    std::vector<float> ref::KdaProblem::*field;
    size_t dim;
    float value;
    bool reaches_state;  // whether the value must reach the sequence's final state (q reaches only o)
  };
  const size_t K = size_t(clean.K), V = size_t(clean.V), H = size_t(clean.H);
  const Poison poisons[] = {{"q NaN", &ref::KdaProblem::q, K, nan, false},
                            {"k Inf", &ref::KdaProblem::k, K, inf, true},
                            {"v NaN", &ref::KdaProblem::v, V, nan, true},
                            {"g NaN", &ref::KdaProblem::g, K, nan, true},
                            {"beta NaN", &ref::KdaProblem::beta, 1, nan, true}};
  const size_t row_bytes = H * V * 2, state_bytes = H * K * V * 4;
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    auto base = make_device_problem(clean, form_options(f, mode));
    ASSERT_NE(base, nullptr);
    const Outputs want = run_form(*base);
    for (const Poison& poison : poisons) {
      ref::KdaProblem bad = clean;
      (bad.*poison.field)[(size_t(token) * H + size_t(head)) * poison.dim] = poison.value;
      auto dp = make_device_problem(bad, form_options(f, mode));
      ASSERT_NE(dp, nullptr);
      const Outputs got = run_form(*dp);
      const std::string what = f.name + " " + mode_name(mode) + " " + poison.what;
      size_t leaked = 0;
      for (int64_t n = 0; n < N; ++n) {
        if (n == victim) continue;
        const SequenceBytesEqual eq = sequence_bytes_equal(clean.cu_seqlens, size_t(n), want.o_bytes, got.o_bytes,
                                                           row_bytes, want.state_bytes, got.state_bytes, state_bytes);
        leaked += !eq.o || !eq.state;
      }
      EXPECT_EQ(leaked, 0u) << what << ": sequences other than " << victim << " changed";
      // The poisoned (sequence, head): o from `token` on (q: that row) or its final state holds a non-finite value.
      bool o_nonfinite = false, state_nonfinite = false;
      for (int64_t t = token; t < (poison.reaches_state ? last : token + 1); ++t)
        for (size_t e = 0; e < V; ++e) o_nonfinite |= !std::isfinite(got.o[(size_t(t) * H + size_t(head)) * V + e]);
      for (size_t e = 0; e < K * V; ++e)
        state_nonfinite |= !std::isfinite(got.state[(size_t(victim) * H + size_t(head)) * K * V + e]);
      EXPECT_TRUE(o_nonfinite) << what << ": o of the poisoned row stayed finite";
      if (poison.reaches_state) EXPECT_TRUE(state_nonfinite) << what << ": final state stayed finite";
    }
  }
}

// A state pool in place with one sequence's slot past the pool: reported, that sequence starts from zero and stores
// nothing (its own slot keeps its bytes), the slot that belongs to nobody keeps its bytes, and every other sequence's
// state is the run without the bad index's. Then a malformed device cu_seqlens in the derived mode: reported, and
// nothing faults (memcheck runs this).
TEST_P(KernelForms, BadStateIndexAndMalformedCuSeqlensAreContained) {
  ASSERT_TRUE(have_gpu());
  const KernelForm& f = form();
  const ref::KdaProblem p = form_problem(f, 7200 + uint64_t(GetParam()));
  const int64_t N = p.num_sequences(), P = N + 1;
  int64_t bad_seq = 0;  // the first sequence with tokens (an empty one would store its initial state unchanged)
  while (bad_seq < N && p.cu_seqlens[size_t(bad_seq) + 1] == p.cu_seqlens[size_t(bad_seq)]) ++bad_seq;
  ASSERT_LT(bad_seq, N);
  const size_t slot_bytes = size_t(p.H) * p.K * p.V * 4;
  std::vector<float> pool(size_t(P) * slot_bytes / 4);
  ref::TestRng rng(9);
  for (float& x : pool) x = float(rng.normal());
  // Sequence n -> slot n + 1; slot 0 belongs to nobody. The bad run sends bad_seq to slot P + 5.
  std::vector<int64_t> good(static_cast<size_t>(N)), bad(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) good[size_t(n)] = bad[size_t(n)] = n + 1;
  bad[size_t(bad_seq)] = P + 5;
  const auto* original = reinterpret_cast<const uint8_t*>(pool.data());
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    std::vector<uint8_t> after[2];
    uint32_t status[2] = {};
    for (int run = 0; run < 2; ++run) {
      auto dp = make_device_problem(p, form_options(f, mode));
      ASSERT_NE(dp, nullptr);
      DeviceBuffer d_pool = upload_floats(pool);
      DeviceBuffer d_slots = upload_indices(run == 0 ? good : bad, IndexType::kInt64);
      dp->args.state.initial_state = d_pool.as<float>();
      dp->args.state.final_state = d_pool.as<float>();
      dp->args.state.state_indices = IndexSpan{d_slots.get(), IndexType::kInt64};
      dp->args.state.pool_size = P;
      KDA_ASSERT_OK(run_chunk_kda(*dp));
      KDA_ASSERT_RT(hipDeviceSynchronize());
      after[run] = d_pool.download_bytes();
      KDA_ASSERT_RT(hipMemcpy(&status[run], chunk_kda_device_status(dp->workspace.get()), 4, hipMemcpyDeviceToHost));
    }
    const std::string what = f.name + " " + mode_name(mode);
    EXPECT_EQ(status[0], 0u) << what;
    EXPECT_EQ(status[1], uint32_t(detail::kDeviceStatusBadStateIndex)) << what;
    const size_t own = size_t(bad_seq + 1) * slot_bytes;
    for (int run = 0; run < 2; ++run) {
      EXPECT_EQ(0, std::memcmp(after[run].data(), original, slot_bytes)) << what << ": slot 0 belongs to nobody";
    }
    EXPECT_EQ(0, std::memcmp(after[1].data() + own, original + own, slot_bytes))
        << what << ": the slot of the sequence with the bad index must keep its bytes";
    EXPECT_NE(0, std::memcmp(after[0].data() + own, original + own, slot_bytes))
        << what << ": the good run did not store that sequence's state";
    size_t others_changed = 0;  // every other sequence's state is the good run's
    for (int64_t n = 0; n < N; ++n) {
      const size_t at = size_t(n + 1) * slot_bytes;
      if (n != bad_seq) others_changed += std::memcmp(after[0].data() + at, after[1].data() + at, slot_bytes) != 0;
    }
    EXPECT_EQ(others_changed, 0u) << what << ": other sequences' states changed";
  }
  // A device cu_seqlens with an entry past T behind derived tables (the host built its view from the good one).
  if (N < 2) return;
  auto dp = make_device_problem(p, form_options(f, MetadataMode::kDeviceDerived));
  ASSERT_NE(dp, nullptr);
  std::vector<int32_t> broken(p.cu_seqlens.begin(), p.cu_seqlens.end());
  broken[1] = int32_t(p.T + 7);
  ASSERT_EQ(dp->cu.bytes(), broken.size() * sizeof(int32_t));
  dp->cu.upload(broken.data(), dp->cu.bytes());
  KDA_ASSERT_OK(run_chunk_kda(*dp));
  KDA_ASSERT_RT(hipDeviceSynchronize());
  uint32_t bits = 0;
  KDA_ASSERT_RT(hipMemcpy(&bits, chunk_kda_device_status(dp->workspace.get()), 4, hipMemcpyDeviceToHost));
  EXPECT_NE(bits & detail::kDeviceStatusBadCuSeqlens, 0u) << f.name << ": cu_seqlens past T not reported";
}

std::string form_name(const ::testing::TestParamInfo<int>& info) { return forms()[size_t(info.param)].name; }

INSTANTIATE_TEST_SUITE_P(Forms, KernelForms, ::testing::Range(0, 15), form_name);
TEST(KernelFormsTable, EveryFormIsInstantiated) { EXPECT_EQ(forms().size(), 15u) << "update the Range above"; }

// One graph captured in the derived mode, replayed on batches of other lengths and other numbers of non-empty
// sequences (the same T and N slots, as an engine pads a batch): each replay gives the bytes of an eager call on
// that batch and meets the float64 bars. Two shapes: long sequences (fused long prepare) and short ones (the
// short-sequence state kernel with tickets).
TEST(KernelFormsGraph, ReplayOnOtherSequenceLengths) {
  ASSERT_TRUE(have_gpu());
  struct Shape {
    const char* name;
    std::vector<std::vector<int64_t>> cus;  // the captured batch first; same T and N
    int H;
  };
  const Shape shapes[] = {
      {"long", {{0, 100, 400, 401, 402, 900, 1200}, {0, 600, 1100, 1200, 1200, 1200, 1200},
                {0, 0, 1, 2, 3, 4, 1200}, {0, 0, 0, 0, 0, 0, 1200}}, 4},
      {"short", {{0, 8, 16, 24, 32, 40, 48, 56, 64, 100}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 100},
                 {0, 50, 50, 50, 50, 50, 50, 50, 50, 100}, {0, 11, 22, 33, 44, 55, 66, 77, 88, 100}}, 2},
  };
  KernelForm f;
  f.K = f.V = 128;
  f.chunk_size = 64;
  f.bound = 0;
  for (const Shape& shape : shapes) {
    f.H = shape.H;
    f.cu = shape.cus[0];
    f.name = shape.name;
    auto dp = make_device_problem(form_problem(f, 7300), form_options(f, MetadataMode::kDeviceDerived));
    ASSERT_NE(dp, nullptr);
    hipStream_t stream;
    KDA_ASSERT_RT(hipStreamCreate(&stream));
    hipGraph_t graph;
    hipGraphExec_t exec;
    KDA_ASSERT_RT(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
    const Status s = run_chunk_kda(*dp, stream);  // its NaN fills are captured too
    KDA_ASSERT_RT(hipStreamEndCapture(stream, &graph));
    ASSERT_TRUE(s.is_ok()) << s.message();
    KDA_ASSERT_RT(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));
    for (size_t b = 0; b < shape.cus.size(); ++b) {
      f.cu = shape.cus[b];
      const ref::KdaProblem p = form_problem(f, 7301 + b);
      upload_inputs(*dp, p);  // new inputs and a new cu_seqlens into the captured buffers
      KDA_ASSERT_RT(hipGraphLaunch(exec, stream));
      KDA_ASSERT_RT(hipStreamSynchronize(stream));
      dp->problem = p;
      const Outputs replay = read_outputs(*dp);
      const std::string what = std::string(shape.name) + " replay " + std::to_string(b);
      EXPECT_EQ(replay.status, 0u) << what;
      auto eager_dp = make_device_problem(p, form_options(f, MetadataMode::kDeviceDerived));
      ASSERT_NE(eager_dp, nullptr);
      const Outputs eager = run_form(*eager_dp);
      EXPECT_EQ(replay.o_bytes, eager.o_bytes) << what << ": o differs from an eager call";
      EXPECT_EQ(replay.state_bytes, eager.state_bytes) << what << ": final state differs from an eager call";
      expect_within(p, recurrent_f64_parallel(p), replay, float64_bars(p.io_dtype), what + " vs f64");
    }
    (void)hipGraphExecDestroy(exec);
    (void)hipGraphDestroy(graph);
    (void)hipStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace kda::test
