// AMD compile check: one TU that includes every public launcher (and so every kernel header) and instantiates every
// kernel through the launchers, for both I/O types and all chunk sizes. Built for gfx90a (hipcc, full link) and for
// gfx942 / gfx950 (device-only assembly). Not run: there is no AMD GPU in CI.
#include "kda/chunk_kda.hpp"
#include "kda/launch/chunk_metadata_args.hpp"

int main() {
  kda::ChunkKdaArgs args;
  const size_t bytes = kda::chunk_kda_workspace_size(args);
  kda::Status s = kda::chunk_kda_fwd(args, nullptr, bytes, nullptr);
  // Each stage launcher on its own too, so a launcher that chunk_kda_fwd stops calling still gets checked.
  s = kda::launch_gate_cumsum(kda::GateCumsumArgs{}, nullptr, 0, nullptr);
  s = kda::launch_intra_chunk(kda::IntraChunkArgs{}, nullptr, 0, nullptr);
  s = kda::launch_solve_tril(kda::SolveTrilArgs{}, nullptr, 0, nullptr);
  s = kda::launch_recompute_w_u(kda::RecomputeWuArgs{}, nullptr, 0, nullptr);
  s = kda::launch_chunk_prepare(kda::IntraChunkArgs{}, kda::RecomputeWuArgs{}, nullptr, 0, nullptr);
  s = kda::launch_chunk_prepare_inputs(kda::ChunkPrepareInputsArgs{}, nullptr, 0, nullptr);
  s = kda::launch_state_recurrence(kda::StateRecurrenceArgs{}, nullptr, 0, nullptr);
  s = kda::launch_chunk_output(kda::ChunkOutputArgs{}, nullptr, 0, nullptr);
  s = kda::launch_qk_l2norm(kda::QkL2NormArgs{}, nullptr);
  return s.is_ok() ? 0 : 1;
}
