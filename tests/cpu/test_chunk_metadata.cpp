// The host chunk-metadata builder against a brute-force walk over each sequence's tokens, plus edge cases, every
// bad-input class, int32 overflow, the batch-kind helpers and the packed upload layout.
#include "kda/chunk_metadata.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

using kda::IndexType;
using kda::Status;
using kda::StatusCode;

constexpr int kChunkSizes[] = {16, 32, 64};
constexpr IndexType kIndexTypes[] = {IndexType::kInt32, IndexType::kInt64};

// The obviously-correct tables: walk each sequence's tokens in steps of BT, one chunk per step.
struct Expected {
  std::vector<int64_t> chunk_indices;  // [NT*2]
  std::vector<int64_t> chunk_offsets;  // [N+1]
  int64_t num_chunks() const { return int64_t(chunk_indices.size()) / 2; }
};

Expected brute_force(const std::vector<int64_t>& cu, int chunk_size) {
  Expected e;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    e.chunk_offsets.push_back(e.num_chunks());
    int64_t c = 0;
    for (int64_t token = cu[n]; token < cu[n + 1]; token += chunk_size, ++c) {
      e.chunk_indices.push_back(int64_t(n));
      e.chunk_indices.push_back(c);
    }
  }
  e.chunk_offsets.push_back(e.num_chunks());
  return e;
}

// The legacy vLLM / old FLA derivation (KDA_SPEC §2): seq = (c == 0).cumsum() - 1, which assumes every sequence
// owns a chunk. Returns the sequence id it assigns to each chunk.
std::vector<int64_t> legacy_vllm_sequence_ids(const std::vector<int64_t>& cu, int chunk_size) {
  std::vector<int64_t> ids;
  int64_t seq = -1;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    for (int64_t c = 0; c < kda::num_chunks_of(cu[n + 1] - cu[n], chunk_size); ++c) {
      if (c == 0) ++seq;
      ids.push_back(seq);
    }
  }
  return ids;
}

