// What every stage launcher shares: the problem geometry and the host-side checks on it.
#pragma once

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kda/launch/chunk_metadata_args.hpp"
#include "kda/tuning.hpp"

namespace kda {

struct StageGeometry {
  ChunkMetadataArgs metadata;
  int num_heads = 0;
  int head_dim_k = 128;
  int head_dim_v = 128;
  int chunk_size = 64;
  DType dtype = DType::kBF16;
};

// The scale the kernels apply to q k^T: the caller's, or K^-0.5 where it is 0.
inline float effective_scale(float scale, int head_dim_k) {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(float(head_dim_k));
}

namespace detail {

constexpr int kMaxHeads = 4096;

// A batch of short sequences (speculative drafts, decodes): its sequences average at most
// ActiveTuning::kShortBatchAverageTokens tokens. The host knows only T and N (the lengths are on the device), so such
// a batch is told by its average. For these batches the state launcher runs its kernel for sequences of at most 16
// tokens, and chunk_kda_fwd the fused prepare with its path for chunks of at most 16 rows.
inline bool short_sequence_batch(const ChunkMetadataArgs& m) {
  return m.num_sequences > 0 && m.total_tokens <= ActiveTuning::kShortBatchAverageTokens * m.num_sequences;
}
// A batch of long sequences: they average at least ActiveTuning::kLongBatchAverageChunks chunks. Its chunks are
// almost all full, so the fused prepare runs its kernel without the short path, whose long path spills less and
// runs faster (see docs/performance.md, "Prepare kernel with the short path").
inline bool long_sequence_batch(const ChunkMetadataArgs& m, int chunk_size) {
  return m.total_tokens >= ActiveTuning::kLongBatchAverageChunks * int64_t(chunk_size) * m.num_sequences;
}
// A batch whose every sequence the caller bounds at that many tokens (ChunkMetadataArgs::max_sequence_tokens): the
// kernels for short sequences run alone.
inline bool every_sequence_short(const ChunkMetadataArgs& m) {
  return m.max_sequence_tokens > 0 && m.max_sequence_tokens <= ActiveTuning::kShortBatchAverageTokens;
}

inline Status validate_geometry(const StageGeometry& g, bool check_pointers = true) {
  if (g.chunk_size == 16) return unsupported("chunk_size: 16 is supported by solve_tril only; use 32 or 64");
  KDA_RETURN_IF_ERROR(validate_metadata(g.metadata, g.chunk_size, check_pointers));
  KDA_REQUIRE(g.num_heads >= 1 && g.num_heads <= kMaxHeads, "num_heads: must be in [1, 4096]");
  if (!is_supported_head_dim(g.head_dim_k)) return unsupported("head_dim_k: must be 64, 128 or 256");
  if (!is_supported_head_dim(g.head_dim_v)) return unsupported("head_dim_v: must be 64, 128 or 256");
  if (g.dtype != DType::kBF16 && g.dtype != DType::kFP16) return unsupported("dtype: must be bf16 or fp16");
  return Status();
}

// Number of elements spanned by a [T,H,D] view (largest offset + 1), or -1 when a stride is negative or the span
// does not fit in int64 with room for the element size (the kernels index in int64).
inline int64_t view_span(int64_t T, int H, int D, int64_t token_stride, int64_t head_stride) {
  if (token_stride < 0 || head_stride < 0) return -1;
  const __int128 span = __int128(T - 1) * token_stride + __int128(H - 1) * head_stride + D;
  return span > (__int128(1) << 59) ? -1 : int64_t(span);
}

// A [T,H,D] view is usable when its data is present (or T == 0), its span fits in int64, and no two of its (t, h)
// rows overlap: heads inside a token (head_stride >= D, token_stride >= (H-1) head_stride + D) or tokens inside a
// head (token_stride >= D, head_stride >= (T-1) token_stride + D).
inline bool view_ok(const void* data, int64_t token_stride, int64_t head_stride, const StageGeometry& g, int dim) {
  const int64_t T = g.metadata.total_tokens, H = g.num_heads;
  if (T == 0) return true;
  if (data == nullptr || view_span(T, g.num_heads, dim, token_stride, head_stride) < 0) return false;
  const bool heads_in_token = head_stride >= dim && token_stride >= (H - 1) * head_stride + dim;
  const bool tokens_in_head = token_stride >= dim && head_stride >= (T - 1) * token_stride + dim;
  return heads_in_token || tokens_in_head || (T == 1 && H == 1);
}
inline bool view_ok(const TensorView& v, const StageGeometry& g, int dim) {
  return view_ok(v.data, v.token_stride, v.head_stride, g, dim);
}
inline bool view_ok(const MutableTensorView& v, const StageGeometry& g, int dim) {
  return view_ok(v.data, v.token_stride, v.head_stride, g, dim);
}
// For [T,H] tensors such as beta (D = 1).
inline bool scalar_view_ok(const TensorView& v, const StageGeometry& g) { return view_ok(v, g, 1); }

// Whether the byte ranges of two views (elements of elem_a / elem_b bytes) intersect. Call on views view_ok accepts.
inline bool views_overlap(const void* a, int64_t a_ts, int64_t a_hs, int a_dim, int elem_a, const void* b,
                          int64_t b_ts, int64_t b_hs, int b_dim, int elem_b, const StageGeometry& g) {
  if (g.metadata.total_tokens == 0 || a == nullptr || b == nullptr) return false;
  const auto begin_a = reinterpret_cast<uintptr_t>(a), begin_b = reinterpret_cast<uintptr_t>(b);
  const uintptr_t end_a = begin_a + uintptr_t(view_span(g.metadata.total_tokens, g.num_heads, a_dim, a_ts, a_hs)) * elem_a;
  const uintptr_t end_b = begin_b + uintptr_t(view_span(g.metadata.total_tokens, g.num_heads, b_dim, b_ts, b_hs)) * elem_b;
  return begin_a < end_b && begin_b < end_a;
}

// Whether a view of 16-bit elements can be read 8 elements (16 bytes) at a time: the matrix-unit kernels need it;
// other views take the scalar kernels of the same contract.
inline bool vector_aligned(const void* data, int64_t token_stride, int64_t head_stride) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && token_stride % 8 == 0 && head_stride % 8 == 0;
}
inline bool vector_aligned(const TensorView& v) { return vector_aligned(v.data, v.token_stride, v.head_stride); }
inline bool vector_aligned(const MutableTensorView& v) { return vector_aligned(v.data, v.token_stride, v.head_stride); }

// Whether every raw intermediate buffer (w, u, kg, G, A, Tinv, h, v_new) is 16-byte aligned: the kernels move them
// 16 bytes at a time. cudaMalloc/hipMalloc and the chunk_kda workspace carving give 256-byte alignment; null passes
// (the null checks are separate).
template <typename... Ptrs>
inline bool intermediates_aligned(const Ptrs*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % 16 == 0) && ...);
}

