// Device-side building blocks shared by every stage: index-table loads, element loads/stores, gate math.
#pragma once

#include <cstdint>

#include "kda/numeric.hpp"
#include "kda/platform.hpp"
#include "kda/types.hpp"

namespace kda::detail {

// Reads entry i of an int32 or int64 table.
__device__ inline int64_t load_index(IndexSpan table, int64_t i) {
  return table.type == IndexType::kInt64 ? static_cast<const int64_t*>(table.data)[i]
                                         : static_cast<const int32_t*>(table.data)[i];
}

// Loads element (t, h, d) of a view of 16-bit elements of type E as fp32.
template <typename E>
__device__ inline float load_elem(TensorView view, int64_t t, int h, int d) {
  const E* p = static_cast<const E*>(view.data);
  return numeric::to_float(p[t * view.token_stride + int64_t(h) * view.head_stride + d]);
}

// Loads element (t, h, d) of a view whose element type is only known at run time (raw gate, raw beta).
__device__ inline float load_scalar(TensorView view, ScalarType type, int64_t t, int h, int d) {
  const int64_t off = t * view.token_stride + int64_t(h) * view.head_stride + d;
  switch (type) {
    case ScalarType::kFloat32: return static_cast<const float*>(view.data)[off];
    case ScalarType::kBFloat16: return numeric::bf16_to_float(static_cast<const uint16_t*>(view.data)[off]);
    default: return numeric::fp16_to_float(static_cast<const uint16_t*>(view.data)[off]);
  }
}

// Rounds v to E and stores it at (t, h, d) of a mutable view.
template <typename E>
__device__ inline void store_elem(MutableTensorView view, int64_t t, int h, int d, float v) {
  E* p = static_cast<E*>(view.data);
  p[t * view.token_stride + int64_t(h) * view.head_stride + d] = numeric::from_float<E>(v);
}

__device__ inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// softplus with FLA's threshold: x for x > 20, else log(1 + e^x). Never overflows.
__device__ inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The activated beta used by Akk and w/u: raw, sigmoid(raw) or 2*sigmoid(raw).
__device__ inline float activate_beta(float raw, BetaActivation act) {
  switch (act) {
    case BetaActivation::kSigmoid: return sigmoid(raw);
    case BetaActivation::kSigmoidTimesTwo: return 2.0f * sigmoid(raw);
    default: return raw;
  }
}

// Per-element natural-log gate of KDA_SPEC §1.1 from x = raw + dt_bias.
//   a_log_exp = exp(A_log[h]) (1 when A_log is absent, lower-bound gate only).
__device__ inline float gate_value(float x, GateKind kind, float a_log_exp, float lower_bound) {
  switch (kind) {
    case GateKind::kSoftplus: return -a_log_exp * softplus(x);
    case GateKind::kLowerBound: return lower_bound * sigmoid(a_log_exp * x);
    default: return x;
  }
}

}  // namespace kda::detail
