// Random KDA problems shaped like flash-linear-attention's test inputs (KDA_SPEC §6), for the CPU and GPU tests.
//
// Deterministic across compilers and standard libraries: its own splitmix64 generator and Box-Muller normals, no
// <random> distributions (whose output is implementation-defined). Every value the kernels read in the io dtype
// (q, k, v, raw g, raw beta) is already representable in that dtype; A_log, dt_bias and h0 are fp32 as in FLA.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kda/numeric.hpp"
#include "kda_problem.hpp"

namespace kda::ref {

// splitmix64: tiny, fast, and good enough for test inputs.
class TestRng {
 public:
  explicit TestRng(uint64_t seed) : state_(seed) {}

  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {  // Box-Muller; 1 - uniform() is in (0, 1], so the log is finite
    const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));
    return radius * std::cos(6.283185307179586 * uniform());
  }

 private:
  uint64_t state_;
};

struct ProblemOptions {
  // true: q, k are raw rand() and the problem asks for l2norm in the kernel; false: they are stored L2-normalised.
  bool qk_l2norm_in_kernel = false;
  // kNone: beta is stored activated, sigmoid(rand()); otherwise it is raw randn() and activated in the kernel.
  BetaActivation beta_activation = BetaActivation::kNone;

  // kPrecomputed: g = logsigmoid(randn) / gate_logit_normalizer (the natural-log decay itself).
  float gate_logit_normalizer = 16.0f;
  // Gate in kernel (kSoftplus, kLowerBound): raw g = randn, A_log = log(uniform(1, 16)) per head (FLA's varlen test),
  // dt_bias = randn per channel.
  bool with_A_log = true;     // kSoftplus needs it; kLowerBound may go without (then exp(A_log) = 1)
  bool with_dt_bias = false;
  float lower_bound = -5.0f;  // kLowerBound's lb, in [-5, 0)
  // FLA masks: these fractions of the gate entries (raw entries for a gate in kernel) become 0 and extreme_gate.
  // A raw -1000 under a gate in kernel means "no decay" (softplus and sigmoid vanish); a precomputed one, "reset".
  double zero_gate_fraction = 0.0;
  double extreme_gate_fraction = 0.0;
  float extreme_gate = -1000.0f;

  bool with_initial_state = false;  // h0 = randn, fp32 [N,H,K,V]
  bool want_final_state = true;
  float scale = 0.0f;               // 0 = K^-0.5
  bool round_intermediates = true;  // see KdaProblem
};

// A problem over the packed sequences `cu_seqlens` (cu[0] = 0, non-decreasing; T = cu.back()).
inline KdaProblem make_random_problem(const std::vector<int64_t>& cu_seqlens, int H, int K, int V, DType io,
                                      GateKind gate, uint64_t seed, const ProblemOptions& opt = ProblemOptions()) {
  TestRng rng(seed);
  const auto round = [io](double x) {
    return io == DType::kFP16 ? numeric::round_to<fp16_t>(float(x)) : numeric::round_to<bf16_t>(float(x));
  };

  KdaProblem p;
  p.cu_seqlens = cu_seqlens;
  p.T = cu_seqlens.empty() ? 0 : cu_seqlens.back();
  p.H = H;
  p.K = K;
  p.V = V;
  p.io_dtype = io;
  p.gate = gate;
  p.lower_bound = opt.lower_bound;
  p.beta_activation = opt.beta_activation;
  p.qk_l2norm = opt.qk_l2norm_in_kernel;
  p.scale = opt.scale;
  p.want_final_state = opt.want_final_state;
  p.round_intermediates = opt.round_intermediates;

  const size_t rows = size_t(p.T) * size_t(H);
  // q, k = rand, L2-normalised per row (in double, before rounding) unless the kernel normalises them.
  for (std::vector<float>* x : {&p.q, &p.k}) {
    x->resize(rows * size_t(K));
    for (size_t r = 0; r < rows; ++r) {
      std::vector<double> row(static_cast<size_t>(K));
      double sum_sq = 0.0;
      for (double& value : row) {
        value = rng.uniform();
        sum_sq += value * value;
      }
      const double norm = opt.qk_l2norm_in_kernel ? 1.0 : std::max(std::sqrt(sum_sq), 1e-12);  // F.normalize's eps
      for (int d = 0; d < K; ++d) (*x)[r * size_t(K) + size_t(d)] = round(row[size_t(d)] / norm);
    }
  }
  p.v.resize(rows * size_t(V));
  for (float& x : p.v) x = round(rng.uniform());

  p.g.resize(rows * size_t(K));
  for (float& x : p.g) {
    const double z = rng.normal();
    const double mask = rng.uniform();
    double value = gate == GateKind::kPrecomputed  // logsigmoid(z) / normalizer, or the raw gate
                       ? (std::min(z, 0.0) - std::log1p(std::exp(-std::fabs(z)))) / double(opt.gate_logit_normalizer)
                       : z;
    if (mask < opt.zero_gate_fraction)
      value = 0.0;
    else if (mask < opt.zero_gate_fraction + opt.extreme_gate_fraction)
      value = opt.extreme_gate;
    x = round(value);
  }

  p.beta.resize(rows);
  for (float& x : p.beta) {
    const double sigmoid_of_rand = 1.0 / (1.0 + std::exp(-rng.uniform()));
    x = round(opt.beta_activation == BetaActivation::kNone ? sigmoid_of_rand : rng.normal());
  }

  if (gate != GateKind::kPrecomputed) {
    if (opt.with_A_log || gate == GateKind::kSoftplus) {
      p.A_log.resize(size_t(H));
      for (float& x : p.A_log) x = float(std::log(rng.uniform(1.0, 16.0)));
    }
    if (opt.with_dt_bias) {
      p.dt_bias.resize(size_t(H) * size_t(K));
      for (float& x : p.dt_bias) x = float(rng.normal());
    }
  }

  if (opt.with_initial_state) {
    p.initial_state.resize(size_t(p.num_sequences()) * size_t(H) * size_t(K) * size_t(V));
    for (float& x : p.initial_state) x = float(rng.normal());
  }
  return p;
}

}  // namespace kda::ref
