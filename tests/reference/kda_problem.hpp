// A KDA prefill problem held on the host in float (values already representable in the I/O dtype), shared by the
// CPU references and the GPU tests. Layouts are token-major and packed (B = 1), exactly as the kernels see them:
//   q, k, g: [T, H, K]   v, o: [T, H, V]   beta: [T, H]   A_log: [H]   dt_bias: [H*K]
//   initial_state / final_state: [N, H, K, V] (K-first), fp32.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kda/types.hpp"

namespace kda::ref {

struct KdaProblem {
  int64_t T = 0;
  int H = 1, K = 64, V = 64;
  std::vector<int64_t> cu_seqlens{0, 0};  // [N+1]

  DType io_dtype = DType::kBF16;  // precision that q/k/v/o and the low-precision intermediates are rounded to

  std::vector<float> q, k, v;  // raw inputs (before l2norm)
  std::vector<float> g;        // raw gate input ([T,H,K]); natural-log decay if gate == kPrecomputed
  std::vector<float> beta;     // raw beta ([T,H]); activated per beta_activation

  GateKind gate = GateKind::kPrecomputed;
  std::vector<float> A_log;    // [H]; empty = absent (allowed only with kLowerBound: then exp(A_log) = 1)
  std::vector<float> dt_bias;  // [H*K]; empty = absent
  float lower_bound = -5.0f;   // used by kLowerBound

  BetaActivation beta_activation = BetaActivation::kNone;
  bool qk_l2norm = false;
  float scale = 0.0f;  // 0 = K^-0.5

  std::vector<float> initial_state;  // [N,H,K,V]; empty = zero initial state
  bool want_final_state = true;

  // Chunked reference only: false makes every "round to io_dtype" step the identity, so the fp32 chunked path can
  // be checked against the float64 recurrence far below bf16 rounding (its identities are exact in exact arithmetic).
  bool round_intermediates = true;

  int64_t num_sequences() const { return int64_t(cu_seqlens.size()) - 1; }
  float effective_scale() const { return scale != 0.0f ? scale : 1.0f / std::sqrt(float(K)); }
};

struct KdaOutput {
  std::vector<float> o;            // [T,H,V]
  std::vector<float> final_state;  // [N,H,K,V] (empty unless want_final_state)
};

}  // namespace kda::ref