inline bool scalar_type_ok(ScalarType t) {
  return t == ScalarType::kFloat32 || t == ScalarType::kBFloat16 || t == ScalarType::kFloat16;
}
inline bool beta_activation_ok(BetaActivation a) {
  return a == BetaActivation::kNone || a == BetaActivation::kSigmoid || a == BetaActivation::kSigmoidTimesTwo;
}

inline dim3 chunk_grid(int64_t grid_chunks, int num_heads, int z = 1) {
  return dim3(static_cast<unsigned>(grid_chunks), static_cast<unsigned>(num_heads), static_cast<unsigned>(z));
}

// The prepare kernels' grid (read back by detail::block_chunk_id and block_head, kernels/kda/detail/chunk_table.hpp):
// the heads in x, so that all heads of a chunk start together, and the chunk ids over y, and z past y's limit.
// Chunk first, a batch's long prefill chunks start first on every head and the tail is short chunks (see
// docs/performance.md, "Prepare grid order").
inline dim3 prepare_grid(int64_t grid_chunks, int num_heads) {
  constexpr int64_t kMaxY = 65535;
  const int64_t z = grid_chunks > kMaxY ? (grid_chunks + kMaxY - 1) / kMaxY : 1;
  const int64_t y = (grid_chunks + z - 1) / z;
  return dim3(static_cast<unsigned>(num_heads), static_cast<unsigned>(y > 0 ? y : 1), static_cast<unsigned>(z));
}

