// Each GPU stage on its own against the float32 chunked CPU reference: both sides get the same inputs (the
// reference's own intermediates), so a stage is judged by itself, not by the error it inherits. Every stage is run
// with host-built and with device-derived chunk tables, and the two must agree bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "device_problem.hpp"
#include "reference/chunked_reference.hpp"
#include "reference/error_metrics.hpp"
#include "reference/problem_generator.hpp"

namespace kda::test {
namespace {

// fp32 stages see only summation-order differences; stages that round to bf16 may flip a last bit here and there.
constexpr double kFp32StageBar = 1e-4;
constexpr double kRoundedStageBar = 2e-3;
// Akk and Aqk: their off-diagonal tiles are products of fp16 factors (intra_chunk_mma.hpp, IntraFactor), ~2e-5 rms
// against the exact fp32 sums on these problems and up to 1.25e-4 where q and k have mixed signs (a CPU model of the
// kernel's arithmetic, docs/performance.md, "Intra-chunk factor precision"); Tinv and everything downstream keep their
// bars (2.9e-6 and 1.3e-4 worst in that model, against 1e-4 and 2e-3).
constexpr double kFactorStageBar = 5e-4;

struct StageCase {
  std::string name;
  std::vector<int64_t> cu;
  int H, K, V, BT;
};

std::vector<StageCase> stage_cases() {
  std::vector<int64_t> mix;
  EXPECT_TRUE(make_decode_prefill_cu_seqlens(6, {150, 64, 300}, &mix).is_ok());
  return {
      {"varlen_zero_len", {0, 15, 15, 100, 300, 300, 700, 700}, 4, 128, 128, 64},
      {"decodes_then_prefills", mix, 2, 128, 64, 64},
      {"d256_bt32", {0, 1, 100, 161}, 2, 256, 256, 32},
      {"d64_bt32_short", {0, 40, 41, 97}, 2, 64, 64, 32},
      // The prepare's short path (<= 16 rows) against the stage launches, which always take the long one.
      {"every_short_length", every_short_length_cu(), 2, 128, 128, 64},
  };
}

ref::KdaProblem stage_problem(const StageCase& c, uint64_t seed) {
  ref::ProblemOptions opt;
  opt.qk_l2norm_in_kernel = true;
  opt.beta_activation = BetaActivation::kSigmoid;
  opt.with_dt_bias = true;
  opt.with_initial_state = true;
  return ref::make_random_problem(c.cu, c.H, c.K, c.V, DType::kBF16, GateKind::kSoftplus, seed, opt);
}

// Device chunk metadata for one mode; keeps its buffers alive.
struct DeviceMetadata {
  DeviceBuffer cu, tables, derive_ws;
  ChunkMetadataArgs args;
};

std::unique_ptr<DeviceMetadata> device_metadata(const ref::KdaProblem& p, int BT, MetadataMode mode) {
  auto m = std::make_unique<DeviceMetadata>();
  m->cu = upload_indices(p.cu_seqlens, IndexType::kInt64);
  m->args.cu_seqlens = IndexSpan{m->cu.get(), IndexType::kInt64};
  m->args.num_sequences = p.num_sequences();
  m->args.total_tokens = p.T;
  if (mode == MetadataMode::kHostBuilder) {
    ChunkMetadata meta;
    EXPECT_TRUE(build_chunk_metadata(p.cu_seqlens, BT, &meta).is_ok());
    std::vector<int64_t> packed = meta.chunk_indices;
    packed.insert(packed.end(), meta.chunk_offsets.begin(), meta.chunk_offsets.end());
    m->tables = upload_indices(packed, IndexType::kInt32);
    m->args.chunk_indices = IndexSpan{m->tables.get(), IndexType::kInt32};
    m->args.chunk_offsets = IndexSpan{m->tables.as<int32_t>() + meta.chunk_indices.size(), IndexType::kInt32};
    m->args.num_chunks = meta.num_chunks;
  }
  m->derive_ws.allocate(std::max<size_t>(1, detail::derived_metadata_bytes(m->args, BT)));
  return m;
}

StageGeometry geometry(const ref::KdaProblem& p, int BT, const DeviceMetadata& m) {
  StageGeometry g;
  g.metadata = m.args;
  g.num_heads = p.H;
  g.head_dim_k = p.K;
  g.head_dim_v = p.V;
  g.chunk_size = BT;
  g.dtype = p.io_dtype;
  return g;
}

void expect_near(const std::vector<float>& want, const std::vector<float>& got, double bar, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const double err = ref::rms_relative_error(want, got);
  EXPECT_TRUE(ref::all_finite(got)) << what;
  EXPECT_LE(err, bar) << what;
  std::printf("  %-50s rms rel %.2e  max abs %.2e\n", what.c_str(), err, ref::max_abs_error(want, got));
}

// Runs `stage(mode)` for both metadata modes; it returns the stage's output bytes, which must match.
template <typename F>
void for_both_modes(const std::string& what, F&& stage) {
  const std::vector<uint8_t> host = stage(MetadataMode::kHostBuilder);
  const std::vector<uint8_t> derived = stage(MetadataMode::kDeviceDerived);
  EXPECT_EQ(host, derived) << what << ": host-built and device-derived tables disagree";
}

class Stages : public ::testing::TestWithParam<int> {};

TEST_P(Stages, EachStageMatchesChunkedReference) {
  ASSERT_TRUE(have_gpu());
  const StageCase c = stage_cases()[GetParam()];
  const ref::KdaProblem p = stage_problem(c, 1000 + GetParam());
  const int BT = c.BT;
  const ref::ChunkedIntermediates R = ref::chunked_kda(p, BT);
  const DType io = p.io_dtype;
  const size_t T = p.T, H = p.H, K = p.K, V = p.V;
  const int64_t nt = int64_t(ref::chunks_of(p.cu_seqlens, BT).size());

  DeviceBuffer q_raw = upload_dtype(p.q, io), k_raw = upload_dtype(p.k, io), v = upload_dtype(p.v, io);
  DeviceBuffer qn = upload_dtype(R.q, io), kn = upload_dtype(R.k, io);
  DeviceBuffer g_raw = upload_floats(p.g), beta_raw = upload_floats(p.beta), A_log = upload_floats(p.A_log),
               dt_bias = upload_floats(p.dt_bias);
  DeviceBuffer G = upload_floats(R.G), Akk = upload_floats(R.Akk), Aqk = upload_floats(R.Aqk),
               Tinv = upload_floats(R.Tinv);
  DeviceBuffer w = upload_dtype(R.w, io), u = upload_dtype(R.u, io), kg = upload_dtype(R.kg, io);
  DeviceBuffer h = upload_dtype(R.h, io), v_new = upload_dtype(R.v_new, io), h0 = upload_floats(p.initial_state);
  const TensorView beta_view{beta_raw.get(), int64_t(H), 1};

  // Each stage writes into fresh buffers sized like the reference output (plus derived-mode slack for h).
  const std::string tag = c.name + ": ";

  for_both_modes(tag + "qk_l2norm", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    DeviceBuffer qo(T * H * K * 2), ko(T * H * K * 2);
    QkL2NormArgs a{geometry(p, BT, *m), contiguous_view(static_cast<const void*>(q_raw.get()), p.H, p.K),
                   contiguous_view(static_cast<const void*>(k_raw.get()), p.H, p.K),
                   contiguous_view(qo.get(), p.H, p.K), contiguous_view(ko.get(), p.H, p.K)};
    EXPECT_TRUE(launch_qk_l2norm(a, nullptr).is_ok());
    expect_near(R.q, download_dtype(qo.get(), T * H * K, io), kRoundedStageBar, tag + "l2norm q");
    expect_near(R.k, download_dtype(ko.get(), T * H * K, io), kRoundedStageBar, tag + "l2norm k");
    return qo.download_bytes();
  });

