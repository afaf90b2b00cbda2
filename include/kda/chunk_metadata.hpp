// Host-side chunk metadata builder (host-only: no GPU compiler or runtime needed).
//
// From CPU-resident cu_seqlens ([N+1], int32 or int64) and a chunk size BT in {16, 32, 64} it builds, exactly as
// KDA_SPEC.md §2 defines them:
//   chunk_indices [NT, 2]: row g = (n, c), sequence-major, c < ceil(len_n / BT); NT = sum_n ceil(len_n / BT).
//   chunk_offsets [N + 1]: [0, cumsum(ceil(len_n / BT))], ending at NT.
// Zero-length sequences may appear anywhere and own no chunk; unlike the legacy vLLM helper, they never shift the
// sequence ids of later chunks.
//
// Two-phase use, like rocPRIM/CUB: count_chunks() validates and returns NT, the caller sizes its buffers, then
// build_chunk_metadata() fills them. Nothing is written when a Status is not ok.
//
// Also here, all host-only:
//   - pack_chunk_metadata(): both tables in one host buffer, laid out for a single upload (kda/metadata_upload.hpp
//     adds the async copy);
//   - cu_seqlens for the batch kinds an engine runs (prefill only, decodes + prefills, speculative) and one-call
//     ChunkMetadata builders for each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <new>
#include <stdexcept>
#include <vector>

#include "kda/status.hpp"
#include "kda/types.hpp"

