// Stages 2-4 in one launch, the chunk-parallel "prepare" of chunk_kda_fwd: per (chunk, head), Akk and Aqk on the
// matrix units, Tinv = (I + Akk)^-1, then w, u and kg from that Tinv. Akk and Tinv never leave the chip: Aqk, w, u
// and kg are the only outputs. The block runs the intra-chunk stage's code (intra_chunk_mma_block) and then the
// w/u stage's (recompute_w_u_mma_block) with Tinv read from shared memory, so every output is bit-identical to the
// two stage kernels with Tinv passed through memory. This saves Tinv's write and read (T x H x BT fp32 each way),
// one launch, and Akk and Tinv in chunk_kda_fwd's workspace.
//
// Requirements (the launcher checks): q, k vector_aligned, K and V in {64, 128}; k, w, u, kg vector_aligned; v may
// be any view (its rows are loaded 16 bytes at a time when it is vector_aligned, else per element). One block of
// kIntraMmaWarps (= kWuMmaWarps) warps keeps the intra kernel's occupancy bound: the w/u part reuses the intra
// part's shared memory, loads v directly instead of staging it, and issues its right-hand-side loads in pairs so
// that it fits the same registers.
#pragma once

#include "kda/chunk_prepare_short_mma.hpp"
#include "kda/intra_chunk_mma.hpp"
#include "kda/recompute_w_u_mma.hpp"

namespace kda::kernels {

template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize, ActiveTuning::kIntraMmaMinBlocks)
    chunk_prepare_mma_kernel(const KDA_GRID_CONSTANT IntraChunkParams ip, const KDA_GRID_CONSTANT RecomputeWuParams wp,
                             bool v_vector) {
  static_assert(kIntraMmaWarps == kWuMmaWarps, "both stages' code runs in the same block");
  using IntraL = IntraMmaLayout<BT>;
  using WuL = WuMmaLayout<BT, K, V, /*kStageV=*/false>;
  constexpr size_t kBytes = size_t(IntraL::kWorkBytes) > WuL::kBytes ? size_t(IntraL::kWorkBytes) : WuL::kBytes;
  // The short path (chunk_prepare_short_mma.hpp) for BT = 64, the chunk size it was measured on, within the same
  // shared memory, so that the long path keeps its occupancy.
  constexpr bool kShortPath = BT == 64;
  static_assert(!kShortPath || ShortPrepareLayout<K, V>::kBytes <= kBytes, "the short path fits the long one's smem");
  __shared__ __align__(16) unsigned char smem[kBytes];
  __shared__ float beta_s[BT];
  __shared__ float glast_s[K];
  detail::allow_dependent_launch();  // the state kernel may take the multiprocessors this grid's last blocks leave
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(ip.chunks, detail::block_chunk_id(), &chunk)) return;
  const int h = detail::block_head();
  if (kShortPath && chunk.length <= kShortChunkRows) {  // uniform over the block
    chunk_prepare_short_block<E, BT, K, V>(ip, wp, chunk, h, smem, beta_s, v_vector);
    return;
  }
  intra_chunk_mma_block<E, BT>(ip, chunk, h, smem, beta_s, /*invert=*/true);
  // Tinv as the intra kernel would have written it: columns past the chunk masked to zero.
  const float* t_s = reinterpret_cast<const float*>(smem) + IntraL::kTinvOffsetFloats;
  auto tinv_row4 = [&](int i, int j) {
    return mask_columns(*reinterpret_cast<const float4*>(&t_s[i * IntraL::kLdO + j]), j, chunk.length, 1.0f);
  };
  // One row tile of w / u per warp here, not recompute_w_u_mma_block's paired row tiles: with those, ptxas spilled
  // in this kernel's slice loop and it ran slower (see docs/performance.md, "w/u row tiles").
  recompute_w_u_mma_block<E, BT, K, V, /*kStageV=*/false, /*kTinvShared=*/true, /*kGroupMax=*/2, /*kRhsInW=*/false,
                          /*kPairRowTiles=*/false>(
      wp, chunk, h, reinterpret_cast<uint16_t*>(smem), beta_s, /*beta_ready=*/true, glast_s, tinv_row4, v_vector);
}

