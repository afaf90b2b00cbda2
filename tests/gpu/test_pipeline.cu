// chunk_kda_fwd end to end on the GPU: accuracy against the float64 recurrence, bit identity between the host-built
// and device-derived chunk tables, determinism, graph capture, state-pool features, aliasing, strided views and
// hostile-but-finite inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "device_problem.hpp"
#include "parallel_reference.hpp"
#include "reference/error_metrics.hpp"
#include "reference/problem_generator.hpp"

namespace kda::test {
size_t workspace_size_from_second_translation_unit(const ChunkKdaArgs& args);  // second_translation_unit.cu
namespace {

constexpr double kRmsBar = 5e-3;  // FLA's o / final-state bar (KDA_SPEC §6)
// The register-state kernel against the other folded forms: the same rounded pipeline summed in another order, so
// o and the final state differ by a few last-bit flips of rounded values (~1.4e-5 rms measured on these problems).
constexpr double kRegisterStateBar = 1e-4;

std::vector<int64_t> spec_cu(int64_t n, int64_t len) {
  std::vector<int64_t> cu;
  EXPECT_TRUE(make_spec_cu_seqlens(n, len, &cu).is_ok());
  return cu;
}
std::vector<int64_t> decode_prefill_cu(int64_t decodes, const std::vector<int64_t>& prefills) {
  std::vector<int64_t> cu;
  EXPECT_TRUE(make_decode_prefill_cu_seqlens(decodes, prefills, &cu).is_ok());
  return cu;
}

struct Batch {
  std::string name;
  std::vector<int64_t> cu;
  int H, K, V;
};

std::vector<Batch> batch_kinds() {
  return {
      {"single1000", {0, 1000}, 4, 128, 128},                           // T not a multiple of 64
      {"varlen_zero_len", {0, 15, 15, 100, 300, 300, 1200, 1200}, 4, 64, 64},  // zero lengths mid and end
      {"decodes_then_prefills", decode_prefill_cu(8, {200, 777, 64}), 4, 128, 128},
      {"spec256x8", spec_cu(256, 8), 2, 128, 128},
      {"single_long", {0, 4096}, 8, 128, 128},
      {"every_short_length_k64", every_short_length_cu(), 2, 64, 128},
  };
}

ref::KdaProblem kimi_problem(const Batch& b, GateKind gate, DType io, uint64_t seed) {
  ref::ProblemOptions opt;
  opt.qk_l2norm_in_kernel = true;
  opt.beta_activation = BetaActivation::kSigmoid;
  opt.with_dt_bias = true;
  opt.with_A_log = gate != GateKind::kLowerBound;
  opt.with_initial_state = true;
  opt.zero_gate_fraction = 0.02;
  opt.extreme_gate_fraction = 0.01;
  if (gate == GateKind::kPrecomputed) {  // FLA's own test style: inputs pre-normalised, beta pre-activated
    opt.qk_l2norm_in_kernel = false;
    opt.beta_activation = BetaActivation::kNone;
    opt.with_dt_bias = false;
  }
  return ref::make_random_problem(b.cu, b.H, b.K, b.V, io, gate, seed, opt);
}

struct RunResult {
  std::vector<float> o, final_state;
  std::vector<uint8_t> o_bytes, state_bytes;
};

RunResult run_once(const ref::KdaProblem& p, const DeviceProblemOptions& opt,
                   std::unique_ptr<DeviceProblem>* keep = nullptr) {
  RunResult r;
  auto dp = make_device_problem(p, opt);
  EXPECT_NE(dp, nullptr);
  if (!dp) return r;
  const Status s = run_chunk_kda(*dp);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
  r.o = dp->read_o();
  r.final_state = dp->read_final_state();
  const void* o_ptr = opt.o_aliases_v ? dp->v.get() : dp->o.get();
  r.o_bytes = download_raw(o_ptr, size_t(p.T) * p.H * p.V * 2);
  r.state_bytes = dp->state_out.download_bytes();
  if (keep) *keep = std::move(dp);
  return r;
}

void expect_close_to_f64(const ref::KdaProblem& p, const RunResult& r, const std::string& what) {
  const ref::KdaOutput want = recurrent_f64_parallel(p);
  const double o_err = ref::rms_relative_error(want.o, r.o);
  const double s_err = ref::rms_relative_error(want.final_state, r.final_state);
  EXPECT_TRUE(ref::all_finite(r.o)) << what;
  EXPECT_TRUE(ref::all_finite(r.final_state)) << what;
  EXPECT_LE(o_err, kRmsBar) << what << ": o rms rel error";
  EXPECT_LE(s_err, kRmsBar) << what << ": final state rms rel error";
  std::printf("  %-60s o %.2e  ht %.2e\n", what.c_str(), o_err, s_err);
}

// ---------------------------------------------------------------------------------------------------------------
// Accuracy against the float64 recurrence
// ---------------------------------------------------------------------------------------------------------------

TEST(ChunkKdaAccuracy, BatchKindsAllGatesBothLayouts) {
  ASSERT_TRUE(have_gpu());
  uint64_t seed = 100;
  for (const Batch& b : batch_kinds()) {
    for (GateKind gate : {GateKind::kPrecomputed, GateKind::kSoftplus, GateKind::kLowerBound}) {
      for (StateLayout layout : {StateLayout::kKFirst, StateLayout::kVFirst}) {
        const ref::KdaProblem p = kimi_problem(b, gate, DType::kBF16, ++seed);
        DeviceProblemOptions opt;
        opt.state_layout = layout;
        const RunResult r = run_once(p, opt);
        expect_close_to_f64(p, r, b.name + " gate=" + std::to_string(int(gate)) +
                                      (layout == StateLayout::kKFirst ? " K-first" : " V-first"));
      }
    }
  }
}

TEST(ChunkKdaAccuracy, FlaShapesFp16AndBf16) {
  ASSERT_TRUE(have_gpu());
  const std::vector<Batch> shapes = {
      {"fla_1x63_d64", {0, 63}, 1, 64, 64},
      {"fla_cu15", {0, 15}, 4, 128, 128},
      {"fla_varlen", {0, 256, 500, 1000}, 4, 64, 64},
      {"fla_varlen5", {0, 15, 100, 300, 1200, 2000}, 4, 128, 128},
      {"fla_varlen_4096", {0, 100, 300, 1200, 3000, 4096}, 4, 64, 64},
      {"d256", {0, 300, 700}, 2, 256, 256},
      {"k64_v256", {0, 500}, 2, 64, 256},
      {"k256_v64", {0, 500}, 2, 256, 64},
  };
  uint64_t seed = 500;
  for (const Batch& b : shapes) {
    for (DType io : {DType::kBF16, DType::kFP16}) {
      const ref::KdaProblem p = kimi_problem(b, GateKind::kPrecomputed, io, ++seed);
      expect_close_to_f64(p, run_once(p, {}), b.name + (io == DType::kBF16 ? " bf16" : " fp16"));
    }
  }
}

TEST(ChunkKdaAccuracy, KimiLinearShapeT8192) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"kimi_T8192_H32", {0, 8192}, 32, 128, 128};
  for (GateKind gate : {GateKind::kSoftplus, GateKind::kLowerBound}) {
    const ref::KdaProblem p = kimi_problem(b, gate, DType::kBF16, 7 + int(gate));
    DeviceProblemOptions opt;
    opt.state_layout = StateLayout::kVFirst;  // vLLM's layout
    expect_close_to_f64(p, run_once(p, opt), b.name + " gate=" + std::to_string(int(gate)));
  }
}

TEST(ChunkKdaAccuracy, ChunkSize32AndStoredGateAndBetaIn16Bit) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"bt32", {0, 31, 96, 160}, 2, 64, 64};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 77);
  DeviceProblemOptions opt;
  opt.chunk_size = 32;
  expect_close_to_f64(p, run_once(p, opt), "chunk size 32");
  DeviceProblemOptions opt16;
  opt16.g_type = ScalarType::kBFloat16;
  opt16.beta_type = ScalarType::kBFloat16;
  expect_close_to_f64(p, run_once(p, opt16), "g and beta stored as bf16");
}

// ---------------------------------------------------------------------------------------------------------------
// Bit identity between metadata paths, and determinism
// ---------------------------------------------------------------------------------------------------------------

