// Device view of the varlen chunk tables (KDA_SPEC §2) and the per-chunk coordinates every stage needs.
//
// The tables come either from the host builder (NT known on the host, grids exact) or from the device derivation
// (NT only on the device: grids are sized by ceil(T/BT) + N and blocks past the device-side NT exit at once).
// Both feed the same code below, so the two modes give bit-identical results.
#pragma once

#include <cstdint>

#include "kda/detail/device_common.hpp"

namespace kda::detail {

// Bits of the device status word: problems only the device can see (the host cannot read device tables without a
// sync). Kernels clamp every index they derive from such data, set the bit, and carry on inside their bounds.
enum DeviceStatusBits : uint32_t {
  kDeviceStatusBadCuSeqlens = 1u,   // cu_seqlens decreasing, outside [0, T], cu[0] != 0 or cu[N] != T
  kDeviceStatusBadChunkTable = 2u,  // chunk_indices / chunk_offsets disagree with cu_seqlens
  kDeviceStatusBadStateIndex = 4u,  // a state_indices entry >= the pool size (treated as "no state")
  kDeviceStatusSequenceOverBound = 8u,  // a sequence longer than ChunkMetadataArgs::max_sequence_tokens (skipped)
};

struct ChunkTable {
  IndexSpan cu_seqlens;     // [N+1]
  IndexSpan chunk_indices;  // [NT,2] (n, c)
  IndexSpan chunk_offsets;  // [N+1]
  int64_t num_sequences = 0;
  int64_t num_chunks_host = -1;          // NT when known on the host, else -1
  const int32_t* num_chunks_device = nullptr;  // NT derived on the device, or null
  int64_t total_tokens = 0;                    // T: every token index is clamped below it
  uint32_t* device_status = nullptr;           // DeviceStatusBits are OR-ed in here; may be null

  __device__ int64_t num_chunks() const {
    return num_chunks_device != nullptr ? int64_t(*num_chunks_device) : num_chunks_host;
  }
  __device__ void report(uint32_t bits) const {
    if (device_status != nullptr) atomicOr(device_status, bits);
  }
  // Token range [bos, eos) of sequence n, clamped into [0, T]; a malformed cu_seqlens is reported.
  __device__ void sequence_range(int64_t n, int64_t* bos, int64_t* eos) const {
    clamp_range(n, load_index(cu_seqlens, n), load_index(cu_seqlens, n + 1), bos, eos);
  }
  // The same from cu_seqlens[n] = b and cu_seqlens[n + 1] = e already loaded.
  __device__ void clamp_range(int64_t n, int64_t b, int64_t e, int64_t* bos, int64_t* eos) const {
    const bool bad = b < 0 || e < b || e > total_tokens || (n == 0 && b != 0) ||
                     (n + 1 == num_sequences && e != total_tokens);
    if (bad) report(kDeviceStatusBadCuSeqlens);
    b = b < 0 ? 0 : (b > total_tokens ? total_tokens : b);
    e = e < b ? b : (e > total_tokens ? total_tokens : e);
    *bos = b;
    *eos = e;
  }
};

// Where one chunk lies in the packed token stream.
struct ChunkCoords {
  int64_t seq;      // sequence n
  int64_t index;    // chunk index c inside the sequence
  int64_t start;    // first token of the chunk
  int length;       // valid rows, 1..BT
};

// The (chunk, head) a block of a prepare kernel takes, on the grid detail::prepare_grid launches: the head is
// blockIdx.x, the chunk id spans y and z (y fastest), taken from the last back. Blocks start in index order, x
// fastest, so every head of a chunk starts together, and engines lay a batch out decodes first, then prefills
// (KDA_SPEC §5), so the prefills' full chunks, the longest blocks, start first for all heads and the short ones fill
// the multiprocessors at the end (see docs/performance.md, "Prepare grid order"). Chunk ids past the device's NT
// (derived tables, or the grid's rounding) exit at once.
__device__ inline int64_t block_chunk_id() {
  return int64_t(gridDim.y) * gridDim.z - 1 - (int64_t(blockIdx.z) * gridDim.y + blockIdx.y);
}
__device__ inline int block_head() { return int(blockIdx.x); }

// Looks up global chunk `g`; returns false when g is past NT (the block has nothing to do). Rows are clamped to
// the sequence and the sequence to [0, T], so a table that disagrees with cu_seqlens, or a malformed cu_seqlens,
// never sends a block outside its sequence or outside the tensors; such a chunk is reported and skipped.
template <int BT>
__device__ inline bool locate_chunk(const ChunkTable& table, int64_t g, ChunkCoords* out) {
  if (g >= table.num_chunks()) return false;
  const int64_t n = load_index(table.chunk_indices, 2 * g);
  const int64_t c = load_index(table.chunk_indices, 2 * g + 1);
  if (n < 0 || n >= table.num_sequences || c < 0) {
    table.report(kDeviceStatusBadChunkTable);
    return false;
  }
  int64_t bos, eos;
  table.sequence_range(n, &bos, &eos);
  const int64_t start = bos + c * BT;
  if (start >= eos) {
    table.report(kDeviceStatusBadChunkTable);
    return false;
  }
  out->seq = n;
  out->index = c;
  out->start = start;
  out->length = static_cast<int>(eos - start < BT ? eos - start : BT);
  return true;
}

}  // namespace kda::detail
