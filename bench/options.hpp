// Run-time options of kda_bench beyond Google Benchmark's own flags (parsed in main.cpp, documented in
// docs/benchmarks.md).
#pragma once

#include "batches.hpp"

namespace kda::bench {

struct BenchOptions {
  int calls = 20;      // --kda_calls=N: back-to-back calls between the two GPU events of one timed iteration
  int warmup = 3;      // --kda_warmup=N: untimed calls before the first timed iteration
  bool graph = false;  // --kda_graph: time the N calls as one captured graph (host time is still a direct call)
  // --kda_heads=N: heads of every benchmark's problem (default the batches' 32). For studies of how a stage scales
  // with the number of blocks at a fixed chain length (e.g. whether the state kernel is bound by L2 bandwidth);
  // the benchmark names stay the same, the label says H
  int heads = kHeads;
  // --kda_state_v_tile=N: V-tile width of the state_with_h stage benchmark, and of state_recurrence where the output
  // is not folded in (0 = launcher's)
  int state_v_tile = 0;
  int state_warps = 0;   // --kda_state_warps=N: warps per block of the same benchmarks (4 or 8; 0 = launcher's)
  // --kda_state_output_warps=N: output warps of the state_recurrence stage benchmark where the output is folded in
  // (0 or 8; -1 = launcher's, the default)
  int state_output_warps = -1;
  // --kda_state_short_sequences=N: the state_recurrence stage benchmarks where the output is folded in force
  // StateRecurrenceArgs::short_sequences (0: the general kernel takes every sequence, 1: the short-sequence kernel;
  // -1 = launcher's, the default)
  int state_short_sequences = -1;
  // --kda_state_fixed_share: the same benchmarks pass the short-sequence kernel no item counter, so that it runs its
  // plain form (a fixed share of the items per block, after the long sequences; no memset before each launch)
  bool state_fixed_share = false;
  // --kda_state_regs_warps=N: the state launch where the output is folded in (the state_recurrence stage benchmark
  // and the end-to-end ones) forces StateRecurrenceArgs::regs_warps (0: not the register-state kernel; 2, 4, 8: it,
  // with that many warps per block; -1 = launcher's, the default)
  int state_regs_warps = -1;
  // --kda_warp_short=N: the fused form's prepare (the prepare_inputs stage benchmark and the end-to-end ones) forces
  // ChunkPrepareInputsArgs::warp_short (0: not the warp-per-item kernel; 1, 2: it, at 128 or 168 registers; -1 =
  // launcher's, the default)
  int warp_short = -1;
  // --kda_output_separate: the end-to-end benchmarks run chunk_kda_fwd with the output as a launch of its own
  // (detail::ChunkKdaOutput::kSeparate, per-chunk h in a workspace sized for it), to compare with the folded form
  bool output_separate = false;
  // --kda_staged: the end-to-end benchmarks run chunk_kda_fwd's staged form (detail::ChunkKdaPath::kStaged: l2norm,
  // gate and prepare as launches of their own) wherever the sizes would pick the fused one, to compare the two forms
  bool staged = false;
  // --kda_derived_bound: the derived-table benchmarks also pass the longest sequence as
  // ChunkMetadataArgs::max_sequence_tokens (kda::longest_sequence on the host cu_seqlens), as an engine that knows
  // its max_query_len but builds no tables would; the builder mode passes it always
  bool derived_bound = false;
};

inline BenchOptions& bench_options() {
  static BenchOptions options;
  return options;
}

}  // namespace kda::bench