// The block of chunk_kda_fwd's first launch (the kernels below): chunk_prepare_mma_kernel's work, starting from the
// raw inputs instead of the l2norm and gate stages' outputs (ip.q, ip.k, wp.k are the raw q, k; ip.G and wp.G are
// unused). The block normalises q and k itself (qk_row_inv_norms), forms G slice by slice, and writes qg (for the
// output stage), kg, and w's right-hand side into wp.w during the intra part, plus G_last (for the state stage); the
// w/u part then needs neither k nor G. Every output equals the stage pipeline's (l2norm, gate, this kernel's staged
// form, and the output stage's qg) bit for bit. Requirements (the launcher checks): K and V in {64, 128}; w, u, kg,
// qg vector_aligned; q, k, g, v any views. kShortChunks (chunk size 64): chunks of at most kShortChunkRows rows take
// the short path from the raw inputs (chunk_prepare_inputs_short_block), with the same bits.
// v_pre_s (long path, NVIDIA): BT x V 16-bit values of shared memory where the chunk's v rows go by asynchronous
// copies when the block starts, so that the w/u part finds them there instead of waiting on their loads at its end;
// null: the w/u part loads them.
template <typename E, int BT, int K, int V, bool kShortChunks>
__device__ __forceinline__ void chunk_prepare_inputs_block(const IntraChunkParams& ip, const RecomputeWuParams& wp,
                                                           const PrepareInputsParams& in, bool v_vector,
                                                           unsigned char* smem, float* beta_s, float* inputs_s,
                                                           uint16_t* v_pre_s = nullptr) {
  static_assert(kIntraMmaWarps == kWuMmaWarps, "both stages' code runs in the same block");
  static_assert(!kShortChunks || BT == 64, "the short path is built for chunks of 64");
  constexpr int kThreads = kIntraMmaWarps * kWarpSize;
  using IntraL = IntraMmaLayout<BT>;
  // The state kernel, launched beside this grid (launch_state_mma's beside_prepare), may start once every block has
  // let it or exited: each block lets it at the end of its work, not at its start. At the start it cost 2.5-5 %
  // after the kernel with the short path, for reasons not known
  // (see docs/performance.md, "State launch beside the prepare").
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(ip.chunks, detail::block_chunk_id(), &chunk)) return;
  const int h = detail::block_head();
  if (kShortChunks && chunk.length <= kShortChunkRows) {  // uniform over the block
    chunk_prepare_inputs_short_block<E, BT, K, V>(ip, wp, in, chunk, h, smem, beta_s, v_vector);
    detail::allow_dependent_launch();
    return;
  }
  // The v rows first: they have the whole intra part to land (the slice loop's first wait for its own copies waits
  // for these too, and its barriers publish them). Rows past the chunk are zero-filled.
  const uint16_t* v_pre = v_vector ? v_pre_s : nullptr;
  static_assert((BT * (V / 8)) % kThreads == 0, "whole v rows per thread");
  if (v_pre != nullptr) {
#pragma unroll
    for (int x = 0; x < BT * (V / 8) / kThreads; ++x) {
      const int u = threadIdx.x + x * kThreads, j = u / (V / 8), d = (u % (V / 8)) * 8;
      const bool valid = j < chunk.length;
      const uint16_t* src = static_cast<const uint16_t*>(wp.v.data) +
                            detail::element_offset(wp.v, chunk.start + (valid ? j : 0), h, d);
      detail::copy16_async_zfill(&v_pre_s[j * V + d], src, valid);
    }
  }
  for (int d = threadIdx.x; d < K; d += kThreads)
    inputs_s[2 * BT + K + d] = in.dt_bias != nullptr ? in.dt_bias[int64_t(h) * K + d] : 0.0f;
  if (in.qk_l2norm) qk_row_inv_norms<E, BT, K, kThreads>(ip.q, ip.k, in.qk_vector, chunk, h, inputs_s);
  // (The intra part's slice loop starts with a barrier: the norms and biases are visible before their first use.)
  // The exact diagonal pairs in slots of their own only with the short path: without it, at 128 registers, ptxas
  // spills in the slice loop (see docs/performance.md, "Exact triangle pairs"). The gate sum from the raw gates only
  // without the short path, the one kernel where it measured faster (see docs/performance.md, "Gate sum").
  intra_chunk_mma_block<E, BT, /*kFromInputs=*/true, /*kDiagonalSlots=*/kShortChunks,
                        /*kGateSumFromRaw=*/!kShortChunks>(
      ip, chunk, h, smem, beta_s, /*invert=*/true, &in, inputs_s, wp.w, wp.kg);
  const float* t_s = reinterpret_cast<const float*>(smem) + IntraL::kTinvOffsetFloats;
  auto tinv_row4 = [&](int i, int j) {
    return mask_columns(*reinterpret_cast<const float4*>(&t_s[i * IntraL::kLdO + j]), j, chunk.length, 1.0f);
  };
  recompute_w_u_mma_block<E, BT, K, V, /*kStageV=*/false, /*kTinvShared=*/true, /*kGroupMax=*/2, /*kRhsInW=*/true>(
      wp, chunk, h, reinterpret_cast<uint16_t*>(smem), beta_s, /*beta_ready=*/true, inputs_s + 2 * BT, tinv_row4,
      v_vector, v_pre);
  detail::allow_dependent_launch();  // at the end of the block's work (see above)
}

// Shared memory of chunk_prepare_inputs_block: the intra and w/u parts' work area, the betas and inputs_s.
template <int BT, int K, int V>
struct PrepareInputsBlockShared {
  static constexpr size_t kIntra = IntraMmaLayout<BT>::kFusedWorkBytes;  // with the raw slice (intra_chunk_mma_block)
  static constexpr size_t kWu = WuMmaLayout<BT, K, V, /*kStageV=*/false>::kBytes;
  static constexpr size_t kBytes = kIntra > kWu ? kIntra : kWu;
};

