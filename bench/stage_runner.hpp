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
    case StageKind::kIntraChunk: return "intra_chunk";
    case StageKind::kSolveTril: return "solve_tril";
    case StageKind::kIntraSolve: return "intra_solve";
    case StageKind::kPrepare: return "prepare";
    case StageKind::kPrepareInputs: return "prepare_inputs";
    case StageKind::kRecomputeWu: return "recompute_w_u";
    case StageKind::kStateRecurrence: return "state_recurrence";
    case StageKind::kStateWithH: return "state_with_h";
    case StageKind::kChunkOutput: return "chunk_output";
  }
  return "?";
}

constexpr StageKind kAllStages[] = {StageKind::kL2Norm,          StageKind::kGateCumsum,  StageKind::kIntraChunk,
                                    StageKind::kSolveTril,       StageKind::kIntraSolve,  StageKind::kRecomputeWu,
                                    StageKind::kPrepare,         StageKind::kPrepareInputs,
                                    StageKind::kStateRecurrence, StageKind::kStateWithH, StageKind::kChunkOutput};

class StageRunner {
 public:
  // `p` must outlive the runner and must have run chunk_kda_fwd once (so the intermediates hold real values).
  explicit StageRunner(const BenchProblem& p) {
    const ChunkKdaArgs& a = p.args;
    // Stage arguments without chunk_kda_fwd's device status word (each launcher here resolves its tables itself).
    // state_recurrence is the launch chunk_kda_fwd itself makes for this batch (in the workspace it left), with the
    // output folded in where chunk_kda_fwd folds it; state_with_h and chunk_output are the two launches of the form
    // with a separate output (ChunkKdaOutput::kSeparate, a workspace of the runner's own). prepare_inputs is the fused form's first launch, and l2norm, gate_cumsum and prepare the staged
    // form's, with the stage launchers that prepare fuses (intra_chunk, solve_tril, intra_solve, recompute_w_u):
    // each form runs in a workspace of the runner's own, filled once by that form of chunk_kda_fwd, so both are
    // timed whichever chunk_kda_fwd picks.
    const detail::ChunkKdaStageArgs own = detail::chunk_kda_stage_args(a, a.geometry, p.workspace.get());
    auto fill = [&](DeviceBuffer& ws, detail::ChunkKdaPath path,
                    detail::ChunkKdaOutput output = detail::ChunkKdaOutput::kAuto) -> void* {
      const size_t bytes = detail::chunk_kda_workspace_layout(a, path, output).total;
      if (scratch_.is_ok()) scratch_ = runtime_status(ws.allocate(bytes));
      if (scratch_.is_ok()) scratch_ = detail::chunk_kda_fwd_on_path(a, ws.get(), bytes, nullptr, path, output);
      if (scratch_.is_ok()) scratch_ = runtime_status(hipDeviceSynchronize());
      return ws.get();
    };
    const detail::ChunkKdaStageArgs fused =
        detail::chunk_kda_stage_args(a, a.geometry, fill(fused_, detail::ChunkKdaPath::kFused),
                                     detail::ChunkKdaPath::kFused);
    prepare_inputs_ = fused.prepare_inputs;
    prepare_inputs_.warp_short = bench_options().warp_short;
    inputs_fusable_ = fused.inputs_fused;
    const detail::ChunkKdaStageArgs s =
        detail::chunk_kda_stage_args(a, a.geometry, fill(staged_, detail::ChunkKdaPath::kStaged),
                                     detail::ChunkKdaPath::kStaged);
    l2norm_ = s.l2norm;
    gate_ = s.gate;
    intra_wu_ = s.intra;
    wu_prepare_ = s.wu;
    // chunk_kda_fwd keeps Akk and Tinv on chip when it can (its workspace then has no room for them): the
    // stand-alone launchers pass them through buffers of their own.
    const size_t a_bytes = size_t(a.geometry.metadata.total_tokens) * size_t(a.geometry.num_heads) *
                           size_t(a.geometry.chunk_size) * sizeof(float);
    float* akk = s.intra.Akk;
    if (akk == nullptr && scratch_.is_ok()) {
      scratch_ = runtime_status(akk_.allocate(a_bytes));
      akk = static_cast<float*>(akk_.get());
    }
    float* tinv = s.intra.Tinv;
    if (tinv == nullptr && scratch_.is_ok()) {
      scratch_ = runtime_status(tinv_.allocate(a_bytes));
      tinv = static_cast<float*>(tinv_.get());
    }
    intra_ = s.intra;
    intra_.Akk = akk;
    intra_.Tinv = nullptr;
    intra_solve_ = s.intra;
    intra_solve_.Tinv = tinv;
    intra_solve_.Akk = intra_chunk_keeps_akk_on_chip(intra_solve_) ? nullptr : akk;
    solve_ = SolveTrilArgs{a.geometry, akk, tinv};
    wu_ = s.wu;
    wu_.Tinv = tinv;
    state_ = own.state;  // chunk_kda_fwd's own state launch
    const detail::ChunkKdaStageArgs separate =
        detail::chunk_kda_stage_args(a, a.geometry, fill(separate_, detail::ChunkKdaPath::kAuto,
                                                         detail::ChunkKdaOutput::kSeparate),
                                     detail::ChunkKdaPath::kAuto, detail::ChunkKdaOutput::kSeparate);
    state_with_h_ = separate.state;
    out_ = separate.output;
    // chunk_kda_fwd writes v_new over u where it writes v_new; here the state stages write a buffer of their own,
    // so that back-to-back calls all read the u that the prepare launch made.
    if (scratch_.is_ok()) {
      const size_t v_bytes = size_t(a.geometry.metadata.total_tokens) * size_t(a.geometry.num_heads) *
                             size_t(a.geometry.head_dim_v) * size_t(dtype_size(a.geometry.dtype));
      scratch_ = runtime_status(v_new_.allocate(v_bytes));
      if (state_.v_new != nullptr) state_.v_new = v_new_.get();
      state_with_h_.v_new = v_new_.get();
    }
    // A forced V-tile width or warp count applies to the state launch with h (the folded one runs only the
    // launcher's 8-warp tiles).
    state_with_h_.v_tile = bench_options().state_v_tile;
    state_with_h_.warps = bench_options().state_warps;
    if (!own.output_folded) {
      state_.v_tile = state_with_h_.v_tile;
      state_.warps = state_with_h_.warps;
    } else {
      state_.output_warps = bench_options().state_output_warps;
      state_.short_sequences = bench_options().state_short_sequences;
      state_.regs_warps = bench_options().state_regs_warps;
    }
    // chunk_kda_fwd hands the state launch an item counter that it clears once per call; here a word of the
    // runner's own, cleared by a 4-byte memset before each launch (timed with it).
    if (scratch_.is_ok() && !bench_options().state_fixed_share) {
      scratch_ = runtime_status(items_taken_.allocate(sizeof(unsigned)));
      state_.short_items_taken = static_cast<unsigned*>(items_taken_.get());
    }

    // The metadata region of the workspace: where a stage derives its tables when the caller passes none (0 bytes
    // with the builder's tables). Every *_workspace_size() of these stages asks for exactly this.
    meta_ws_ = static_cast<char*>(p.workspace.get()) + detail::chunk_kda_workspace_layout(a).metadata;
    meta_bytes_ = gate_cumsum_workspace_size(gate_);
    // recompute_w_u reads Tinv: a buffer of the runner's own starts with the values intra_solve leaves there.
    if (scratch_.is_ok() && tinv_.get() != nullptr) {
      scratch_ = launch_intra_chunk(intra_solve_, meta_ws_, meta_bytes_, nullptr);
      if (scratch_.is_ok()) scratch_ = runtime_status(hipDeviceSynchronize());
    }
  }