// Byte ranges of the workspace that hold stage intermediates (the h rows past NT exist only in derived mode), for
// the layout of `path`.
std::vector<std::pair<const char*, std::pair<size_t, size_t>>> intermediate_ranges(
    const DeviceProblem& dp, detail::ChunkKdaPath path = detail::ChunkKdaPath::kAuto,
    detail::ChunkKdaOutput output = detail::ChunkKdaOutput::kAuto) {
  const auto l = detail::chunk_kda_workspace_layout(dp.args, path, output);
  const auto& p = dp.problem;
  const size_t T = p.T, H = p.H, K = p.K, V = p.V, E = 2, BT = dp.options.chunk_size, NT = dp.num_chunks;
  std::vector<std::pair<const char*, std::pair<size_t, size_t>>> r = {
      {"Aqk", {l.Aqk, T * H * BT * 4}}, {"w", {l.w, T * H * K * E}}, {"kg", {l.kg, T * H * K * E}}};
  if (l.output_folded || l.inputs_fused) r.push_back({"qg", {l.qg, T * H * K * E}});
  if (l.output_folded) {  // the state kernel forms o from qg; u keeps u (no v_new is written), no h exists
    r.push_back({"u", {l.u, T * H * V * E}});
  } else {  // v_new written over u, and the per-chunk h
    r.push_back({"v_new", {l.v_new, T * H * V * E}});
    r.push_back({"h", {l.h, NT * H * K * V * E}});
  }
  if (l.inputs_fused) {  // the fused prepare's own outputs
    r.push_back({"G_last", {l.G_last, NT * H * K * 4}});
    return r;
  }
  // Akk and Tinv are in memory only where the launches cannot keep them on chip (the prepare launch not fused;
  // then Akk only for unaligned, unnormalised q or k).
  const auto s = detail::chunk_kda_stage_args(dp.args, dp.args.geometry, dp.workspace.get(), path);
  const bool akk_written = s.intra.Akk != nullptr, tinv_written = !chunk_prepare_fused(s.intra, s.wu);
  r.push_back({"G", {l.G, T * H * K * 4}});
  r.push_back({"Akk", {l.Akk, akk_written ? T * H * BT * 4 : 0}});
  r.push_back({"Tinv", {l.Tinv, tinv_written ? T * H * BT * 4 : 0}});
  if (p.qk_l2norm) {
    r.push_back({"q_norm", {l.q_norm, T * H * K * E}});
    r.push_back({"k_norm", {l.k_norm, T * H * K * E}});
  }
  return r;
}

void expect_bit_identical(const DeviceProblem& a, const DeviceProblem& b, const std::string& what) {
  const std::vector<uint8_t> wa = a.workspace.download_bytes(), wb = b.workspace.download_bytes();
  const auto rb = intermediate_ranges(b);
  for (const auto& entry : intermediate_ranges(a)) {
    const std::string name = entry.first;
    const auto range = entry.second;
    const auto it = std::find_if(rb.begin(), rb.end(), [&](const auto& x) { return x.first == name; });
    ASSERT_NE(it, rb.end());
    ASSERT_EQ(range.second, it->second.second) << name;
    EXPECT_EQ(0, std::memcmp(wa.data() + range.first, wb.data() + it->second.first, range.second))
        << what << ": intermediate " << name << " differs";
  }
}

TEST(ChunkKdaBitIdentity, BuilderAndDerivedMetadataAgreeOnEveryStage) {
  ASSERT_TRUE(have_gpu());
  uint64_t seed = 900;
  for (const Batch& b : batch_kinds()) {
    for (IndexType it : {IndexType::kInt32, IndexType::kInt64}) {
      const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, ++seed);
      DeviceProblemOptions host_opt, dev_opt;
      host_opt.index_type = dev_opt.index_type = it;
      host_opt.mode = MetadataMode::kHostBuilder;
      dev_opt.mode = MetadataMode::kDeviceDerived;
      std::unique_ptr<DeviceProblem> host_dp, dev_dp;
      const RunResult rh = run_once(p, host_opt, &host_dp);
      const RunResult rd = run_once(p, dev_opt, &dev_dp);
      const std::string what = b.name + (it == IndexType::kInt32 ? " int32" : " int64");
      EXPECT_EQ(rh.o_bytes, rd.o_bytes) << what << ": o differs between metadata paths";
      EXPECT_EQ(rh.state_bytes, rd.state_bytes) << what << ": final state differs between metadata paths";
      expect_bit_identical(*host_dp, *dev_dp, what);
    }
  }
}

TEST(ChunkKdaBitIdentity, RunToRunDeterministic) {
  ASSERT_TRUE(have_gpu());
  for (const Batch& b : batch_kinds()) {
    const ref::KdaProblem p = kimi_problem(b, GateKind::kLowerBound, DType::kBF16, 4242);
    for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
      DeviceProblemOptions opt;
      opt.mode = mode;
      std::unique_ptr<DeviceProblem> first;
      const RunResult r1 = run_once(p, opt, &first);
      ASSERT_TRUE(run_chunk_kda(*first).is_ok());  // same buffers, poisoned again, second call
      ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
      EXPECT_EQ(r1.o_bytes, download_raw(first->o.get(), r1.o_bytes.size())) << b.name << " " << mode_name(mode);
      EXPECT_EQ(r1.state_bytes, first->state_out.download_bytes()) << b.name << " " << mode_name(mode);
    }
  }
}

