// What every stage launcher shares: the problem geometry and the host-side checks on it.
#pragma once

#include "kda/launch/chunk_metadata_args.hpp"

namespace kda {

struct StageGeometry {
  ChunkMetadataArgs metadata;
  int num_heads = 0;
  int head_dim_k = 128;
  int head_dim_v = 128;
  int chunk_size = 64;
  DType dtype = DType::kBF16;
};

namespace detail {

constexpr int kMaxHeads = 4096;

inline Status validate_geometry(const StageGeometry& g) {
  KDA_RETURN_IF_ERROR(validate_metadata(g.metadata, g.chunk_size));
  KDA_REQUIRE(g.num_heads >= 1 && g.num_heads <= kMaxHeads, "num_heads: must be in [1, 4096]");
  if (!is_supported_head_dim(g.head_dim_k)) return unsupported("head_dim_k: must be 64, 128 or 256");
  if (!is_supported_head_dim(g.head_dim_v)) return unsupported("head_dim_v: must be 64, 128 or 256");
  if (g.dtype != DType::kBF16 && g.dtype != DType::kFP16) return unsupported("dtype: must be bf16 or fp16");
  return Status();
}

// A [T,H,D] view is usable when its data is present (or T == 0) and its strides do not make heads or tokens overlap.
inline bool view_ok(const TensorView& v, const StageGeometry& g, int dim) {
  if (g.metadata.total_tokens == 0) return true;
  return v.data != nullptr && v.head_stride >= dim && v.token_stride >= int64_t(g.num_heads - 1) * v.head_stride + dim;
}
inline bool view_ok(const MutableTensorView& v, const StageGeometry& g, int dim) {
  return view_ok(TensorView{v.data, v.token_stride, v.head_stride}, g, dim);
}
// For [T,H] tensors such as beta: head_stride >= 1.
inline bool scalar_view_ok(const TensorView& v, const StageGeometry& g) {
  if (g.metadata.total_tokens == 0) return true;
  return v.data != nullptr && v.head_stride >= 1 && v.token_stride >= int64_t(g.num_heads - 1) * v.head_stride + 1;
}

inline dim3 chunk_grid(int64_t grid_chunks, int num_heads, int z = 1) {
  return dim3(static_cast<unsigned>(grid_chunks), static_cast<unsigned>(num_heads), static_cast<unsigned>(z));
}

}  // namespace detail
}  // namespace kda