// cu_seqlens as raw bytes of either index type.
std::vector<unsigned char> as_index_bytes(const std::vector<int64_t>& values, IndexType type) {
  std::vector<unsigned char> bytes(values.size() * size_t(kda::index_type_size(type)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == IndexType::kInt64) {
      std::memcpy(bytes.data() + 8 * i, &values[i], 8);
    } else {
      const int32_t v = int32_t(values[i]);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  }
  return bytes;
}

int64_t load(const void* table, IndexType type, size_t i) {
  if (type == IndexType::kInt64) return static_cast<const int64_t*>(table)[i];
  return static_cast<const int32_t*>(table)[i];
}

// Output tables of either type, pre-filled with a sentinel so that untouched entries can be detected.
constexpr int32_t kSentinel = -12345;

struct Outputs {
  IndexType type;
  std::vector<int64_t> indices_storage, offsets_storage;  // int64 storage: aligned for both types
  int64_t capacity_rows;

  Outputs(IndexType t, int64_t rows, int64_t num_sequences) : type(t), capacity_rows(rows) {
    indices_storage.assign(size_t(rows > 0 ? rows : 0) * 2 + 1, 0);
    offsets_storage.assign(size_t(num_sequences) + 2, 0);
    fill_sentinel();
  }
  void fill_sentinel() {
    for (size_t i = 0; i < elements(indices_storage); ++i) store(indices(), i, kSentinel);
    for (size_t i = 0; i < elements(offsets_storage); ++i) store(offsets(), i, kSentinel);
  }
  size_t elements(const std::vector<int64_t>& v) const { return v.size() * 8 / size_t(kda::index_type_size(type)); }
  void store(void* table, size_t i, int64_t v) {
    if (type == IndexType::kInt64) static_cast<int64_t*>(table)[i] = v;
    else static_cast<int32_t*>(table)[i] = int32_t(v);
  }
  void* indices() { return indices_storage.data(); }
  void* offsets() { return offsets_storage.data(); }
  bool untouched() const {
    for (size_t i = 0; i < elements(indices_storage); ++i) if (load(indices_storage.data(), type, i) != kSentinel) return false;
    for (size_t i = 0; i < elements(offsets_storage); ++i) if (load(offsets_storage.data(), type, i) != kSentinel) return false;
    return true;
  }
};

// Builds with the given types and checks every value against the brute force, and that nothing past NT rows or
// past N+1 offsets was written.
void expect_matches_brute_force(const std::vector<int64_t>& cu, int chunk_size, IndexType cu_type,
                                IndexType out_type, int64_t extra_rows = 0) {
  const Expected expected = brute_force(cu, chunk_size);
  const int64_t n_seq = int64_t(cu.size()) - 1;
  const std::vector<unsigned char> cu_bytes = as_index_bytes(cu, cu_type);

  int64_t counted = -1;
  ASSERT_TRUE(kda::count_chunks(cu_bytes.data(), cu_type, n_seq, chunk_size, cu.back(), &counted).is_ok());
  ASSERT_EQ(counted, expected.num_chunks());
  // The longest sequence (the bound ChunkMetadataArgs::max_sequence_tokens takes), from the same validating scan.
  int64_t want_longest = 0, longest = -1;
  for (int64_t n = 0; n < n_seq; ++n) want_longest = std::max(want_longest, cu[size_t(n + 1)] - cu[size_t(n)]);
  ASSERT_TRUE(kda::longest_sequence(cu_bytes.data(), cu_type, n_seq, cu.back(), &longest).is_ok());
  ASSERT_EQ(longest, want_longest);

  Outputs out(out_type, counted + extra_rows, n_seq);
  int64_t nt = -1;
  const Status s = kda::build_chunk_metadata(cu_bytes.data(), cu_type, n_seq, chunk_size, cu.back(), out_type,
                                             out.indices(), out.capacity_rows, out.offsets(), &nt);
  ASSERT_TRUE(s.is_ok()) << s.message();
  ASSERT_EQ(nt, expected.num_chunks());
  for (size_t i = 0; i < expected.chunk_indices.size(); ++i) {
    ASSERT_EQ(load(out.indices(), out_type, i), expected.chunk_indices[i]) << "chunk_indices element " << i;
  }
  for (size_t i = 0; i < expected.chunk_offsets.size(); ++i) {
    ASSERT_EQ(load(out.offsets(), out_type, i), expected.chunk_offsets[i]) << "chunk_offsets entry " << i;
  }
  for (size_t i = expected.chunk_indices.size(); i < out.elements(out.indices_storage); ++i) {
    ASSERT_EQ(load(out.indices(), out_type, i), kSentinel) << "wrote past NT rows at element " << i;
  }
  for (size_t i = expected.chunk_offsets.size(); i < out.elements(out.offsets_storage); ++i) {
    ASSERT_EQ(load(out.offsets(), out_type, i), kSentinel) << "wrote past N+1 offsets at entry " << i;
  }
}

void expect_matches_all_types(const std::vector<int64_t>& cu) {
  for (int bt : kChunkSizes) {
    for (IndexType cu_type : kIndexTypes) {
      for (IndexType out_type : kIndexTypes) {
        SCOPED_TRACE("BT=" + std::to_string(bt) + " cu_type=" + std::to_string(int(cu_type)) +
                     " out_type=" + std::to_string(int(out_type)));
        expect_matches_brute_force(cu, bt, cu_type, out_type);
      }
    }
  }
}

std::vector<int64_t> cu_from_lengths(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu;
  EXPECT_TRUE(kda::make_prefill_cu_seqlens(lengths, &cu).is_ok());
  return cu;
}

// ---- Random batches against the brute force ------------------------------------------------------------------------

// A length in 0..5000 with a good share of the boundary cases: 0, 1, multiples of BT and BT +- 1.
int64_t random_length(std::mt19937_64& rng, int chunk_size) {
  const int kind = int(rng() % 10);
  const int64_t multiple = int64_t(rng() % (5000 / chunk_size + 1)) * chunk_size;  // k*BT <= 5000
  switch (kind) {
    case 0: case 1: return 0;
    case 2: return 1;
    case 3: return multiple;
    case 4: return multiple > 0 ? multiple - 1 : 0;
    case 5: return multiple < 5000 ? multiple + 1 : 5000;
    case 6: return chunk_size + int64_t(rng() % 3) - 1;  // BT-1, BT, BT+1
    default: return int64_t(rng() % 5001);
  }
}

TEST(ChunkMetadataRandom, MatchesBruteForceOnTenThousandBatches) {
  std::mt19937_64 rng(0x6b646121);  // fixed seed: failures reproduce
  constexpr int kBatches = 10240;
  int full_size_batches = 0;
  for (int it = 0; it < kBatches; ++it) {
    // Each of the 12 (BT, cu_type, out_type) combinations in turn.
    const int bt = kChunkSizes[it % 3];
    const IndexType cu_type = kIndexTypes[(it / 3) % 2];
    const IndexType out_type = kIndexTypes[(it / 6) % 2];
    // Mostly small batches to keep the run short; every 16th is 0..512 sequences and every 64th exactly 512.
    int64_t n_seq;
    if (it % 64 == 0) n_seq = 512;
    else if (it % 16 == 0) n_seq = int64_t(rng() % 513);
    else n_seq = int64_t(rng() % 33);
    full_size_batches += n_seq == 512;
    std::vector<int64_t> lengths(static_cast<size_t>(n_seq));
    for (auto& len : lengths) len = random_length(rng, bt);
    SCOPED_TRACE("batch " + std::to_string(it) + " N=" + std::to_string(n_seq) + " BT=" + std::to_string(bt));
    // Sometimes leave spare rows to prove nothing is written past NT.
    expect_matches_brute_force(cu_from_lengths(lengths), bt, cu_type, out_type, it % 5 == 0 ? 3 : 0);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GE(full_size_batches, kBatches / 64);
}

// ---- Hand-written edge cases ---------------------------------------------------------------------------------------

TEST(ChunkMetadataEdge, NoSequences) {
  expect_matches_all_types({0});
  const int64_t cu[] = {0};
  int32_t offsets[1] = {kSentinel};
  int64_t nt = -1;
  // An empty batch needs no chunk_indices buffer at all.
  ASSERT_TRUE(kda::build_chunk_metadata(cu, IndexType::kInt64, 0, 64, 0, IndexType::kInt32, nullptr, 0, offsets, &nt)
                  .is_ok());
  EXPECT_EQ(nt, 0);
  EXPECT_EQ(offsets[0], 0);
}

TEST(ChunkMetadataEdge, OneSequence) {
  for (int64_t len : {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000}) expect_matches_all_types({0, len});
  kda::ChunkMetadata meta;
  ASSERT_TRUE(kda::build_chunk_metadata({0, 130}, 64, &meta).is_ok());
  EXPECT_EQ(meta.num_chunks, 3);
  EXPECT_EQ(meta.chunk_indices, (std::vector<int64_t>{0, 0, 0, 1, 0, 2}));
  EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 3}));
}