// Raw bf16 and fp32 buffers as floats.
std::vector<float> bf16_values(const std::vector<uint8_t>& bytes) {
  std::vector<float> x(bytes.size() / 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = numeric::bf16_to_float(uint16_t(bytes[2 * i] | (bytes[2 * i + 1] << 8)));
  return x;
}
std::vector<float> float_values(const std::vector<uint8_t>& bytes) {
  std::vector<float> x(bytes.size() / 4);
  std::memcpy(x.data(), bytes.data(), x.size() * 4);
  return x;
}

// One chunk_kda_fwd call on a chosen form, in a workspace of that form's layout: o, the final state and the
// workspace, as bytes.
struct PathRun {
  std::vector<uint8_t> o, state, ws;
};
// state_regs_warps: StateRecurrenceArgs::regs_warps of the state launch, prepare_warp_short:
// ChunkPrepareInputsArgs::warp_short of the fused prepare (-1: the launcher's choice).
PathRun run_on_path(DeviceProblem& dp, detail::ChunkKdaPath path,
                    detail::ChunkKdaOutput output = detail::ChunkKdaOutput::kAuto, int state_regs_warps = -1,
                    int prepare_warp_short = -1) {
  PathRun r;
  const size_t bytes = detail::chunk_kda_workspace_layout(dp.args, path, output).total;
  DeviceBuffer ws(bytes);  // starts as NaNs (DeviceBuffer)
  EXPECT_NE(ws.get(), nullptr);
  poison_outputs(dp);  // o and the final state start as NaNs, so that a launch that writes neither cannot pass
  const Status s = detail::chunk_kda_fwd_on_path(dp.args, ws.get(), bytes, nullptr, path, output, state_regs_warps,
                                                 prepare_warp_short);
  EXPECT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
  r.o = download_raw(dp.o.get(), size_t(dp.problem.T) * dp.problem.H * dp.problem.V * 2);
  r.state = dp.state_out.download_bytes();
  r.ws = ws.download_bytes();
  return r;
}

// chunk_kda_fwd's two forms on the same inputs: the fused one (l2norm, gate and the prepare in one launch from the raw
// inputs) and the staged one. o, the final state and every intermediate both keep (Aqk, w, u, kg, qg) must be the
// same bits, and G_last must be the staged G at each chunk's last row. The raw gate g stored as fp32, bf16 or fp16.
TEST(ChunkKdaBitIdentity, FusedPrepareMatchesStagedForm) {
  ASSERT_TRUE(have_gpu());
  uint64_t seed = 1300;
  for (const Batch& b : batch_kinds()) {
    for (GateKind gate : {GateKind::kSoftplus, GateKind::kLowerBound, GateKind::kPrecomputed}) {
      for (ScalarType g_type : {ScalarType::kFloat32, ScalarType::kBFloat16, ScalarType::kFloat16}) {
        if (gate != GateKind::kSoftplus && g_type != ScalarType::kFloat32) continue;
        const ref::KdaProblem p = kimi_problem(b, gate, DType::kBF16, ++seed);
        DeviceProblemOptions opt;
        opt.g_type = g_type;
        auto dp = make_device_problem(p, opt);
        ASSERT_NE(dp, nullptr);
        const std::string what = b.name + " gate " + std::to_string(int(gate)) + " g_type " +
                                 std::to_string(int(g_type));
        ASSERT_TRUE(detail::chunk_kda_workspace_layout(dp->args, detail::ChunkKdaPath::kFused).inputs_fused) << what;
        // The output folded in (chunk_kda_fwd's own form), so that qg and the Aqk pair are compared too.
        constexpr auto kFold = detail::ChunkKdaOutput::kAuto;
        // Not the register-state kernel, whose sums run in another order than the separate output's (the staged
        // form's without l2norm): FoldedOutputMatchesSeparateOutput checks it within its bar.
        const PathRun fused = run_on_path(*dp, detail::ChunkKdaPath::kFused, kFold, /*state_regs_warps=*/0);
        const PathRun staged = run_on_path(*dp, detail::ChunkKdaPath::kStaged, kFold, /*state_regs_warps=*/0);
        EXPECT_EQ(fused.o, staged.o) << what << ": o";
        EXPECT_EQ(fused.state, staged.state) << what << ": final state";
        const auto fr = intermediate_ranges(*dp, detail::ChunkKdaPath::kFused, kFold);
        const auto sr = intermediate_ranges(*dp, detail::ChunkKdaPath::kStaged, kFold);
        // The staged form folds the output too where its prepare is one kernel (l2norm on): then Aqk is the same hi + lo
        // pair in both and both keep u and qg. Without l2norm (the precomputed-gate cases) it keeps fp32 Aqk, writes
        // v_new over u and has no qg.
        const bool both_fold =
            detail::chunk_kda_workspace_layout(dp->args, detail::ChunkKdaPath::kStaged, kFold).output_folded;
        EXPECT_EQ(both_fold, dp->args.qk_l2norm) << what;
        const std::vector<const char*> names =
            both_fold ? std::vector<const char*>{"Aqk", "w", "u", "kg", "qg"} : std::vector<const char*>{"w", "kg"};
        for (const char* name : names) {
          auto find = [&](const auto& ranges) {
            const auto it = std::find_if(ranges.begin(), ranges.end(),
                                         [&](const auto& x) { return std::string(x.first) == name; });
            return it == ranges.end() ? std::pair<size_t, size_t>{0, 0} : it->second;
          };
          const auto a = find(fr), c = find(sr);
          ASSERT_GT(a.second, 0u) << name;
          ASSERT_EQ(a.second, c.second) << name;
          EXPECT_EQ(0, std::memcmp(fused.ws.data() + a.first, staged.ws.data() + c.first, a.second))
              << what << ": intermediate " << name << " differs";
        }
        // G_last of chunk c (global id, in sequence order) = staged G at the chunk's last token.
        const auto fl = detail::chunk_kda_workspace_layout(dp->args, detail::ChunkKdaPath::kFused, kFold);
        const auto sl = detail::chunk_kda_workspace_layout(dp->args, detail::ChunkKdaPath::kStaged, kFold);
        const size_t H = p.H, K = p.K, BT = 64;
        size_t chunk = 0, mismatches = 0;
        for (size_t n = 0; n + 1 < b.cu.size(); ++n) {
          for (int64_t start = b.cu[n]; start < b.cu[n + 1]; start += BT, ++chunk) {
            const int64_t last = std::min<int64_t>(start + BT, b.cu[n + 1]) - 1;
            mismatches += std::memcmp(fused.ws.data() + fl.G_last + chunk * H * K * 4,
                                      staged.ws.data() + sl.G + size_t(last) * H * K * 4, H * K * 4) != 0;
          }
        }
        EXPECT_EQ(chunk, size_t(dp->num_chunks)) << what;
        EXPECT_EQ(mismatches, 0u) << what << ": G_last differs from the staged G at chunks' last rows";
      }
    }
  }
}

// The fused prepare's two kernels on the same inputs: the one with a short path for chunks of at most 16 rows
// (launch_chunk_prepare_inputs' choice in chunks of 64 wherever sequences average fewer than four chunks) and the
// long path alone. Every byte they write must agree (Aqk's hi + lo pair, w, u, kg, qg, G_last), on chunks of every
// length 1-17, for K = 64 and 128, every gate, g stored as fp32, bf16 or fp16 (the short path loads a 16-bit g on a
// path of its own), and both metadata modes.
TEST(ChunkKdaBitIdentity, FusedPrepareShortPathMatchesLongPath) {
  ASSERT_TRUE(have_gpu());
  uint64_t seed = 2100;
  struct Case {
    Batch b;
    bool launcher_short;  // whether launch_chunk_prepare_inputs picks the short path itself: T < 4 x 64 x N
  };
  const std::vector<Case> cases = {
      {{"every_short_length_k64", every_short_length_cu(), 2, 64, 128}, true},
      {{"every_short_length_k128", every_short_length_cu(), 2, 128, 64}, true},
      {{"spec64x8", spec_cu(64, 8), 2, 128, 128}, true},
      {{"decodes_then_prefills", decode_prefill_cu(8, {200, 777, 64}), 2, 128, 128}, true},
  };
  for (const Case& c : cases) {
    const Batch& b = c.b;
    for (GateKind gate : {GateKind::kSoftplus, GateKind::kLowerBound, GateKind::kPrecomputed}) {
      for (ScalarType g_type : {ScalarType::kFloat32, ScalarType::kBFloat16, ScalarType::kFloat16}) {
        if (gate != GateKind::kSoftplus && g_type != ScalarType::kFloat32) continue;
        for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
          const ref::KdaProblem p = kimi_problem(b, gate, DType::kBF16, ++seed);
          DeviceProblemOptions opt;
          opt.g_type = g_type;
          opt.mode = mode;
          auto dp = make_device_problem(p, opt);
          ASSERT_NE(dp, nullptr);
          const std::string what = b.name + " gate " + std::to_string(int(gate)) + " g_type " +
                                   std::to_string(int(g_type)) + " " + mode_name(mode);
          const auto l = detail::chunk_kda_workspace_layout(dp->args, detail::ChunkKdaPath::kFused);
          ASSERT_TRUE(l.inputs_fused) << what;
          std::vector<uint8_t> out[2];
          for (int short_chunks : {0, 1}) {
            DeviceBuffer ws(l.total);
            ASSERT_EQ(hipMemsetAsync(ws.get(), 0x5a, l.total, nullptr), hipSuccess);
            ChunkPrepareInputsArgs a =
                detail::chunk_kda_stage_args(dp->args, dp->args.geometry, ws.get(), detail::ChunkKdaPath::kFused)
                    .prepare_inputs;
            EXPECT_EQ(detail::prepare_inputs_short_path_used(a), c.launcher_short) << what << ": launcher's choice";
            a.short_chunks = short_chunks;
            DeviceBuffer meta(std::max<size_t>(chunk_prepare_inputs_workspace_size(a), 16));
            const Status st = launch_chunk_prepare_inputs(a, meta.get(), meta.bytes(), nullptr);
            ASSERT_TRUE(st.is_ok()) << what << ": " << st.message();
            ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
            out[short_chunks] = ws.download_bytes();
          }
          size_t differing = 0;
          for (size_t i = 0; i < out[0].size(); ++i) differing += out[0][i] != out[1][i];
          EXPECT_EQ(differing, 0u) << what << ": the short path's bytes differ from the long path's";
          // Not two untouched workspaces: every row of w was written (no 4-byte word of it still holds the fill).
          size_t fill_words = 0;
          for (size_t o = l.w; o + 4 <= l.w + size_t(p.T) * p.H * p.K * 2; o += 4)
            fill_words += std::memcmp(out[1].data() + o, "\x5a\x5a\x5a\x5a", 4) == 0;
          EXPECT_EQ(fill_words, 0u) << what << ": w not written";
        }
      }
    }
  }
  // A batch of long sequences keeps the kernel without the short path unless forced.
  const ref::KdaProblem p = kimi_problem(Batch{"single_long", {0, 4096}, 2, 128, 128}, GateKind::kSoftplus,
                                         DType::kBF16, 2199);
  auto dp = make_device_problem(p, {});
  ASSERT_NE(dp, nullptr);
  ChunkPrepareInputsArgs a =
      detail::chunk_kda_stage_args(dp->args, dp->args.geometry, dp->workspace.get(), detail::ChunkKdaPath::kFused)
          .prepare_inputs;
  EXPECT_FALSE(detail::prepare_inputs_short_path_used(a));
  a.short_chunks = 1;
  EXPECT_TRUE(detail::prepare_inputs_short_path_used(a));
}

