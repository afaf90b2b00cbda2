#include "batches.hpp"

#include <random>
#include <stdexcept>

#include "kda/chunk_metadata.hpp"

namespace kda::bench {
namespace {

void check(Status s) {
  if (!s.is_ok()) throw std::runtime_error(s.message());
}

// An integer uniform in [lo, hi]: lo + (mt19937 output mod (hi - lo + 1)). Not std::uniform_int_distribution, whose
// algorithm differs between standard libraries (and libstdc++ versions): mt19937's raw output is fixed by the
// standard, so this gives the same batches everywhere. The modulo bias (< 1e-6 here) does not matter.
int64_t uniform_int(std::mt19937& rng, int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint32_t(hi - lo + 1)); }

BatchSpec single(const char* name, int64_t tokens) {
  std::vector<int64_t> cu;
  check(make_prefill_cu_seqlens({tokens}, &cu));
  return {name, "one sequence of " + std::to_string(tokens) + " tokens", cu};
}

// 16 prefills, lengths uniform in [64, 2047] drawn from std::mt19937(0) (T = 15,860, as in DESIGN.md's table).
BatchSpec varlen16() {
  std::mt19937 rng(0);
  std::vector<int64_t> lengths(16);
  for (int64_t& l : lengths) l = uniform_int(rng, 64, 2047);
  std::vector<int64_t> cu;
  check(make_prefill_cu_seqlens(lengths, &cu));
  return {"varlen16", "16 prefills of 64..2047 tokens (mt19937 seed 0)", cu};
}

// vLLM's decode-first order: 56 decodes of 1..8 tokens (speculative decodes), then 8 prefills of 200..1799 tokens.
// One mt19937(0) draws the 8 prefill lengths first, then the 56 decode lengths (T = 6,890, as in DESIGN.md's table).
BatchSpec mixed64() {
  std::mt19937 rng(0);
  std::vector<int64_t> prefills(8), lengths(56);
  for (int64_t& l : prefills) l = uniform_int(rng, 200, 1799);
  for (int64_t& l : lengths) l = uniform_int(rng, 1, 8);
  lengths.insert(lengths.end(), prefills.begin(), prefills.end());
  std::vector<int64_t> cu;
  check(make_prefill_cu_seqlens(lengths, &cu));
  return {"mixed64", "56 decodes of 1..8 tokens then 8 prefills of 200..1799 (mt19937 seed 0)", cu};
}

// A few long prefills: 4 x 4096 tokens. Between the single sequences and the many short ones: 512 state blocks of
// 32 columns, enough to fill the GPU once or more, where the output folded into the state kernel had measured
// slower than as a launch of its own before the output warps (docs/performance.md, "Output folded into the state
// kernel").
BatchSpec prefill4x4k() {
  std::vector<int64_t> cu;
  check(make_prefill_cu_seqlens({4096, 4096, 4096, 4096}, &cu));
  return {"prefill4x4k", "4 prefills of 4096 tokens", cu};
}

// One step of an engine's chunked prefill: 256 decodes of one token (decode-first, as vLLM lays them out), then a
// 1,792-token prefill chunk that fills a 2,048-token budget. Its sequences average 8 tokens, so the short-sequence
// rules (detail::short_sequence_batch) pick its kernels while one long chain of chunks runs beside the decodes.
BatchSpec chunked2k() {
  std::vector<int64_t> lengths(256, 1);
  lengths.push_back(1792);
  std::vector<int64_t> cu;
  check(make_prefill_cu_seqlens(lengths, &cu));
  return {"chunked2k", "256 decodes of 1 token, then a 1792-token prefill", cu};
}

BatchSpec spec256x8() {
  std::vector<int64_t> cu;
  check(make_spec_cu_seqlens(256, 8, &cu));
  return {"spec256x8", "256 sequences of 8 tokens", cu};
}

}  // namespace

const std::vector<BatchSpec>& bench_batches() {
  static const std::vector<BatchSpec> batches = {
      single("single1k", 1024), single("single8k", 8192), single("single32k", 32768),
      varlen16(),               mixed64(),                spec256x8(),
      prefill4x4k(),            chunked2k(),
  };
  return batches;
}

int64_t batch_num_chunks(const BatchSpec& b) {
  int64_t nt = 0;
  const Status s = count_chunks(b.cu_seqlens.data(), IndexType::kInt64, b.num_sequences(), kChunkSize,
                                b.total_tokens(), &nt);
  return s.is_ok() ? nt : -1;
}

}  // namespace kda::bench
