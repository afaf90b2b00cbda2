// Every kernel form chunk_kda_fwd's launcher can choose, each with a batch that selects it by default, and the inputs
// it runs on: signed q, k, v, gates that keep the state carried across chunks alive, beta up to 2, every gate kind,
// bf16 and fp16. The GPU tests run each form end to end and assert that the launcher did pick it. The selections are
// NVIDIA's (the register-state, short-sequence and warp-per-item kernels and the output warps are NVIDIA only).
#pragma once

#include <string>
#include <vector>

#include "device_problem.hpp"
#include "reference/problem_generator.hpp"

namespace kda::test {

// What the launcher runs, in words: the prepare and the state kernel (with the output folded in or not).
struct FormSelection {
  std::string prepare, state;
  bool operator==(const FormSelection& o) const { return prepare == o.prepare && state == o.state; }
};

inline std::string to_string(const FormSelection& s) { return "prepare " + s.prepare + ", state " + s.state; }

// The launcher's choices for dp's call in metadata mode dp.options.mode, from the same host functions it uses.
inline FormSelection selection_of(const DeviceProblem& dp) {
  const ChunkKdaArgs& a = dp.args;
  const detail::ChunkKdaStageArgs s = detail::chunk_kda_stage_args(a, a.geometry, dp.workspace.get());
  FormSelection out;
  if (s.inputs_fused) {
    const bool short_path = detail::prepare_inputs_short_path_used(s.prepare_inputs);
    if (detail::prepare_inputs_warp_short_used(s.prepare_inputs) > 0) {
      out.prepare = "fused warp-per-item";
    } else if (short_path && detail::every_sequence_short(a.geometry.metadata)) {
      out.prepare = "fused short-only";
    } else {
      out.prepare = short_path ? "fused with short path" : "fused long";
    }
  } else {
    out.prepare = chunk_prepare_fused(s.intra, s.wu) ? "staged one kernel" : "staged two kernels";
  }
  StateRecurrenceArgs st = s.state;
  uint32_t counter = 0;
  st.short_items_taken = &counter;  // chunk_kda_fwd always gives one (any non-null pointer serves the host rules)
  const int K = a.geometry.head_dim_k;
  const std::string fold = s.output_folded ? " (output folded)" : " + output launch";
  if (K != 64 && K != 128) {
    out.state = "scalar" + fold;
  } else if (detail::state_regs_warps_used(st) > 0) {
    out.state = "register-state" + fold;
  } else if (a.geometry.chunk_size == 64 && detail::state_short_kernel_used(st)) {
    out.state = detail::every_sequence_short(a.geometry.metadata) ? "short-only"
                : detail::state_short_tickets_used(st)    ? "short with tickets + long items"
                                                          : "short + long items";
    out.state += fold;
  } else {
    out.state = "general " + std::to_string(detail::state_v_tile(st)) + " columns" +
                (detail::state_output_warps(st) > 0 ? " + output warps" : "") + fold;
  }
  return out;
}

// The inputs of a form's problem.
struct FormInputs {
  GateKind gate = GateKind::kSoftplus;
  bool A_log = true, dt_bias = true;
  bool l2norm = true;  // q, k raw and normalised in the kernel; false: stored normalised
  BetaActivation beta = BetaActivation::kSigmoid;
  DType io = DType::kBF16;
  StateLayout layout = StateLayout::kKFirst;
};

struct KernelForm {
  std::string name;
  std::vector<int64_t> cu;
  int H, K, V, chunk_size;
  int64_t bound;  // ChunkMetadataArgs::max_sequence_tokens (0 = none)
  FormInputs inputs;
  FormSelection builder, derived;  // what the launcher must pick with host-built and device-derived tables
};

namespace forms_detail {
inline std::vector<int64_t> cu_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu;
  EXPECT_TRUE(make_prefill_cu_seqlens(lengths, &cu).is_ok());
  return cu;
}
inline std::vector<int64_t> decodes_then(int64_t decodes, const std::vector<int64_t>& prefills) {
  std::vector<int64_t> cu;
  EXPECT_TRUE(make_decode_prefill_cu_seqlens(decodes, prefills, &cu).is_ok());
  return cu;
}
// Sequences of every length lo..hi, `reps` times over.
inline std::vector<int64_t> every_length(int64_t lo, int64_t hi, int reps) {
  std::vector<int64_t> lengths;
  for (int r = 0; r < reps; ++r)
    for (int64_t l = lo; l <= hi; ++l) lengths.push_back(l);
  return cu_of(lengths);
}
}  // namespace forms_detail

