// Every tuning choice in one table: the thresholds that pick a form or a kernel, the tiles and warps the launchers
// run, and the kernels' blocks per SM. One struct per architecture; ActiveTuning is this build's. Each entry names
// the docs/performance.md section that holds its measurement. Constants fixed by a kernel's code stay with it.
#pragma once

#include <cstdint>

#include "kda/platform.hpp"

namespace kda {

// sm_90 (H100, H200): every entry was measured there.
struct TuningSm90 {
  // ---- Which batch is which: the host knows only T and N (the lengths are on the device) ----
  // Sequences averaging at most this many tokens: the short-sequence kernels take the batch; a caller's bound at or
  // under it runs them alone. Equals their one row tile ("Short-sequence state kernel").
  static constexpr int64_t kShortBatchAverageTokens = 16;
  // Sequences averaging at least this many chunks: long-only prepare, and the fused form in chunks of 32; also where
  // the register-state kernel pays ("Prepare kernel with the short path").
  static constexpr int64_t kLongBatchAverageChunks = 4;

  // ---- Prepare ----
  // Blocks per SM of the long-only fused prepare: 128 registers and the v rows in shared memory; 3 and 5 ran slower
  // ("Prepare occupancy").
  static constexpr int kPrepareInputsMinBlocks = 4;
  // ... of the intra stage, the staged prepare and the prepare with the short path: the fifth block hides more
  // latency than the spills at 96 registers cost ("Prepare occupancy").
  static constexpr int kIntraMmaMinBlocks = 5;
  // ... of the short-only prepare: without the long path it fits 80 registers and ~36 KB ("Short-only prepare").
  static constexpr int kShortOnlyPrepareMinBlocks = 6;
  // Form of the warp-per-item prepare wherever it can run (0: never): 2, no spills, beat 1 ("Warp-per-item prepare").
  static constexpr int kWarpShortDefaultForm = 2;
  // Its blocks per SM in form 1 (128 registers, ~240 bytes of spills) and form 2 (168, none), and its items (warps)
  // per block: four blocks of three fill form 2's registers ("Warp-per-item prepare").
  static constexpr int kWarpShortMinBlocks = 5;
  static constexpr int kWarpShortMinBlocksNoSpill = 4;
  static constexpr int kWarpShortWarps = 3;

  // ---- State recurrence ----
  // V columns per block of the general kernel: the wide tile shares staging w and kg, so it runs wherever
  // N x H x V / kStateWideTileV still gives kStateWideTileMinBlocks blocks ("State tile width").
  static constexpr int kStateNarrowTileV = 32;
  static constexpr int kStateWideTileV = 64;
  static constexpr int64_t kStateWideTileMinBlocks = 256;
  // Warps per block: 8 share a long chain's step on the 32- and 64-column tiles; 4 on the 16-column tiles (tests,
  // forced runs) ("State warps per block").
  static constexpr int kStateMmaWarps = 4;
  static constexpr int kStateMmaWideWarps = 8;
  // Blocks per SM: 3 at 4 warps up to 32 columns hide thousands of short items' latency; 2 at 8 warps or 64 columns
  // ("State warps per block").
  static constexpr int kStateMmaMinBlocks = 3;
  static constexpr int kStateMmaWideMinBlocks = 2;
  // Output warps beside the chain's on the folded 32-column tiles (named barriers): one o tile each; 4 ran slower
  // ("Output warps").
  static constexpr int kStateOutputWarps = 8;
  // Warps per block of the register-state kernel where the 64-column tiles would run a long batch (0: never)
  // ("Register-state kernel").
  static constexpr int kStateRegsWarps = 8;
  // Sequences a state block ranks by length to take the longest first; past it, from the last item back. More costs
  // the decode blocks, and shared memory near the carveout ("State item order").
  static constexpr int kStateSortedSequences = 32;
  // The short-sequence state kernel for short batches: it keeps the fp32 states' loads in flight
  // ("Short-sequence state kernel").
  static constexpr bool kShortStateKernel = true;
  // Its persistent blocks per SM: 128 registers, ~90 KB of shared memory each at K = 128
  // ("Short-sequence state kernel").
  static constexpr int kShortStateMinBlocks = 2;
  // Blocks of the long-item kernel beside it, in multiples of the resident blocks: enough that no two long items
  // share a block; blocks without one exit after a load ("Short-sequence state kernel").
  static constexpr int64_t kLongItemWaves = 8;
};

// Targets never measured (gfx90a, other AMD targets; HIP's host pass, which sees no target): sm_90's entries, as AMD
// has always run, but no kernel measured on NVIDIA only. The NVIDIA-only kernels (register-state, output warps,
// warp-per-item prepare) are refused by capability (kPlatformNvidia, kNamedBarriers), whatever the entries say.
struct TuningDefault : TuningSm90 {
  // Not by itself: ~97 KB of shared memory exceed 64 KiB of LDS per block on gfx90a and gfx942; never measured.
  static constexpr bool kShortStateKernel = false;
};

// gfx942 (MI300): never measured, so the default's entries. HIP reads blocks per SM as waves per EU.
struct TuningGfx942 : TuningDefault {};

// gfx950 (MI355X): never measured, so the default's entries; its 160 KiB of LDS would fit the short state kernel.
struct TuningGfx950 : TuningDefault {};

#if defined(KDA_PLATFORM_CUDA)
using ActiveTuning = TuningSm90;
#elif defined(__gfx950__)
using ActiveTuning = TuningGfx950;
#elif defined(__gfx942__)
using ActiveTuning = TuningGfx942;
#else
using ActiveTuning = TuningDefault;
#endif

// HIP compiles the host code once for all targets, with TuningDefault: every entry the host reads must be the same
// in each AMD struct. Only the kernels' blocks per SM (and the state blocks' ranking) may differ per target.
template <typename A, typename B>
constexpr bool same_host_tuning() {
  return A::kShortBatchAverageTokens == B::kShortBatchAverageTokens &&
         A::kLongBatchAverageChunks == B::kLongBatchAverageChunks &&
         A::kWarpShortDefaultForm == B::kWarpShortDefaultForm && A::kWarpShortMinBlocks == B::kWarpShortMinBlocks &&
         A::kWarpShortMinBlocksNoSpill == B::kWarpShortMinBlocksNoSpill && A::kWarpShortWarps == B::kWarpShortWarps &&
         A::kStateNarrowTileV == B::kStateNarrowTileV && A::kStateWideTileV == B::kStateWideTileV &&
         A::kStateWideTileMinBlocks == B::kStateWideTileMinBlocks && A::kStateMmaWarps == B::kStateMmaWarps &&
         A::kStateMmaWideWarps == B::kStateMmaWideWarps && A::kStateOutputWarps == B::kStateOutputWarps &&
         A::kStateRegsWarps == B::kStateRegsWarps && A::kShortStateKernel == B::kShortStateKernel &&
         A::kLongItemWaves == B::kLongItemWaves;
}
static_assert(same_host_tuning<TuningGfx942, TuningDefault>() && same_host_tuning<TuningGfx950, TuningDefault>(),
              "HIP's host pass runs TuningDefault's launch choices for every AMD target");

}  // namespace kda
