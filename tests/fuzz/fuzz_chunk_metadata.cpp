// libFuzzer target: the host chunk-metadata builder (include/kda/chunk_metadata.hpp) on hostile cu_seqlens.
//
// Calls count_chunks, build_chunk_metadata (raw-pointer form, both cu and output index types, with and without
// bad_position), pack_chunk_metadata, the ChunkMetadata vector builder and the batch-kind helpers
// (make_prefill/make_decode_prefill/make_spec_cu_seqlens and their one-call builders), and checks against an
// independent brute-force model:
//   - ok iff the model says the request is valid; on ok NT equals the brute-force count and the tables equal a
//     brute-force walk over each sequence's chunks;
//   - nothing is written outside the tables (guard sentinels before, after, and between NT and the capacity);
//   - on error every output is untouched and bad_position names the documented entry.
// Any violation traps, so libFuzzer stores the input as a reproducer. Build and run: tests/fuzz/README.md.
//
// Input layout (little-endian, zeros past the end; tests/fuzz/make_seeds.py writes seeds in this format):
//   u8  flags     bits 0-1 chunk size: 0->16, 1->32, 2->64, 3->raw i32 from the stream
//                 bit 2 cu_type int64 (else int32)   bit 3 out_type int64 (else int32)
//                 bit 4 cu_type is an out-of-range enum value   bit 5 out_type is an out-of-range enum value
//                 bit 6 cu_seqlens pointer is null  bit 7 num_sequences is negative (-1 - next u8)
//   u16 N         number of sequences, modulo kMaxSequences + 1
//   u8  T mode    0: -1 (unknown)  1: cu[N]  2: cu[N] + i8 delta  3: raw i64  (then the delta / raw value)
//   u8  capacity  low 3 bits: 0: NT  1: NT - 1 - u8  2: NT + u8  3, 6, 7: raw i64  4: null chunk_indices,
//                 capacity 0  5: null chunk_indices, raw i64 capacity;  bit 3: null chunk_offsets;
//                 bit 4: null num_chunks;  bit 5: misaligned staging for pack_chunk_metadata;
//                 bits 6-7: staging size: exact, exact - 1..8 (u8), exact + u8, raw u64
//   then cu[0] (a byte; with its top bit set, a cu entry follows as below; else cu[0] = 0), then N cu entries, each
//   a kind byte + payload (next_cu_value), then the capacity payload, the staging-size payload, and the
//   batch-helper section (fuzz_batch_helpers). Payloads that depend on NT are read only where NT allows them.
#include "kda/chunk_metadata.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "fuzz_input.hpp"