inline std::vector<KernelForm> kernel_forms() {
  using namespace forms_detail;
  const FormSelection fused_long_warps{"fused long", "general 32 columns + output warps (output folded)"};
  std::vector<int64_t> sixteen_long;  // 16 sequences of 256-406 tokens: averaging over four chunks
  for (int i = 0; i < 16; ++i) sixteen_long.push_back(256 + 10 * i);
  const std::string regs = "register-state (output folded)";
  const std::string short_state = "short + long items (output folded)";
  const std::string short_tickets = "short with tickets + long items (output folded)";
  const std::string short_only = "short-only (output folded)";
  FormInputs lower_no_alog{GateKind::kLowerBound, false, false};
  FormInputs lower_alog_fp16{GateKind::kLowerBound, true, true, true, BetaActivation::kSigmoid, DType::kFP16,
                             StateLayout::kVFirst};
  FormInputs softplus_beta2{GateKind::kSoftplus, true, true, true, BetaActivation::kSigmoidTimesTwo};
  FormInputs precomputed{GateKind::kPrecomputed, false, false, false, BetaActivation::kNone};
  FormInputs precomputed_fp16_vfirst{GateKind::kPrecomputed, false, false, false, BetaActivation::kNone,
                                     DType::kFP16, StateLayout::kVFirst};
  FormInputs softplus_vfirst;
  softplus_vfirst.layout = StateLayout::kVFirst;
  FormInputs softplus_fp16;
  softplus_fp16.io = DType::kFP16;
  return {
      {"one_long_sequence", {0, 1000}, 4, 128, 128, 64, 0, {}, fused_long_warps, fused_long_warps},
      {"long_sequences_fp16_vfirst", {0, 300, 1000}, 4, 128, 128, 64, 0, lower_alog_fp16, fused_long_warps,
       fused_long_warps},
      {"decodes_beside_prefills_wide_tiles", decodes_then(8, {200, 777, 64}), 12, 128, 128, 64, 0, lower_no_alog,
       {"fused with short path", "general 64 columns (output folded)"},
       {"fused with short path", "general 64 columns (output folded)"}},
      {"many_long_sequences", cu_of(sixteen_long), 8, 128, 128, 64, 0, softplus_beta2, {"fused long", regs},
       {"fused long", regs}},
      {"many_long_sequences_k64_vfirst_fp16", cu_of(sixteen_long), 8, 64, 128, 64, 0, precomputed_fp16_vfirst,
       {"fused long", regs}, {"fused long", regs}},
      {"chunk32_long_sequences", {0, 300, 700}, 4, 64, 64, 32, 0, {}, fused_long_warps, fused_long_warps},
      {"chunk32_short_sequences", {0, 31, 96, 160}, 2, 128, 128, 32, 0, lower_no_alog,
       {"staged one kernel", "general 32 columns + output warps (output folded)"},
       {"staged one kernel", "general 32 columns + output warps (output folded)"}},
      {"chunk32_short_sequences_no_l2norm", {0, 31, 96, 160}, 2, 64, 64, 32, 0, precomputed,
       {"staged one kernel", "general 32 columns + output launch"},
       {"staged one kernel", "general 32 columns + output launch"}},
      {"head_dim_256", {0, 1, 100, 300}, 2, 256, 256, 64, 0, softplus_beta2,
       {"staged two kernels", "scalar + output launch"}, {"staged two kernels", "scalar + output launch"}},
      {"k64_v256", {0, 200, 333}, 2, 64, 256, 64, 0, softplus_fp16,
       {"staged two kernels", "general 32 columns + output launch"},
       {"staged two kernels", "general 32 columns + output launch"}},
      {"speculative_8_tokens", every_length(8, 8, 64), 2, 128, 128, 64, 0, {},
       {"fused with short path", short_state}, {"fused with short path", short_tickets}},
      {"decodes_beside_one_prefill", decodes_then(40, {300}), 2, 128, 128, 64, 0, lower_no_alog,
       {"fused with short path", short_tickets}, {"fused with short path", short_tickets}},
      {"bounded_16_tokens", every_length(0, 16, 2), 2, 64, 128, 64, 16, softplus_beta2,
       {"fused short-only", short_only}, {"fused short-only", short_only}},
      {"bounded_8_tokens", every_length(0, 8, 4), 3, 128, 128, 64, 8, lower_no_alog,
       {"fused warp-per-item", short_only},
       {"fused warp-per-item", short_only}},
      {"speculative_vfirst", every_length(8, 8, 64), 2, 128, 128, 64, 0, softplus_vfirst,
       {"fused with short path", "general 64 columns (output folded)"},
       {"fused with short path", "general 64 columns (output folded)"}},
  };
}

// A form's problem: signed q, k, v, a twentieth of the q/k rows of tiny norm (where the kernel normalises them),
// gates whose decay per 64-token chunk stays in [0.5, 10] nat with FLA's masks (2 % zero, 1 % -1000) on top, beta up
// to 2 where the form asks for 2 sigmoid, and a random initial state.
inline ref::KdaProblem form_problem(const KernelForm& f, uint64_t seed) {
  ref::ProblemOptions opt;
  opt.qk_l2norm_in_kernel = f.inputs.l2norm;
  opt.beta_activation = f.inputs.beta;
  opt.beta_raw_scale = f.inputs.beta == BetaActivation::kSigmoidTimesTwo ? 3.0 : 1.0;
  opt.with_A_log = f.inputs.A_log;
  opt.with_dt_bias = f.inputs.dt_bias;
  opt.signed_qkv = true;
  opt.tiny_row_fraction = 0.05;
  opt.decay_per_chunk_min = 0.5;
  opt.decay_per_chunk_max = 10.0;
  opt.zero_gate_fraction = 0.02;
  opt.extreme_gate_fraction = 0.01;
  opt.with_initial_state = true;
  return ref::make_random_problem(f.cu, f.H, f.K, f.V, f.inputs.io, f.inputs.gate, seed, opt);
}

inline DeviceProblemOptions form_options(const KernelForm& f, MetadataMode mode) {
  DeviceProblemOptions opt;
  opt.mode = mode;
  opt.state_layout = f.inputs.layout;
  opt.chunk_size = f.chunk_size;
  opt.max_sequence_tokens = f.bound;
  return opt;
}

}  // namespace kda::test