namespace kda {

// Chunk sizes the builder (and solve_tril) accept.
constexpr bool is_supported_chunk_size(int chunk_size) {
  return chunk_size == 16 || chunk_size == 32 || chunk_size == 64;
}

// Number of chunks of one sequence (length >= 0). Written without `length + chunk_size - 1` so that lengths near
// INT64_MAX do not overflow.
constexpr int64_t num_chunks_of(int64_t length, int chunk_size) {
  return length / chunk_size + (length % chunk_size != 0 ? 1 : 0);
}

// Host-known upper bound on NT used when the tables are derived on the device: ceil(T/BT) + N.
constexpr int64_t max_num_chunks(int64_t total_tokens, int64_t num_sequences, int chunk_size) {
  return num_chunks_of(total_tokens, chunk_size) + num_sequences;
}

namespace detail {

constexpr bool is_index_type(IndexType t) { return t == IndexType::kInt32 || t == IndexType::kInt64; }

constexpr int64_t index_type_max(IndexType t) {
  return t == IndexType::kInt64 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max();
}

inline void report_position(int64_t* bad_position, int64_t position) {
  if (bad_position != nullptr) *bad_position = position;
}

// Calls f with cu_seqlens cast to its element type.
template <typename F>
inline auto with_typed_cu(const void* cu_seqlens, IndexType cu_type, F&& f) {
  return cu_type == IndexType::kInt64 ? f(static_cast<const int64_t*>(cu_seqlens))
                                      : f(static_cast<const int32_t*>(cu_seqlens));
}

// The checks on cu_seqlens itself. Sums NT on the way, and the longest sequence into *longest (may be null); sets
// *bad_position to the first offending cu index. out_max is the largest value the output tables may hold (int64 max
// when there is no output type yet).
template <typename Cu>
inline Status scan_cu_seqlens(const Cu* cu, int64_t num_sequences, int chunk_size, int64_t total_tokens,
                              int64_t out_max, int64_t* num_chunks, int64_t* bad_position, int64_t* longest) {
  const int64_t n_seq = num_sequences;
  if (cu[0] != 0) {
    report_position(bad_position, 0);
    return invalid_argument("cu_seqlens[0] must be 0");
  }
  int64_t nt = 0;
  int64_t max_length = 0;
  for (int64_t n = 0; n < n_seq; ++n) {
    const int64_t bos = cu[n];
    const int64_t eos = cu[n + 1];
    if (eos < bos) {
      report_position(bad_position, n + 1);
      return invalid_argument("cu_seqlens is decreasing (must be non-decreasing)");
    }
    // bos >= 0 here (cu[0] == 0 and non-decreasing so far), so eos - bos cannot overflow and nt <= eos.
    nt += num_chunks_of(eos - bos, chunk_size);
    max_length = eos - bos > max_length ? eos - bos : max_length;
  }
  if (total_tokens >= 0 && cu[n_seq] != total_tokens) {
    report_position(bad_position, n_seq);
    return invalid_argument("cu_seqlens[N] does not equal total_tokens");
  }
  // cu rises from 0, so cu[N] = T is its largest value and NT <= T (every chunk holds a token): checking T covers
  // every token offset and every chunk count. An int32 table promises that all of them fit int32.
  if (cu[n_seq] > out_max) {
    int64_t first = n_seq;
    while (first > 0 && cu[first - 1] > out_max) --first;
    report_position(bad_position, first);
    return invalid_argument("cu_seqlens value (token offset, hence NT) does not fit out_type");
  }
  // Sequence ids go up to N - 1; N itself must fit so that engines can size grids over sequences in out_type.
  if (n_seq > out_max) {
    report_position(bad_position, -1);
    return invalid_argument("num_sequences does not fit out_type");
  }
  *num_chunks = nt;
  if (longest != nullptr) *longest = max_length;
  return Status::ok();
}

// All argument checks short of the output buffers; returns NT in *num_chunks and the longest sequence in *longest
// (may be null).
inline Status validate_chunk_request(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences,
                                     int chunk_size, int64_t total_tokens, IndexType out_type,
                                     int64_t* num_chunks, int64_t* bad_position, int64_t* longest = nullptr) {
  report_position(bad_position, -1);
  if (cu_seqlens == nullptr) return invalid_argument("cu_seqlens is null");
  if (num_sequences < 0) return invalid_argument("num_sequences is negative");
  if (!is_supported_chunk_size(chunk_size)) return invalid_argument("chunk_size must be 16, 32 or 64");
  if (total_tokens < -1) return invalid_argument("total_tokens is negative (pass -1 when unknown)");
  if (!is_index_type(cu_type)) return invalid_argument("cu_type is not int32 or int64");
  if (!is_index_type(out_type)) return invalid_argument("out_type is not int32 or int64");
  return with_typed_cu(cu_seqlens, cu_type, [&](const auto* cu) {
    return scan_cu_seqlens(cu, num_sequences, chunk_size, total_tokens, index_type_max(out_type), num_chunks,
                           bad_position, longest);
  });
}

// Writes both tables; the arguments must have passed validate_chunk_request.
template <typename Cu, typename Out>
inline void fill_chunk_tables(const Cu* cu, int64_t num_sequences, int chunk_size, Out* chunk_indices,
                              Out* chunk_offsets) {
  int64_t g = 0;  // global chunk id
  for (int64_t n = 0; n < num_sequences; ++n) {
    chunk_offsets[n] = static_cast<Out>(g);
    const int64_t chunks = num_chunks_of(int64_t(cu[n + 1]) - int64_t(cu[n]), chunk_size);
    for (int64_t c = 0; c < chunks; ++c, ++g) {
      chunk_indices[2 * g] = static_cast<Out>(n);
      chunk_indices[2 * g + 1] = static_cast<Out>(c);
    }
  }
  chunk_offsets[num_sequences] = static_cast<Out>(g);
}

inline void fill_chunk_tables(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                              IndexType out_type, void* chunk_indices, void* chunk_offsets) {
  with_typed_cu(cu_seqlens, cu_type, [&](const auto* cu) {
    if (out_type == IndexType::kInt64) {
      fill_chunk_tables(cu, num_sequences, chunk_size, static_cast<int64_t*>(chunk_indices),
                        static_cast<int64_t*>(chunk_offsets));
    } else {
      fill_chunk_tables(cu, num_sequences, chunk_size, static_cast<int32_t*>(chunk_indices),
                        static_cast<int32_t*>(chunk_offsets));
    }
    return 0;
  });
}

}  // namespace detail

// Validates cu_seqlens and returns NT in *num_chunks.
//   cu_seqlens: host array of num_sequences + 1 entries of type cu_type.
//   total_tokens: T if known (cu[N] must equal it), or -1 to accept any cu[N].
// Errors (StatusCode::kInvalidArgument) name the first bad position: null pointers, num_sequences < 0,
// chunk size not in {16,32,64}, total_tokens < -1, cu[0] != 0, cu decreasing, cu[N] != total_tokens, or (checked by
// build_chunk_metadata) a cu value (token offset; NT <= T follows) or N not representable in out_type. Each class has
// its own static message.
//
// The overload with bad_position (may be null) also reports where: the index into cu_seqlens of the first entry
// that breaks the rule (0 for cu[0] != 0, n+1 for cu[n+1] < cu[n], N for cu[N] != total_tokens, the first entry
// above the out_type range), or -1 when the error is not about one entry (and on success).
inline Status count_chunks(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                           int64_t total_tokens, int64_t* num_chunks, int64_t* bad_position) {
  detail::report_position(bad_position, -1);
  if (num_chunks == nullptr) return invalid_argument("num_chunks output is null");
  int64_t nt = 0;
  KDA_RETURN_IF_ERROR(detail::validate_chunk_request(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens,
                                                     IndexType::kInt64, &nt, bad_position));
  *num_chunks = nt;
  return Status::ok();
}

inline Status count_chunks(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                           int64_t total_tokens, int64_t* num_chunks) {
  return count_chunks(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens, num_chunks, nullptr);
}

// The longest sequence of the batch in tokens (0 when every sequence is empty) in *max_sequence_tokens: the bound to
// pass as ChunkMetadataArgs::max_sequence_tokens (engines often know it already, e.g. vLLM's max_query_len;
// upload_chunk_metadata returns it too). Validates cu_seqlens like count_chunks; bad_position (may be null) as there.
inline Status longest_sequence(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int64_t total_tokens,
                               int64_t* max_sequence_tokens, int64_t* bad_position = nullptr) {
  detail::report_position(bad_position, -1);
  if (max_sequence_tokens == nullptr) return invalid_argument("max_sequence_tokens output is null");
  int64_t nt = 0, longest = 0;
  // The chunk size only enters NT, which is not returned here.
  KDA_RETURN_IF_ERROR(detail::validate_chunk_request(cu_seqlens, cu_type, num_sequences, 64, total_tokens,
                                                     IndexType::kInt64, &nt, bad_position, &longest));
  *max_sequence_tokens = longest;
  return Status::ok();
}

// Fills chunk_indices ([NT,2] of out_type, capacity in rows) and chunk_offsets ([N+1] of out_type).
// Validates like count_chunks, plus: capacity_rows >= NT, and all values fit out_type. Writes nothing on error.
// chunk_indices may be null only with capacity_rows == 0 (a batch of empty sequences).
inline Status build_chunk_metadata(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                                   int64_t total_tokens, IndexType out_type, void* chunk_indices,
                                   int64_t capacity_rows, void* chunk_offsets, int64_t* num_chunks,
                                   int64_t* bad_position) {
  detail::report_position(bad_position, -1);
  if (num_chunks == nullptr) return invalid_argument("num_chunks output is null");
  if (chunk_offsets == nullptr) return invalid_argument("chunk_offsets output is null");
  if (chunk_indices == nullptr && capacity_rows != 0) {
    return invalid_argument("chunk_indices output is null (allowed only with capacity_rows == 0)");
  }
  int64_t nt = 0;
  KDA_RETURN_IF_ERROR(detail::validate_chunk_request(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens,
                                                     out_type, &nt, bad_position));
  if (capacity_rows < nt) return invalid_argument("capacity_rows is smaller than NT (chunk_indices too small)");
  detail::fill_chunk_tables(cu_seqlens, cu_type, num_sequences, chunk_size, out_type, chunk_indices, chunk_offsets);
  *num_chunks = nt;
  return Status::ok();
}

inline Status build_chunk_metadata(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                                   int64_t total_tokens, IndexType out_type, void* chunk_indices,
                                   int64_t capacity_rows, void* chunk_offsets, int64_t* num_chunks) {
  return build_chunk_metadata(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens, out_type, chunk_indices,
                              capacity_rows, chunk_offsets, num_chunks, nullptr);
}

// ---- Packed layout for a single upload -----------------------------------------------------------------------------
// One buffer holds chunk_indices [NT,2] at byte 0, then chunk_offsets [N+1] at chunk_offsets_byte_offset(), both of
// the index type. The offsets start is 8-byte aligned (a row is 2 elements of >= 4 bytes, so NT rows always end on a
// multiple of 8; the rounding only states it), so int64 tables load aligned when the buffer itself is.

// Byte offset of chunk_offsets inside the packed buffer.
constexpr size_t chunk_offsets_byte_offset(int64_t num_chunks, IndexType type) {
  return num_chunks <= 0 ? 0 : (size_t(num_chunks) * 2 * size_t(index_type_size(type)) + 7) / 8 * 8;
}

// Bytes of the packed buffer (0 for negative arguments, which no valid batch has).
constexpr size_t chunk_metadata_bytes(int64_t num_chunks, int64_t num_sequences, IndexType type) {
  return num_chunks < 0 || num_sequences < 0
             ? 0
             : chunk_offsets_byte_offset(num_chunks, type) + size_t(num_sequences + 1) * size_t(index_type_size(type));
}

// Builds both tables straight into `staging` in the packed layout. *num_chunks = NT, *packed_bytes (may be null) =
// chunk_metadata_bytes(NT, N, out_type). Errors as build_chunk_metadata, plus a null or not 8-byte-aligned staging
// buffer and staging_bytes < chunk_metadata_bytes(NT, N, out_type). Writes nothing on error.
inline Status pack_chunk_metadata(const void* cu_seqlens, IndexType cu_type, int64_t num_sequences, int chunk_size,
                                  int64_t total_tokens, IndexType out_type, void* staging, size_t staging_bytes,
                                  int64_t* num_chunks, size_t* packed_bytes) {
  if (num_chunks == nullptr) return invalid_argument("num_chunks output is null");
  if (staging == nullptr) return invalid_argument("staging buffer is null");
  if (reinterpret_cast<std::uintptr_t>(staging) % 8 != 0) return invalid_argument("staging buffer is not 8-byte aligned");
  int64_t nt = 0;
  KDA_RETURN_IF_ERROR(detail::validate_chunk_request(cu_seqlens, cu_type, num_sequences, chunk_size, total_tokens,
                                                     out_type, &nt, nullptr));
  const size_t bytes = chunk_metadata_bytes(nt, num_sequences, out_type);
  if (staging_bytes < bytes) return invalid_argument("staging_bytes is smaller than chunk_metadata_bytes()");
  char* base = static_cast<char*>(staging);
  detail::fill_chunk_tables(cu_seqlens, cu_type, num_sequences, chunk_size, out_type, base,
                            base + chunk_offsets_byte_offset(nt, out_type));
  *num_chunks = nt;
  if (packed_bytes != nullptr) *packed_bytes = bytes;
  return Status::ok();
}

// ---- Convenience holder --------------------------------------------------------------------------------------------

// Convenience holder for engines and tests that are happy to allocate on the host.
struct ChunkMetadata {
  IndexType type = IndexType::kInt32;
  int chunk_size = 64;
  int64_t num_sequences = 0;
  int64_t num_chunks = 0;               // NT
  std::vector<int64_t> chunk_indices;   // [NT*2], (n, c) pairs, widened to int64 for inspection
  std::vector<int64_t> chunk_offsets;   // [N+1]
};

namespace detail {
// Runs f (which allocates host vectors) and turns an allocation failure into a Status: the builders never throw
// through the Status API.
template <typename F>
Status catching_host_allocation(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return invalid_argument("batch too large: host allocation failed");
  } catch (const std::length_error&) {
    return invalid_argument("batch too large: host allocation failed");
  }
}
}  // namespace detail