namespace {

using kda::IndexType;
using kda::Status;
using kda::StatusCode;
using kda_fuzz::Input;
using kda_fuzz::tolerate;

constexpr int64_t kMaxSequences = 2048;
constexpr int64_t kMaxRows = int64_t(1) << 14;   // largest chunk table the harness allocates
constexpr int64_t kGuard = 8;                     // sentinel elements before and after every output buffer
constexpr unsigned char kSentinelByte = 0xA5;
constexpr int64_t kNoPosition = std::numeric_limits<int64_t>::min() + 7;  // "bad_position not written"

int64_t wrap_add(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }  // no UB in the harness

// The next cu value from a kind byte + payload. Covers small and large steps, zero-length sequences, exact
// multiples of every chunk size, raw values (negative, huge), decreasing steps and values near the type maximum.
int64_t next_cu_value(Input& in, int64_t prev, bool int64_cu) {
  const uint8_t kind = in.u8();
  const int64_t type_max = int64_cu ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int32_t>::max();
  int64_t v = 0;
  switch (kind % 8) {
    case 0: v = wrap_add(prev, in.u8()); break;
    case 1: v = wrap_add(prev, in.u16()); break;
    case 2: v = prev; break;
    case 3: v = wrap_add(prev, int64_t(in.u8() % 5) * 16); break;
    case 4: v = int64_cu ? in.i64() : int64_t(in.i32()); break;
    case 5: v = wrap_add(prev, -int64_t(in.u8()) - 1); break;
    case 6: v = type_max - int64_t(in.u8()); break;
    case 7: v = wrap_add(prev, int64_t(in.u32())); break;
  }
  return int64_cu ? v : int64_t(int32_t(uint32_t(uint64_t(v))));  // an int32 table holds the truncated value
}

// ---- The model -------------------------------------------------------------------------------------------------

struct Model {
  bool ok = false;
  int64_t bad_position = -1;  // documented position for the failure (or -1)
  __int128 num_chunks = 0;    // NT when ok
};

bool valid_index_type(IndexType t) { return t == IndexType::kInt32 || t == IndexType::kInt64; }

// What validate_chunk_request must answer, written independently from the spec in chunk_metadata.hpp.
Model model_request(const std::vector<int64_t>& cu, bool cu_null, int64_t n_seq, int chunk_size, int64_t total_tokens,
                    IndexType cu_type, IndexType out_type) {
  Model m;
  if (cu_null || n_seq < 0 || !(chunk_size == 16 || chunk_size == 32 || chunk_size == 64) || total_tokens < -1 ||
      !valid_index_type(cu_type) || !valid_index_type(out_type)) {
    return m;
  }
  if (cu[0] != 0) {
    m.bad_position = 0;
    return m;
  }
  for (int64_t n = 0; n < n_seq; ++n) {
    if (cu[size_t(n) + 1] < cu[size_t(n)]) {
      m.bad_position = n + 1;
      return m;
    }
  }
  if (total_tokens >= 0 && cu[size_t(n_seq)] != total_tokens) {
    m.bad_position = n_seq;
    return m;
  }
  const int64_t out_max = out_type == IndexType::kInt64 ? std::numeric_limits<int64_t>::max()
                                                        : std::numeric_limits<int32_t>::max();
  for (int64_t i = 0; i <= n_seq; ++i) {
    if (cu[size_t(i)] > out_max) {
      m.bad_position = i;
      return m;
    }
  }
  if (n_seq > out_max) return m;
  m.ok = true;
  for (int64_t n = 0; n < n_seq; ++n) {
    const __int128 len = __int128(cu[size_t(n) + 1]) - cu[size_t(n)];
    m.num_chunks += (len + chunk_size - 1) / chunk_size;
  }
  return m;
}

// The brute-force tables: one row per step of BT tokens through each sequence.
void brute_force_tables(const std::vector<int64_t>& cu, int64_t n_seq, int chunk_size, std::vector<int64_t>* indices,
                        std::vector<int64_t>* offsets) {
  indices->clear();
  offsets->clear();
  for (int64_t n = 0; n < n_seq; ++n) {
    offsets->push_back(int64_t(indices->size() / 2));
    int64_t c = 0;
    for (int64_t token = cu[size_t(n)]; token < cu[size_t(n) + 1]; token += chunk_size, ++c) {
      indices->push_back(n);
      indices->push_back(c);
    }
  }
  offsets->push_back(int64_t(indices->size() / 2));
}

// ---- Guarded output buffers -------------------------------------------------------------------------------------

// `elems` elements of `elem_size` bytes with kGuard sentinel elements on each side; data() points past the front
// guard and is 8-byte aligned.
class Guarded {
 public:
  Guarded(int64_t elems, int elem_size) : elems_(elems), elem_size_(elem_size) {
    storage_.assign(size_t((elems + 2 * kGuard) * elem_size) / 8 + 2, 0);
    std::memset(bytes(), kSentinelByte, size_t((elems + 2 * kGuard) * elem_size));
  }
  void* data() { return bytes() + kGuard * elem_size_; }
  int64_t load(int64_t i) const {
    const unsigned char* p = cbytes() + (kGuard + i) * elem_size_;
    if (elem_size_ == 8) {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  // True when bytes [from, to) of the payload (element units; may extend into the guards) hold the sentinel.
  bool untouched(int64_t from, int64_t to) const {
    for (int64_t b = (kGuard + from) * elem_size_; b < (kGuard + to) * elem_size_; ++b) {
      if (cbytes()[b] != kSentinelByte) return false;
    }
    return true;
  }
  bool all_untouched() const { return untouched(-kGuard, elems_ + kGuard); }

 private:
  unsigned char* bytes() { return reinterpret_cast<unsigned char*>(storage_.data()); }
  const unsigned char* cbytes() const { return reinterpret_cast<const unsigned char*>(storage_.data()); }
  std::vector<uint64_t> storage_;
  int64_t elems_;
  int elem_size_;
};

// cu_seqlens as a host table of cu_type (a bogus cu_type is stored as int32, which is what the builder must not
// even read).
std::vector<uint64_t> cu_table(const std::vector<int64_t>& cu, bool int64_cu) {
  std::vector<uint64_t> storage(cu.size() + 1, 0);
  for (size_t i = 0; i < cu.size(); ++i) {
    if (int64_cu) {
      std::memcpy(reinterpret_cast<unsigned char*>(storage.data()) + 8 * i, &cu[i], 8);
    } else {
      const int32_t v = int32_t(cu[i]);
      std::memcpy(reinterpret_cast<unsigned char*>(storage.data()) + 4 * i, &v, 4);
    }
  }
  return storage;
}

void check_status_shape(const Status& s) {
  KDA_FUZZ_CHECK(s.message() != nullptr);
  KDA_FUZZ_CHECK(s.is_ok() ? s.code() == StatusCode::kOk : s.code() == StatusCode::kInvalidArgument);
}

// ---- Raw-pointer builder -----------------------------------------------------------------------------------------

void fuzz_raw_builder(Input& in) {
  const uint8_t flags = in.u8();
  const int chunk_sizes[] = {16, 32, 64};
  const int chunk_size = (flags & 3) == 3 ? in.i32() : chunk_sizes[flags & 3];
  const bool int64_cu = (flags & 4) != 0;
  IndexType cu_type = int64_cu ? IndexType::kInt64 : IndexType::kInt32;
  IndexType out_type = (flags & 8) ? IndexType::kInt64 : IndexType::kInt32;
  if (flags & 16) cu_type = IndexType(2 + in.u8());
  if (flags & 32) {
    const int low = in.u8();
    const bool negative = (in.u8() & 1) != 0;
    out_type = IndexType(negative ? low - 256 : 2 + low);
  }
  const bool cu_null = (flags & 64) != 0;
  const int64_t n_entries_seq = int64_t(in.u16()) % (kMaxSequences + 1);
  const int64_t n_seq = (flags & 128) ? -1 - int64_t(in.u8()) : n_entries_seq;
  const uint8_t t_mode = in.u8();
  int64_t t_raw = 0;
  if ((t_mode & 3) == 2) t_raw = int64_t(int8_t(in.u8()));
  if ((t_mode & 3) == 3) t_raw = in.i64();
  const uint8_t cap_mode = in.u8();

  std::vector<int64_t> cu(size_t(n_entries_seq) + 1);
  int64_t prev = 0;
  for (size_t i = 0; i < cu.size(); ++i) {
    // cu[0] is 0 unless its kind byte has the top bit, so most inputs get past the first check.
    if (i == 0) {
      const uint8_t k = in.u8();
      cu[0] = (k & 0x80) ? next_cu_value(in, 0, int64_cu) : 0;
    } else {
      cu[i] = next_cu_value(in, prev, int64_cu);
    }
    prev = cu[i];
  }
  const int64_t cu_last = cu.back();
  int64_t total_tokens = -1;
  switch (t_mode & 3) {
    case 0: total_tokens = -1; break;
    case 1: total_tokens = cu_last; break;
    case 2: total_tokens = wrap_add(cu_last, t_raw); break;
    case 3: total_tokens = t_raw; break;
  }
  std::vector<uint64_t> cu_storage = cu_table(cu, int64_cu);
  const void* cu_ptr = cu_null ? nullptr : cu_storage.data();
  const std::vector<uint64_t> cu_before = cu_storage;

  // ---- count_chunks (int64 output model) ----
  const Model count_model = model_request(cu, cu_null, n_seq, chunk_size, total_tokens, cu_type, IndexType::kInt64);
  {
    int64_t nt = -777, pos = kNoPosition;
    const Status s = kda::count_chunks(cu_ptr, cu_type, n_seq, chunk_size, total_tokens, &nt, &pos);
    check_status_shape(s);
    KDA_FUZZ_CHECK(s.is_ok() == count_model.ok);
    KDA_FUZZ_CHECK(pos == count_model.bad_position);
    KDA_FUZZ_STAT(s.is_ok() ? "count_chunks ok" : (pos >= 0 ? "count_chunks error at an entry" : "count_chunks error"));
    if (s.is_ok()) {
      KDA_FUZZ_CHECK(__int128(nt) == count_model.num_chunks);
      KDA_FUZZ_CHECK(nt >= 0 && nt <= cu_last);  // every chunk holds a token
      KDA_FUZZ_CHECK(nt <= kda::max_num_chunks(cu_last, n_seq, chunk_size));
    } else {
      KDA_FUZZ_CHECK(nt == -777);
    }
    int64_t nt2 = -777;
    const Status s2 = kda::count_chunks(cu_ptr, cu_type, n_seq, chunk_size, total_tokens, &nt2);
    KDA_FUZZ_CHECK(s2.code() == s.code() && nt2 == nt);
    const Status s3 = kda::count_chunks(cu_ptr, cu_type, n_seq, chunk_size, total_tokens, nullptr, &pos);
    KDA_FUZZ_CHECK(!s3.is_ok() && pos == -1);
  }

  // ---- build_chunk_metadata (raw) ----
  const Model model = model_request(cu, cu_null, n_seq, chunk_size, total_tokens, cu_type, out_type);
  const bool nt_small = model.ok && model.num_chunks <= kMaxRows;
  const int64_t nt_ref = nt_small ? int64_t(model.num_chunks) : -1;
  int64_t capacity = 0;
  bool indices_null = false;
  switch (cap_mode & 7) {
    case 0: capacity = nt_small ? nt_ref : int64_t(in.u16()); break;
    case 1: capacity = nt_small ? nt_ref - 1 - in.u8() : -1; break;
    case 2: capacity = nt_small ? nt_ref + in.u8() : int64_t(in.u8()); break;
    case 4: indices_null = true; capacity = 0; break;
    case 5: indices_null = true; capacity = in.i64(); break;
    default: capacity = in.i64(); break;
  }
  const bool offsets_null = (cap_mode & 8) != 0;
  const bool num_chunks_null = (cap_mode & 16) != 0;
  // Rows actually allocated. The builder must write exactly NT rows whatever the capacity (and nothing on error), so
  // a capacity well past NT is passed as is but backed by only NT + kSlackRows rows plus the guards: a write past
  // them would hit the guards or ASan's redzone.
  constexpr int64_t kSlackRows = 16;
  const int64_t backed = nt_small ? nt_ref + kSlackRows : kSlackRows;
  const int64_t alloc_rows = capacity <= 0 ? 0 : (capacity < backed ? capacity : backed);
  const bool would_overrun_harness = model.ok && capacity >= model.num_chunks && model.num_chunks > alloc_rows;
  const int out_size = out_type == IndexType::kInt64 ? 8 : 4;
  if (!would_overrun_harness) {
    Guarded indices(alloc_rows * 2, out_size);
    Guarded offsets(n_entries_seq + 1, out_size);
    int64_t nt = -777, pos = kNoPosition;
    const Status s = kda::build_chunk_metadata(cu_ptr, cu_type, n_seq, chunk_size, total_tokens, out_type,
                                               indices_null ? nullptr : indices.data(), capacity,
                                               offsets_null ? nullptr : offsets.data(),
                                               num_chunks_null ? nullptr : &nt, &pos);
    check_status_shape(s);
    const bool pre_ok = !num_chunks_null && !offsets_null && !(indices_null && capacity != 0);
    const bool expect_ok = pre_ok && model.ok && capacity >= model.num_chunks;
    KDA_FUZZ_CHECK(s.is_ok() == expect_ok);
    KDA_FUZZ_CHECK(pos == (pre_ok ? model.bad_position : -1));
    KDA_FUZZ_STAT(s.is_ok() ? (nt_ref > 0 ? "build ok, NT > 0" : "build ok, NT = 0") : "build error");
    if (model.ok && pre_ok && !s.is_ok()) KDA_FUZZ_STAT("build error: capacity < NT");
    if (s.is_ok()) {
      KDA_FUZZ_CHECK(nt == nt_ref);
      std::vector<int64_t> want_indices, want_offsets;
      brute_force_tables(cu, n_seq, chunk_size, &want_indices, &want_offsets);
      KDA_FUZZ_CHECK(int64_t(want_indices.size()) == 2 * nt);
      for (int64_t i = 0; i < 2 * nt; ++i) KDA_FUZZ_CHECK(indices.load(i) == want_indices[size_t(i)]);
      for (int64_t i = 0; i <= n_seq; ++i) KDA_FUZZ_CHECK(offsets.load(i) == want_offsets[size_t(i)]);
      KDA_FUZZ_CHECK(indices.untouched(-kGuard, 0));                         // nothing before the table
      KDA_FUZZ_CHECK(indices.untouched(2 * nt, alloc_rows * 2 + kGuard));    // nothing past NT rows
      KDA_FUZZ_CHECK(offsets.untouched(-kGuard, 0));
      KDA_FUZZ_CHECK(offsets.untouched(n_seq + 1, n_entries_seq + 1 + kGuard));
    } else {
      KDA_FUZZ_CHECK(nt == -777);
      KDA_FUZZ_CHECK(indices.all_untouched());
      KDA_FUZZ_CHECK(offsets.all_untouched());
    }
    // The overload without bad_position agrees.
    if (!num_chunks_null && !offsets_null) {
      Guarded indices2(alloc_rows * 2, out_size);
      Guarded offsets2(n_entries_seq + 1, out_size);
      int64_t nt2 = -777;
      const Status s2 = kda::build_chunk_metadata(cu_ptr, cu_type, n_seq, chunk_size, total_tokens, out_type,
                                                  indices_null ? nullptr : indices2.data(), capacity,
                                                  offsets2.data(), &nt2);
      KDA_FUZZ_CHECK(s2.code() == s.code() && nt2 == nt);
    }
  }

  // ---- pack_chunk_metadata ----
  if (nt_small || !model.ok) {
    const size_t want_bytes =
        nt_small ? kda::chunk_metadata_bytes(nt_ref, n_seq, out_type) : size_t(0);
    if (nt_small) {
      // The documented layout, recomputed: indices at 0, offsets at the next multiple of 8, N + 1 entries.
      const size_t offsets_at = (size_t(nt_ref) * 2 * size_t(out_size) + 7) / 8 * 8;
      KDA_FUZZ_CHECK(kda::chunk_offsets_byte_offset(nt_ref, out_type) == offsets_at);
      KDA_FUZZ_CHECK(want_bytes == offsets_at + size_t(n_seq + 1) * size_t(out_size));
    }
    size_t staging_bytes = want_bytes;
    switch (cap_mode >> 6) {
      case 1: staging_bytes = want_bytes - std::min<size_t>(want_bytes, 1 + in.u8() % 8); break;
      case 2: staging_bytes = want_bytes + in.u8(); break;
      case 3: staging_bytes = size_t(in.u64()); break;
      default: break;
    }
    const bool misaligned = (cap_mode & 32) != 0;
    const size_t alloc_bytes = std::min<size_t>(staging_bytes, want_bytes + 256);
    Guarded staging(int64_t(alloc_bytes) + 8, 1);
    void* staging_ptr = static_cast<char*>(staging.data()) + (misaligned ? 4 : 0);
    int64_t nt = -777;
    size_t packed = 12345;
    const Status s = kda::pack_chunk_metadata(cu_ptr, cu_type, n_seq, chunk_size, total_tokens, out_type, staging_ptr,
                                              staging_bytes, num_chunks_null ? nullptr : &nt, &packed);
    check_status_shape(s);
    const bool expect_ok = !num_chunks_null && !misaligned && model.ok && staging_bytes >= want_bytes;
    KDA_FUZZ_CHECK(s.is_ok() == expect_ok);
    KDA_FUZZ_STAT(s.is_ok() ? "pack ok" : "pack error");
    if (s.is_ok()) {
      KDA_FUZZ_CHECK(nt == nt_ref && packed == want_bytes);
      std::vector<int64_t> want_indices, want_offsets;
      brute_force_tables(cu, n_seq, chunk_size, &want_indices, &want_offsets);
      const int64_t offsets_at = int64_t(kda::chunk_offsets_byte_offset(nt_ref, out_type)) / out_size;
      // Read through a typed view of the packed buffer.
      auto packed_load = [&](int64_t elem) {
        const unsigned char* p = static_cast<const unsigned char*>(staging_ptr) + elem * out_size;
        if (out_size == 8) {
          int64_t v;
          std::memcpy(&v, p, 8);
          return v;
        }
        int32_t v;
        std::memcpy(&v, p, 4);
        return int64_t(v);
      };
      for (int64_t i = 0; i < 2 * nt; ++i) KDA_FUZZ_CHECK(packed_load(i) == want_indices[size_t(i)]);
      for (int64_t i = 0; i <= n_seq; ++i) KDA_FUZZ_CHECK(packed_load(offsets_at + i) == want_offsets[size_t(i)]);
      KDA_FUZZ_CHECK(staging.untouched(-kGuard, 0));
      KDA_FUZZ_CHECK(staging.untouched(int64_t(want_bytes), int64_t(alloc_bytes) + 8 + kGuard));
    } else {
      KDA_FUZZ_CHECK(nt == -777 && packed == 12345);
      KDA_FUZZ_CHECK(staging.all_untouched());
    }
  }

  // ---- ChunkMetadata vector builder (int64 cu) ----
  if (!cu_null && n_seq >= 0 && (nt_small || !model.ok)) {
    const Model vm = model_request(cu, false, n_seq, chunk_size, -1, IndexType::kInt64, out_type);
    // G10: the ChunkMetadata builders allocate NT rows (and the cu helpers N + 1 entries) with std::vector, so a
    // valid but huge batch throws std::bad_alloc through the Status API instead of returning an error.
    if (!vm.ok || vm.num_chunks <= kMaxRows || !tolerate(10)) {
      std::vector<int64_t> cu64(cu.begin(), cu.begin() + n_seq + 1);
      kda::ChunkMetadata meta;
      meta.num_chunks = -5;
      meta.chunk_offsets = {42};
      const Status s = kda::build_chunk_metadata(cu64, chunk_size, out_type, &meta);
      check_status_shape(s);
      KDA_FUZZ_CHECK(s.is_ok() == vm.ok);
      KDA_FUZZ_STAT(s.is_ok() ? "vector builder ok" : "vector builder error");
      if (s.is_ok() && vm.num_chunks > kMaxRows) {
        KDA_FUZZ_CHECK(meta.num_chunks == int64_t(vm.num_chunks));
      } else if (s.is_ok()) {
        std::vector<int64_t> want_indices, want_offsets;
        brute_force_tables(cu, n_seq, chunk_size, &want_indices, &want_offsets);
        KDA_FUZZ_CHECK(meta.num_chunks == int64_t(vm.num_chunks) && meta.num_sequences == n_seq);
        KDA_FUZZ_CHECK(meta.type == out_type && meta.chunk_size == chunk_size);
        KDA_FUZZ_CHECK(meta.chunk_indices == want_indices && meta.chunk_offsets == want_offsets);
      } else {
        KDA_FUZZ_CHECK(meta.num_chunks == -5 && meta.chunk_offsets.size() == 1 && meta.chunk_offsets[0] == 42 &&
                       meta.chunk_indices.empty());
      }
    }
  }
  KDA_FUZZ_CHECK(cu_storage == cu_before);  // the input is never written
}

// ---- Batch-kind helpers ------------------------------------------------------------------------------------------

// Model of make_prefill_cu_seqlens: [0, cumsum], error on a negative length or an int64 overflow.
bool model_prefill(const std::vector<int64_t>& lengths, std::vector<int64_t>* cu) {
  cu->assign(1, 0);
  __int128 sum = 0;
  for (int64_t len : lengths) {
    if (len < 0) return false;
    sum += len;
    if (sum > std::numeric_limits<int64_t>::max()) return false;
    cu->push_back(int64_t(sum));
  }
  return true;
}

void check_one_call_builder(const Status& s, const kda::ChunkMetadata& meta, bool cu_ok,
                            const std::vector<int64_t>& cu, int chunk_size, IndexType out_type) {
  check_status_shape(s);
  const Model m = cu_ok ? model_request(cu, false, int64_t(cu.size()) - 1, chunk_size, -1, IndexType::kInt64, out_type)
                        : Model{};
  KDA_FUZZ_CHECK(s.is_ok() == m.ok);
  KDA_FUZZ_STAT(s.is_ok() ? "one-call builder ok" : "one-call builder error");
  if (s.is_ok() && meta.num_chunks > kMaxRows) {
    KDA_FUZZ_CHECK(__int128(meta.num_chunks) == m.num_chunks);
  } else if (s.is_ok()) {
    std::vector<int64_t> want_indices, want_offsets;
    brute_force_tables(cu, int64_t(cu.size()) - 1, chunk_size, &want_indices, &want_offsets);
    KDA_FUZZ_CHECK(meta.chunk_indices == want_indices && meta.chunk_offsets == want_offsets);
    KDA_FUZZ_CHECK(meta.num_chunks == int64_t(want_indices.size() / 2));
  } else {
    KDA_FUZZ_CHECK(meta.num_chunks == -5 && meta.chunk_indices.empty() && meta.chunk_offsets.empty());
  }
}

// NT of a cu table, or "too big for the harness" (the one-call builders allocate NT rows on the host).
bool small_enough(const std::vector<int64_t>& cu, int chunk_size) {
  if (!tolerate(10)) return true;  // G10: let the builders try to allocate anything
  if (!(chunk_size == 16 || chunk_size == 32 || chunk_size == 64)) return true;  // rejected before allocating
  __int128 nt = 0;
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    const __int128 len = __int128(cu[i + 1]) - cu[i];
    if (len > 0) nt += (len + chunk_size - 1) / chunk_size;
  }
  return nt <= kMaxRows;
}

// One batch-kind helper pair: make_*_cu_seqlens (through make_cu) must give `want` when `ok`, or fail and leave its
// output untouched; the one-call builder (through build_meta) must then agree, when the batch is small enough to model.
template <typename MakeCu, typename BuildMeta>
void check_helper_pair(bool ok, const std::vector<int64_t>& want, int chunk_size, IndexType out_type, MakeCu make_cu,
                       BuildMeta build_meta) {
  std::vector<int64_t> cu = {-9};
  const Status s = make_cu(&cu);
  check_status_shape(s);
  KDA_FUZZ_CHECK(s.is_ok() == ok);
  KDA_FUZZ_CHECK(s.is_ok() ? cu == want : (cu.size() == 1 && cu[0] == -9));
  if (!ok || small_enough(want, chunk_size)) {
    kda::ChunkMetadata meta;
    meta.num_chunks = -5;
    const Status s2 = build_meta(&meta);
    check_one_call_builder(s2, meta, ok, want, chunk_size, out_type);
  }
}

void fuzz_batch_helpers(Input& in) {
  const uint8_t mode = in.u8();
  const int chunk_sizes[] = {16, 32, 64, 48};
  const int chunk_size = chunk_sizes[mode & 3];
  const IndexType out_type = (mode & 4) ? IndexType::kInt64 : IndexType::kInt32;
  const size_t n_lengths = in.u8();
  std::vector<int64_t> lengths(n_lengths);
  for (auto& len : lengths) {
    const uint8_t kind = in.u8();
    switch (kind % 4) {
      case 0: len = in.u8(); break;
      case 1: len = in.u16(); break;
      case 2: len = in.i64(); break;
      case 3: len = std::numeric_limits<int64_t>::max() - in.u8(); break;
    }
  }

  // make_prefill_cu_seqlens
  std::vector<int64_t> want_cu;
  const bool prefill_ok = model_prefill(lengths, &want_cu);
  {
    std::vector<int64_t> cu = {-9};
    const Status s = kda::make_prefill_cu_seqlens(lengths, &cu);
    check_status_shape(s);
    KDA_FUZZ_CHECK(s.is_ok() == prefill_ok);
    KDA_FUZZ_CHECK(s.is_ok() ? cu == want_cu : (cu.size() == 1 && cu[0] == -9));
    KDA_FUZZ_CHECK(!kda::make_prefill_cu_seqlens(lengths, nullptr).is_ok());
  }
  if (!prefill_ok || small_enough(want_cu, chunk_size)) {
    kda::ChunkMetadata meta;
    meta.num_chunks = -5;
    const Status s = kda::build_prefill_chunk_metadata(lengths, chunk_size, out_type, &meta);
    check_one_call_builder(s, meta, prefill_ok, want_cu, chunk_size, out_type);
  }

  // make_decode_prefill_cu_seqlens: num_decodes 1-token sequences first.
  // G10: a huge num_decodes makes make_decode_prefill_cu_seqlens allocate num_decodes entries (std::bad_alloc).
  int64_t num_decodes = (mode & 8) ? -1 - int64_t(in.u8()) : int64_t(in.u16() % 4096);
  if (!tolerate(10) && (mode & 128)) num_decodes = int64_t(1) << (40 + in.u8() % 20);
  if (num_decodes < 4096) {
    std::vector<int64_t> all(size_t(num_decodes > 0 ? num_decodes : 0), 1);
    all.insert(all.end(), lengths.begin(), lengths.end());
    std::vector<int64_t> want;
    const bool ok = num_decodes >= 0 && model_prefill(all, &want);
    check_helper_pair(
        ok, want, chunk_size, out_type,
        [&](std::vector<int64_t>* cu) { return kda::make_decode_prefill_cu_seqlens(num_decodes, lengths, cu); },
        [&](kda::ChunkMetadata* meta) {
          return kda::build_decode_prefill_chunk_metadata(num_decodes, lengths, chunk_size, out_type, meta);
        });
  } else {
    // Too many entries to model: the only requirement is a Status, not an exception or an abort.
    std::vector<int64_t> cu;
    check_status_shape(kda::make_decode_prefill_cu_seqlens(num_decodes, lengths, &cu));
  }

  // make_spec_cu_seqlens: N equal sequences of k tokens. N stays small (the helper allocates N + 1 entries).
  int64_t spec_n = (mode & 16) ? -1 - int64_t(in.u8()) : int64_t(in.u16() % 4096);
  if (!tolerate(10) && (mode & 128)) spec_n = int64_t(1) << (40 + in.u8() % 20);  // G10, as above
  int64_t spec_k = 0;
  switch ((mode >> 5) & 3) {
    case 0: spec_k = in.u8(); break;
    case 1: spec_k = -1 - int64_t(in.u8()); break;
    case 2: spec_k = in.i64(); break;
    case 3:  // right at the int64 overflow boundary of N * k
      spec_k = wrap_add(std::numeric_limits<int64_t>::max() / (spec_n > 0 ? spec_n : 1), int64_t(in.u8() % 3) - 1);
      break;
  }
  if (spec_n >= 4096) {
    std::vector<int64_t> cu;  // too many entries to model, as above
    check_status_shape(kda::make_spec_cu_seqlens(spec_n, spec_k, &cu));
  } else {
    bool ok = spec_n >= 0 && spec_k >= 0 && __int128(spec_n) * spec_k <= std::numeric_limits<int64_t>::max();
    std::vector<int64_t> want;
    if (ok) {
      for (int64_t n = 0; n <= spec_n; ++n) want.push_back(n * spec_k);
    }
    check_helper_pair(
        ok, want, chunk_size, out_type,
        [&](std::vector<int64_t>* cu) { return kda::make_spec_cu_seqlens(spec_n, spec_k, cu); },
        [&](kda::ChunkMetadata* meta) {
          return kda::build_spec_chunk_metadata(spec_n, spec_k, chunk_size, out_type, meta);
        });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  fuzz_raw_builder(in);
  fuzz_batch_helpers(in);
  return 0;
}