  // One launcher call on `stream`.
  Status run(StageKind s, hipStream_t stream) const {
    if (!scratch_.is_ok()) return scratch_;
    switch (s) {
      case StageKind::kL2Norm: return launch_qk_l2norm(l2norm_, stream);
      case StageKind::kGateCumsum: return launch_gate_cumsum(gate_, meta_ws_, meta_bytes_, stream);
      case StageKind::kIntraChunk: return launch_intra_chunk(intra_, meta_ws_, meta_bytes_, stream);
      case StageKind::kSolveTril: return launch_solve_tril(solve_, meta_ws_, meta_bytes_, stream);
      case StageKind::kIntraSolve: return launch_intra_chunk(intra_solve_, meta_ws_, meta_bytes_, stream);
      case StageKind::kPrepare: return launch_chunk_prepare(intra_wu_, wu_prepare_, meta_ws_, meta_bytes_, stream);
      case StageKind::kPrepareInputs:
        if (!inputs_fusable_) return unsupported("prepare_inputs: K and V must be 64 or 128");
        return launch_chunk_prepare_inputs(prepare_inputs_, meta_ws_, meta_bytes_, stream);
      case StageKind::kRecomputeWu: return launch_recompute_w_u(wu_, meta_ws_, meta_bytes_, stream);
      case StageKind::kStateRecurrence:
        if (state_.short_items_taken != nullptr) {
          KDA_RETURN_IF_RUNTIME_ERROR(hipMemsetAsync(state_.short_items_taken, 0, sizeof(unsigned), stream));
        }
        return launch_state_recurrence(state_, meta_ws_, meta_bytes_, stream);
      case StageKind::kStateWithH: return launch_state_recurrence(state_with_h_, meta_ws_, meta_bytes_, stream);
      case StageKind::kChunkOutput: return launch_chunk_output(out_, meta_ws_, meta_bytes_, stream);
    }
    return invalid_argument("unknown stage");
  }

 private:
  QkL2NormArgs l2norm_;
  GateCumsumArgs gate_;
  IntraChunkArgs intra_;
  DeviceBuffer akk_, tinv_;  // Akk and Tinv of the stand-alone stages, when chunk_kda_fwd's workspace has none
  Status scratch_;  // allocating or filling those buffers
  SolveTrilArgs solve_;
  IntraChunkArgs intra_solve_;
  IntraChunkArgs intra_wu_;  // the prepare launch: exactly chunk_kda_fwd's arguments
  RecomputeWuArgs wu_prepare_;
  RecomputeWuArgs wu_;
  ChunkPrepareInputsArgs prepare_inputs_;  // chunk_kda_fwd's first launch
  bool inputs_fusable_ = false;
  DeviceBuffer fused_, staged_, separate_;  // the two forms' workspaces, and the separate output form's
  DeviceBuffer v_new_;   // the state stages' v_new (chunk_kda_fwd's is u's buffer)
  DeviceBuffer items_taken_;  // state_'s item counter
  StateRecurrenceArgs state_, state_with_h_;
  ChunkOutputArgs out_;
  void* meta_ws_ = nullptr;
  size_t meta_bytes_ = 0;
};

}  // namespace kda::bench