// The warp-per-item prepare (chunk_prepare_warp_short.hpp: where the caller bounds every sequence at 8 tokens, K = V =
// 128, NVIDIA) against the short-only kernel it replaces there: every byte they write must agree (Aqk's hi + lo pair,
// w, u, kg, qg, G_last), at both of its register budgets (warp_short 1 and 2), on sequences of every length 0-8, for
// every gate, g stored as fp32, bf16 or fp16, beta as bf16, fp16 I/O, views that are not 8-byte aligned (its
// per-element loads), and both metadata modes. The launcher picks it by itself under the bound (in its
// kWarpShortDefaultForm), and never without the bound; forcing it there is refused.
TEST(ChunkKdaBitIdentity, FusedPrepareWarpShortMatchesShortOnly) {
  ASSERT_TRUE(have_gpu());
#if !defined(KDA_PLATFORM_CUDA)
  GTEST_SKIP() << "the warp-per-item prepare is NVIDIA only";
#endif
  std::vector<int64_t> lengths0to8 = {0};
  for (int rep = 0; rep < 3; ++rep)
    for (int64_t len = 0; len <= 8; ++len) lengths0to8.push_back(lengths0to8.back() + len);
  const std::vector<Batch> batches = {{"spec64x8", spec_cu(64, 8), 3, 128, 128},
                                      {"lengths0to8", lengths0to8, 2, 128, 128}};
  struct Variant {
    GateKind gate;
    ScalarType g_type, beta_type;
    DType io;
    bool unaligned;  // q, k, v and g read through views one element past their buffers' starts
  };
  const std::vector<Variant> variants = {
      {GateKind::kSoftplus, ScalarType::kFloat32, ScalarType::kFloat32, DType::kBF16, false},
      {GateKind::kSoftplus, ScalarType::kBFloat16, ScalarType::kBFloat16, DType::kBF16, false},
      {GateKind::kSoftplus, ScalarType::kFloat16, ScalarType::kFloat32, DType::kBF16, false},
      {GateKind::kLowerBound, ScalarType::kFloat32, ScalarType::kFloat32, DType::kBF16, false},
      {GateKind::kPrecomputed, ScalarType::kFloat32, ScalarType::kFloat32, DType::kBF16, false},
      {GateKind::kSoftplus, ScalarType::kFloat32, ScalarType::kFloat16, DType::kFP16, false},
      {GateKind::kSoftplus, ScalarType::kFloat32, ScalarType::kFloat32, DType::kBF16, true},
      {GateKind::kSoftplus, ScalarType::kBFloat16, ScalarType::kFloat32, DType::kFP16, true},
  };
  uint64_t seed = 3800;
  for (const Batch& b : batches) {
    for (const Variant& v : variants) {
      for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
        const ref::KdaProblem p = kimi_problem(b, v.gate, v.io, ++seed);
        DeviceProblemOptions opt;
        opt.g_type = v.g_type;
        opt.beta_type = v.beta_type;
        opt.mode = mode;
        opt.max_sequence_tokens = kernels::kWarpShortRows;
        auto dp = make_device_problem(p, opt);
        ASSERT_NE(dp, nullptr);
        const std::string what = b.name + " gate " + std::to_string(int(v.gate)) + " g_type " +
                                 std::to_string(int(v.g_type)) + " beta_type " + std::to_string(int(v.beta_type)) +
                                 (v.io == DType::kFP16 ? " fp16" : " bf16") + (v.unaligned ? " unaligned" : "") +
                                 " " + mode_name(mode);
        const auto l = detail::chunk_kda_workspace_layout(dp->args, detail::ChunkKdaPath::kFused);
        ASSERT_TRUE(l.inputs_fused) << what;
        // The unaligned views: copies of q, k, v (16-bit) and g one element into buffers one element longer.
        DeviceBuffer shifted[4];
        const TensorView* views[4] = {&dp->args.q, &dp->args.k, &dp->args.v, &dp->args.g};
        const size_t elem[4] = {2, 2, 2, v.g_type == ScalarType::kFloat32 ? size_t(4) : size_t(2)};
        const size_t count[4] = {size_t(p.T) * p.H * p.K, size_t(p.T) * p.H * p.K, size_t(p.T) * p.H * p.V,
                                 size_t(p.T) * p.H * p.K};
        if (v.unaligned) {
          for (int x = 0; x < 4; ++x) {
            shifted[x].allocate((count[x] + 1) * elem[x]);
            ASSERT_NE(shifted[x].get(), nullptr);
            ASSERT_EQ(hipMemcpy(shifted[x].as<char>() + elem[x], views[x]->data, count[x] * elem[x],
                                hipMemcpyDeviceToDevice),
                      hipSuccess);
          }
        }
        std::vector<uint8_t> out[3];
        for (int warp_short : {0, 1, 2}) {
          DeviceBuffer ws(l.total);
          ASSERT_EQ(hipMemsetAsync(ws.get(), 0x5a, l.total, nullptr), hipSuccess);
          ChunkPrepareInputsArgs a =
              detail::chunk_kda_stage_args(dp->args, dp->args.geometry, ws.get(), detail::ChunkKdaPath::kFused)
                  .prepare_inputs;
          EXPECT_EQ(detail::prepare_inputs_warp_short_used(a), ActiveTuning::kWarpShortDefaultForm)
              << what << ": launcher's choice under the bound";
          if (v.unaligned) {
            TensorView* dst[4] = {&a.q, &a.k, &a.v, &a.g};
            for (int x = 0; x < 4; ++x) dst[x]->data = shifted[x].as<char>() + elem[x];
          }
          a.warp_short = warp_short;
          DeviceBuffer meta(std::max<size_t>(chunk_prepare_inputs_workspace_size(a), 16));
          const Status st = launch_chunk_prepare_inputs(a, meta.get(), meta.bytes(), nullptr);
          ASSERT_TRUE(st.is_ok()) << what << ": " << st.message();
          ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
          out[warp_short] = ws.download_bytes();
        }
        for (int warp_short : {1, 2}) {
          size_t differing = 0;
          for (size_t i = 0; i < out[0].size(); ++i) differing += out[0][i] != out[warp_short][i];
          EXPECT_EQ(differing, 0u) << what << ": warp_short " << warp_short
                                   << ": bytes differ from the short-only kernel's";
        }
        // Not untouched workspaces: every row of w was written (no 4-byte word of it still holds the fill).
        size_t fill_words = 0;
        for (size_t o = l.w; o + 4 <= l.w + size_t(p.T) * p.H * p.K * 2; o += 4)
          fill_words += std::memcmp(out[1].data() + o, "\x5a\x5a\x5a\x5a", 4) == 0;
        EXPECT_EQ(fill_words, 0u) << what << ": w not written";
      }
    }
  }
  // Without the bound, or with one above 8 tokens, the launcher keeps the other kernels; forcing it there is refused.
  const ref::KdaProblem p = kimi_problem(batches[0], GateKind::kSoftplus, DType::kBF16, 3899);
  for (int64_t bound : {int64_t(0), int64_t(9)}) {
    DeviceProblemOptions opt;
    opt.max_sequence_tokens = bound;
    auto dp = make_device_problem(p, opt);
    ASSERT_NE(dp, nullptr);
    ChunkPrepareInputsArgs a =
        detail::chunk_kda_stage_args(dp->args, dp->args.geometry, dp->workspace.get(), detail::ChunkKdaPath::kFused)
            .prepare_inputs;
    EXPECT_EQ(detail::prepare_inputs_warp_short_used(a), 0) << "bound " << bound;
    a.warp_short = 1;
    EXPECT_FALSE(detail::validate_chunk_prepare_inputs(a).is_ok()) << "bound " << bound;
  }
}