TEST(ChunkMetadataEdge, LengthsAroundTheChunkSize) {
  for (int bt : kChunkSizes) {
    const std::vector<int64_t> cu = cu_from_lengths({bt, bt + 1, bt - 1, 2 * bt, 2 * bt + 1, 2 * bt - 1});
    expect_matches_all_types(cu);
    kda::ChunkMetadata meta;
    ASSERT_TRUE(kda::build_chunk_metadata(cu, bt, &meta).is_ok());
    EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 1, 3, 4, 6, 9, 11}));
  }
}

TEST(ChunkMetadataEdge, ZeroLengthSequencesAnywhere) {
  const std::vector<std::vector<int64_t>> batches = {
      {0, 100, 64},        // first
      {100, 0, 64},        // middle
      {100, 64, 0},        // last
      {100, 0, 0, 0, 64},  // consecutive
      {0, 0, 100, 0, 0, 64, 0, 0},
      {0},                 // one empty sequence
      {0, 0, 0, 0},        // all empty
  };
  for (const auto& lengths : batches) expect_matches_all_types(cu_from_lengths(lengths));

  kda::ChunkMetadata meta;
  ASSERT_TRUE(kda::build_chunk_metadata(cu_from_lengths({0, 100, 0, 0, 64, 0}), 64, &meta).is_ok());
  EXPECT_EQ(meta.chunk_indices, (std::vector<int64_t>{1, 0, 1, 1, 4, 0}));
  EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 0, 2, 2, 2, 3, 3}));

  ASSERT_TRUE(kda::build_chunk_metadata({0, 0, 0, 0}, 16, &meta).is_ok());
  EXPECT_EQ(meta.num_chunks, 0);
  EXPECT_TRUE(meta.chunk_indices.empty());
  EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 0, 0, 0}));
}

// KDA_SPEC §2: with a zero-length sequence before the last, the legacy seq = (c == 0).cumsum() - 1 labels every
// later chunk with the wrong (earlier) sequence id. This is the batch of the consumer example.
TEST(ChunkMetadataEdge, LegacyVllmMislabellingCaseGetsCorrectIds) {
  const std::vector<int64_t> cu = {0, 100, 100, 164};
  const std::vector<int64_t> legacy = legacy_vllm_sequence_ids(cu, 64);
  ASSERT_EQ(legacy, (std::vector<int64_t>{0, 0, 1}));  // the last chunk is sequence 2's, not the empty sequence 1's

  kda::ChunkMetadata meta;
  ASSERT_TRUE(kda::build_chunk_metadata(cu, 64, &meta).is_ok());
  ASSERT_EQ(meta.num_chunks, 3);
  EXPECT_EQ(meta.chunk_indices, (std::vector<int64_t>{0, 0, 0, 1, 2, 0}));
  EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 2, 2, 3}));
  expect_matches_all_types(cu);
}