// Builds a ChunkMetadata from int64 cu_seqlens (the common host form). out_type is the type the tables are meant to
// be uploaded as: every value is checked to fit it, and it is recorded in out->type. *out is untouched on error.
inline Status build_chunk_metadata(const std::vector<int64_t>& cu_seqlens, int chunk_size, IndexType out_type,
                                   ChunkMetadata* out) {
  if (out == nullptr) return invalid_argument("ChunkMetadata output is null");
  if (cu_seqlens.empty()) return invalid_argument("cu_seqlens is empty (needs N + 1 >= 1 entries)");
  const int64_t n_seq = int64_t(cu_seqlens.size()) - 1;
  int64_t nt = 0;
  KDA_RETURN_IF_ERROR(detail::validate_chunk_request(cu_seqlens.data(), IndexType::kInt64, n_seq, chunk_size, -1,
                                                     out_type, &nt, nullptr));
  return detail::catching_host_allocation([&]() -> Status {
    ChunkMetadata meta;
    meta.type = out_type;
    meta.chunk_size = chunk_size;
    meta.num_sequences = n_seq;
    meta.num_chunks = nt;
    meta.chunk_indices.resize(size_t(nt) * 2);
    meta.chunk_offsets.resize(size_t(n_seq) + 1);
    detail::fill_chunk_tables(cu_seqlens.data(), n_seq, chunk_size, meta.chunk_indices.data(),
                              meta.chunk_offsets.data());
    *out = std::move(meta);
    return Status::ok();
  });
}