// The output folded into the state kernel (o formed chunk after chunk from qg, round(S) and v_new on chip) against
// the separate output launch reading a per-chunk h and v_new from memory, in both forms and on every batch kind:
// the same bits for o and the final state, and the same intermediates before the state launch (the separate form's
// staged prepare writes no qg, so qg is compared only in the fused form).
TEST(ChunkKdaBitIdentity, FoldedOutputMatchesSeparateOutput) {
  ASSERT_TRUE(have_gpu());
  uint64_t seed = 1700;
  for (const Batch& b : batch_kinds()) {
    for (GateKind gate : {GateKind::kSoftplus, GateKind::kLowerBound}) {
      const ref::KdaProblem p = kimi_problem(b, gate, DType::kBF16, ++seed);
      auto dp = make_device_problem(p, {});
      ASSERT_NE(dp, nullptr);
      for (detail::ChunkKdaPath path : {detail::ChunkKdaPath::kFused, detail::ChunkKdaPath::kStaged}) {
        const std::string what = b.name + " gate " + std::to_string(int(gate)) +
                                 (path == detail::ChunkKdaPath::kFused ? " fused" : " staged");
        // The output folded in (chunk_kda_fwd's own form) against the separate output launch.
        const auto fl = detail::chunk_kda_workspace_layout(dp->args, path, detail::ChunkKdaOutput::kAuto);
        const auto sl = detail::chunk_kda_workspace_layout(dp->args, path, detail::ChunkKdaOutput::kSeparate);
        ASSERT_TRUE(fl.output_folded) << what;
        ASSERT_FALSE(sl.output_folded) << what;
        EXPECT_LT(fl.total, sl.total) << what << ": the folded form needs no per-chunk h";
        // The folded forms that sum in the output stage's order (not the register-state kernel: see below).
        const PathRun folded = run_on_path(*dp, path, detail::ChunkKdaOutput::kAuto, /*state_regs_warps=*/0);
        const PathRun separate = run_on_path(*dp, path, detail::ChunkKdaOutput::kSeparate);
        EXPECT_EQ(folded.o, separate.o) << what << ": o";
        EXPECT_EQ(folded.state, separate.state) << what << ": final state";
        // The register-state kernel (state_recurrence_regs_mma.hpp), where it runs: within the rounded output's bar.
        const StateRecurrenceArgs probe = detail::chunk_kda_stage_args(dp->args, dp->args.geometry, dp->workspace.get(),
                                                                 path).state;
        for (const int regs : kRegisterStateWarps) {
          if (!detail::state_regs_ok(probe, regs)) continue;
          const PathRun r = run_on_path(*dp, path, detail::ChunkKdaOutput::kAuto, regs);
          const std::string where = what + ", register state at " + std::to_string(regs) + " warps";
          EXPECT_LE(ref::rms_relative_error(bf16_values(separate.o), bf16_values(r.o)), kRegisterStateBar)
              << where << ": o";
          EXPECT_LE(ref::rms_relative_error(float_values(separate.state), float_values(r.state)), kRegisterStateBar)
              << where << ": final state";
          EXPECT_TRUE(ref::all_finite(bf16_values(r.o))) << where;
        }
        // The folded form's Aqk region holds hi = round(Aqk) then lo = round(Aqk - hi) of the fp32 Aqk the separate
        // form keeps (bf16 here).
        const size_t n = size_t(p.T) * p.H * dp->options.chunk_size;
        std::vector<uint16_t> hi(n), lo(n);
        std::vector<float> aqk(n);
        std::memcpy(hi.data(), folded.ws.data() + fl.Aqk, n * 2);
        std::memcpy(lo.data(), folded.ws.data() + fl.Aqk + n * 2, n * 2);
        std::memcpy(aqk.data(), separate.ws.data() + sl.Aqk, n * 4);
        size_t split_mismatches = 0;
        for (size_t i = 0; i < n; ++i) {
          const uint16_t want_hi = numeric::float_to_bf16(aqk[i]);
          const uint16_t want_lo = numeric::float_to_bf16(aqk[i] - numeric::bf16_to_float(want_hi));
          split_mismatches += hi[i] != want_hi || lo[i] != want_lo;
        }
        EXPECT_EQ(split_mismatches, 0u) << what << ": Aqk hi + lo differs from the split of the fp32 Aqk";
        const auto fr = intermediate_ranges(*dp, path, detail::ChunkKdaOutput::kAuto),
                   sr = intermediate_ranges(*dp, path, detail::ChunkKdaOutput::kSeparate);
        for (const auto& entry : fr) {
          const auto it = std::find_if(sr.begin(), sr.end(),
                                       [&](const auto& x) { return std::string(x.first) == entry.first; });
          if (it == sr.end() || std::string(entry.first) == "Aqk") continue;  // qg (staged form); Aqk: above
          ASSERT_EQ(entry.second.second, it->second.second) << entry.first;
          EXPECT_EQ(0, std::memcmp(folded.ws.data() + entry.second.first, separate.ws.data() + it->second.first,
                                   entry.second.second))
              << what << ": intermediate " << entry.first << " differs";
        }
      }
    }
  }
}

// The fused form reads q, k, v and g through views that are not 16-byte aligned (per-element loads): the same bits
// as from contiguous inputs. (The staged form's unaligned views are covered by StridedViewsIntoFusedProjection.)
TEST(ChunkKdaFeatures, UnalignedViewsGiveTheSameBits) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"unaligned", {0, 130, 333}, 4, 128, 64};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 21);
  auto plain = make_device_problem(p, {});
  ASSERT_NE(plain, nullptr);
  const PathRun want = run_on_path(*plain, detail::ChunkKdaPath::kFused);
  // One token row = [pad | q heads | k heads | v heads], an odd number of elements: no row starts 16-byte aligned.
  const int H = p.H, K = p.K, V = p.V;
  const int64_t row = int64_t(H) * (2 * K + V) + 1;
  std::vector<float> packed(size_t(p.T) * row + 1, 0.0f);
  for (int64_t t = 0; t < p.T; ++t)
    for (int h = 0; h < H; ++h) {
      std::copy_n(p.q.begin() + (t * H + h) * K, K, packed.begin() + 1 + t * row + h * K);
      std::copy_n(p.k.begin() + (t * H + h) * K, K, packed.begin() + 1 + t * row + H * K + h * K);
      std::copy_n(p.v.begin() + (t * H + h) * V, V, packed.begin() + 1 + t * row + 2 * H * K + h * V);
    }
  // g as fp32 rows of H*K + 1 values, starting one element in.
  const int64_t g_row = int64_t(H) * K + 1;
  std::vector<float> g_packed(size_t(p.T) * g_row + 1, 0.0f);
  for (int64_t t = 0; t < p.T; ++t)
    std::copy_n(p.g.begin() + t * H * K, H * K, g_packed.begin() + 1 + t * g_row);
  DeviceBuffer d_packed = upload_dtype(packed, p.io_dtype);
  DeviceBuffer d_g = upload_floats(g_packed);
  auto dp = make_device_problem(p, {});
  ASSERT_NE(dp, nullptr);
  const char* base = d_packed.as<char>() + 2;
  dp->args.q = TensorView{base, row, K};
  dp->args.k = TensorView{base + size_t(H) * K * 2, row, K};
  dp->args.v = TensorView{base + size_t(2) * H * K * 2, row, V};
  dp->args.g = TensorView{d_g.as<char>() + 4, g_row, K};
  const PathRun got = run_on_path(*dp, detail::ChunkKdaPath::kFused);
  EXPECT_EQ(want.o, got.o);
  EXPECT_EQ(want.state, got.state);
}

// ---------------------------------------------------------------------------------------------------------------
// Graph capture: proves no host sync on either path
// ---------------------------------------------------------------------------------------------------------------

// Two batches: sequences averaging more than 16 tokens, and at most 16 (decodes beside one prefill: the short-sequence
// state kernel, whose item counter each call clears; replayed twice, so that a counter left from the first replay
// would lose items in the second).
TEST(ChunkKdaGraph, CaptureReplayWithNewInputsMatchesDirectCall) {
  ASSERT_TRUE(have_gpu());
  for (const Batch& b : {Batch{"graph_mix", decode_prefill_cu(5, {130, 64, 1000}), 4, 128, 128},
                         Batch{"graph_short_mix", decode_prefill_cu(40, {300}), 4, 128, 128}}) {
    for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
      DeviceProblemOptions opt;
      opt.mode = mode;
      const ref::KdaProblem first = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 1);
      const ref::KdaProblem second = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 2);
      auto dp = make_device_problem(first, opt);
      ASSERT_NE(dp, nullptr);

      hipStream_t stream;
      KDA_ASSERT_RT(hipStreamCreate(&stream));
      hipGraph_t graph;
      hipGraphExec_t exec;
      KDA_ASSERT_RT(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
      const Status s = run_chunk_kda(*dp, stream);
      KDA_ASSERT_RT(hipStreamEndCapture(stream, &graph));  // fails if anything inside synchronised the host
      ASSERT_TRUE(s.is_ok()) << s.message();
      KDA_ASSERT_RT(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0));

      upload_inputs(*dp, second);  // new values into the same buffers (the same cu_seqlens), then replay
      std::vector<uint8_t> replay_o, replay_state;
      for (int replay = 0; replay < 2; ++replay) {
        KDA_ASSERT_RT(hipMemsetAsync(dp->o.get(), 0xff, dp->o.bytes(), stream));
        KDA_ASSERT_RT(hipGraphLaunch(exec, stream));
        KDA_ASSERT_RT(hipStreamSynchronize(stream));
        if (replay == 1) {
          EXPECT_EQ(dp->o.download_bytes(), replay_o) << b.name << " " << mode_name(mode) << ": second replay";
          EXPECT_EQ(dp->state_out.download_bytes(), replay_state) << b.name << " " << mode_name(mode);
        }
        replay_o = dp->o.download_bytes();
        replay_state = dp->state_out.download_bytes();
      }

      const RunResult direct = run_once(second, opt);
      EXPECT_EQ(std::vector<uint8_t>(replay_o.begin(), replay_o.begin() + direct.o_bytes.size()), direct.o_bytes)
          << b.name << " " << mode_name(mode);
      EXPECT_EQ(replay_state, direct.state_bytes) << b.name << " " << mode_name(mode);
      (void)hipGraphExecDestroy(exec);
      (void)hipGraphDestroy(graph);
      (void)hipStreamDestroy(stream);
    }
  }
}

