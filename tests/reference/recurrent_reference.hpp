// Float64 token-by-token KDA recurrence (KDA_SPEC §4): the ground truth the chunked paths are measured against.
// Deliberately shares no code with the chunked reference (gate formulas included), so a slip in one cannot hide in
// the other.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kda_problem.hpp"

namespace kda::ref {

namespace recurrent_detail {

// The natural-log gate of KDA_SPEC §1.1 in double: x = g_raw + dt_bias[h*K+d] (dt_bias optional), then
// kPrecomputed: x;  kSoftplus: -exp(A_log[h]) softplus(x);  kLowerBound: lower_bound sigmoid(exp(A_log[h]) x).
// A_log absent means exp(A_log) = 1. softplus keeps FLA's threshold (x for x > 20), which is exact in double anyway.
inline double gate(const KdaProblem& p, int64_t t, int h, int d) {
  double x = p.g[(size_t(t) * size_t(p.H) + size_t(h)) * size_t(p.K) + size_t(d)];
  if (!p.dt_bias.empty()) x += double(p.dt_bias[size_t(h) * size_t(p.K) + size_t(d)]);
  const double decay_rate = p.A_log.empty() ? 1.0 : std::exp(double(p.A_log[size_t(h)]));
  switch (p.gate) {
    case GateKind::kPrecomputed:
      return x;
    case GateKind::kSoftplus:
      return -decay_rate * (x > 20.0 ? x : std::log1p(std::exp(x)));
    case GateKind::kLowerBound:
      return double(p.lower_bound) / (1.0 + std::exp(-decay_rate * x));
  }
  return x;
}

inline double activate_beta(double raw, BetaActivation act) {
  const double sigmoid = 1.0 / (1.0 + std::exp(-raw));
  return act == BetaActivation::kNone ? raw : act == BetaActivation::kSigmoid ? sigmoid : 2.0 * sigmoid;
}

// x / sqrt(sum x^2 + 1e-6) in place (KDA_SPEC §1 step 0).
inline void l2_normalise(std::vector<double>* x) {
  double sum_sq = 0.0;
  for (double v : *x) sum_sq += v * v;
  const double norm = std::sqrt(sum_sq + 1e-6);
  for (double& v : *x) v /= norm;
}

}  // namespace recurrent_detail

// Everything in double. Per sequence and head, S [K,V] starts at initial_state (or 0) and, for each token t:
//   (l2norm on) q,k <- x / sqrt(sum x^2 + 1e-6);  q *= scale;  gate g_t as in §1.1 with natural exp (no RCP_LN2);
//   S <- diag(exp(g_t)) S;  v' = v_t - S^T k_t;  v' *= beta_t (after activation);  S += k_t v'^T;  o_t = S^T q.
// Inputs are used exactly as stored in the problem (no rounding to the io dtype).
inline KdaOutput recurrent_kda_f64(const KdaProblem& p) {
  namespace rd = recurrent_detail;
  const int H = p.H, K = p.K, V = p.V;
  const size_t state_size = size_t(K) * size_t(V);
  const int64_t N = p.num_sequences();
  const double scale = p.effective_scale();  // the float value the kernels use, widened

  KdaOutput out;
  out.o.assign(size_t(p.T) * size_t(H) * size_t(V), 0.0f);
  if (p.want_final_state) out.final_state.assign(size_t(N) * size_t(H) * state_size, 0.0f);

  std::vector<double> S(state_size), q(static_cast<size_t>(K)), k(static_cast<size_t>(K));
  std::vector<double> v_delta(static_cast<size_t>(V)), o(static_cast<size_t>(V));
  for (int64_t n = 0; n < N; ++n) {
    for (int h = 0; h < H; ++h) {
      const size_t state_at = (size_t(n) * size_t(H) + size_t(h)) * state_size;
      for (size_t x = 0; x < state_size; ++x)
        S[x] = p.initial_state.empty() ? 0.0 : double(p.initial_state[state_at + x]);  // the state resets per sequence

      for (int64_t t = p.cu_seqlens[size_t(n)]; t < p.cu_seqlens[size_t(n) + 1]; ++t) {
        const size_t qk_at = (size_t(t) * size_t(H) + size_t(h)) * size_t(K);
        const size_t v_at = (size_t(t) * size_t(H) + size_t(h)) * size_t(V);
        for (int d = 0; d < K; ++d) {
          q[size_t(d)] = p.q[qk_at + size_t(d)];
          k[size_t(d)] = p.k[qk_at + size_t(d)];
        }
        if (p.qk_l2norm) {
          rd::l2_normalise(&q);
          rd::l2_normalise(&k);
        }
        for (double& x : q) x *= scale;

        for (int d = 0; d < K; ++d) {  // S <- diag(exp(g_t)) S
          const double decay = std::exp(rd::gate(p, t, h, d));
          for (int e = 0; e < V; ++e) S[size_t(d) * size_t(V) + size_t(e)] *= decay;
        }
        for (int e = 0; e < V; ++e) v_delta[size_t(e)] = p.v[v_at + size_t(e)];
        for (int d = 0; d < K; ++d)  // v' = v - S^T k
          for (int e = 0; e < V; ++e) v_delta[size_t(e)] -= S[size_t(d) * size_t(V) + size_t(e)] * k[size_t(d)];
        const double beta = rd::activate_beta(p.beta[size_t(t) * size_t(H) + size_t(h)], p.beta_activation);
        for (double& x : v_delta) x *= beta;
        for (int d = 0; d < K; ++d)  // S += k v'^T
          for (int e = 0; e < V; ++e) S[size_t(d) * size_t(V) + size_t(e)] += k[size_t(d)] * v_delta[size_t(e)];
        std::fill(o.begin(), o.end(), 0.0);
        for (int d = 0; d < K; ++d)  // o = S^T q with the updated S
          for (int e = 0; e < V; ++e) o[size_t(e)] += S[size_t(d) * size_t(V) + size_t(e)] * q[size_t(d)];
        for (int e = 0; e < V; ++e) out.o[v_at + size_t(e)] = float(o[size_t(e)]);
      }

      if (p.want_final_state)
        for (size_t x = 0; x < state_size; ++x) out.final_state[state_at + x] = float(S[x]);
    }
  }
  return out;
}

}  // namespace kda::ref
