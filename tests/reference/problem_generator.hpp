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

  // Inputs like real activations (the defaults above are FLA's test inputs, all non-negative):
  bool signed_qkv = false;          // q, k, v = randn instead of rand: A, qg and kg entries of both signs
  double tiny_row_fraction = 0.0;   // with l2norm in kernel: this fraction of q and k rows scaled by 1e-4, so that
                                    // their sum of squares (~1e-6) is of the order of l2norm's eps and decides them
  double beta_raw_scale = 1.0;      // raw beta = beta_raw_scale * randn (kSigmoidTimesTwo: 3 reaches beta ~2)
  // When decay_per_chunk_max > 0, every gate entry is set through the inverse of its gate function so that the
  // decay per token is -D/64 (x U(0.5, 1.5)) nat, with D log-uniform in [decay_per_chunk_min, decay_per_chunk_max]
  // per (sequence, head, channel): the decay over a 64-token chunk stays in that range, so the state carried across
  // chunks and the initial state matter (FLA's randn gates make exp(G_last) underflow on most channels). The zero /
  // extreme masks above apply on top.
  double decay_per_chunk_min = 0.5, decay_per_chunk_max = 0.0;

  bool with_initial_state = false;  // h0 = randn, fp32 [N,H,K,V]
  bool want_final_state = true;
  float scale = 0.0f;               // 0 = K^-0.5
  bool round_intermediates = true;  // see KdaProblem
};

// The raw gate entry whose natural-log decay under p's gate (KDA_SPEC §1.1) is -decay for head h, channel d: the
// inverse of the gate function, less dt_bias. decay > 0 and, for kLowerBound, below |lower_bound|.
inline double raw_gate_for_decay(const KdaProblem& p, int h, int d, double decay) {
  const double rate = p.A_log.empty() ? 1.0 : std::exp(double(p.A_log[size_t(h)]));
  const double bias = p.dt_bias.empty() ? 0.0 : double(p.dt_bias[size_t(h) * size_t(p.K) + size_t(d)]);
  double x = -decay;  // kPrecomputed
  if (p.gate == GateKind::kSoftplus) x = std::log(std::expm1(decay / rate));  // softplus(x) = decay / rate
  if (p.gate == GateKind::kLowerBound) {                                       // sigmoid(rate x) = decay / |lb|
    const double s = std::min(decay / std::fabs(double(p.lower_bound)), 0.95);
    x = std::log(s / (1.0 - s)) / rate;
  }
  return p.gate == GateKind::kPrecomputed ? x : x - bias;
}

// ProblemOptions::decay_per_chunk_*: overwrites every unmasked gate entry of p. Its own generator (from `seed`), so
// the other inputs are those of the same seed without the option.
inline void set_gates_for_decay(const ProblemOptions& opt, uint64_t seed, const std::vector<uint8_t>& masked,
                                KdaProblem* p) {
  TestRng rng(seed ^ 0x5eedd3ca7ull);
  const double lo = std::log(opt.decay_per_chunk_min), hi = std::log(opt.decay_per_chunk_max);
  const auto round = [p](double x) {
    return p->io_dtype == DType::kFP16 ? numeric::round_to<fp16_t>(float(x)) : numeric::round_to<bf16_t>(float(x));
  };
  for (int64_t n = 0; n < p->num_sequences(); ++n)
    for (int h = 0; h < p->H; ++h)
      for (int d = 0; d < p->K; ++d) {
        const double per_chunk = std::exp(rng.uniform(lo, hi));
        for (int64_t t = p->cu_seqlens[size_t(n)]; t < p->cu_seqlens[size_t(n) + 1]; ++t) {
          const size_t i = (size_t(t) * size_t(p->H) + size_t(h)) * size_t(p->K) + size_t(d);
          if (!masked[i]) p->g[i] = round(raw_gate_for_decay(*p, h, d, per_chunk / 64.0 * rng.uniform(0.5, 1.5)));
        }
      }
}

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
        value = opt.signed_qkv ? rng.normal() : rng.uniform();
        sum_sq += value * value;
      }
      double norm = opt.qk_l2norm_in_kernel ? 1.0 : std::max(std::sqrt(sum_sq), 1e-12);  // F.normalize's eps
      if (opt.tiny_row_fraction > 0.0 && opt.qk_l2norm_in_kernel && rng.uniform() < opt.tiny_row_fraction) norm = 1e4;
      for (int d = 0; d < K; ++d) (*x)[r * size_t(K) + size_t(d)] = round(row[size_t(d)] / norm);
    }
  }
  p.v.resize(rows * size_t(V));
  for (float& x : p.v) x = round(opt.signed_qkv ? rng.normal() : rng.uniform());

  p.g.resize(rows * size_t(K));
  std::vector<uint8_t> gate_masked(p.g.size(), 0);  // entries the FLA masks set (kept by the decay option below)
  for (size_t i = 0; i < p.g.size(); ++i) {
    const double z = rng.normal();
    const double mask = rng.uniform();
    double value = gate == GateKind::kPrecomputed  // logsigmoid(z) / normalizer, or the raw gate
                       ? (std::min(z, 0.0) - std::log1p(std::exp(-std::fabs(z)))) / double(opt.gate_logit_normalizer)
                       : z;
    if (mask < opt.zero_gate_fraction)
      value = 0.0;
    else if (mask < opt.zero_gate_fraction + opt.extreme_gate_fraction)
      value = opt.extreme_gate;
    gate_masked[i] = mask < opt.zero_gate_fraction + opt.extreme_gate_fraction;
    p.g[i] = round(value);
  }

  p.beta.resize(rows);
  for (float& x : p.beta) {
    const double sigmoid_of_rand = 1.0 / (1.0 + std::exp(-rng.uniform()));
    x = round(opt.beta_activation == BetaActivation::kNone ? sigmoid_of_rand : opt.beta_raw_scale * rng.normal());
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

  if (opt.decay_per_chunk_max > 0.0) set_gates_for_decay(opt, seed, gate_masked, &p);

  if (opt.with_initial_state) {
    p.initial_state.resize(size_t(p.num_sequences()) * size_t(H) * size_t(K) * size_t(V));
    for (float& x : p.initial_state) x = float(rng.normal());
  }
  return p;
}

}  // namespace kda::ref