// The short-sequence state kernel takes items by ticket where a sequence may span several chunks: every call clears
// the counter word after the status word, so after a call it holds the tickets taken. A speculative batch (NT = N)
// takes none with the builder's tables (the host rules chains out) and takes them with derived ones (the host cannot);
// decodes beside a prefill (NT > N) take them in both modes.
TEST(ChunkKdaShortState, TicketsWhereTheHostCannotRuleAChainOut) {
  ASSERT_TRUE(have_gpu());
  for (const Batch& b : {Batch{"spec64x8", spec_cu(64, 8), 2, 128, 128},
                         Batch{"short_mix", decode_prefill_cu(40, {300}), 2, 128, 128}}) {
    for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
      const bool tickets = b.name == "short_mix" || mode == MetadataMode::kDeviceDerived;
      DeviceProblemOptions opt;
      opt.mode = mode;
      auto dp = make_device_problem(kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 7), opt);
      ASSERT_NE(dp, nullptr);
      ASSERT_TRUE(detail::state_short_kernel_used(
          detail::chunk_kda_stage_args(dp->args, dp->args.geometry, dp->workspace.get()).state))
          << b.name << ": the short-sequence kernel is not in use";
      KDA_ASSERT_OK(run_chunk_kda(*dp));
      uint32_t words[2] = {};
      KDA_ASSERT_RT(hipMemcpy(words, chunk_kda_device_status(dp->workspace.get()), sizeof(words),
                              hipMemcpyDeviceToHost));
      EXPECT_EQ(words[0], 0u) << b.name << " " << mode_name(mode) << ": device status";
      if (tickets) {
        EXPECT_GT(words[1], 0u) << b.name << " " << mode_name(mode) << ": no ticket taken";
      } else {
        EXPECT_EQ(words[1], 0u) << b.name << " " << mode_name(mode) << ": tickets taken where the host ruled them out";
      }
    }
  }
}

// One problem run twice in one metadata mode: without a bound on the sequence lengths and with `bound`.
struct BoundRuns {
  std::unique_ptr<DeviceProblem> plain, bound;
  RunResult plain_result, bound_result;
};
BoundRuns run_without_and_with_bound(const ref::KdaProblem& p, MetadataMode mode, int64_t bound) {
  DeviceProblemOptions plain_opt, bound_opt;
  plain_opt.mode = bound_opt.mode = mode;
  bound_opt.max_sequence_tokens = bound;
  BoundRuns r;
  r.plain_result = run_once(p, plain_opt, &r.plain);
  r.bound_result = run_once(p, bound_opt, &r.bound);
  return r;
}

// A caller's bound on the sequence lengths (ChunkMetadataArgs::max_sequence_tokens) of at most 16 runs the kernels
// for short sequences alone: the prepare kernel without its long path, the short state kernel without its partner for
// long sequences and in its plain form even with derived tables. The bits must be those of the same batch without the
// bound (o, final state and every intermediate), in both metadata modes, for K and V in {64, 128}, with empty
// sequences and chunks of every length 1-16; the device status stays clear. A bound of at most 8 tokens (K = V = 128)
// runs the warp-per-item prepare instead where the launcher picks it (NVIDIA, kWarpShortDefaultForm): the same bits.
TEST(ChunkKdaShortState, SequenceBoundGivesTheSameBits) {
  ASSERT_TRUE(have_gpu());
  std::vector<int64_t> every_length = {0}, every_length8 = {0};
  for (int rep = 0; rep < 3; ++rep) {
    for (int64_t len = 0; len <= 16; ++len) every_length.push_back(every_length.back() + len);
    for (int64_t len = 0; len <= 8; ++len) every_length8.push_back(every_length8.back() + len);
  }
  struct Case {
    Batch b;
    int64_t bound;
  };
  const std::vector<Case> cases = {{{"spec64x8", spec_cu(64, 8), 2, 128, 128}, 16},
                                   {{"lengths0to16_k64", every_length, 2, 64, 128}, 16},
                                   {{"lengths0to16_v64", every_length, 2, 128, 64}, 16},
                                   {{"spec64x8", spec_cu(64, 8), 2, 128, 128}, 8},
                                   {{"lengths0to8", every_length8, 3, 128, 128}, 8}};
  uint64_t seed = 3300;
  for (const Case& c : cases) {
    const Batch& b = c.b;
    for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
      const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, ++seed);
      const BoundRuns r = run_without_and_with_bound(p, mode, c.bound);
      ASSERT_TRUE(r.plain && r.bound) << b.name;
      const DeviceProblem &plain = *r.plain, &bound = *r.bound;
      const RunResult &rp = r.plain_result, &rb = r.bound_result;
      const std::string what = b.name + " bound " + std::to_string(c.bound) + " " + mode_name(mode);
      ASSERT_TRUE(detail::every_sequence_short(bound.args.geometry.metadata)) << what;
#if defined(KDA_PLATFORM_CUDA)
      EXPECT_EQ(detail::prepare_inputs_warp_short_used(
                    detail::chunk_kda_stage_args(bound.args, bound.args.geometry, bound.workspace.get())
                        .prepare_inputs) > 0,
                ActiveTuning::kWarpShortDefaultForm > 0 && c.bound <= kernels::kWarpShortRows)
          << what << ": the warp-per-item prepare";
#endif
      EXPECT_EQ(rp.o_bytes, rb.o_bytes) << what << ": o differs with the bound";
      EXPECT_EQ(rp.state_bytes, rb.state_bytes) << what << ": final state differs with the bound";
      expect_bit_identical(plain, bound, what);
      uint32_t words[2] = {};
      KDA_ASSERT_RT(hipMemcpy(words, chunk_kda_device_status(bound.workspace.get()), sizeof(words),
                              hipMemcpyDeviceToHost));
      EXPECT_EQ(words[0], 0u) << what << ": device status";
      EXPECT_EQ(words[1], 0u) << what << ": tickets taken although the bound rules chains out";
    }
  }
}

// The o rows and final states of every sequence of at most `bound` tokens are the same bytes in runs a and b (one
// [T,H,V] bf16 o and one [N,H,K,V] fp32 state pool each).
void expect_sequences_within_bound_equal(const ref::KdaProblem& p, const std::vector<int64_t>& cu, int64_t bound,
                                         const std::vector<uint8_t>& o_a, const std::vector<uint8_t>& o_b,
                                         const std::vector<uint8_t>& state_a, const std::vector<uint8_t>& state_b,
                                         const std::string& what) {
  const size_t row_bytes = size_t(p.H) * p.V * 2, state_bytes = size_t(p.H) * p.K * p.V * 4;
  size_t rows_differing = 0, states_differing = 0;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    if (cu[n + 1] - cu[n] > bound) continue;
    const SequenceBytesEqual eq = sequence_bytes_equal(cu, n, o_a, o_b, row_bytes, state_a, state_b, state_bytes);
    rows_differing += !eq.o;
    states_differing += !eq.state;
  }
  EXPECT_EQ(rows_differing, 0u) << what << ": o of the sequences within the bound";
  EXPECT_EQ(states_differing, 0u) << what << ": final states of the sequences within the bound";
}

