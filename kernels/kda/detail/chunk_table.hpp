// Device view of the varlen chunk tables (KDA_SPEC §2) and the per-chunk coordinates every stage needs.
//
// The tables come either from the host builder (NT known on the host, grids exact) or from the device derivation
// (NT only on the device: grids are sized by ceil(T/BT) + N and blocks past the device-side NT exit at once).
// Both feed the same code below, so the two modes give bit-identical results.
#pragma once

#include <cstdint>

#include "kda/detail/device_common.hpp"

namespace kda::detail {

struct ChunkTable {
  IndexSpan cu_seqlens;     // [N+1]
  IndexSpan chunk_indices;  // [NT,2] (n, c)
  IndexSpan chunk_offsets;  // [N+1]
  int64_t num_sequences = 0;
  int64_t num_chunks_host = -1;          // NT when known on the host, else -1
  const int32_t* num_chunks_device = nullptr;  // NT derived on the device, or null

  __device__ int64_t num_chunks() const {
    return num_chunks_device != nullptr ? int64_t(*num_chunks_device) : num_chunks_host;
  }
};

// Where one chunk lies in the packed token stream.
struct ChunkCoords {
  int64_t seq;      // sequence n
  int64_t index;    // chunk index c inside the sequence
  int64_t start;    // first token of the chunk
  int length;       // valid rows, 1..BT
};

// Looks up global chunk `g`; returns false when g is past NT (the block has nothing to do). Rows are clamped to
// the sequence so a table that disagrees with cu_seqlens never sends a block outside its sequence.
template <int BT>
__device__ inline bool locate_chunk(const ChunkTable& table, int64_t g, ChunkCoords* out) {
  if (g >= table.num_chunks()) return false;
  const int64_t n = load_index(table.chunk_indices, 2 * g);
  const int64_t c = load_index(table.chunk_indices, 2 * g + 1);
  if (n < 0 || n >= table.num_sequences || c < 0) return false;
  const int64_t bos = load_index(table.cu_seqlens, n);
  const int64_t eos = load_index(table.cu_seqlens, n + 1);
  const int64_t start = bos + c * BT;
  if (start >= eos) return false;
  out->seq = n;
  out->index = c;
  out->start = start;
  out->length = static_cast<int>(eos - start < BT ? eos - start : BT);
  return true;
}

}  // namespace kda::detail