// Lets kKernel launch with `bytes` of dynamic shared memory on the current device. NVIDIA wants an opt-in per function
// and device above 48 KiB; it is made on the first launch on each device, and later launches read one atomic, so the
// steady state makes no extra runtime call. The opt-in is not a stream operation, so a first launch inside a graph
// capture may make it (flash-attention does the same on every call). AMD gives a block its whole LDS (64 KiB on CDNA)
// without one.
template <auto kKernel>
inline Status allow_dynamic_shared(size_t bytes, size_t static_bytes = 0) {
#if defined(KDA_PLATFORM_CUDA)
  if (bytes + static_bytes <= 48 * 1024) return Status();
  static std::atomic<uint64_t> opted_in{0};  // bit d: done on device d (devices past 63 opt in every time)
  int device = 0;
  KDA_RETURN_IF_RUNTIME_ERROR(hipGetDevice(&device));
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (opted_in.load(std::memory_order_acquire) & bit) != 0) return Status();
  KDA_RETURN_IF_RUNTIME_ERROR(hipFuncSetAttribute(reinterpret_cast<const void*>(kKernel),
                                                  hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  opted_in.fetch_or(bit, std::memory_order_release);
#else
  (void)bytes;
#endif
  return Status();
}

#if defined(KDA_PLATFORM_CUDA)
// Launches kKernel(p) with programmatic stream serialization (NVIDIA): it may start once every block of the kernel
// ahead of it in the stream has called detail::allow_dependent_launch or exited, before that kernel has finished, so
// it must call detail::wait_for_prior_grid before it reads anything that kernel wrote.
template <auto kKernel, typename Params>
inline Status launch_programmatic(unsigned blocks, int threads, size_t shared_bytes, hipStream_t stream,
                                  const Params& p) {
  cudaLaunchAttribute overlap;
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = 1;
  KDA_RETURN_IF_RUNTIME_ERROR(cudaLaunchKernelEx(&config, kKernel, p));
  return Status();
}
#endif

// Blocks of kKernel (`threads` threads, `bytes` of dynamic shared memory) that the current device runs at once, for
// kernels whose blocks loop over their work (a grid-stride loop). Queried on the first launch on each device and
// read from one atomic after that, like allow_dynamic_shared (whose opt-in must come first).
template <auto kKernel>
inline Status resident_blocks(int threads, size_t bytes, int64_t* out) {
  static std::atomic<int64_t> cached[64] = {};  // per device; devices past 63 query every time
  int device = 0;
  KDA_RETURN_IF_RUNTIME_ERROR(hipGetDevice(&device));
  const bool cacheable = device >= 0 && device < 64;
  if (cacheable) {
    const int64_t known = cached[device].load(std::memory_order_acquire);
    if (known > 0) {
      *out = known;
      return Status();
    }
  }
  int per_sm = 0, sms = 0;
  KDA_RETURN_IF_RUNTIME_ERROR(hipOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, reinterpret_cast<const void*>(kKernel), threads, bytes));
  KDA_RETURN_IF_RUNTIME_ERROR(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device));
  const int64_t blocks = int64_t(per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
  if (cacheable) cached[device].store(blocks, std::memory_order_release);
  *out = blocks;
  return Status();
}

}  // namespace detail
}  // namespace kda