// A sequence longer than the caller's bound is skipped and reported (kDeviceStatusSequenceOverBound), without touching
// anything outside its own rows (the GPU validation runs this test under memcheck): the other sequences' o rows and
// final states are those of the same batch without the bound.
TEST(ChunkKdaShortState, SequenceOverTheBoundIsReportedAndSkipped) {
  ASSERT_TRUE(have_gpu());
  std::vector<int64_t> cu = {0};
  for (int n = 0; n < 15; ++n) cu.push_back(cu.back() + (n == 7 ? 40 : 8));  // T = 152 <= 16 N
  const Batch b{"one_over_the_bound", cu, 2, 128, 128};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 3400);
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    const BoundRuns r = run_without_and_with_bound(p, mode, 16);
    ASSERT_TRUE(r.plain && r.bound);
    const RunResult &rp = r.plain_result, &rb = r.bound_result;
    const std::string what = mode_name(mode);
    uint32_t status = 0;
    KDA_ASSERT_RT(hipMemcpy(&status, chunk_kda_device_status(r.bound->workspace.get()), sizeof(status),
                            hipMemcpyDeviceToHost));
    EXPECT_EQ(status, uint32_t(detail::kDeviceStatusSequenceOverBound)) << what;
    expect_sequences_within_bound_equal(p, cu, 16, rp.o_bytes, rb.o_bytes, rp.state_bytes, rb.state_bytes, what);
    // The skipped sequence's o rows and final state keep the NaN fill every run starts from (poison_outputs).
    const size_t row_bytes = size_t(p.H) * p.V * 2, state_bytes = size_t(p.H) * p.K * p.V * 4;
    const auto o_first = rb.o_bytes.begin() + cu[7] * row_bytes, o_last = rb.o_bytes.begin() + cu[8] * row_bytes;
    EXPECT_EQ(std::count(o_first, o_last, uint8_t(0xff)), o_last - o_first)
        << what << ": o rows of the skipped sequence";
    const auto s_first = rb.state_bytes.begin() + 7 * state_bytes, s_last = s_first + state_bytes;
    EXPECT_EQ(std::count(s_first, s_last, uint8_t(0xff)), s_last - s_first) << what << ": its final state";
  }
}

// A sequence longer than the bound of 8 under the warp-per-item prepare (forced, in its 128-register form; the
// launcher's own choice is the other, which the bound-8 cases of SequenceBoundGivesTheSameBits run):
// reported, nothing outside its own rows touched (memcheck runs this test), and the other sequences' o rows and final
// states are those of the same batch run without the bound. Its own o rows keep the NaNs run_on_path filled them with:
// the short-only state kernel skips a sequence over the caller's bound, as the prepare did (it would otherwise run
// its 12 tokens on operands nobody wrote).
TEST(ChunkKdaShortState, SequenceOverTheWarpShortBoundIsReportedAndSkipped) {
  ASSERT_TRUE(have_gpu());
#if !defined(KDA_PLATFORM_CUDA)
  GTEST_SKIP() << "the warp-per-item prepare is NVIDIA only";
#endif
  std::vector<int64_t> cu = {0};
  // One sequence of 12 tokens, one of 4 beside it, so that the batch's average (8) stays within the bound (the host
  // refuses a bound below total_tokens / num_sequences).
  for (int n = 0; n < 15; ++n) cu.push_back(cu.back() + (n == 6 ? 12 : n == 7 ? 4 : 8));
  const Batch b{"one_over_the_warp_bound", cu, 2, 128, 128};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 3950);
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    DeviceProblemOptions plain_opt, bound_opt;
    plain_opt.mode = bound_opt.mode = mode;
    bound_opt.max_sequence_tokens = kernels::kWarpShortRows;
    const RunResult rp = run_once(p, plain_opt);
    auto dp = make_device_problem(p, bound_opt);
    ASSERT_NE(dp, nullptr);
    const PathRun rb = run_on_path(*dp, detail::ChunkKdaPath::kAuto, detail::ChunkKdaOutput::kAuto,
                                   /*state_regs_warps=*/-1, /*prepare_warp_short=*/1);
    const std::string what = mode_name(mode);
    uint32_t status = 0;
    ASSERT_GE(rb.ws.size(), sizeof(status));
    std::memcpy(&status, rb.ws.data(), sizeof(status));  // chunk_kda_device_status: the workspace's first word
    EXPECT_EQ(status, uint32_t(detail::kDeviceStatusSequenceOverBound)) << what;
    expect_sequences_within_bound_equal(p, cu, kernels::kWarpShortRows, rp.o_bytes, rb.o, rp.state_bytes, rb.state,
                                        what);
    const size_t row_bytes = size_t(p.H) * p.V * 2;
    const auto first = rb.o.begin() + cu[6] * row_bytes, last = rb.o.begin() + cu[7] * row_bytes;
    EXPECT_EQ(std::count(first, last, uint8_t(0xff)), last - first) << what << ": o rows of the skipped sequence";
    const size_t state_bytes = size_t(p.H) * p.K * p.V * 4;
    const auto s_first = rb.state.begin() + 6 * state_bytes, s_last = s_first + state_bytes;
    EXPECT_EQ(std::count(s_first, s_last, uint8_t(0xff)), s_last - s_first) << what << ": its final state";
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Engine-facing features: state pool, aliasing, strided views
// ---------------------------------------------------------------------------------------------------------------

// Every sequence longer than 16 tokens (the general state kernel), and every one at most 16 (a batch that short on
// average runs the short-sequence state kernel).
class ChunkKdaStatePool : public ::testing::TestWithParam<bool> {};

TEST_P(ChunkKdaStatePool, IndicesAndHasInitialStateInPlace) {
  ASSERT_TRUE(have_gpu());
  const Batch b = GetParam() ? Batch{"pool_short", {0, 5, 21, 22}, 2, 64, 64}
                             : Batch{"pool", {0, 100, 165, 300}, 2, 64, 64};
  ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 31);
  const int64_t P = 5, N = 3;
  const size_t kv = size_t(p.H) * p.K * p.V;
  // Pool of 5 slots with distinct random contents; sequence -> slot {3, -1, 0}; has_initial_state {1, 1, 0}.
  std::vector<float> pool(P * kv);
  ref::TestRng rng(5);
  for (float& x : pool) x = float(rng.normal());
  const std::vector<int64_t> slots = {3, -1, 0};
  const std::vector<uint8_t> has_init = {1, 1, 0};
  // Reference: initial state of each sequence as the kernel should see it.
  p.initial_state.assign(N * kv, 0.0f);
  std::copy_n(pool.begin() + 3 * kv, kv, p.initial_state.begin());  // seq 0 from slot 3; seq 1, 2 start at zero
  const ref::KdaOutput want = recurrent_f64_parallel(p);

  auto dp = make_device_problem(p, {});
  ASSERT_NE(dp, nullptr);
  DeviceBuffer d_pool = upload_floats(pool);
  DeviceBuffer d_slots = upload_indices(slots, IndexType::kInt64);
  DeviceBuffer d_flags(3);
  d_flags.upload(has_init.data(), 3);
  dp->args.state.initial_state = d_pool.as<float>();
  dp->args.state.final_state = d_pool.as<float>();  // in place
  dp->args.state.state_indices = IndexSpan{d_slots.get(), IndexType::kInt64};
  dp->args.state.has_initial_state = d_flags.as<uint8_t>();
  dp->args.state.pool_size = P;
  KDA_ASSERT_OK(run_chunk_kda(*dp));
  KDA_ASSERT_RT(hipDeviceSynchronize());
  const std::vector<float> got = download_floats(d_pool.get(), pool.size());

  auto slice = [&](const std::vector<float>& x, int64_t i) {
    return std::vector<float>(x.begin() + i * kv, x.begin() + (i + 1) * kv);
  };
  EXPECT_LE(ref::rms_relative_error(slice(want.final_state, 0), slice(got, 3)), kRmsBar) << "slot 3 <- seq 0";
  EXPECT_LE(ref::rms_relative_error(slice(want.final_state, 2), slice(got, 0)), kRmsBar) << "slot 0 <- seq 2";
  for (int64_t untouched : {1, 2, 4}) EXPECT_EQ(slice(pool, untouched), slice(got, untouched)) << "slot " << untouched;
  EXPECT_LE(ref::rms_relative_error(want.o, dp->read_o()), kRmsBar);
}

