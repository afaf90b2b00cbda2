// Each stage of chunk_kda_fwd on its own, through its public launcher, reading the intermediates that one earlier
// chunk_kda_fwd call left in the workspace (at the offsets detail::chunk_kda_workspace_layout gives) and writing its
// outputs back to the same place. Every stage is idempotent on those buffers (no stage reads what it writes), so it
// can be called back to back.
//
// Metadata: with the builder's tables every launcher uses them; without, each launcher derives the tables itself
// into the workspace's metadata region, exactly as a caller of that one launcher would, so a derived stage's time
// includes the two small derivation kernels. qk_l2norm takes no metadata (both modes time the same call).
#pragma once

#include "bench_problem.hpp"
#include "options.hpp"
#include "work_model.hpp"

namespace kda::bench {

inline const char* stage_name(StageKind s) {
  switch (s) {
    case StageKind::kL2Norm: return "l2norm";
    case StageKind::kGateCumsum: return "gate_cumsum";
    case StageKind::kL2NormGate: return "l2norm_gate";
    case StageKind::kIntraChunk: return "intra_chunk";
    case StageKind::kSolveTril: return "solve_tril";
    case StageKind::kIntraSolve: return "intra_solve";
    case StageKind::kRecomputeWu: return "recompute_w_u";
    case StageKind::kStateRecurrence: return "state_recurrence";
    case StageKind::kChunkOutput: return "chunk_output";
  }
  return "?";
}

constexpr StageKind kAllStages[] = {StageKind::kL2Norm,      StageKind::kGateCumsum,      StageKind::kL2NormGate,
                                    StageKind::kIntraChunk,  StageKind::kSolveTril,       StageKind::kIntraSolve,
                                    StageKind::kRecomputeWu, StageKind::kStateRecurrence, StageKind::kChunkOutput};

class StageRunner {
 public:
  // `p` must outlive the runner and must have run chunk_kda_fwd once (so the intermediates hold real values).
  explicit StageRunner(const BenchProblem& p) {
    const ChunkKdaArgs& a = p.args;
    // chunk_kda_fwd's own stage arguments (without its device status word: each launcher here resolves its tables
    // itself); intra_solve is its fused launch, intra_chunk and solve_tril the two stage launchers on their own.
    const detail::ChunkKdaStageArgs s = detail::chunk_kda_stage_args(a, a.geometry, p.workspace.get());
    l2norm_ = s.l2norm;
    gate_ = s.gate;
    intra_solve_ = s.intra;
    intra_ = s.intra;
    intra_.Tinv = nullptr;
    // chunk_kda_fwd keeps Akk on chip when it can (its workspace then has no Akk): the two stand-alone launchers
    // write and read it in a buffer of their own.
    if (intra_.Akk == nullptr) {
      akk_status_ = akk_.allocate(size_t(a.geometry.metadata.total_tokens) * size_t(a.geometry.num_heads) *
                                  size_t(a.geometry.chunk_size) * sizeof(float));
      intra_.Akk = static_cast<float*>(akk_.get());
    }
    solve_ = SolveTrilArgs{a.geometry, intra_.Akk, s.intra.Tinv};
    wu_ = s.wu;
    state_ = s.state;
    state_.v_tile = bench_options().state_v_tile;
    state_.warps = bench_options().state_warps;
    out_ = s.output;

    // The metadata region of the workspace: where a stage derives its tables when the caller passes none (0 bytes
    // with the builder's tables). Every *_workspace_size() of these stages asks for exactly this.
    meta_ws_ = static_cast<char*>(p.workspace.get()) + detail::chunk_kda_workspace_layout(a).metadata;
    meta_bytes_ = gate_cumsum_workspace_size(gate_);
  }

  // One launcher call on `stream`.
  Status run(StageKind s, hipStream_t stream) const {
    KDA_RETURN_IF_RUNTIME_ERROR(akk_status_);
    switch (s) {
      case StageKind::kL2Norm: return launch_qk_l2norm(l2norm_, stream);
      case StageKind::kGateCumsum: return launch_gate_cumsum(gate_, meta_ws_, meta_bytes_, stream);
      case StageKind::kL2NormGate:
        return launch_qk_l2norm_gate_cumsum(l2norm_, gate_, meta_ws_, meta_bytes_, stream);
      case StageKind::kIntraChunk: return launch_intra_chunk(intra_, meta_ws_, meta_bytes_, stream);
      case StageKind::kSolveTril: return launch_solve_tril(solve_, meta_ws_, meta_bytes_, stream);
      case StageKind::kIntraSolve: return launch_intra_chunk(intra_solve_, meta_ws_, meta_bytes_, stream);
      case StageKind::kRecomputeWu: return launch_recompute_w_u(wu_, meta_ws_, meta_bytes_, stream);
      case StageKind::kStateRecurrence: return launch_state_recurrence(state_, meta_ws_, meta_bytes_, stream);
      case StageKind::kChunkOutput: return launch_chunk_output(out_, meta_ws_, meta_bytes_, stream);
    }
    return invalid_argument("unknown stage");
  }

 private:
  QkL2NormArgs l2norm_;
  GateCumsumArgs gate_;
  IntraChunkArgs intra_;
  DeviceBuffer akk_;  // Akk of the stand-alone intra_chunk and solve_tril stages, when chunk_kda_fwd's workspace has none
  hipError_t akk_status_ = hipSuccess;
  SolveTrilArgs solve_;
  IntraChunkArgs intra_solve_;
  RecomputeWuArgs wu_;
  StateRecurrenceArgs state_;
  ChunkOutputArgs out_;
  void* meta_ws_ = nullptr;
  size_t meta_bytes_ = 0;
};

}  // namespace kda::bench
