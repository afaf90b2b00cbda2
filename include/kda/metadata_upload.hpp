// Upload of host-built chunk metadata (DESIGN.md, "The two ways to get chunk metadata", way 1).
//
// From CPU cu_seqlens it builds chunk_indices and chunk_offsets straight into a caller-provided pinned staging
// buffer, packed as pack_chunk_metadata() lays them out (indices [NT,2] at byte 0, offsets [N+1] after them, 8-byte
// aligned), and copies them with ONE hipMemcpyAsync into a caller-provided device buffer on the caller's stream.
// It never synchronises and never allocates, so it is graph-capture safe; NT comes back on the host, so grids are
// exact.
//
// The staging buffer must stay untouched until the copy has completed on the stream (record an event after this
// call and wait on it before reusing the buffer), as with any async copy from pinned memory. Under graph capture the
// copy becomes a memcpy node that re-reads the staging buffer at every replay: pack new metadata into it (with
// pack_chunk_metadata) before each replay, or keep it constant.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kda/chunk_metadata.hpp"
#include "kda/platform.hpp"
#include "kda/status.hpp"
#include "kda/types.hpp"

namespace kda {

// Where the uploaded tables live on the device: ready to pass as a launcher's optional metadata with its host NT.
struct DeviceChunkMetadata {
  IndexSpan chunk_indices;  // [NT, 2] at the device buffer's start
  IndexSpan chunk_offsets;  // [N + 1] at start + chunk_offsets_byte_offset(NT, type)
  int64_t num_chunks = 0;   // NT, known on the host
  size_t bytes = 0;         // chunk_metadata_bytes(NT, N, type): what the copy moved
  int64_t max_sequence_tokens = 0;  // the longest sequence: pass it as ChunkMetadataArgs::max_sequence_tokens
};

// Builds the tables from host cu_seqlens ([N+1] of cu_type) into pinned_staging and enqueues one H2D copy of
// chunk_metadata_bytes(NT, N, out_type) bytes to device_buffer on `stream`.
//   total_tokens: T if known (cu[N] must equal it), or -1.
//   pinned_staging / staging_bytes: page-locked host memory (hipHostMalloc), 8-byte aligned.
//   device_buffer / device_bytes: device memory, 8-byte aligned, so that int64 tables load aligned.
// Size the buffers with count_chunks() then chunk_metadata_bytes(), or with the upper bound
// chunk_metadata_bytes(max_num_chunks(T, N, BT), N, out_type) to size them once per T.
// Errors: those of build_chunk_metadata, null or misaligned buffers, a buffer smaller than chunk_metadata_bytes()
// (kInvalidArgument, before anything is written or enqueued), or the runtime's error from the copy (kRuntimeError).
// *out is written only on success.
inline Status upload_chunk_metadata(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                                    int64_t total_tokens, IndexType out_type, void* pinned_staging,
                                    size_t staging_bytes, void* device_buffer, size_t device_bytes,
                                    hipStream_t stream, DeviceChunkMetadata* out) {
  if (out == nullptr) return invalid_argument("DeviceChunkMetadata output is null");
  if (device_buffer == nullptr) return invalid_argument("device_buffer is null");
  if (reinterpret_cast<std::uintptr_t>(device_buffer) % 8 != 0) {
    return invalid_argument("device_buffer is not 8-byte aligned");
  }
  // The device size check needs NT and must come before pack writes the staging buffer. pack validates again
  // (O(N), microseconds), which keeps it the one place that writes the staging buffer.
  int64_t nt = 0, longest = 0;
  KDA_RETURN_IF_ERROR(detail::validate_chunk_request(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens,
                                                     out_type, &nt, nullptr, &longest));
  const size_t bytes = chunk_metadata_bytes(nt, num_sequences, out_type);
  if (device_bytes < bytes) return invalid_argument("device_bytes is smaller than chunk_metadata_bytes()");

  int64_t packed_nt = 0;
  size_t packed_bytes = 0;
  KDA_RETURN_IF_ERROR(pack_chunk_metadata(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens, out_type,
                                          pinned_staging, staging_bytes, &packed_nt, &packed_bytes));
  KDA_RETURN_IF_RUNTIME_ERROR(
      hipMemcpyAsync(device_buffer, pinned_staging, packed_bytes, hipMemcpyHostToDevice, stream));

  char* base = static_cast<char*>(device_buffer);
  DeviceChunkMetadata result;
  result.chunk_indices = IndexSpan{base, out_type};
  result.chunk_offsets = IndexSpan{base + chunk_offsets_byte_offset(packed_nt, out_type), out_type};
  result.num_chunks = packed_nt;
  result.bytes = packed_bytes;
  result.max_sequence_tokens = longest;  // from the validating scan above
  *out = result;
  return Status::ok();
}

}  // namespace kda
