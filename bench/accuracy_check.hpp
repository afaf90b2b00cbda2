// --kda_check: chunk_kda_fwd against the float64 token-by-token reference (tests/reference/recurrent_reference.hpp)
// on a small batch with the benchmarks' options (bf16, l2norm and beta sigmoid in the kernel, dt_bias, initial and
// final fp32 state), for both gate variants and both metadata modes. Prints one line per run and a summary line;
// returns 0 when every run is within FLA's bar (rms relative error <= 5e-3 for o and the final state).
#pragma once

#include <cstdio>
#include <cstring>
#include <vector>

#include "bench_problem.hpp"
#include "kda/numeric.hpp"
#include "reference/error_metrics.hpp"
#include "reference/problem_generator.hpp"
#include "reference/recurrent_reference.hpp"

namespace kda::bench {

constexpr double kCheckRmsBar = 5e-3;

// Copies a host reference problem's values over the random inputs of `bp` (same shape).
inline Status upload_reference_inputs(const ref::KdaProblem& p, BenchProblem* bp, hipStream_t stream) {
  auto bf16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) bits[i] = numeric::float_to_bf16(x[i]);
    return bits;
  };
  auto put = [](DeviceBuffer& dst, const void* src, size_t bytes) {
    return runtime_status(bytes > 0 ? hipMemcpy(dst.get(), src, bytes, hipMemcpyHostToDevice) : hipSuccess);
  };
  const std::vector<uint16_t> q = bf16(p.q), k = bf16(p.k), v = bf16(p.v);
  KDA_RETURN_IF_ERROR(put(bp->q, q.data(), q.size() * 2));
  KDA_RETURN_IF_ERROR(put(bp->k, k.data(), k.size() * 2));
  KDA_RETURN_IF_ERROR(put(bp->v, v.data(), v.size() * 2));
  KDA_RETURN_IF_ERROR(put(bp->g, p.g.data(), p.g.size() * sizeof(float)));
  KDA_RETURN_IF_ERROR(put(bp->beta, p.beta.data(), p.beta.size() * sizeof(float)));
  KDA_RETURN_IF_ERROR(put(bp->A_log, p.A_log.data(), p.A_log.size() * sizeof(float)));
  KDA_RETURN_IF_ERROR(put(bp->dt_bias, p.dt_bias.data(), p.dt_bias.size() * sizeof(float)));
  KDA_RETURN_IF_ERROR(put(bp->state_in, p.initial_state.data(), p.initial_state.size() * sizeof(float)));
  return runtime_status(hipStreamSynchronize(stream));
}

struct CheckResult {
  double o_max_abs = 0, o_rms_rel = 0, state_max_abs = 0, state_rms_rel = 0;
  std::vector<uint8_t> o_bytes, state_bytes;
  bool pass() const { return o_rms_rel <= kCheckRmsBar && state_rms_rel <= kCheckRmsBar; }
};

inline Status run_check_case(const ref::KdaProblem& p, const ref::KdaOutput& expected, GateVariant gate,
                             MetadataMode mode, hipStream_t stream, CheckResult* r) {
  ProblemConfig c;
  c.cu_seqlens = p.cu_seqlens;
  c.H = p.H;
  c.K = p.K;
  c.V = p.V;
  c.gate = gate;
  c.mode = mode;
  BenchProblem bp;
  KDA_RETURN_IF_ERROR(bp.init(c, stream));
  KDA_RETURN_IF_ERROR(upload_reference_inputs(p, &bp, stream));
  KDA_RETURN_IF_ERROR(bp.run(stream));
  KDA_RETURN_IF_RUNTIME_ERROR(hipStreamSynchronize(stream));

  r->o_bytes.resize(bp.o.bytes());
  r->state_bytes.resize(bp.state_out.bytes());
  KDA_RETURN_IF_RUNTIME_ERROR(hipMemcpy(r->o_bytes.data(), bp.o.get(), bp.o.bytes(), hipMemcpyDeviceToHost));
  KDA_RETURN_IF_RUNTIME_ERROR(
      hipMemcpy(r->state_bytes.data(), bp.state_out.get(), bp.state_out.bytes(), hipMemcpyDeviceToHost));
  std::vector<float> o(r->o_bytes.size() / 2), state(r->state_bytes.size() / sizeof(float));
  for (size_t i = 0; i < o.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, r->o_bytes.data() + 2 * i, 2);
    o[i] = numeric::bf16_to_float(bits);
  }
  std::memcpy(state.data(), r->state_bytes.data(), state.size() * sizeof(float));
  r->o_max_abs = ref::max_abs_error(expected.o, o);
  r->o_rms_rel = ref::rms_relative_error(expected.o, o);
  r->state_max_abs = ref::max_abs_error(expected.final_state, state);
  r->state_rms_rel = ref::rms_relative_error(expected.final_state, state);
  return Status();
}

// Returns the process exit code: 0 when every case passes.
inline int run_accuracy_check(hipStream_t stream) {
  const std::vector<int64_t> cu = {0, 100, 357, 1000};
  const int H = 4, K = 128, V = 128;
  bool all_pass = true, identical = true;
  int cases = 0;
  for (GateVariant gate : {GateVariant::kSoftplus, GateVariant::kLowerBound}) {
    ref::ProblemOptions opt;
    opt.qk_l2norm_in_kernel = true;
    opt.beta_activation = BetaActivation::kSigmoid;
    opt.with_A_log = gate == GateVariant::kSoftplus;
    opt.with_dt_bias = true;
    opt.lower_bound = -5.0f;
    opt.with_initial_state = true;
    const GateKind kind = gate == GateVariant::kSoftplus ? GateKind::kSoftplus : GateKind::kLowerBound;
    const uint64_t seed = gate == GateVariant::kSoftplus ? 1 : 2;
    const ref::KdaProblem p = ref::make_random_problem(cu, H, K, V, DType::kBF16, kind, seed, opt);
    const ref::KdaOutput expected = ref::recurrent_kda_f64(p);

    CheckResult results[2];
    for (MetadataMode mode : {MetadataMode::kBuilder, MetadataMode::kDerived}) {
      CheckResult& r = results[mode == MetadataMode::kBuilder ? 0 : 1];
      const Status s = run_check_case(p, expected, gate, mode, stream, &r);
      ++cases;
      if (!s.is_ok()) {
        std::printf("kda check: %-8s %-7s FAILED to run: %s\n", gate_name(gate), mode_name(mode), s.message());
        all_pass = false;
        continue;
      }
      all_pass = all_pass && r.pass();
      std::printf("kda check: %-8s %-7s o: max abs err %.3e, rms rel err %.3e | final state: max abs err %.3e, "
                  "rms rel err %.3e  %s\n",
                  gate_name(gate), mode_name(mode), r.o_max_abs, r.o_rms_rel, r.state_max_abs, r.state_rms_rel,
                  r.pass() ? "ok" : "FAIL");
    }
    identical = identical && results[0].o_bytes == results[1].o_bytes &&
                results[0].state_bytes == results[1].state_bytes && !results[0].o_bytes.empty();
  }
  std::printf("kda check: %s: chunk_kda_fwd vs float64 reference, cu_seqlens {0,100,357,1000}, H=%d, K=V=%d, bf16, "
              "%d runs, bar rms rel err <= %.0e; builder and derived outputs %s\n",
              all_pass ? "PASS" : "FAIL", H, K, cases, kCheckRmsBar,
              identical ? "bit-identical" : "DIFFER");
  std::fflush(stdout);
  return all_pass && identical ? 0 : 1;
}

}  // namespace kda::bench