// As above with int32 tables (vLLM's type and ChunkMetadata's default).
inline Status build_chunk_metadata(const std::vector<int64_t>& cu_seqlens, int chunk_size, ChunkMetadata* out) {
  return build_chunk_metadata(cu_seqlens, chunk_size, IndexType::kInt32, out);
}

// ---- cu_seqlens of the batch kinds an engine runs ------------------------------------------------------------------
// How vLLM's metadata maps onto these: query_start_loc_cpu ([num_reqs + 1], int32, CPU) is already a cu_seqlens, so
// an engine that has it passes it to count_chunks / build_chunk_metadata directly (cu_type kInt32) and needs none of
// the helpers below. They rebuild the same arrays from per-request lengths, for tests and for engines that keep
// lengths:
//   - a non-spec batch, reordered decode-first, is make_decode_prefill_cu_seqlens(num_decodes, prefill lengths) ==
//     query_start_loc_cpu[:num_reqs + 1]. This whole-batch table is what a KDA layer called with
//     cu_seqlens = non_spec_query_start_loc needs (KDA_SPEC §3);
//   - the decode-peeled slice the GDN builder stores (prefill_qsl_cpu = qsl_cpu[num_decodes:] - num_decode_tokens)
//     is make_prefill_cu_seqlens(prefill lengths). It does not describe the whole batch when num_decodes > 0;
//   - a speculative verification step of N requests with k = num_speculative_tokens + 1 tokens each is
//     make_spec_cu_seqlens(N, k) = [0, k, 2k, ..., Nk].
// Each leaves *cu untouched on error.