// ---- Bad input: one distinct message per class, outputs untouched -------------------------------------------------

struct BadCase {
  const char* name;
  const char* keyword;  // a word the message must contain
  std::vector<int64_t> cu;
  int64_t num_sequences;  // -2: cu.size() - 1
  int chunk_size = 64;
  int64_t total_tokens = -1;
  IndexType out_type = IndexType::kInt32;
  int64_t capacity_rows = 1000;
  bool null_cu = false, null_indices = false, null_offsets = false, null_num_chunks = false;
  int64_t expected_position = -1;
};

std::vector<BadCase> bad_cases() {
  std::vector<BadCase> cases;
  auto add = [&](const BadCase& c) { cases.push_back(c); };
  BadCase base{"", "", {0, 10, 20}, -2};
  BadCase c = base;
  c.name = "null cu_seqlens"; c.keyword = "cu_seqlens is null"; c.null_cu = true; add(c);
  c = base; c.name = "null chunk_indices"; c.keyword = "chunk_indices output is null"; c.null_indices = true; add(c);
  c = base; c.name = "null chunk_offsets"; c.keyword = "chunk_offsets output is null"; c.null_offsets = true; add(c);
  c = base; c.name = "null num_chunks"; c.keyword = "num_chunks output is null"; c.null_num_chunks = true; add(c);
  c = base; c.name = "negative num_sequences"; c.keyword = "num_sequences is negative"; c.num_sequences = -1; add(c);
  for (int bt : {0, 8, 48, 128, -64}) {
    c = base; c.name = "unsupported chunk size"; c.keyword = "chunk_size"; c.chunk_size = bt; add(c);
  }
  c = base; c.name = "negative total"; c.keyword = "total_tokens is negative"; c.total_tokens = -2; add(c);
  c = base; c.name = "cu[0] != 0"; c.keyword = "cu_seqlens[0]"; c.cu = {3, 10, 20}; c.expected_position = 0; add(c);
  c = base; c.name = "decreasing"; c.keyword = "decreasing"; c.cu = {0, 10, 9, 20}; c.expected_position = 2; add(c);
  c = base; c.name = "decreasing to negative"; c.keyword = "decreasing"; c.cu = {0, -5}; c.expected_position = 1; add(c);
  c = base; c.name = "cu[N] != total"; c.keyword = "total_tokens"; c.total_tokens = 21; c.expected_position = 2;
  add(c);
  c = base; c.name = "int32 overflow"; c.keyword = "fit out_type"; c.cu = {0, 10, int64_t(1) << 31, (int64_t(1) << 31) + 7};
  c.capacity_rows = 0; c.expected_position = 2; add(c);
  c = base; c.name = "capacity"; c.keyword = "capacity_rows"; c.capacity_rows = 1; add(c);
  c = base; c.name = "negative capacity"; c.keyword = "capacity_rows"; c.capacity_rows = -1; add(c);
  return cases;
}

TEST(ChunkMetadataBadInput, EveryClassIsInvalidArgumentWithItsOwnMessageAndWritesNothing) {
  std::set<std::string> messages;
  for (const BadCase& bad : bad_cases()) {
    SCOPED_TRACE(bad.name);
    const int64_t n_seq = bad.num_sequences == -2 ? int64_t(bad.cu.size()) - 1 : bad.num_sequences;
    Outputs out(bad.out_type, 1000, int64_t(bad.cu.size()));
    int64_t nt = kSentinel;
    int64_t position = kSentinel;
    const Status s = kda::build_chunk_metadata(
        bad.null_cu ? nullptr : bad.cu.data(), IndexType::kInt64, n_seq, bad.chunk_size, bad.total_tokens,
        bad.out_type, bad.null_indices ? nullptr : out.indices(), bad.capacity_rows,
        bad.null_offsets ? nullptr : out.offsets(), bad.null_num_chunks ? nullptr : &nt, &position);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.message()).find(bad.keyword), std::string::npos) << "message: " << s.message();
    EXPECT_EQ(position, bad.expected_position);
    EXPECT_EQ(nt, kSentinel);
    EXPECT_TRUE(out.untouched());
    messages.insert(s.message());
  }
  // Classes, not cases: the five bad chunk sizes share one message, as do the two decreasing and capacity cases.
  EXPECT_EQ(messages.size(), bad_cases().size() - 4 - 1 - 1);
}