  for_both_modes(tag + "gate_cumsum", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    DeviceBuffer out(T * H * K * 4);
    GateCumsumArgs a{geometry(p, BT, *m), contiguous_view(static_cast<const void*>(g_raw.get()), p.H, p.K),
                     ScalarType::kFloat32, p.gate, A_log.as<float>(), dt_bias.as<float>(), p.lower_bound,
                     out.as<float>()};
    EXPECT_TRUE(launch_gate_cumsum(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    expect_near(R.G, download_floats(out.get(), T * H * K), kFp32StageBar, tag + "G");
    return out.download_bytes();
  });

  for_both_modes(tag + "intra_chunk", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    DeviceBuffer akk(T * H * BT * 4), aqk(T * H * BT * 4);
    IntraChunkArgs a{geometry(p, BT, *m), contiguous_view(static_cast<const void*>(qn.get()), p.H, p.K),
                     contiguous_view(static_cast<const void*>(kn.get()), p.H, p.K), beta_view, ScalarType::kFloat32,
                     p.beta_activation, G.as<float>(), p.scale, akk.as<float>(), aqk.as<float>()};
    EXPECT_TRUE(launch_intra_chunk(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    expect_near(R.Akk, download_floats(akk.get(), T * H * BT), kFactorStageBar, tag + "Akk");
    expect_near(R.Aqk, download_floats(aqk.get(), T * H * BT), kFactorStageBar, tag + "Aqk");
    std::vector<uint8_t> bytes = akk.download_bytes(), more = aqk.download_bytes();
    bytes.insert(bytes.end(), more.begin(), more.end());
    return bytes;
  });

  for_both_modes(tag + "solve_tril", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    DeviceBuffer out(T * H * BT * 4);
    SolveTrilArgs a{geometry(p, BT, *m), Akk.as<float>(), out.as<float>()};
    EXPECT_TRUE(launch_solve_tril(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    expect_near(R.Tinv, download_floats(out.get(), T * H * BT), kFp32StageBar, tag + "Tinv");
    return out.download_bytes();
  });

  // intra_chunk with Tinv asked for (what chunk_kda_fwd runs): Akk and Aqk as above, and Tinv bit-identical to
  // solve_tril run on the Akk that the same launch wrote.
  for_both_modes(tag + "intra_chunk + fused solve_tril", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    DeviceBuffer akk(T * H * BT * 4), aqk(T * H * BT * 4), tinv(T * H * BT * 4), staged(T * H * BT * 4);
    IntraChunkArgs a{geometry(p, BT, *m), contiguous_view(static_cast<const void*>(qn.get()), p.H, p.K),
                     contiguous_view(static_cast<const void*>(kn.get()), p.H, p.K), beta_view, ScalarType::kFloat32,
                     p.beta_activation, G.as<float>(), p.scale, akk.as<float>(), aqk.as<float>(), tinv.as<float>()};
    EXPECT_TRUE(launch_intra_chunk(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    SolveTrilArgs s{geometry(p, BT, *m), akk.as<float>(), staged.as<float>()};
    EXPECT_TRUE(launch_solve_tril(s, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    expect_near(R.Akk, download_floats(akk.get(), T * H * BT), kFactorStageBar, tag + "fused Akk");
    expect_near(R.Tinv, download_floats(tinv.get(), T * H * BT), kFp32StageBar, tag + "fused Tinv");
    const std::vector<uint8_t> fused = tinv.download_bytes();
    EXPECT_EQ(fused, staged.download_bytes()) << tag << "fused Tinv differs from solve_tril on the same Akk";
    // Without an Akk buffer (what chunk_kda_fwd passes): the same Aqk and Tinv bytes, and nothing else written.
    DeviceBuffer aqk2(T * H * BT * 4), tinv2(T * H * BT * 4);
    a.Akk = nullptr;
    a.Aqk = aqk2.as<float>();
    a.Tinv = tinv2.as<float>();
    EXPECT_TRUE(launch_intra_chunk(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    EXPECT_EQ(aqk2.download_bytes(), aqk.download_bytes()) << tag << "Aqk differs when Akk stays on chip";
    EXPECT_EQ(tinv2.download_bytes(), fused) << tag << "Tinv differs when Akk stays on chip";
    // Aqk as the 16-bit hi + lo pair (what chunk_kda_fwd writes where the state kernel forms the output): exactly
    // the split of the fp32 Aqk, hi = round(Aqk), lo = round(Aqk - hi), and qg = round(q exp2 G) alongside.
    DeviceBuffer aqk_hi(T * H * BT * 2), aqk_lo(T * H * BT * 2), qg(T * H * K * 2), tinv3(T * H * BT * 4);
    a.Aqk = nullptr;
    a.Aqk_hi = aqk_hi.get();
    a.Aqk_lo = aqk_lo.get();
    a.qg = contiguous_view(qg.get(), p.H, p.K);
    a.Tinv = tinv3.as<float>();
    EXPECT_TRUE(launch_intra_chunk(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    EXPECT_EQ(tinv3.download_bytes(), fused) << tag << "Tinv differs when Aqk is split";
    const std::vector<float> aqk_f = download_floats(aqk.get(), T * H * BT);
    const std::vector<float> hi_f = download_dtype(aqk_hi.get(), T * H * BT, io),
                             lo_f = download_dtype(aqk_lo.get(), T * H * BT, io);
    size_t split_mismatches = 0;
    for (size_t i = 0; i < aqk_f.size(); ++i) {
      const float want_hi = ref::round_io(io, aqk_f[i]);
      split_mismatches += hi_f[i] != want_hi || lo_f[i] != ref::round_io(io, aqk_f[i] - want_hi);
    }
    EXPECT_EQ(split_mismatches, 0u) << tag << "Aqk hi + lo is not the split of the fp32 Aqk";
    std::vector<float> want_qg(T * H * K);
    for (size_t i = 0; i < want_qg.size(); ++i) want_qg[i] = R.q[i] * std::exp2(R.G[i]);
    expect_near(want_qg, download_dtype(qg.get(), T * H * K, io), kRoundedStageBar, tag + "qg");
    std::vector<uint8_t> bytes = akk.download_bytes(), more = aqk.download_bytes();
    bytes.insert(bytes.end(), more.begin(), more.end());
    bytes.insert(bytes.end(), fused.begin(), fused.end());
    return bytes;
  });

  // The launch chunk_kda_fwd makes for intra_chunk + solve_tril + recompute_w_u (launch_chunk_prepare): Aqk, w, u
  // and kg bit-identical to the two stage launchers with Tinv passed through memory, and the same bytes when v is
  // not 16-byte aligned (the fused kernel then loads v per element). d256 runs the two stage launches instead.
  for_both_modes(tag + "chunk_prepare", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    const StageGeometry geo = geometry(p, BT, *m);
    DeviceBuffer aqk(T * H * BT * 4), wo(T * H * K * 2), uo(T * H * V * 2), kgo(T * H * K * 2);
    DeviceBuffer aqk_s(T * H * BT * 4), tinv_s(T * H * BT * 4), wo_s(T * H * K * 2), uo_s(T * H * V * 2),
        kgo_s(T * H * K * 2);
    auto intra_args = [&](DeviceBuffer& aqk_out, float* tinv_out) {
      return IntraChunkArgs{geo, contiguous_view(static_cast<const void*>(qn.get()), p.H, p.K),
                            contiguous_view(static_cast<const void*>(kn.get()), p.H, p.K), beta_view,
                            ScalarType::kFloat32, p.beta_activation, G.as<float>(), p.scale, nullptr,
                            aqk_out.as<float>(), tinv_out};
    };
    auto wu_args = [&](TensorView v_view, const float* tinv_in, DeviceBuffer& w_out, DeviceBuffer& u_out,
                       DeviceBuffer& kg_out) {
      return RecomputeWuArgs{geo, contiguous_view(static_cast<const void*>(kn.get()), p.H, p.K), v_view, beta_view,
                             ScalarType::kFloat32, p.beta_activation, G.as<float>(), tinv_in,
                             contiguous_view(w_out.get(), p.H, p.K), contiguous_view(u_out.get(), p.H, p.V),
                             contiguous_view(kg_out.get(), p.H, p.K)};
    };
    const TensorView v_view = contiguous_view(static_cast<const void*>(v.get()), p.H, p.V);
    const bool fused = chunk_prepare_fused(intra_args(aqk, nullptr), wu_args(v_view, nullptr, wo, uo, kgo));
    EXPECT_EQ(fused, p.K <= 128 && p.V <= 128) << tag << "the fused kernel runs for K, V in {64, 128}";
    // Fused where it can be: no Akk, no Tinv buffer; otherwise the two launches through a Tinv buffer.
    DeviceBuffer tinv_own(T * H * BT * 4);
    float* tinv_fused = fused ? nullptr : tinv_own.as<float>();
    EXPECT_TRUE(launch_chunk_prepare(intra_args(aqk, tinv_fused), wu_args(v_view, tinv_fused, wo, uo, kgo),
                                     m->derive_ws.get(), m->derive_ws.bytes(), nullptr)
                    .is_ok());
    EXPECT_TRUE(launch_intra_chunk(intra_args(aqk_s, tinv_s.as<float>()), m->derive_ws.get(), m->derive_ws.bytes(),
                                   nullptr)
                    .is_ok());
    EXPECT_TRUE(launch_recompute_w_u(wu_args(v_view, tinv_s.as<float>(), wo_s, uo_s, kgo_s), m->derive_ws.get(),
                                     m->derive_ws.bytes(), nullptr)
                    .is_ok());
    std::vector<uint8_t> bytes = aqk.download_bytes();
    EXPECT_EQ(bytes, aqk_s.download_bytes()) << tag << "prepare Aqk differs from the stage launches";
    const std::vector<uint8_t> w_bytes = wo.download_bytes(), u_bytes = uo.download_bytes(),
                               kg_bytes = kgo.download_bytes();
    EXPECT_EQ(w_bytes, wo_s.download_bytes()) << tag << "prepare w differs from the stage launches";
    EXPECT_EQ(u_bytes, uo_s.download_bytes()) << tag << "prepare u differs from the stage launches";
    EXPECT_EQ(kg_bytes, kgo_s.download_bytes()) << tag << "prepare kg differs from the stage launches";
    expect_near(R.w, download_dtype(wo.get(), T * H * K, io), kRoundedStageBar, tag + "prepare w");
    expect_near(R.u, download_dtype(uo.get(), T * H * V, io), kRoundedStageBar, tag + "prepare u");
    if (fused) {  // v two bytes past a 16-byte boundary
      DeviceBuffer v_odd(T * H * V * 2 + 16), uo_odd(T * H * V * 2);
      char* v_at = static_cast<char*>(v_odd.get()) + 2;
      EXPECT_EQ(hipMemcpy(v_at, v.get(), T * H * V * 2, hipMemcpyDeviceToDevice), hipSuccess);
      const TensorView odd = contiguous_view(static_cast<const void*>(v_at), p.H, p.V);
      EXPECT_TRUE(launch_chunk_prepare(intra_args(aqk, nullptr), wu_args(odd, nullptr, wo, uo_odd, kgo),
                                       m->derive_ws.get(), m->derive_ws.bytes(), nullptr)
                      .is_ok());
      EXPECT_EQ(uo_odd.download_bytes(), u_bytes) << tag << "prepare u differs when v is not 16-byte aligned";
    }
    bytes.insert(bytes.end(), w_bytes.begin(), w_bytes.end());
    bytes.insert(bytes.end(), u_bytes.begin(), u_bytes.end());
    bytes.insert(bytes.end(), kg_bytes.begin(), kg_bytes.end());
    return bytes;
  });

  for_both_modes(tag + "recompute_w_u", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    DeviceBuffer wo(T * H * K * 2), uo(T * H * V * 2), kgo(T * H * K * 2);
    RecomputeWuArgs a{geometry(p, BT, *m), contiguous_view(static_cast<const void*>(kn.get()), p.H, p.K),
                      contiguous_view(static_cast<const void*>(v.get()), p.H, p.V), beta_view, ScalarType::kFloat32,
                      p.beta_activation, G.as<float>(), Tinv.as<float>(), contiguous_view(wo.get(), p.H, p.K),
                      contiguous_view(uo.get(), p.H, p.V), contiguous_view(kgo.get(), p.H, p.K)};
    EXPECT_TRUE(launch_recompute_w_u(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    expect_near(R.w, download_dtype(wo.get(), T * H * K, io), kRoundedStageBar, tag + "w");
    expect_near(R.u, download_dtype(uo.get(), T * H * V, io), kRoundedStageBar, tag + "u");
    expect_near(R.kg, download_dtype(kgo.get(), T * H * K, io), kRoundedStageBar, tag + "kg");
    std::vector<uint8_t> bytes = wo.download_bytes(), more = uo.download_bytes(), kgb = kgo.download_bytes();
    bytes.insert(bytes.end(), more.begin(), more.end());
    bytes.insert(bytes.end(), kgb.begin(), kgb.end());
    return bytes;
  });

  // The state launch on the reference's w, u, kg, G and initial state, writing h, v_new and the final state.
  auto state_args = [&](const auto& m, DeviceBuffer& ho, DeviceBuffer& vno, DeviceBuffer& ht) {
    StateRecurrenceArgs a;
    a.geometry = geometry(p, BT, m);
    a.w = w.get();
    a.u = u.get();
    a.kg = kg.get();
    a.G = G.as<float>();
    a.state.initial_state = h0.as<float>();
    a.state.final_state = ht.as<float>();
    a.h = ho.get();
    a.v_new = vno.get();
    return a;
  };
  // v_tile / warps 0 are the launcher's choice (32 columns, 8 warps at these sizes); every forced width and warp
  // count must give the same bytes.
  auto run_state = [&](MetadataMode mode, int v_tile, int warps, bool check) {
    auto m = device_metadata(p, BT, mode);
    const int64_t h_rows = mode == MetadataMode::kHostBuilder ? nt : max_num_chunks(p.T, p.num_sequences(), BT);
    DeviceBuffer ho(std::max<size_t>(1, size_t(h_rows) * H * K * V * 2)), vno(T * H * V * 2),
        ht(std::max<size_t>(1, size_t(p.num_sequences()) * H * K * V * 4));
    StateRecurrenceArgs a = state_args(*m, ho, vno, ht);
    a.v_tile = v_tile;
    a.warps = warps;
    EXPECT_TRUE(launch_state_recurrence(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    if (check) {
      expect_near(R.h, download_dtype(ho.get(), size_t(nt) * H * K * V, io), kRoundedStageBar, tag + "h");
      expect_near(R.v_new, download_dtype(vno.get(), T * H * V, io), kRoundedStageBar, tag + "v_new");
      expect_near(R.final_state, download_floats(ht.get(), size_t(p.num_sequences()) * H * K * V), kRoundedStageBar,
                  tag + "final state");
    }
    std::vector<uint8_t> bytes = download_raw(ho.get(), size_t(nt) * H * K * V * 2), more = vno.download_bytes(),
                         st = ht.download_bytes();
    bytes.insert(bytes.end(), more.begin(), more.end());
    bytes.insert(bytes.end(), st.begin(), st.end());
    return bytes;
  };
  for_both_modes(tag + "state_recurrence", [&](MetadataMode mode) { return run_state(mode, 0, 0, true); });
  if (K == 64 || K == 128) {  // the matrix-unit kernel's widths and warp counts
    const std::vector<uint8_t> chosen = run_state(MetadataMode::kHostBuilder, 0, 0, false);
    for (int v_tile : {16, 32, 64}) {
      if (V % v_tile != 0) continue;
      for (int warps : {4, 8}) {
        if (warps == 8 && v_tile < 32) continue;  // refused (StagesValidation)
        for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
          EXPECT_EQ(chosen, run_state(mode, v_tile, warps, false))
              << tag << "state_recurrence v_tile " << v_tile << ", " << warps << " warps, " << mode_name(mode)
              << ": differs from the launcher's choice";
        }
      }
    }

    // The fp32 state pool V-first, or K-first at a pointer 4 bytes off 8-byte alignment: the kernel then moves the
    // initial and final state through shared memory instead of as 8-byte pairs straight to and from its registers.
    // h, v_new and the final state (transposed back) must be the K-first, aligned run's bytes at every width.
    const size_t pool_floats = size_t(p.num_sequences()) * H * K * V;
    auto transposed = [&](const std::vector<float>& x, bool to_v_first) {
      return transposed_state_pool(x, p.num_sequences() * int64_t(H), int(K), int(V), to_v_first);
    };
    for (StateLayout layout : {StateLayout::kVFirst, StateLayout::kKFirst}) {
      const bool v_first = layout == StateLayout::kVFirst;
      for (size_t off : {size_t(0), size_t(1)}) {  // floats of offset
        if (!v_first && off == 0) continue;  // the run above
        const std::vector<float> h0_host = v_first ? transposed(p.initial_state, true) : p.initial_state;
        DeviceBuffer h0_pool((pool_floats + 1) * 4), ht_pool((pool_floats + 1) * 4);
        EXPECT_EQ(hipMemcpy(h0_pool.as<float>() + off, h0_host.data(), h0_host.size() * 4, hipMemcpyHostToDevice),
                  hipSuccess);
        for (int v_tile : {16, 32, 64}) {
          if (V % v_tile != 0) continue;
          auto m = device_metadata(p, BT, MetadataMode::kHostBuilder);
          DeviceBuffer ho(std::max<size_t>(1, size_t(nt) * H * K * V * 2)), vno(T * H * V * 2);
          StateRecurrenceArgs a = state_args(*m, ho, vno, ht_pool);
          a.state.initial_state = h0_pool.as<float>() + off;
          a.state.final_state = ht_pool.as<float>() + off;
          a.state.layout = layout;
          a.v_tile = v_tile;
          a.warps = v_tile >= 32 ? 8 : 4;
          EXPECT_TRUE(launch_state_recurrence(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
          std::vector<float> ht_host = download_floats(ht_pool.as<float>() + off, pool_floats);
          if (v_first) ht_host = transposed(ht_host, false);
          std::vector<uint8_t> bytes = download_raw(ho.get(), size_t(nt) * H * K * V * 2), more = vno.download_bytes();
          bytes.insert(bytes.end(), more.begin(), more.end());
          const auto* st = reinterpret_cast<const uint8_t*>(ht_host.data());
          bytes.insert(bytes.end(), st, st + ht_host.size() * 4);
          EXPECT_EQ(chosen, bytes) << tag << "state_recurrence v_tile " << v_tile << ", pool "
                                   << (v_first ? "V-first" : "K-first") << " at float offset " << off;
        }
      }
    }
  }

  // The output folded into the state kernel (what chunk_kda_fwd runs for K in {64, 128}): o and the final state
  // bit-identical to the state launch writing h and v_new followed by the output launch on them with q_gated, at
  // both widths the fold has, with and without output warps on 32 columns (NVIDIA), in both metadata modes, with o
  // contiguous (4-byte pair stores) and two bytes off (element stores). Any bf16 tensor serves as qg here: the
  // normalised q stands in.
  if (K == 64 || K == 128) {
    std::map<int, std::vector<uint8_t>> regs_bytes;  // the register-state kernel's o and final state, per warp count
    for (MetadataMode mode : {MetadataMode::kHostBuilder, MetadataMode::kDeviceDerived}) {
      auto m = device_metadata(p, BT, mode);
      const int64_t h_rows = mode == MetadataMode::kHostBuilder ? nt : max_num_chunks(p.T, p.num_sequences(), BT);
      const size_t state_bytes = std::max<size_t>(1, size_t(p.num_sequences()) * H * K * V * 4);
      DeviceBuffer ho(std::max<size_t>(1, size_t(h_rows) * H * K * V * 2)), vno(T * H * V * 2), o_sep(T * H * V * 2),
          ht_sep(state_bytes);
      const StateRecurrenceArgs a = state_args(*m, ho, vno, ht_sep);
      EXPECT_TRUE(launch_state_recurrence(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
      ChunkOutputArgs oa{a.geometry, contiguous_view(static_cast<const void*>(qn.get()), p.H, p.K), nullptr,
                         ho.get(), Aqk.as<float>(), vno.get(), p.scale, contiguous_view(o_sep.get(), p.H, p.V)};
      oa.q_gated = true;
      EXPECT_TRUE(launch_chunk_output(oa, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
      const std::vector<uint8_t> want_o = o_sep.download_bytes(), want_state = ht_sep.download_bytes();
      // Aqk as the hi + lo pair the prepare launches write for the fold (the output stage splits fp32 the same way).
      std::vector<float> lo_host(R.Aqk.size());
      for (size_t i = 0; i < lo_host.size(); ++i) lo_host[i] = R.Aqk[i] - ref::round_io(io, R.Aqk[i]);
      DeviceBuffer aqk_hi = upload_dtype(R.Aqk, io), aqk_lo = upload_dtype(lo_host, io);
      // The state launch with the output folded in (neither h nor v_new): o at o_at, the final state at ht.
      auto folded_args = [&](void* o_at, float* ht) {
        StateRecurrenceArgs f = a;
        f.h = nullptr;
        f.v_new = nullptr;
        f.state.final_state = ht;
        f.qg = qn.get();
        f.Aqk_hi = aqk_hi.get();
        f.Aqk_lo = aqk_lo.get();
        f.o = contiguous_view(o_at, p.H, p.V);
        f.scale = p.scale;
        return f;
      };
      // short_sequences 1: the short-sequence kernel takes the sequences of at most 16 tokens and
      // state_long_items_kernel, launched first, the rest (chunks of 64 only); with an item counter (taken) the short
      // kernel's blocks take items as they get to them, without it a fixed share each. 0: the general kernel takes all.
      struct FoldForm {
        int v_tile, output_warps, short_sequences;
        bool taken;
      };
      for (FoldForm form : {FoldForm{32, 0, 0, false}, FoldForm{32, ActiveTuning::kStateOutputWarps, 0, false},
                            FoldForm{64, 0, 0, false}, FoldForm{64, 0, 1, false}, FoldForm{64, 0, 1, true}}) {
        const int v_tile = form.v_tile;
        if (V % v_tile != 0 || (form.output_warps > 0 && !kda::detail::kNamedBarriers)) continue;
        if (form.short_sequences == 1 && BT != 64) continue;  // refused (StagesValidation)
        for (int offset : {0, 2}) {
          DeviceBuffer o_f(T * H * V * 2 + 16), ht_f(state_bytes), taken(sizeof(unsigned));
          EXPECT_EQ(hipMemsetAsync(taken.get(), 0, sizeof(unsigned), nullptr), hipSuccess);
          EXPECT_EQ(hipMemsetAsync(o_f.get(), 0xff, T * H * V * 2 + 16, nullptr), hipSuccess);
          char* o_at = o_f.as<char>() + offset;
          StateRecurrenceArgs f = folded_args(o_at, ht_f.as<float>());
          f.v_tile = v_tile;
          f.warps = 8;
          f.output_warps = form.output_warps;
          f.short_sequences = form.short_sequences;
          if (form.taken) f.short_items_taken = taken.as<unsigned>();
          EXPECT_TRUE(launch_state_recurrence(f, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
          const std::string where = tag + "folded output, v_tile " + std::to_string(v_tile) + ", output warps " +
                                    std::to_string(form.output_warps) + ", short sequences " +
                                    std::to_string(form.short_sequences) + (form.taken ? " with a counter" : "") +
                                    ", o offset " + std::to_string(offset) + ", " + mode_name(mode);
          EXPECT_EQ(download_raw(o_at, T * H * V * 2), want_o) << where << ": o differs from the output stage's";
          EXPECT_EQ(ht_f.download_bytes(), want_state) << where << ": final state differs";
        }
      }
#if defined(KDA_PLATFORM_CUDA)
      // The register-state kernel (state_recurrence_regs_mma.hpp): its sums run in another order, so o and the final
      // state agree with the output stage's within the rounded stages' bar, not bit for bit; both metadata modes give
      // the same bits (checked against the builder mode's run).
      const std::vector<float> want_o_values = download_dtype(o_sep.get(), T * H * V, io);
      const std::vector<float> want_state_values = download_floats(ht_sep.get(), state_bytes / 4);
      for (const int regs : kRegisterStateWarps) {
        DeviceBuffer o_r(T * H * V * 2), ht_r(state_bytes);
        StateRecurrenceArgs f = folded_args(o_r.get(), ht_r.as<float>());
        if (!detail::state_regs_ok(f, regs)) continue;  // refused (StagesValidation)
        EXPECT_EQ(hipMemsetAsync(o_r.get(), 0xff, T * H * V * 2, nullptr), hipSuccess);
        f.regs_warps = regs;
        EXPECT_TRUE(launch_state_recurrence(f, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
        const std::string where = tag + "folded output, register state, " + std::to_string(regs) + " warps, " +
                                  mode_name(mode);
        expect_near(want_o_values, download_dtype(o_r.get(), T * H * V, io), kRoundedStageBar, where + " o");
        expect_near(want_state_values, download_floats(ht_r.get(), state_bytes / 4), kRoundedStageBar,
                    where + " final state");
        std::vector<uint8_t> bytes = o_r.download_bytes(), state = ht_r.download_bytes();
        bytes.insert(bytes.end(), state.begin(), state.end());
        auto& first = regs_bytes[regs];
        if (first.empty()) {
          first = std::move(bytes);
        } else {
          EXPECT_EQ(first, bytes) << where << ": differs from the builder tables' run";
        }
      }
#endif
    }
  }

  for_both_modes(tag + "chunk_output", [&](MetadataMode mode) {
    auto m = device_metadata(p, BT, mode);
    // The output stage reads h at the global chunk id; derived mode has the same ids (< NT), so R.h serves both.
    DeviceBuffer out(T * H * V * 2);
    ChunkOutputArgs a{geometry(p, BT, *m), contiguous_view(static_cast<const void*>(qn.get()), p.H, p.K),
                      G.as<float>(), h.get(), Aqk.as<float>(), v_new.get(), p.scale,
                      contiguous_view(out.get(), p.H, p.V)};
    EXPECT_TRUE(launch_chunk_output(a, m->derive_ws.get(), m->derive_ws.bytes(), nullptr).is_ok());
    expect_near(R.o, download_dtype(out.get(), T * H * V, io), kRoundedStageBar, tag + "o");
    return out.download_bytes();
  });
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

INSTANTIATE_TEST_SUITE_P(Cases, Stages, ::testing::Range(0, 5));  // every entry of stage_cases()
TEST(StagesCases, EveryCaseIsInstantiated) { EXPECT_EQ(stage_cases().size(), 5u) << "update the Range above"; }

// Argument-validation tests: one 70-token sequence, 2 heads, K = V = 128, host-built tables, and a 1 MiB device buffer
// whose 64 KiB-aligned slices serve as intermediates. Nothing is ever computed: every call must be refused first.
struct ValidationBed {
  static constexpr int BT = 64;
  ref::KdaProblem p;
  std::unique_ptr<DeviceMetadata> m;
  DeviceBuffer buf;
  ValidationBed() : buf(1 << 20) {
    p.cu_seqlens = {0, 70};
    p.T = 70;
    p.H = 2;
    p.K = 128;
    p.V = 128;
    m = device_metadata(p, BT, MetadataMode::kHostBuilder);
  }
  char* slice(int i) const { return static_cast<char*>(buf.get()) + i * 65536; }
  StateRecurrenceArgs state_args() const {
    StateRecurrenceArgs a;
    a.geometry = geometry(p, BT, *m);
    a.w = slice(0);
    a.u = slice(1);
    a.kg = slice(2);
    a.G = reinterpret_cast<const float*>(slice(3));
    a.h = slice(6);
    a.v_new = slice(10);
    return a;
  }
  // state_args() with the output folded in (neither h nor v_new written): qg, Aqk's hi and lo, and o of `heads` heads.
  StateRecurrenceArgs folded_state_args(int heads) const {
    StateRecurrenceArgs a = state_args();
    a.h = nullptr;
    a.v_new = nullptr;
    a.qg = slice(12);
    a.Aqk_hi = slice(13);
    a.Aqk_lo = slice(13) + 32768;
    a.o = contiguous_view(static_cast<void*>(slice(14)), heads, p.V);
    return a;
  }
  // launch_chunk_prepare_inputs' arguments that pass its checks (lower-bound gate: no A_log needed).
  ChunkPrepareInputsArgs prepare_inputs_args() const {
    ChunkPrepareInputsArgs a;
    a.geometry = geometry(p, BT, *m);
    a.q = contiguous_view(static_cast<const void*>(slice(0)), p.H, p.K);
    a.k = contiguous_view(static_cast<const void*>(slice(1)), p.H, p.K);
    a.v = contiguous_view(static_cast<const void*>(slice(2)), p.H, p.V);
    a.g = contiguous_view(static_cast<const void*>(slice(3)), p.H, p.K);
    a.beta = TensorView{slice(5), int64_t(p.H), 1};
    a.gate = GateKind::kLowerBound;
    a.Aqk = reinterpret_cast<float*>(slice(6));
    a.w = contiguous_view(slice(7), p.H, p.K);
    a.u = contiguous_view(slice(8), p.H, p.V);
    a.kg = contiguous_view(slice(9), p.H, p.K);
    a.qg = contiguous_view(slice(10), p.H, p.K);
    a.G_last = reinterpret_cast<float*>(slice(11));
    return a;
  }
};

void expect_refused(const Status& s, const char* expected_text, const char* what) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
  EXPECT_NE(std::string(s.message()).find(expected_text), std::string::npos) << what << ": " << s.message();
}

// The kernels move raw intermediates 16 bytes at a time: a misaligned one is refused before anything is enqueued.
TEST(StagesValidation, MisalignedIntermediatesAreRefused) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  StateRecurrenceArgs st = bed.state_args();
  st.G = reinterpret_cast<const float*>(bed.slice(3) + 8);  // 8 bytes off
  expect_refused(launch_state_recurrence(st, nullptr, 0, nullptr), "not 16-byte aligned", "state_recurrence G");
  SolveTrilArgs so{geometry(bed.p, bed.BT, *bed.m), reinterpret_cast<const float*>(bed.slice(0)),
                   reinterpret_cast<float*>(bed.slice(1) + 4)};
  expect_refused(launch_solve_tril(so, nullptr, 0, nullptr), "not 16-byte aligned", "solve_tril Tinv");
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

// Akk may stay on chip only where the fused matrix-unit launch runs: Tinv asked for, q and k 16-byte aligned.
TEST(StagesValidation, NullAkkIsRefusedWhereAkkMustBeWritten) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  const int K = bed.p.K, H = bed.p.H;
  IntraChunkArgs a{geometry(bed.p, bed.BT, *bed.m), contiguous_view(static_cast<const void*>(bed.slice(0)), H, K),
                   contiguous_view(static_cast<const void*>(bed.slice(1)), H, K),
                   TensorView{bed.slice(2), int64_t(H), 1}, ScalarType::kFloat32, BetaActivation::kSigmoid,
                   reinterpret_cast<const float*>(bed.slice(3)), 0.0f, nullptr,
                   reinterpret_cast<float*>(bed.slice(6)), nullptr};
  expect_refused(launch_intra_chunk(a, nullptr, 0, nullptr), "Akk: null", "no Tinv asked for");
  a.Tinv = reinterpret_cast<float*>(bed.slice(10));
  a.q.data = bed.slice(0) + 2;  // no longer 16-byte aligned: the per-element kernel, which needs Akk in memory
  expect_refused(launch_intra_chunk(a, nullptr, 0, nullptr), "Akk: null", "unaligned q");
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

// launch_chunk_prepare: the two argument sets must agree, and where the fused kernel cannot run (here: q not
// 16-byte aligned) the two stage launches need Akk and one shared Tinv buffer.
TEST(StagesValidation, ChunkPrepareRefusesWhatItCannotRun) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  const int K = bed.p.K, V = bed.p.V, H = bed.p.H;
  const float* G = reinterpret_cast<const float*>(bed.slice(3));
  const TensorView beta{bed.slice(2), int64_t(H), 1};
  IntraChunkArgs intra{geometry(bed.p, bed.BT, *bed.m), contiguous_view(static_cast<const void*>(bed.slice(0)), H, K),
                       contiguous_view(static_cast<const void*>(bed.slice(1)), H, K), beta, ScalarType::kFloat32,
                       BetaActivation::kSigmoid, G, 0.0f, nullptr, reinterpret_cast<float*>(bed.slice(6)), nullptr};
  RecomputeWuArgs wu{geometry(bed.p, bed.BT, *bed.m), intra.k,
                     contiguous_view(static_cast<const void*>(bed.slice(4)), H, V), beta, ScalarType::kFloat32,
                     BetaActivation::kSigmoid, G, nullptr, contiguous_view(bed.slice(7), H, K),
                     contiguous_view(bed.slice(8), H, V), contiguous_view(bed.slice(9), H, K)};
  ASSERT_TRUE(chunk_prepare_fused(intra, wu));
  RecomputeWuArgs other = wu;
  other.geometry.num_heads = 1;
  expect_refused(launch_chunk_prepare(intra, other, nullptr, 0, nullptr), "geometries differ", "head counts differ");
  intra.q.data = bed.slice(0) + 2;  // the two stage launches from here on
  ASSERT_FALSE(chunk_prepare_fused(intra, wu));
  expect_refused(launch_chunk_prepare(intra, wu, nullptr, 0, nullptr), "Akk: null", "unfused without Akk");
  intra.Akk = reinterpret_cast<float*>(bed.slice(11));
  expect_refused(launch_chunk_prepare(intra, wu, nullptr, 0, nullptr), "G/Tinv: null", "unfused without Tinv");
  intra.Tinv = reinterpret_cast<float*>(bed.slice(12));
  wu.Tinv = reinterpret_cast<const float*>(bed.slice(13));
  expect_refused(launch_chunk_prepare(intra, wu, nullptr, 0, nullptr), "one Tinv buffer", "two Tinv buffers");
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

// launch_chunk_prepare_inputs refuses before enqueuing anything: K or V outside {64, 128}, outputs it cannot move 16
// bytes at a time, a missing Aqk or G_last, bad gate or input arguments, and a short path it does not have.
TEST(StagesValidation, ChunkPrepareInputsRefusesWhatItCannotRun) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  const ChunkPrepareInputsArgs a = bed.prepare_inputs_args();
  ASSERT_TRUE(detail::validate_chunk_prepare_inputs(a).is_ok());
  ChunkPrepareInputsArgs b = a;
  b.geometry.head_dim_k = 256;
  EXPECT_EQ(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr).code(), StatusCode::kUnsupported) << "K = 256";
  b = a;
  b.qg.data = bed.slice(10) + 2;
  expect_refused(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr), "not vector_aligned", "qg unaligned");
  b = a;
  b.G_last = nullptr;
  expect_refused(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr), "Aqk/G_last: null", "no G_last");
  b = a;
  b.gate = GateKind::kSoftplus;
  expect_refused(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr), "A_log: required", "softplus without A_log");
  b = a;
  b.g = TensorView{};
  expect_refused(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr), "g: null", "no g");
  b = a;
  b.short_chunks = 2;
  expect_refused(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr), "short_chunks: must be -1, 0 or 1",
                 "short_chunks 2");
  b = a;
  const auto tables32 = device_metadata(bed.p, 32, MetadataMode::kHostBuilder);
  b.geometry = geometry(bed.p, 32, *tables32);
  ASSERT_TRUE(detail::validate_chunk_prepare_inputs(b).is_ok()) << "chunks of 32, the launcher's choice";
  b.short_chunks = 1;
  expect_refused(launch_chunk_prepare_inputs(b, nullptr, 0, nullptr), "short_chunks: 1 needs chunk_size 64",
                 "short path at chunks of 32");
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

// Where the launcher runs the register-state kernel by itself (detail::state_regs_warps_used, a host rule: no launch
// here): batches of long sequences with enough (sequence, head) items for the other kernel's 64-column tiles, e.g.
// 4 x 4096 or 16 x 1024 tokens at 32 heads; not one long sequence, not decodes beside prefills, not where a caller
// forces a form, and only on NVIDIA.
TEST(StagesValidation, RegisterStateKernelWhereItMeasuredFaster) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  StateRecurrenceArgs a = bed.folded_state_args(32);
  a.geometry.num_heads = 32;
  auto chosen = [&](int64_t sequences, int64_t tokens) {
    StateRecurrenceArgs b = a;
    b.geometry.metadata.num_sequences = sequences;
    b.geometry.metadata.total_tokens = tokens;
    return detail::state_regs_warps_used(b);
  };
  const int regs = kda::detail::kNamedBarriers ? ActiveTuning::kStateRegsWarps : 0;  // NVIDIA only
  EXPECT_EQ(chosen(4, 4 * 4096), regs) << "4 x 4096 tokens";
  EXPECT_EQ(chosen(16, 16 * 1024), regs) << "16 x 1024 tokens";
  EXPECT_EQ(chosen(1, 8192), 0) << "one long sequence: 32-column tiles with output warps";
  EXPECT_EQ(chosen(64, 64 * 100), 0) << "short sequences on average (decodes beside prefills)";
  EXPECT_EQ(chosen(256, 256 * 8), 0) << "the short-sequence kernel's batch";
  a.v_tile = 64;
  EXPECT_EQ(chosen(4, 4 * 4096), 0) << "a forced V-tile keeps the other kernel";
  a.v_tile = 0;
  a.o.data = bed.slice(14) + 2;  // o rows not in 16-byte pieces
  EXPECT_EQ(chosen(4, 4 * 4096), 0) << "o two bytes off";
}

// The output folded into the state launch: only K in {64, 128} and the 8-warp 32- or 64-column tiles, with qg and
// Aqk given and o clear of what the recurrence reads. And the staged prepare's qg needs the matrix-unit kernel.
TEST(StagesValidation, FoldedOutputRefusesWhatItCannotRun) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  const int K = bed.p.K, H = bed.p.H;
  auto folded = [&]() { return bed.folded_state_args(H); };
  StateRecurrenceArgs a = folded();
  a.v_tile = 16;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "V-tile of 32 or 64 columns and 8 warps",
                 "16 columns");
  a = folded();
  a.warps = 4;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "8 warps", "4 warps");
  a = folded();
  a.geometry.head_dim_k = 256;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "head_dim_k 64 or 128", "K = 256");
  a = folded();
  a.qg = nullptr;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "qg/Aqk_hi/Aqk_lo: null", "no qg");
  a = folded();
  a.o.data = bed.slice(1);  // over u
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "o: overlaps", "o over u");
  a = folded();
  a.scale = std::nanf("");
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "scale: not finite", "NaN scale");
  // Output warps: only 0 or 8, and 8 only beside the folded 32-column tiles (on NVIDIA, where this test runs).
  a = folded();
  a.output_warps = 2;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "output_warps: must be -1, 0 or 8", "2 warps");
  a = folded();
  a.v_tile = 64;
  a.output_warps = 8;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "output_warps: 8 needs", "64 columns");
  // The register-state kernel: 2, 4 or 8 warps, the output folded in without h or v_new, o in 16-byte rows.
  a = folded();
  a.regs_warps = 3;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "regs_warps: must be -1, 0, 2, 4 or 8", "3 warps");
  a = folded();
  a.regs_warps = 4;
  a.h = bed.slice(6);
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "regs_warps: needs", "with h");
  a = folded();
  a.regs_warps = 4;
  a.o.data = static_cast<char*>(a.o.data) + 2;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "regs_warps: needs", "o off 16 bytes");
  a = bed.state_args();
  a.v_tile = 32;
  a.output_warps = 8;
  expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "output_warps: 8 needs", "not folded");
  // The short-sequence kernel: only -1, 0 or 1, and 1 only where it can run.
  auto refused_short = [&](StateRecurrenceArgs x, int short_sequences, const char* text, const char* what) {
    x.short_sequences = short_sequences;
    expect_refused(launch_state_recurrence(x, nullptr, 0, nullptr), text, what);
  };
  refused_short(folded(), 2, "short_sequences: must be -1, 0 or 1", "2");
  refused_short(bed.state_args(), 1, "short_sequences: 1 needs", "not folded");  // writes h and v_new
  a = folded();
  a.v_tile = 32;
  refused_short(a, 1, "short_sequences: 1 runs", "32 columns");
  a = folded();
  a.state.layout = StateLayout::kVFirst;
  refused_short(a, 1, "short_sequences: 1 needs", "V-first pool");
  a = folded();
  a.state.final_state = reinterpret_cast<float*>(bed.slice(15)) + 2;  // 8 bytes off 16-byte alignment
  refused_short(a, 1, "short_sequences: 1 needs", "unaligned pool");
  IntraChunkArgs intra{geometry(bed.p, bed.BT, *bed.m),
                       contiguous_view(static_cast<const void*>(bed.slice(0) + 2), H, K),
                       contiguous_view(static_cast<const void*>(bed.slice(1)), H, K),
                       TensorView{bed.slice(2), int64_t(H), 1}, ScalarType::kFloat32, BetaActivation::kSigmoid,
                       reinterpret_cast<const float*>(bed.slice(3)), 0.0f, reinterpret_cast<float*>(bed.slice(5)),
                       reinterpret_cast<float*>(bed.slice(6)), nullptr};
  intra.qg = contiguous_view(static_cast<void*>(bed.slice(7)), H, K);
  expect_refused(launch_intra_chunk(intra, nullptr, 0, nullptr), "qg: needs 16-byte-aligned q and k", "q unaligned");
  intra.q.data = bed.slice(0);  // aligned again; one half of the Aqk pair alone is refused (the kernel writes both)
  intra.Aqk_hi = bed.slice(8);
  expect_refused(launch_intra_chunk(intra, nullptr, 0, nullptr), "Aqk_hi/Aqk_lo: give both or neither", "hi alone");
  ChunkPrepareInputsArgs pi = bed.prepare_inputs_args();
  pi.Aqk_lo = bed.slice(15);
  expect_refused(launch_chunk_prepare_inputs(pi, nullptr, 0, nullptr), "Aqk_hi/Aqk_lo: give both or neither",
                 "prepare_inputs lo alone");
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

// Which state kernels the launcher runs with the output folded in: the short-sequence kernel beside the general one
// where sequences average at most 16 tokens (NVIDIA), never where it cannot run or a form is forced against it.
TEST(StagesShortSequences, LauncherChoosesTheShortKernelForShortBatches) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  auto folded = [&](int64_t tokens, int64_t sequences) {
    StateRecurrenceArgs a = bed.state_args();
    a.h = nullptr;
    a.v_new = nullptr;
    a.o = contiguous_view(static_cast<void*>(bed.slice(14)), bed.p.H, bed.p.V);
    a.geometry.metadata.total_tokens = tokens;
    a.geometry.metadata.num_sequences = sequences;
    return a;
  };
  const bool on_nvidia = kda::detail::kNamedBarriers;
  EXPECT_EQ(detail::state_short_kernel_used(folded(2048, 256)), on_nvidia) << "spec256x8: 8 tokens on average";
  EXPECT_EQ(detail::state_short_kernel_used(folded(4096, 256)), on_nvidia) << "16 tokens on average";
  EXPECT_FALSE(detail::state_short_kernel_used(folded(4097, 256))) << "just over 16 on average";
  EXPECT_FALSE(detail::state_short_kernel_used(folded(8192, 1))) << "one long sequence";
  StateRecurrenceArgs a = folded(2048, 256);
  a.short_sequences = 0;
  EXPECT_FALSE(detail::state_short_kernel_used(a)) << "forced off";
  a = folded(2048, 256);
  a.v_tile = 32;
  EXPECT_FALSE(detail::state_short_kernel_used(a)) << "32 columns forced";
  a = folded(2048, 256);
  a.state.layout = StateLayout::kVFirst;
  EXPECT_FALSE(detail::state_short_kernel_used(a)) << "V-first pool";
  a = folded(2048, 256);
  a.geometry.chunk_size = 32;
  EXPECT_FALSE(detail::state_short_kernel_used(a)) << "chunks of 32";
  a = bed.state_args();  // writes h and v_new
  a.geometry.metadata.total_tokens = 2048;
  a.geometry.metadata.num_sequences = 256;
  EXPECT_FALSE(detail::state_short_kernel_used(a)) << "not folded";
  a = folded(2048, 256);
  a.short_sequences = 1;
  EXPECT_TRUE(detail::state_short_kernel_used(a)) << "forced on";

  // Its ticket form (beside the long sequences' chains): only with a counter, and not where the builder's tables show
  // that no sequence spans two chunks (the bed's tables are the builder's; their host NT is set here).
  unsigned word = 0;
  a = folded(2048, 256);
  a.geometry.metadata.num_chunks = 284;
  EXPECT_FALSE(detail::state_short_tickets_used(a)) << "no counter";
  a.short_items_taken = &word;  // never dereferenced by the host
  EXPECT_TRUE(detail::state_short_tickets_used(a)) << "NT > N: a chain may run";
  a.geometry.metadata.num_chunks = a.geometry.metadata.num_sequences;
  EXPECT_FALSE(detail::state_short_tickets_used(a)) << "NT = N: no chain";
  a.geometry.metadata.chunk_indices = IndexSpan{};
  a.geometry.metadata.chunk_offsets = IndexSpan{};
  a.geometry.metadata.num_chunks = -1;
  EXPECT_TRUE(detail::state_short_tickets_used(a)) << "derived tables: the host cannot tell";
}

// A forced V-tile width or warp count the kernels do not have is refused before anything is enqueued.
TEST(StagesValidation, UnsupportedStateVTileIsRefused) {
  ASSERT_TRUE(have_gpu());
  const ValidationBed bed;
  auto refused = [&](int v_tile, int K, const char* what) {
    StateRecurrenceArgs a = bed.state_args();
    a.v_tile = v_tile;
    a.geometry.head_dim_k = K;
    expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "v_tile", what);
  };
  refused(48, 128, "a width with no kernel");
  refused(-16, 128, "a negative width");
  refused(32, 256, "a wide tile on the scalar kernel (K = 256)");
  auto refused_warps = [&](int warps, int v_tile, const char* what) {
    StateRecurrenceArgs a = bed.state_args();
    a.warps = warps;
    a.v_tile = v_tile;
    expect_refused(launch_state_recurrence(a, nullptr, 0, nullptr), "warps", what);
  };
  refused_warps(6, 0, "a warp count with no kernel");
  refused_warps(-4, 0, "a negative warp count");
  refused_warps(8, 16, "8 warps on a 16-column tile");
  EXPECT_EQ(hipDeviceSynchronize(), hipSuccess);
}

TEST(StagesSolveTril, InverseTimesMatrixIsIdentityForEveryChunkSize) {
  ASSERT_TRUE(have_gpu());
  for (int BT : {16, 32, 64}) {
    const std::vector<int64_t> cu = {0, 5, 5, BT, BT + 1, 3 * BT + 7};
    ref::KdaProblem p;
    p.cu_seqlens = cu;
    p.T = cu.back();
    p.H = 3;
    const ref::ChunkGeometry geo = ref::geometry_of(p, BT);
    // Random strictly-lower A within each chunk, of the size Akk has for unit-norm keys and beta < 1.
    std::vector<float> A(size_t(p.T) * p.H * BT, 0.0f);
    ref::TestRng rng(BT);
    for (const auto& ch : ref::chunks_of(cu, BT))
      for (int i = 0; i < ch.length; ++i)
        for (int hh = 0; hh < p.H; ++hh)
          for (int j = 0; j < i; ++j) A[((ch.first + i) * p.H + hh) * BT + j] = float(rng.uniform(-0.3, 0.3));
    std::vector<float> want;
    ref::solve_tril(geo, A, &want);
    auto m = device_metadata(p, BT, MetadataMode::kDeviceDerived);
    DeviceBuffer dA = upload_floats(A), out(A.size() * 4);
    StageGeometry g;
    g.metadata = m->args;
    g.num_heads = p.H;
    g.chunk_size = BT;
    KDA_ASSERT_OK(launch_solve_tril(SolveTrilArgs{g, dA.as<float>(), out.as<float>()}, m->derive_ws.get(),
                                    m->derive_ws.bytes(), nullptr));
    expect_near(want, download_floats(out.get(), A.size()), kFp32StageBar, "solve_tril BT=" + std::to_string(BT));
  }
}

}  // namespace
}  // namespace kda::test
