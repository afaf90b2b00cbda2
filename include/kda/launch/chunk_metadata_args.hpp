// Chunk metadata as every launcher takes it: device cu_seqlens plus, optionally, the host builder's tables.
//
// With tables (chunk_indices, chunk_offsets and the host NT), grids are exact. Without them, the launcher derives the
// tables on the device into the caller's workspace (kernels/kda/chunk_metadata_device.hpp): nothing is read back,
// grids are sized by ceil(T/BT) + N, and blocks past the device-side NT exit at once. Either way no host sync.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kda/chunk_metadata.hpp"
#include "kda/detail/chunk_table.hpp"
#include "kda/chunk_metadata_device.hpp"
#include "kda/platform.hpp"
#include "kda/types.hpp"

namespace kda {

struct ChunkMetadataArgs {
  IndexSpan cu_seqlens;          // device [N+1]; required
  int64_t num_sequences = 0;     // N
  int64_t total_tokens = 0;      // T (= cu[N])
  IndexSpan chunk_indices;       // device [NT,2] from the host builder, or absent
  IndexSpan chunk_offsets;       // device [N+1] from the host builder, or absent
  int64_t num_chunks = -1;       // host NT matching the tables (required with them)
  // Optional device word where kernels OR in DeviceStatusBits for problems only the device can see (malformed
  // device cu_seqlens, tables that disagree with it, state indices past the pool, sequences longer than
  // max_sequence_tokens). Read it with
  // kda::read_device_status. chunk_kda_fwd points this at its own workspace slot and clears it on every call (the stage
  // launchers only OR into it: clearing is the caller's).
  uint32_t* device_status = nullptr;
  // Optional: a bound the caller knows on the host for every sequence's length (vLLM's max_query_len; the host
  // builder's DeviceChunkMetadata::max_sequence_tokens), 0 = unknown. With it at most 16 and chunks of 64,
  // chunk_kda_fwd runs its kernels for short sequences alone: a prepare kernel without the long-chunk path (six
  // blocks per SM instead of five) and the state stage without its partner kernel for long sequences or its ticket
  // form. A sequence longer than the bound is then not computed (its o rows and final state are left as they were)
  // and is reported on the device (kDeviceStatusSequenceOverBound); nothing is written out of bounds.
  int64_t max_sequence_tokens = 0;