TEST(ChunkMetadataBadInput, CountChunksReportsTheSameErrors) {
  const int64_t decreasing[] = {0, 10, 20, 19, 30};
  int64_t nt = kSentinel, position = kSentinel;
  Status s = kda::count_chunks(decreasing, IndexType::kInt64, 4, 64, -1, &nt, &position);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("decreasing"), std::string::npos);
  EXPECT_EQ(position, 3);
  EXPECT_EQ(nt, kSentinel);

  const int32_t bad_start[] = {1, 10};
  s = kda::count_chunks(bad_start, IndexType::kInt32, 1, 64, -1, &nt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::count_chunks(bad_start, IndexType::kInt32, 1, 64, -1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::count_chunks(nullptr, IndexType::kInt32, 1, 64, -1, &nt).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nt, kSentinel);

  // longest_sequence validates the same way and writes nothing on error.
  position = kSentinel;
  s = kda::longest_sequence(decreasing, IndexType::kInt64, 4, -1, &nt, &position);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("decreasing"), std::string::npos);
  EXPECT_EQ(position, 3);
  EXPECT_EQ(kda::longest_sequence(decreasing, IndexType::kInt64, 4, -1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nt, kSentinel);

  // A bad index-type enum value is rejected, not read as int32.
  const int64_t ok[] = {0, 10};
  EXPECT_EQ(kda::count_chunks(ok, static_cast<IndexType>(7), 1, 64, -1, &nt).code(), StatusCode::kInvalidArgument);
  int32_t offsets[2] = {kSentinel, kSentinel};
  int32_t indices[2] = {kSentinel, kSentinel};
  s = kda::build_chunk_metadata(ok, IndexType::kInt64, 1, 64, 10, static_cast<IndexType>(7), indices, 1, offsets, &nt);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(offsets[0], kSentinel);

  // The vector convenience.
  kda::ChunkMetadata meta;
  meta.num_chunks = 77;
  EXPECT_EQ(kda::build_chunk_metadata({}, 64, &meta).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::build_chunk_metadata({0, 5, 4}, 64, &meta).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::build_chunk_metadata({0, 5}, 64, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(meta.num_chunks, 77);
}

// ---- int32 overflow ------------------------------------------------------------------------------------------------
// A real batch with T > 2^31 has > 2^25 chunks (a 0.5 GiB int64 table), so the int64 side is shown through
// count_chunks and through the check order: an int64 build gets past the overflow check and stops at capacity.

TEST(ChunkMetadataOverflow, Int32TablesRejectTokenOffsetsAbove2To31) {
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  const std::vector<int64_t> fits = {0, 1000, int32_max};
  const std::vector<int64_t> overflows = {0, 1000, int32_max + 1, int32_max + 100};
  int64_t nt = -1, position = kSentinel;
  int64_t indices[2] = {kSentinel, kSentinel}, offsets[4] = {kSentinel, kSentinel, kSentinel, kSentinel};

  // int32 out: T = INT32_MAX still fits (stops only at the too-small capacity); 2^31 does not.
  Status s = kda::build_chunk_metadata(fits.data(), IndexType::kInt64, 2, 64, -1, IndexType::kInt32, indices, 1,
                                       offsets, &nt, &position);
  EXPECT_NE(std::string(s.message()).find("capacity_rows"), std::string::npos) << s.message();
  s = kda::build_chunk_metadata(overflows.data(), IndexType::kInt64, 3, 64, -1, IndexType::kInt32, indices, 1, offsets,
                                &nt, &position);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("fit out_type"), std::string::npos) << s.message();
  EXPECT_EQ(position, 2);
  EXPECT_EQ(kda::build_chunk_metadata(overflows, 64, IndexType::kInt32, nullptr).code(), StatusCode::kInvalidArgument);
  kda::ChunkMetadata meta;
  EXPECT_EQ(kda::build_chunk_metadata(overflows, 64, IndexType::kInt32, &meta).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(meta.num_chunks, 0);

  // int64 out: the same batch passes every value check.
  s = kda::build_chunk_metadata(overflows.data(), IndexType::kInt64, 3, 64, -1, IndexType::kInt64, indices, 1, offsets,
                                &nt, &position);
  EXPECT_NE(std::string(s.message()).find("capacity_rows"), std::string::npos) << s.message();
  EXPECT_EQ(position, -1);
  ASSERT_TRUE(kda::count_chunks(overflows.data(), IndexType::kInt64, 3, 64, -1, &nt).is_ok());
  EXPECT_EQ(nt, 16 + kda::num_chunks_of(int32_max + 1 - 1000, 64) + kda::num_chunks_of(99, 64));
  EXPECT_EQ(indices[0], kSentinel);
  EXPECT_EQ(offsets[0], kSentinel);

  // Near INT64_MAX the chunk count must not overflow either.
  const int64_t huge[] = {0, std::numeric_limits<int64_t>::max()};
  ASSERT_TRUE(kda::count_chunks(huge, IndexType::kInt64, 1, 16, -1, &nt).is_ok());
  EXPECT_EQ(nt, std::numeric_limits<int64_t>::max() / 16 + 1);
}

// ---- Batch kinds ---------------------------------------------------------------------------------------------------

TEST(ChunkMetadataBatchKinds, PrefillOnly) {
  std::vector<int64_t> cu;
  ASSERT_TRUE(kda::make_prefill_cu_seqlens({100, 0, 64, 1}, &cu).is_ok());
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 100, 100, 164, 165}));
  ASSERT_TRUE(kda::make_prefill_cu_seqlens({}, &cu).is_ok());
  EXPECT_EQ(cu, (std::vector<int64_t>{0}));

  kda::ChunkMetadata meta;
  ASSERT_TRUE(kda::build_prefill_chunk_metadata({100, 0, 64, 1}, 64, IndexType::kInt64, &meta).is_ok());
  EXPECT_EQ(meta.type, IndexType::kInt64);
  EXPECT_EQ(meta.num_sequences, 4);
  EXPECT_EQ(meta.chunk_indices, (std::vector<int64_t>{0, 0, 0, 1, 2, 0, 3, 0}));
  EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 2, 2, 3, 4}));

  cu = {42};
  EXPECT_EQ(kda::make_prefill_cu_seqlens({10, -1}, &cu).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::make_prefill_cu_seqlens({std::numeric_limits<int64_t>::max(), 1}, &cu).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::make_prefill_cu_seqlens({1}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cu, (std::vector<int64_t>{42}));
  meta.num_chunks = 77;
  EXPECT_EQ(kda::build_prefill_chunk_metadata({10, -1}, 64, IndexType::kInt32, &meta).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::build_prefill_chunk_metadata({10}, 48, IndexType::kInt32, &meta).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(meta.num_chunks, 77);
}

TEST(ChunkMetadataBatchKinds, DecodesMixedWithPrefills) {
  // 3 decodes then prefills of 100 and 64 tokens (vLLM's decode-first non-spec batch).
  std::vector<int64_t> cu;
  ASSERT_TRUE(kda::make_decode_prefill_cu_seqlens(3, {100, 64}, &cu).is_ok());
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 1, 2, 3, 103, 167}));

  kda::ChunkMetadata meta;
  ASSERT_TRUE(kda::build_decode_prefill_chunk_metadata(3, {100, 64}, 64, IndexType::kInt32, &meta).is_ok());
  EXPECT_EQ(meta.num_sequences, 5);
  EXPECT_EQ(meta.num_chunks, 6);  // one chunk per decode, 2 + 1 for the prefills
  EXPECT_EQ(meta.chunk_indices, (std::vector<int64_t>{0, 0, 1, 0, 2, 0, 3, 0, 3, 1, 4, 0}));
  EXPECT_EQ(meta.chunk_offsets, (std::vector<int64_t>{0, 1, 2, 3, 5, 6}));

  // The benchmark's mix: 56 decodes and 8 prefills.
  const std::vector<int64_t> prefills = {1000, 777, 64, 65, 2048, 1, 900, 1979};
  ASSERT_TRUE(kda::make_decode_prefill_cu_seqlens(56, prefills, &cu).is_ok());
  ASSERT_EQ(cu.size(), 65u);
  EXPECT_EQ(cu[56], 56);
  EXPECT_EQ(cu.back(), 56 + 1000 + 777 + 64 + 65 + 2048 + 1 + 900 + 1979);
  for (int bt : kChunkSizes) {
    ASSERT_TRUE(kda::build_decode_prefill_chunk_metadata(56, prefills, bt, IndexType::kInt32, &meta).is_ok());
    const Expected expected = brute_force(cu, bt);
    EXPECT_EQ(meta.chunk_indices, expected.chunk_indices);
    EXPECT_EQ(meta.chunk_offsets, expected.chunk_offsets);
    for (int64_t d = 0; d < 56; ++d) EXPECT_EQ(meta.chunk_offsets[size_t(d)], d);  // decode d owns chunk d
  }
  expect_matches_all_types(cu);

  // Decodes only, prefills only.
  ASSERT_TRUE(kda::make_decode_prefill_cu_seqlens(2, {}, &cu).is_ok());
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 1, 2}));
  ASSERT_TRUE(kda::make_decode_prefill_cu_seqlens(0, {5}, &cu).is_ok());
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 5}));

  EXPECT_EQ(kda::make_decode_prefill_cu_seqlens(-1, {5}, &cu).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::make_decode_prefill_cu_seqlens(1, {-5}, &cu).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cu, (std::vector<int64_t>{0, 5}));
}