// chunk_kda_fwd's first launch for batches whose sequences average at least four chunks: the long path only. On
// NVIDIA it takes prepare_inputs_v_bytes<BT, V>() of dynamic shared memory for the chunk's v rows (v_pre_s above):
// ~56 KB per block in all, still four blocks per multiprocessor.
template <int BT, int V>
constexpr size_t prepare_inputs_v_bytes() {
#if defined(KDA_PLATFORM_CUDA)
  return sizeof(uint16_t) * BT * V;
#else
  return 0;  // no asynchronous copy: the w/u part loads v
#endif
}
template <int BT, int K, int V>
constexpr size_t prepare_inputs_static_bytes() {
  return PrepareInputsBlockShared<BT, K, V>::kBytes + sizeof(float) * (BT + PrepareInputsShared<BT, K>::kFloats);
}
template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize, ActiveTuning::kPrepareInputsMinBlocks)
    chunk_prepare_inputs_mma_kernel(IntraChunkParams ip, RecomputeWuParams wp, PrepareInputsParams in,
                                    bool v_vector) {
  __shared__ __align__(16) unsigned char smem[PrepareInputsBlockShared<BT, K, V>::kBytes];
  __shared__ float beta_s[BT];
  __shared__ __align__(16) float inputs_s[PrepareInputsShared<BT, K>::kFloats];  // see intra_chunk_mma_block
#if defined(KDA_PLATFORM_CUDA)
  extern __shared__ __align__(16) uint16_t prepare_v_s[];  // prepare_inputs_v_bytes<BT, V>()
  uint16_t* v_pre_s = prepare_v_s;
#else
  uint16_t* v_pre_s = nullptr;
#endif
  chunk_prepare_inputs_block<E, BT, K, V, /*kShortChunks=*/false>(ip, wp, in, v_vector, smem, beta_s, inputs_s,
                                                                   v_pre_s);
}

// chunk_kda_fwd's first launch for batches of short sequences (chunk size 64): with the short path for chunks of at
// most kShortChunkRows rows. A kernel of its own: the short path's mere presence makes ptxas allocate the long path
// worse. ActiveTuning::kIntraMmaMinBlocks blocks per SM: the short path runs without spills, and at four its latency
// showed (see docs/performance.md, "Prepare kernel with the short path"). Its parameters are KDA_GRID_CONSTANT so
// that the short path's call (not inlined on NVIDIA) passes their address instead of a copy.
template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize, ActiveTuning::kIntraMmaMinBlocks)
    chunk_prepare_inputs_short_mma_kernel(const KDA_GRID_CONSTANT IntraChunkParams ip,
                                          const KDA_GRID_CONSTANT RecomputeWuParams wp,
                                          const KDA_GRID_CONSTANT PrepareInputsParams in, bool v_vector) {
  static_assert(ShortPrepareLayout<K, V>::kBytes <= PrepareInputsBlockShared<BT, K, V>::kBytes,
                "the short path fits the long one's smem");
  __shared__ __align__(16) unsigned char smem[PrepareInputsBlockShared<BT, K, V>::kBytes];
  __shared__ float beta_s[BT];
  __shared__ __align__(16) float inputs_s[PrepareInputsShared<BT, K>::kFloats];
  chunk_prepare_inputs_block<E, BT, K, V, /*kShortChunks=*/true>(ip, wp, in, v_vector, smem, beta_s, inputs_s);
}

// chunk_kda_fwd's first launch where the caller bounds every sequence at kShortChunkRows tokens
// (ChunkMetadataArgs::max_sequence_tokens): the short path alone. Without the long path's code and shared memory it
// fits 80 registers and ~36 KB, so more blocks share an SM (ActiveTuning::kShortOnlyPrepareMinBlocks), which runs
// faster (see docs/performance.md, "Short-only prepare"). A chunk past the bound is reported and left unwritten.
template <typename E, int BT, int K, int V>
__global__ void __launch_bounds__(kIntraMmaWarps * kWarpSize, ActiveTuning::kShortOnlyPrepareMinBlocks)
    chunk_prepare_inputs_short_only_mma_kernel(const KDA_GRID_CONSTANT IntraChunkParams ip,
                                               const KDA_GRID_CONSTANT RecomputeWuParams wp,
                                               const KDA_GRID_CONSTANT PrepareInputsParams in, bool v_vector) {
  static_assert(BT == 64, "the short path is built for chunks of 64");
  __shared__ __align__(16) unsigned char smem[ShortPrepareLayout<K, V>::kBytes];
  __shared__ float beta_s[kShortChunkRows];
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(ip.chunks, detail::block_chunk_id(), &chunk)) return;
  if (chunk.index > 0 || chunk.length > kShortChunkRows) {  // uniform over the block
    if (threadIdx.x == 0) ip.chunks.report(detail::kDeviceStatusSequenceOverBound);
    return;
  }
  chunk_prepare_inputs_short_block<E, BT, K, V, ActiveTuning::kShortOnlyPrepareMinBlocks>(
      ip, wp, in, chunk, detail::block_head(), smem, beta_s, v_vector);
}

}  // namespace kda::kernels