// Prefill-only batch: cu = [0, cumsum(lengths)]. Zero lengths are allowed; negative ones are an error.
inline Status make_prefill_cu_seqlens(const std::vector<int64_t>& lengths, std::vector<int64_t>* cu) {
  if (cu == nullptr) return invalid_argument("cu_seqlens output is null");
  return detail::catching_host_allocation([&]() -> Status {
    std::vector<int64_t> result(lengths.size() + 1, 0);
    for (size_t n = 0; n < lengths.size(); ++n) {
      if (lengths[n] < 0) return invalid_argument("sequence length is negative");
      if (lengths[n] > std::numeric_limits<int64_t>::max() - result[n]) {
        return invalid_argument("sum of sequence lengths overflows int64");
      }
      result[n + 1] = result[n] + lengths[n];
    }
    *cu = std::move(result);
    return Status::ok();
  });
}

// vLLM non-spec batch: num_decodes 1-token decode sequences first, then the prefills, all chunked together. Each
// decode is its own sequence and owns its own (1-token) chunk: cu = [0, 1, ..., num_decodes, num_decodes +
// cumsum(prefill_lengths)].
inline Status make_decode_prefill_cu_seqlens(int64_t num_decodes, const std::vector<int64_t>& prefill_lengths,
                                             std::vector<int64_t>* cu) {
  if (cu == nullptr) return invalid_argument("cu_seqlens output is null");
  if (num_decodes < 0) return invalid_argument("num_decodes is negative");
  return detail::catching_host_allocation([&]() -> Status {
    std::vector<int64_t> lengths(size_t(num_decodes), 1);
    lengths.insert(lengths.end(), prefill_lengths.begin(), prefill_lengths.end());
    return make_prefill_cu_seqlens(lengths, cu);
  });
}

