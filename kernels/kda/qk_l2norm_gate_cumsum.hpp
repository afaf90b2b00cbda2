// Stages 0 and 1 in one launch: the q/k l2norm of a chunk's rows and its gate + chunk cumsum. chunk_kda_fwd runs
// this instead of two launches whenever the l2norm can move 16-byte vectors (vector_aligned q, k and outputs): one
// launch less on the host. Each part is the code of its own stage kernel (l2norm_store_row_vec, gate_cumsum_chunk),
// so the results are bit-identical to the two separate launches.
//
// Grid (chunk, head, role), D threads per block (D = K). Role 0 runs the gate cumsum of the (chunk, head), thread d
// on channel d. Roles 1.. each normalise kPassesPerBlock passes of 8 rows (D / 8 lanes per row) of the chunk's q
// rows, then its k rows. The roles are separate blocks, not phases of one block: the gate walks a serial chain of
// rows per channel, and a block that did both in turn ran them back to back at the occupancy of the larger one
// (H200, single8k 0.164 ms against 0.071 + 0.082 ms for the two stage kernels; capped at 40 registers 0.157).
#pragma once

#include "kda/gate_cumsum.hpp"
#include "kda/qk_l2norm.hpp"

namespace kda::kernels {

template <int BT, int D>
struct L2NormGateGrid {
  static constexpr int kRowsPerPass = 8;  // D / (D / 8)
  static constexpr int kPasses = 2 * BT / kRowsPerPass;
  static constexpr int kPassesPerBlock = 2;  // their loads fly together
  static constexpr int kRoles = 1 + kPasses / kPassesPerBlock;
  static_assert(BT % (kRowsPerPass * kPassesPerBlock) == 0, "a block's passes hold only q rows or only k rows");
};

// NVIDIA: a full multiprocessor of blocks (32 registers; ptxas spills ~90 bytes, reloading ~20), as many warps as
// the gate stage kernel gets. HIP reads the second bound as waves per execution unit, so AMD gets no hint
// (untuned).
template <int D>
constexpr int l2norm_gate_min_blocks() {
#if defined(KDA_PLATFORM_CUDA)
  return 2048 / D;
#else
  return 1;
#endif
}

template <typename E, int BT, int D>
__global__ void __launch_bounds__(D, (l2norm_gate_min_blocks<D>()))
    qk_l2norm_gate_cumsum_kernel(GateCumsumParams gate, TensorView q, TensorView k, MutableTensorView q_out,
                                 MutableTensorView k_out) {
  using Grid = L2NormGateGrid<BT, D>;
  constexpr int kLanesPerRow = D / 8, kPassesPerBlock = Grid::kPassesPerBlock;
  detail::ChunkCoords chunk;
  if (!detail::locate_chunk<BT>(gate.chunks, blockIdx.x, &chunk)) return;
  const int h = blockIdx.y;
  if (blockIdx.z == 0) {
    gate_cumsum_chunk(gate, chunk, h, threadIdx.x, D);
    return;
  }
  // Pass n covers rows i = (n kRowsPerPass) % BT + r of q (the first kPasses / 2 passes) or of k.
  const int n0 = (blockIdx.z - 1) * kPassesPerBlock;
  const bool is_q = n0 < Grid::kPasses / 2;
  const int first_row = (n0 * Grid::kRowsPerPass) % BT;
  if (first_row >= chunk.length) return;  // uniform over the block: no rows of this chunk
  const TensorView in = is_q ? q : k;
  const MutableTensorView out = is_q ? q_out : k_out;
  const int d = 8 * (threadIdx.x % kLanesPerRow), r = threadIdx.x / kLanesPerRow;
  float x[kPassesPerBlock][8];
#pragma unroll
  for (int n = 0; n < kPassesPerBlock; ++n) {
    const int i = first_row + n * Grid::kRowsPerPass + r;
#pragma unroll
    for (int c = 0; c < 8; ++c) x[n][c] = 0.0f;
    if (i < chunk.length) detail::load8<E>(in, chunk.start + i, h, d, x[n]);
  }
#pragma unroll
  for (int n = 0; n < kPassesPerBlock; ++n) {  // every lane joins the shuffles, rows past the chunk included
    const int i = first_row + n * Grid::kRowsPerPass + r;
    l2norm_store_row_vec<E, D>(x[n], out, chunk.start + i, h, d, i < chunk.length);
  }
}

}  // namespace kda::kernels
