// Plain enums and small value types shared by the host API and the device code. Host-only, no GPU headers.
#pragma once

#include <cstdint>

namespace kda {

// Element type of q, k, v, o and of the low-precision intermediates (w, u, kg, h, v_new).
enum class DType : int { kBF16 = 0, kFP16 = 1 };

// Integer type of cu_seqlens, chunk_indices and chunk_offsets (vLLM uses int32, FLA's tests int64).
enum class IndexType : int { kInt32 = 0, kInt64 = 1 };

// Memory layout of one [K,V] state matrix. FLA stores K-first ([N,H,K,V]); vLLM stores V-first ([N,H,V,K]).
enum class StateLayout : int { kKFirst = 0, kVFirst = 1 };

// How the per-channel log-decay g is obtained from the raw gate input (KDA_SPEC §1.1).
enum class GateKind : int {
  kPrecomputed = 0,  // g is already the natural-log decay; only the chunk cumsum is applied
  kSoftplus = 1,     // g = -exp(A_log[h]) * softplus(raw + dt_bias)
  kLowerBound = 2,   // g = lower_bound * sigmoid(exp(A_log[h]) * (raw + dt_bias)); A_log optional
};

// What is applied to the raw beta input before use.
enum class BetaActivation : int {
  kNone = 0,           // beta is used as given
  kSigmoid = 1,        // beta = sigmoid(raw)
  kSigmoidTimesTwo = 2 // beta = 2 * sigmoid(raw) (allow_neg_eigval)
};

// Element type of inputs that may be fp32 or 16-bit (the raw gate g and raw beta).
enum class ScalarType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// A [T, H, D] token-major tensor view: element (t, h, d) is at data + t*token_stride + h*head_stride + d (strides in
// elements; the innermost dimension is contiguous). Lets q/k/v/g be views into a fused projection without copies.
struct TensorView {
  const void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};
struct MutableTensorView {
  void* data = nullptr;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// Contiguous [T, H, D] views.
inline TensorView contiguous_view(const void* data, int num_heads, int dim) {
  return TensorView{data, int64_t(num_heads) * dim, dim};
}
inline MutableTensorView contiguous_view(void* data, int num_heads, int dim) {
  return MutableTensorView{data, int64_t(num_heads) * dim, dim};
}

// A pointer to a table of integers that may be int32 or int64. Null `data` means "absent".
struct IndexSpan {
  const void* data = nullptr;
  IndexType type = IndexType::kInt32;
};

constexpr int dtype_size(DType t) { return t == DType::kBF16 || t == DType::kFP16 ? 2 : 0; }
constexpr int scalar_type_size(ScalarType t) { return t == ScalarType::kFloat32 ? 4 : 2; }
constexpr ScalarType scalar_type_of(DType t) { return t == DType::kBF16 ? ScalarType::kBFloat16 : ScalarType::kFloat16; }
constexpr int index_type_size(IndexType t) { return t == IndexType::kInt64 ? 8 : 4; }

}  // namespace kda