  bool has_tables() const { return chunk_indices.data != nullptr || chunk_offsets.data != nullptr; }
};

namespace detail {

constexpr size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
constexpr size_t kWorkspaceAlignment = 256;

// Limits that keep every derived count and chunk id inside 32 bits (the device tables are int32).
constexpr int64_t kMaxSequences = int64_t(1) << 29;
constexpr int64_t kMaxTokens = (int64_t(1) << 31) - 1;

inline bool index_type_ok(IndexType t) { return t == IndexType::kInt32 || t == IndexType::kInt64; }

// check_pointers = false leaves out the null check of cu_seqlens, for size queries made before buffers exist.
inline Status validate_metadata(const ChunkMetadataArgs& m, int chunk_size, bool check_pointers = true) {
  if (check_pointers) KDA_REQUIRE(m.cu_seqlens.data != nullptr, "cu_seqlens: null");
  KDA_REQUIRE(index_type_ok(m.cu_seqlens.type), "cu_seqlens: unknown IndexType");
  KDA_REQUIRE(m.num_sequences >= 0, "num_sequences: negative");
  KDA_REQUIRE(m.num_sequences <= kMaxSequences, "num_sequences: more than 2^29 sequences");
  KDA_REQUIRE(m.total_tokens >= 0, "total_tokens: negative");
  KDA_REQUIRE(m.total_tokens <= kMaxTokens, "total_tokens: more than 2^31-1 tokens");
  KDA_REQUIRE(m.num_sequences >= 1 || m.total_tokens == 0, "num_sequences: 0 while total_tokens > 0");
  KDA_REQUIRE(is_supported_chunk_size(chunk_size), "chunk_size: must be 16, 32 or 64");
  KDA_REQUIRE(m.max_sequence_tokens >= 0, "max_sequence_tokens: negative (0 = unknown)");
  KDA_REQUIRE(m.max_sequence_tokens == 0 || m.max_sequence_tokens >= (m.total_tokens + m.num_sequences - 1) /
                                                                        (m.num_sequences > 0 ? m.num_sequences : 1),
              "max_sequence_tokens: smaller than total_tokens / num_sequences, so some sequence exceeds it");
  // Both terms are bounded above, so the sum cannot overflow.
  KDA_REQUIRE(max_num_chunks(m.total_tokens, m.num_sequences, chunk_size) < (int64_t(1) << 30),
              "total_tokens/num_sequences: too many chunks for 32-bit chunk ids");
  if (m.has_tables()) {
    KDA_REQUIRE(m.chunk_indices.data != nullptr, "chunk_indices: null while chunk_offsets is given (pass both)");
    KDA_REQUIRE(m.chunk_offsets.data != nullptr, "chunk_offsets: null while chunk_indices is given (pass both)");
    KDA_REQUIRE(index_type_ok(m.chunk_indices.type), "chunk_indices: unknown IndexType");
    KDA_REQUIRE(index_type_ok(m.chunk_offsets.type), "chunk_offsets: unknown IndexType");
    KDA_REQUIRE(m.num_chunks >= 0, "num_chunks: must be the host NT when chunk tables are given");
    KDA_REQUIRE(m.num_chunks <= max_num_chunks(m.total_tokens, m.num_sequences, chunk_size),
                "num_chunks: larger than ceil(T/BT)+N, inconsistent with total_tokens and num_sequences");
    KDA_REQUIRE(m.num_chunks >= num_chunks_of(m.total_tokens, chunk_size),
                "num_chunks: smaller than ceil(T/BT), too few chunks to cover total_tokens");
    KDA_REQUIRE(m.num_chunks <= m.total_tokens, "num_chunks: larger than total_tokens (every chunk holds a token)");
  }
  return Status();
}

// True when T, N and BT are within the limits validate_metadata enforces (so the sizes below cannot overflow).
inline bool metadata_sizes_ok(int64_t total_tokens, int64_t num_sequences, int chunk_size) {
  return total_tokens >= 0 && total_tokens <= kMaxTokens && num_sequences >= 0 && num_sequences <= kMaxSequences &&
         is_supported_chunk_size(chunk_size);
}

// Bytes of workspace the device derivation needs: offsets [N+1], NT, indices [NT_max,2] (int32). 0 when the caller
// passes tables, and 0 for sizes validate_metadata rejects (the launch then reports why).
inline size_t derived_metadata_bytes(const ChunkMetadataArgs& m, int chunk_size) {
  if (m.has_tables() || !metadata_sizes_ok(m.total_tokens, m.num_sequences, chunk_size)) return 0;
  const int64_t nt_max = max_num_chunks(m.total_tokens, m.num_sequences, chunk_size);
  return align_up(sizeof(int32_t) * size_t(m.num_sequences + 2), kWorkspaceAlignment) +
         align_up(sizeof(int32_t) * size_t(2 * nt_max), kWorkspaceAlignment);
}

// The tables a stage reads, and how many chunk blocks to launch.
struct ResolvedChunks {
  ChunkTable table;
  int64_t grid_chunks = 0;
};

// Uses the caller's tables, or derives them on the device into `workspace` (derived_metadata_bytes of it).
// clear_words (chunk_kda_fwd, whose status word reports on one call): that many 32-bit words from m.device_status on
// (its status word, then the state stage's item counter) are zeroed first, in stream order, by the derivation
// kernel itself when it runs (one launch fewer) and by a memset otherwise.
inline Status resolve_chunks(const ChunkMetadataArgs& m, int chunk_size, void* workspace, size_t workspace_bytes,
                             hipStream_t stream, ResolvedChunks* out, int clear_words = 0) {
  ChunkTable& t = out->table;
  t.cu_seqlens = m.cu_seqlens;
  t.num_sequences = m.num_sequences;
  t.total_tokens = m.total_tokens;
  t.device_status = m.device_status;
  if (m.device_status == nullptr) clear_words = 0;
  if (m.has_tables()) {
    if (clear_words > 0) {
      KDA_RETURN_IF_RUNTIME_ERROR(hipMemsetAsync(m.device_status, 0, sizeof(uint32_t) * clear_words, stream));
    }
    t.chunk_indices = m.chunk_indices;
    t.chunk_offsets = m.chunk_offsets;
    t.num_chunks_host = m.num_chunks;
    t.num_chunks_device = nullptr;
    out->grid_chunks = m.num_chunks;
    return Status();
  }
  const size_t need = derived_metadata_bytes(m, chunk_size);
  if (workspace_bytes < need) return Status(StatusCode::kWorkspaceTooSmall, "workspace: too small for the chunk tables");
  if (workspace == nullptr) return invalid_argument("workspace: null while chunk tables must be derived");
  const int64_t nt_max = max_num_chunks(m.total_tokens, m.num_sequences, chunk_size);
  auto* base = static_cast<char*>(workspace);
  auto* offsets = reinterpret_cast<int32_t*>(base);
  int32_t* nt = offsets + m.num_sequences + 1;
  auto* indices = reinterpret_cast<int32_t*>(base + align_up(sizeof(int32_t) * size_t(m.num_sequences + 2),
                                                            kWorkspaceAlignment));
  kernels::derive_chunk_tables_kernel<<<1, kernels::kOffsetsScanThreads, 0, stream>>>(t, chunk_size, nt_max, offsets,
                                                                                      nt, indices, clear_words);
  KDA_RETURN_IF_LAUNCH_ERROR();
  t.chunk_indices = IndexSpan{indices, IndexType::kInt32};
  t.chunk_offsets = IndexSpan{offsets, IndexType::kInt32};
  t.num_chunks_host = -1;
  t.num_chunks_device = nt;
  out->grid_chunks = nt_max;
  return Status();
}

// Calls f(E{}, std::integral_constant<int, BT>{}) for the run-time dtype and chunk size. Chunk size 16 exists for
// solve_tril alone (kWithChunk16); the other stages support 32 and 64 (FLA's two), which keeps the instantiations
// (and binaries) small.
template <bool kWithChunk16 = false, typename F>
Status dispatch_dtype_chunk(DType dtype, int chunk_size, F&& f) {
  auto with_bt = [&](auto e) -> Status {
    switch (chunk_size) {
      case 16:
        if constexpr (kWithChunk16) return f(e, std::integral_constant<int, 16>{});
        return unsupported("chunk_size: 16 is supported by solve_tril only; use 32 or 64");
      case 32: return f(e, std::integral_constant<int, 32>{});
      case 64: return f(e, std::integral_constant<int, 64>{});
      default: return unsupported("chunk_size: must be 16, 32 or 64");
    }
  };
  switch (dtype) {
    case DType::kBF16: return with_bt(bf16_t{});
    case DType::kFP16: return with_bt(fp16_t{});
  }
  return unsupported("dtype: must be bf16 or fp16");
}

inline bool is_supported_head_dim(int d) { return d == 64 || d == 128 || d == 256; }

// Whether K and V are both 64 or 128: the head dims whose operands fit the matrix-unit kernels' shared memory.
inline bool mma_head_dims(int K, int V) { return (K == 64 || K == 128) && (V == 64 || V == 128); }

// Calls f(std::integral_constant<int, K>{}, std::integral_constant<int, V>{}) when mma_head_dims(K, V) and returns
// true; else returns false.
template <typename F>
bool dispatch_mma_head_dims(int K, int V, F&& f) {
  using D64 = std::integral_constant<int, 64>;
  using D128 = std::integral_constant<int, 128>;
  if (K == 64 && V == 64) return f(D64{}, D64{}), true;
  if (K == 64 && V == 128) return f(D64{}, D128{}), true;
  if (K == 128 && V == 64) return f(D128{}, D64{}), true;
  if (K == 128 && V == 128) return f(D128{}, D128{}), true;
  return false;
}

}  // namespace detail

// Reads a device status word (see ChunkMetadataArgs::device_status) into *bits. This SYNCHRONISES: it waits for
// `stream` to finish. Call it off the hot path: after a failure, in a debug mode, or once per many steps.
inline Status read_device_status(const uint32_t* device_status, hipStream_t stream, uint32_t* bits) {
  KDA_REQUIRE(device_status != nullptr && bits != nullptr, "read_device_status: null pointer");
  KDA_RETURN_IF_RUNTIME_ERROR(hipMemcpyAsync(bits, device_status, sizeof(uint32_t), hipMemcpyDeviceToHost, stream));
  KDA_RETURN_IF_RUNTIME_ERROR(hipStreamSynchronize(stream));
  return Status();
}

// Public: derives chunk_offsets [N+1] (int32), NT and chunk_indices [NT_max,2] (int32) on the device into
// `workspace` (derived_chunk_metadata_bytes of it), without any host sync. The layout: offsets at byte 0, NT right
// after them (int32 at offsets + N + 1), indices at the next 256-byte boundary.
inline size_t derived_chunk_metadata_bytes(int64_t total_tokens, int64_t num_sequences, int chunk_size) {
  ChunkMetadataArgs m;
  m.total_tokens = total_tokens;
  m.num_sequences = num_sequences;
  return detail::derived_metadata_bytes(m, chunk_size);
}

}  // namespace kda