// Speculative batch: num_sequences equal sequences of tokens_per_sequence tokens: cu = [0, k, 2k, ..., N*k].
inline Status make_spec_cu_seqlens(int64_t num_sequences, int64_t tokens_per_sequence, std::vector<int64_t>* cu) {
  if (cu == nullptr) return invalid_argument("cu_seqlens output is null");
  if (num_sequences < 0) return invalid_argument("num_sequences is negative");
  if (tokens_per_sequence < 0) return invalid_argument("tokens_per_sequence is negative");
  if (tokens_per_sequence > 0 && num_sequences > std::numeric_limits<int64_t>::max() / tokens_per_sequence) {
    return invalid_argument("num_sequences * tokens_per_sequence overflows int64");
  }
  return detail::catching_host_allocation([&]() -> Status {
    std::vector<int64_t> result(size_t(num_sequences) + 1);
    for (int64_t n = 0; n <= num_sequences; ++n) result[size_t(n)] = n * tokens_per_sequence;
    *cu = std::move(result);
    return Status::ok();
  });
}

// One-call builders: the cu_seqlens of a batch kind, then its ChunkMetadata. *out is untouched on error.
inline Status build_prefill_chunk_metadata(const std::vector<int64_t>& lengths, int chunk_size, IndexType out_type,
                                           ChunkMetadata* out) {
  std::vector<int64_t> cu;
  KDA_RETURN_IF_ERROR(make_prefill_cu_seqlens(lengths, &cu));
  return build_chunk_metadata(cu, chunk_size, out_type, out);
}

inline Status build_decode_prefill_chunk_metadata(int64_t num_decodes, const std::vector<int64_t>& prefill_lengths,
                                                  int chunk_size, IndexType out_type, ChunkMetadata* out) {
  std::vector<int64_t> cu;
  KDA_RETURN_IF_ERROR(make_decode_prefill_cu_seqlens(num_decodes, prefill_lengths, &cu));
  return build_chunk_metadata(cu, chunk_size, out_type, out);
}

inline Status build_spec_chunk_metadata(int64_t num_sequences, int64_t tokens_per_sequence, int chunk_size,
                                        IndexType out_type, ChunkMetadata* out) {
  std::vector<int64_t> cu;
  KDA_RETURN_IF_ERROR(make_spec_cu_seqlens(num_sequences, tokens_per_sequence, &cu));
  return build_chunk_metadata(cu, chunk_size, out_type, out);
}

}  // namespace kda