INSTANTIATE_TEST_SUITE_P(Sequences, ChunkKdaStatePool, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "short" : "long"; });

TEST(ChunkKdaFeatures, OutputMayAliasV) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"alias", decode_prefill_cu(3, {300, 64}), 4, 128, 128};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 8);
  DeviceProblemOptions alias;
  alias.o_aliases_v = true;
  EXPECT_EQ(run_once(p, {}).o_bytes, run_once(p, alias).o_bytes);
}

TEST(ChunkKdaFeatures, StridedViewsIntoFusedProjection) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"fused", {0, 200, 333}, 4, 64, 128};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 12);
  std::unique_ptr<DeviceProblem> plain;
  const RunResult want = run_once(p, {}, &plain);

  // One token row = [q heads | k heads | v heads | 8 pad], as a fused qkv projection would lay it out.
  const int H = p.H, K = p.K, V = p.V;
  const int64_t row = int64_t(H) * (2 * K + V) + 8;
  std::vector<float> fused(size_t(p.T) * row, 0.0f);
  for (int64_t t = 0; t < p.T; ++t)
    for (int h = 0; h < H; ++h) {
      std::copy_n(p.q.begin() + (t * H + h) * K, K, fused.begin() + t * row + h * K);
      std::copy_n(p.k.begin() + (t * H + h) * K, K, fused.begin() + t * row + H * K + h * K);
      std::copy_n(p.v.begin() + (t * H + h) * V, V, fused.begin() + t * row + 2 * H * K + h * V);
    }
  DeviceBuffer d_fused = upload_dtype(fused, p.io_dtype);
  auto dp = make_device_problem(p, {});
  ASSERT_NE(dp, nullptr);
  const char* base = d_fused.as<char>();
  dp->args.q = TensorView{base, row, K};
  dp->args.k = TensorView{base + size_t(H) * K * 2, row, K};
  dp->args.v = TensorView{base + size_t(2) * H * K * 2, row, V};
  KDA_ASSERT_OK(run_chunk_kda(*dp));
  KDA_ASSERT_RT(hipDeviceSynchronize());
  EXPECT_EQ(want.o_bytes, dp->o.download_bytes());
  EXPECT_EQ(want.state_bytes, dp->state_out.download_bytes());
}

// ---------------------------------------------------------------------------------------------------------------
// Robustness: hostile but finite inputs, degenerate batches
// ---------------------------------------------------------------------------------------------------------------

TEST(ChunkKdaRobustness, ExtremeGatesZeroVectorsZeroBeta) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"hostile", {0, 70, 200}, 2, 64, 64};
  {  // precomputed gate of -1e4 on every channel of every token
    ref::KdaProblem p = kimi_problem(b, GateKind::kPrecomputed, DType::kBF16, 1);
    for (float& x : p.g) x = -1e4f;
    expect_close_to_f64(p, run_once(p, {}), "precomputed gate -1e4");
  }
  {  // softplus gate driven to -exp(A_log)*1e4 per token
    ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 2);
    for (float& x : p.g) x = 1e4f;
    expect_close_to_f64(p, run_once(p, {}), "softplus gate -1e4");
  }
  {  // zero q and k under l2norm
    ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 3);
    std::fill(p.q.begin(), p.q.end(), 0.0f);
    std::fill(p.k.begin(), p.k.end(), 0.0f);
    const RunResult r = run_once(p, {});
    EXPECT_TRUE(ref::all_finite(r.o));
    expect_close_to_f64(p, r, "zero q/k with l2norm");
  }
  {  // beta = 0: no write to the state, only decay
    ref::KdaProblem p = kimi_problem(b, GateKind::kPrecomputed, DType::kBF16, 4);
    std::fill(p.beta.begin(), p.beta.end(), 0.0f);
    expect_close_to_f64(p, run_once(p, {}), "beta = 0");
  }
}

TEST(ChunkKdaRobustness, EmptyBatchAndSingleToken) {
  ASSERT_TRUE(have_gpu());
  for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
    DeviceProblemOptions opt;
    opt.mode = mode;
    {  // T = 0 with three zero-length sequences: final state = initial state, nothing else happens
      const Batch b{"empty", {0, 0, 0, 0}, 2, 64, 64};
      const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 5);
      const RunResult r = run_once(p, opt);
      EXPECT_EQ(r.final_state, p.initial_state) << mode_name(mode);
    }
    {  // N = 0, T = 0: a no-op that must not fail
      const Batch b{"nothing", {0}, 2, 64, 64};
      ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 6);
      auto dp = make_device_problem(p, opt);
      ASSERT_NE(dp, nullptr);
      KDA_ASSERT_OK(run_chunk_kda(*dp));
      KDA_ASSERT_RT(hipDeviceSynchronize());
    }
    {  // N = 1, T = 1
      const Batch b{"one", {0, 1}, 2, 128, 128};
      const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 7);
      expect_close_to_f64(p, run_once(p, opt), std::string("T=1 ") + mode_name(mode));
    }
  }
}

TEST(ChunkKdaValidation, BadArgumentsAreRejectedBeforeAnyLaunch) {
  ASSERT_TRUE(have_gpu());
  const Batch b{"v", {0, 100}, 2, 64, 64};
  const ref::KdaProblem p = kimi_problem(b, GateKind::kSoftplus, DType::kBF16, 9);
  auto dp = make_device_problem(p, {});
  ASSERT_NE(dp, nullptr);
  auto expect_error = [&](ChunkKdaArgs a, StatusCode code, const char* what) {
    const Status s = chunk_kda_fwd(a, dp->workspace.get(), dp->workspace.bytes(), nullptr);
    EXPECT_EQ(s.code(), code) << what << ": " << s.message();
  };
  ChunkKdaArgs a = dp->args;
  a.geometry.head_dim_k = 96;
  expect_error(a, StatusCode::kUnsupported, "head dim 96");
  a = dp->args;
  a.q.data = nullptr;
  expect_error(a, StatusCode::kInvalidArgument, "null q");
  a = dp->args;
  a.A_log = nullptr;
  expect_error(a, StatusCode::kInvalidArgument, "softplus without A_log");
  a = dp->args;
  a.geometry.chunk_size = 16;
  expect_error(a, StatusCode::kUnsupported, "chunk 16 in the pipeline");
  a = dp->args;
  a.o = MutableTensorView{const_cast<void*>(a.q.data), a.q.token_stride, a.q.head_stride};
  expect_error(a, StatusCode::kInvalidArgument, "o aliases q");
  a = dp->args;
  a.scale = std::nanf("");
  expect_error(a, StatusCode::kInvalidArgument, "NaN scale");
  a = dp->args;
  a.q.head_stride = int64_t(1) << 62;
  expect_error(a, StatusCode::kInvalidArgument, "head stride whose span overflows");
  a = dp->args;
  a.geometry.metadata.num_sequences = 0;
  expect_error(a, StatusCode::kInvalidArgument, "no sequences but tokens");
  a = dp->args;
  a.g_type = static_cast<ScalarType>(7);
  expect_error(a, StatusCode::kInvalidArgument, "unknown g type");
  EXPECT_EQ(chunk_kda_workspace_size(a), dp->workspace.bytes()) << "the workspace depends on sizes only";
  a = dp->args;
  a.geometry.metadata.max_sequence_tokens = -1;
  expect_error(a, StatusCode::kInvalidArgument, "negative sequence bound");
  a = dp->args;
  a.geometry.metadata.max_sequence_tokens = 99;  // T = 100 in one sequence
  expect_error(a, StatusCode::kInvalidArgument, "sequence bound below T / N");
  a = dp->args;
  a.geometry.head_dim_v = 96;
  EXPECT_EQ(chunk_kda_workspace_size(a), 0u) << "workspace query of rejected sizes";
  a = dp->args;
  a.q.data = a.k.data = a.v.data = a.g.data = a.beta.data = nullptr;
  a.o.data = nullptr;
  a.geometry.metadata.cu_seqlens.data = nullptr;
  EXPECT_EQ(chunk_kda_workspace_size(a), dp->workspace.bytes()) << "sizing before the buffers exist";
  EXPECT_EQ(workspace_size_from_second_translation_unit(dp->args), dp->workspace.bytes());
  const Status small = chunk_kda_fwd(dp->args, dp->workspace.get(), dp->workspace.bytes() - 1, nullptr);
  EXPECT_EQ(small.code(), StatusCode::kWorkspaceTooSmall);
}

}  // namespace
}  // namespace kda::test
