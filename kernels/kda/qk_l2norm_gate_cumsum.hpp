// Stages 0 and 1 in one launch: the q/k l2norm of a chunk's rows and its gate + chunk cumsum, one block per
// (chunk, head). chunk_kda_fwd runs this instead of two launches whenever the l2norm can move 16-byte vectors
// (vector_aligned q, k and outputs): one launch less on the host, and the two memory-bound stages share one ramp
// and one tail on the GPU. Each half is the code of its own stage kernel (l2norm_store_row_vec,
// gate_cumsum_chunk), so the results are bit-identical to the two separate launches.
//
// D threads per block (D = K): D / 8 lanes per l2norm row, so 8 rows per pass over the chunk's q rows, then its k
// rows; then thread d runs the gate cumsum of channel d.
#pragma once

#include "kda/gate_cumsum.hpp"
#include "kda/qk_l2norm.hpp"

namespace kda::kernels {

// 1536 threads' worth of blocks per multiprocessor (40 registers, no spills). The gate half is latency-bound (one
// chain of rows per channel), so it wants many warps: with 1024 threads' worth (64 registers) the fused launch was
// slower than the two stage kernels it replaces (H200, single8k 0.164 against 0.071 + 0.082 ms).
template <typename E, int BT, int D>
__global__ void __launch_bounds__(D, 1536 / D)
    qk_l2norm_gate_cumsum_kernel(GateCumsumParams gate, TensorView q, TensorView k, MutableTensorView q_out,
                                 MutableTensorView k_out) {
  constexpr int kLanesPerRow = D / 8, kRowsPerPass = D / kLanesPerRow;
  constexpr int kPasses = 2 * BT / kRowsPerPass, kGroup = 2;  // the loads of kGroup passes fly together
  static_assert(BT % kRowsPerPass == 0 && kPasses % kGroup == 0, "a pass holds only q rows or only k rows");
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(gate.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  const int d = 8 * (threadIdx.x % kLanesPerRow), r = threadIdx.x / kLanesPerRow;
  // Pass n covers rows i = (n kRowsPerPass) % BT + r of q (first BT / kRowsPerPass passes) or of k. A pass past the
  // chunk's rows is skipped whole (uniform over the block), so the shuffles always have full warps.
  auto row_of = [&](int n) { return (n * kRowsPerPass) % BT + r; };
  auto skipped = [&](int n) { return (n * kRowsPerPass) % BT >= chunk.length; };
#pragma unroll
  for (int n0 = 0; n0 < kPasses; n0 += kGroup) {  // unrolled: whether a pass reads q or k is known at compile time
    float x[kGroup][8];
#pragma unroll
    for (int n = 0; n < kGroup; ++n) {
      const int i = row_of(n0 + n);
#pragma unroll
      for (int c = 0; c < 8; ++c) x[n][c] = 0.0f;
      if (!skipped(n0 + n) && i < chunk.length)
        detail::load8<E>(n0 + n < kPasses / 2 ? q : k, chunk.start + i, h, d, x[n]);
    }
#pragma unroll
    for (int n = 0; n < kGroup; ++n) {
      if (skipped(n0 + n)) continue;
      const int i = row_of(n0 + n);
      l2norm_store_row_vec<E, D>(x[n], n0 + n < kPasses / 2 ? q_out : k_out, chunk.start + i, h, d,
                                 i < chunk.length);
    }
  }
  gate_cumsum_chunk(gate, chunk, h, threadIdx.x, D);
}

}  // namespace kda::kernels