TEST(ChunkMetadataBatchKinds, SpeculativeBatchOf256SequencesOf8Tokens) {
  std::vector<int64_t> cu;
  ASSERT_TRUE(kda::make_spec_cu_seqlens(256, 8, &cu).is_ok());
  ASSERT_EQ(cu.size(), 257u);
  for (size_t n = 0; n < cu.size(); ++n) EXPECT_EQ(cu[n], int64_t(8 * n));

  for (int bt : kChunkSizes) {
    kda::ChunkMetadata meta;
    ASSERT_TRUE(kda::build_spec_chunk_metadata(256, 8, bt, IndexType::kInt32, &meta).is_ok());
    ASSERT_EQ(meta.num_chunks, 256);  // one chunk per sequence for every BT >= 8
    for (int64_t n = 0; n < 256; ++n) {
      EXPECT_EQ(meta.chunk_indices[size_t(2 * n)], n);
      EXPECT_EQ(meta.chunk_indices[size_t(2 * n + 1)], 0);
      EXPECT_EQ(meta.chunk_offsets[size_t(n)], n);
    }
    EXPECT_EQ(meta.chunk_offsets.back(), 256);
  }
  expect_matches_all_types(cu);

  ASSERT_TRUE(kda::make_spec_cu_seqlens(0, 8, &cu).is_ok());
  EXPECT_EQ(cu, (std::vector<int64_t>{0}));
  EXPECT_EQ(kda::make_spec_cu_seqlens(-1, 8, &cu).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::make_spec_cu_seqlens(4, -8, &cu).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::make_spec_cu_seqlens(int64_t(1) << 40, int64_t(1) << 30, &cu).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cu, (std::vector<int64_t>{0}));
}

