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
#include "work_model.hpp"

namespace kda::bench {

inline const char* stage_name(StageKind s) {
  switch (s) {
    case StageKind::kL2Norm: return "l2norm";
    case StageKind::kGateCumsum: return "gate_cumsum";
    case StageKind::kIntraChunk: return "intra_chunk";
    case StageKind::kSolveTril: return "solve_tril";
    case StageKind::kIntraSolve: return "intra_solve";
    case StageKind::kRecomputeWu: return "recompute_w_u";
    case StageKind::kStateRecurrence: return "state_recurrence";
    case StageKind::kChunkOutput: return "chunk_output";
  }
  return "?";
}

constexpr StageKind kAllStages[] = {StageKind::kL2Norm,          StageKind::kGateCumsum,  StageKind::kIntraChunk,
                                    StageKind::kSolveTril,       StageKind::kIntraSolve,  StageKind::kRecomputeWu,
                                    StageKind::kStateRecurrence, StageKind::kChunkOutput};

class StageRunner {
 public:
  // `p` must outlive the runner and must have run chunk_kda_fwd once (so the intermediates hold real values).
  explicit StageRunner(const BenchProblem& p) {
    const ChunkKdaArgs& a = p.args;
    const StageGeometry& geo = a.geometry;
    const detail::ChunkKdaWorkspaceLayout l = detail::chunk_kda_workspace_layout(a);
    char* ws = static_cast<char*>(p.workspace.get());
    auto at = [&](size_t off) { return static_cast<void*>(ws + off); };
    const int H = geo.num_heads, K = geo.head_dim_k, V = geo.head_dim_v;
    float* G = static_cast<float*>(at(l.G));
    float* Akk = static_cast<float*>(at(l.Akk));
    float* Aqk = static_cast<float*>(at(l.Aqk));
    float* Tinv = static_cast<float*>(at(l.Tinv));
    TensorView q = a.q, k = a.k;
    if (a.qk_l2norm) {
      q = contiguous_view(static_cast<const void*>(at(l.q_norm)), H, K);
      k = contiguous_view(static_cast<const void*>(at(l.k_norm)), H, K);
    }

    l2norm_.geometry = geo;
    l2norm_.q = a.q;
    l2norm_.k = a.k;
    l2norm_.q_out = contiguous_view(at(l.q_norm), H, K);
    l2norm_.k_out = contiguous_view(at(l.k_norm), H, K);

    gate_.geometry = geo;
    gate_.g = a.g;
    gate_.g_type = a.g_type;
    gate_.gate = a.gate;
    gate_.A_log = a.A_log;
    gate_.dt_bias = a.dt_bias;
    gate_.lower_bound = a.lower_bound;
    gate_.G = G;

    intra_.geometry = geo;
    intra_.q = q;
    intra_.k = k;
    intra_.beta = a.beta;
    intra_.beta_type = a.beta_type;
    intra_.beta_activation = a.beta_activation;
    intra_.G = G;
    intra_.scale = a.scale;
    intra_.Akk = Akk;
    intra_.Aqk = Aqk;

    solve_.geometry = geo;
    solve_.A = Akk;
    solve_.Tinv = Tinv;

    intra_solve_ = intra_;  // what chunk_kda_fwd launches: the same, with Tinv produced in the same kernel
    intra_solve_.Tinv = Tinv;

    wu_.geometry = geo;
    wu_.k = k;
    wu_.v = a.v;
    wu_.beta = a.beta;
    wu_.beta_type = a.beta_type;
    wu_.beta_activation = a.beta_activation;
    wu_.G = G;
    wu_.Tinv = Tinv;
    wu_.w = contiguous_view(at(l.w), H, K);
    wu_.u = contiguous_view(at(l.u), H, V);
    wu_.kg = contiguous_view(at(l.kg), H, K);

    state_.geometry = geo;
    state_.w = at(l.w);
    state_.u = at(l.u);
    state_.kg = at(l.kg);
    state_.G = G;
    state_.state = a.state;
    state_.h = at(l.h);
    state_.v_new = at(l.v_new);

    out_.geometry = geo;
    out_.q = q;
    out_.G = G;
    out_.h = at(l.h);
    out_.Aqk = Aqk;
    out_.v_new = at(l.v_new);
    out_.scale = a.scale;
    out_.o = a.o;

    // The metadata region of the workspace: where a stage derives its tables when the caller passes none (0 bytes
    // with the builder's tables). Every *_workspace_size() of these stages asks for exactly this.
    meta_ws_ = at(l.metadata);
    meta_bytes_ = gate_cumsum_workspace_size(gate_);
  }

  // One launcher call on `stream`.
  Status run(StageKind s, hipStream_t stream) const {
    switch (s) {
      case StageKind::kL2Norm: return launch_qk_l2norm(l2norm_, stream);
      case StageKind::kGateCumsum: return launch_gate_cumsum(gate_, meta_ws_, meta_bytes_, stream);
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
  SolveTrilArgs solve_;
  IntraChunkArgs intra_solve_;
  RecomputeWuArgs wu_;
  StateRecurrenceArgs state_;
  ChunkOutputArgs out_;
  void* meta_ws_ = nullptr;
  size_t meta_bytes_ = 0;
};

}  // namespace kda::bench
