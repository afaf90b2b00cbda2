// The batches every benchmark runs on (DESIGN.md's comparison table): H=32, K=V=128, bf16, chunk size 64.
// Host-only: lengths come from std::mt19937 seeded with 0, so every machine benchmarks the same batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kda::bench {

constexpr int kHeads = 32;
constexpr int kHeadDimK = 128;
constexpr int kHeadDimV = 128;
constexpr int kChunkSize = 64;

struct BatchSpec {
  std::string name;                // e.g. "varlen16"
  std::string description;         // one line for docs and labels
  std::vector<int64_t> cu_seqlens; // [N+1], cu[0] = 0
  int64_t num_sequences() const { return int64_t(cu_seqlens.size()) - 1; }
  int64_t total_tokens() const { return cu_seqlens.back(); }
};

// single1k, single8k, single32k, varlen16, mixed64, spec256x8 (issue 5's batches), then prefill4x4k and chunked2k (in
// this order).
// Built once, on first use.
const std::vector<BatchSpec>& bench_batches();

// Number of chunks (host NT) of a batch for chunk size kChunkSize.
int64_t batch_num_chunks(const BatchSpec& b);

}  // namespace kda::bench