// ---- Packed layout for the upload ----------------------------------------------------------------------------------

// A batch whose tables cannot be allocated on the host is an error Status, never an exception through the API.
TEST(ChunkMetadataBatchKinds, ImpossibleAllocationIsAStatusNotAThrow) {
#if defined(__SANITIZE_ADDRESS__)
  // ASan's throwing operator new reports a failed allocation as fatal instead of throwing std::bad_alloc, so this
  // path can only be exercised in the plain build (which runs it).
  GTEST_SKIP() << "not testable under AddressSanitizer; runs in the plain build";
#endif
  std::vector<int64_t> cu{1, 2, 3};
  kda::ChunkMetadata meta;
  const std::vector<int64_t> before = cu;
  EXPECT_EQ(kda::make_spec_cu_seqlens(int64_t(1) << 60, 0, &cu).code(), kda::StatusCode::kInvalidArgument);
  EXPECT_EQ(kda::make_decode_prefill_cu_seqlens(int64_t(1) << 60, {}, &cu).code(), kda::StatusCode::kInvalidArgument);
  EXPECT_EQ(cu, before) << "output untouched on error";
  // 2^50 tokens in one sequence: the table would need 2^45 rows.
  EXPECT_EQ(kda::build_chunk_metadata(std::vector<int64_t>{0, int64_t(1) << 50}, 32, kda::IndexType::kInt64, &meta)
                .code(),
            kda::StatusCode::kInvalidArgument);
  EXPECT_EQ(meta.num_chunks, 0);
}

TEST(ChunkMetadataPacking, Bytes) {
  // int32: NT*2*4 then (N+1)*4; int64: NT*2*8 then (N+1)*8.
  EXPECT_EQ(kda::chunk_metadata_bytes(0, 0, IndexType::kInt32), 4u);
  EXPECT_EQ(kda::chunk_metadata_bytes(3, 3, IndexType::kInt32), 3u * 8 + 4 * 4);
  EXPECT_EQ(kda::chunk_metadata_bytes(3, 3, IndexType::kInt64), 3u * 16 + 4 * 8);
  EXPECT_EQ(kda::chunk_offsets_byte_offset(3, IndexType::kInt32), 24u);
  EXPECT_EQ(kda::chunk_offsets_byte_offset(3, IndexType::kInt64), 48u);
  for (int64_t nt = 0; nt < 100; ++nt) {
    for (IndexType t : kIndexTypes) EXPECT_EQ(kda::chunk_offsets_byte_offset(nt, t) % 8, 0u);
  }
  EXPECT_EQ(kda::chunk_metadata_bytes(-1, 3, IndexType::kInt32), 0u);
  EXPECT_EQ(kda::chunk_metadata_bytes(3, -1, IndexType::kInt32), 0u);
  static_assert(kda::chunk_metadata_bytes(1, 1, IndexType::kInt64) == 32, "usable at compile time");
}

TEST(ChunkMetadataPacking, LayoutIsIndicesThenOffsets) {
  const std::vector<int64_t> cu = cu_from_lengths({100, 0, 64, 1, 0});
  for (int bt : kChunkSizes) {
    for (IndexType cu_type : kIndexTypes) {
      for (IndexType out_type : kIndexTypes) {
        const Expected expected = brute_force(cu, bt);
        const std::vector<unsigned char> cu_bytes = as_index_bytes(cu, cu_type);
        const int64_t n_seq = int64_t(cu.size()) - 1;
        const size_t bytes = kda::chunk_metadata_bytes(expected.num_chunks(), n_seq, out_type);
        std::vector<uint64_t> staging(bytes / 8 + 2, 0xA5A5A5A5A5A5A5A5ull);  // 8-byte aligned
        int64_t nt = -1;
        size_t packed = 0;
        ASSERT_TRUE(kda::pack_chunk_metadata(cu_bytes.data(), cu_type, n_seq, bt, cu.back(), out_type, staging.data(),
                                             bytes, &nt, &packed)
                        .is_ok());
        ASSERT_EQ(nt, expected.num_chunks());
        EXPECT_EQ(packed, bytes);
        const unsigned char* base = reinterpret_cast<const unsigned char*>(staging.data());
        const void* offsets = base + kda::chunk_offsets_byte_offset(nt, out_type);
        for (size_t i = 0; i < expected.chunk_indices.size(); ++i) {
          EXPECT_EQ(load(base, out_type, i), expected.chunk_indices[i]);
        }
        for (size_t i = 0; i < expected.chunk_offsets.size(); ++i) {
          EXPECT_EQ(load(offsets, out_type, i), expected.chunk_offsets[i]);
        }
        for (size_t b = bytes; b < staging.size() * 8; ++b) EXPECT_EQ(base[b], 0xA5) << "wrote past the packed bytes";
      }
    }
  }
}

TEST(ChunkMetadataPacking, BadStagingWritesNothing) {
  const int64_t cu[] = {0, 100, 164};  // NT = 3 at BT = 64
  const size_t bytes = kda::chunk_metadata_bytes(3, 2, IndexType::kInt32);
  std::vector<uint64_t> staging(8, 0xA5A5A5A5A5A5A5A5ull);
  const std::vector<uint64_t> untouched = staging;
  int64_t nt = kSentinel;
  size_t packed = 12345;
  char* aligned = reinterpret_cast<char*>(staging.data());
  Status s = kda::pack_chunk_metadata(cu, IndexType::kInt64, 2, 64, 164, IndexType::kInt32, aligned, bytes - 1, &nt,
                                      &packed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("staging_bytes"), std::string::npos) << s.message();
  s = kda::pack_chunk_metadata(cu, IndexType::kInt64, 2, 64, 164, IndexType::kInt32, aligned + 4, bytes, &nt, &packed);
  EXPECT_NE(std::string(s.message()).find("aligned"), std::string::npos) << s.message();
  s = kda::pack_chunk_metadata(cu, IndexType::kInt64, 2, 64, 164, IndexType::kInt32, nullptr, bytes, &nt, &packed);
  EXPECT_NE(std::string(s.message()).find("staging buffer is null"), std::string::npos) << s.message();
  s = kda::pack_chunk_metadata(cu, IndexType::kInt64, 2, 64, 165, IndexType::kInt32, aligned, bytes, &nt, &packed);
  EXPECT_NE(std::string(s.message()).find("total_tokens"), std::string::npos) << s.message();
  EXPECT_EQ(kda::pack_chunk_metadata(cu, IndexType::kInt64, 2, 64, 164, IndexType::kInt32, aligned, bytes, nullptr,
                                     &packed)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(staging, untouched);
  EXPECT_EQ(nt, kSentinel);
  EXPECT_EQ(packed, 12345u);
  // The exact size is enough, and packed_bytes may be null.
  EXPECT_TRUE(kda::pack_chunk_metadata(cu, IndexType::kInt64, 2, 64, 164, IndexType::kInt32, aligned, bytes, &nt,
                                       nullptr)
                  .is_ok());
  EXPECT_EQ(nt, 3);
}

}  // namespace
