#include "work_model.hpp"

namespace kda::bench {
namespace {

// Calls f(L) for every chunk of every sequence, L = its number of valid rows.
template <typename F>
void for_each_chunk(const WorkShape& s, F&& f) {
  for (size_t n = 0; n + 1 < s.cu_seqlens.size(); ++n) {
    int64_t len = s.cu_seqlens[n + 1] - s.cu_seqlens[n];
    for (; len > 0; len -= s.BT) f(double(len < s.BT ? len : s.BT));
  }
}

int64_t num_tokens(const WorkShape& s) { return s.cu_seqlens.empty() ? 0 : s.cu_seqlens.back(); }
int64_t num_sequences(const WorkShape& s) { return int64_t(s.cu_seqlens.size()) - 1; }
int64_t num_chunks(const WorkShape& s) {
  int64_t nt = 0;
  for_each_chunk(s, [&](double) { ++nt; });
  return nt;
}

}  // namespace

FlopBreakdown count_flops(const WorkShape& s) {
  const double K = s.K, V = s.V;
  FlopBreakdown f;
  for_each_chunk(s, [&](double L) {
    const double strict = L * (L - 1) / 2;  // entries below the diagonal
    const double lower = L * (L + 1) / 2;   // entries on and below the diagonal
    f.akk += 2 * K * strict;                // Akk[i,j], j < i: a K-long dot product each
    f.aqk += 2 * K * lower;                 // Aqk[i,j], j <= i
    f.solve += (L * L * L - L) / 3;         // (I + Akk)^-1 by substitution: sum_{i>j} 2 (i - j)
    f.w += 2 * K * lower;                   // w = Tinv (beta k exp2 G), Tinv unit lower triangular
    f.u += 2 * V * lower;                   // u = Tinv (beta v)
    f.v_new += 2 * L * K * V;               // v_new = u - w S
    f.state_update += 2 * L * K * V;        // S <- diag(exp2 G_last) S + kg^T v_new
    f.out_inter += 2 * L * K * V;           // (q exp2 G) h
    f.out_intra += 2 * V * lower;           // Aqk v_new, Aqk lower triangular
  });
  const double H = s.H;
  f.akk *= H, f.aqk *= H, f.solve *= H, f.w *= H, f.u *= H, f.v_new *= H, f.state_update *= H, f.out_inter *= H,
      f.out_intra *= H;
  return f;
}

bool output_folded(const WorkShape& s) { return (s.K == 64 || s.K == 128) && (s.V == 64 || s.V == 128); }

double stage_flops(const WorkShape& s, StageKind stage) {
  const FlopBreakdown f = count_flops(s);
  switch (stage) {
    case StageKind::kL2Norm:
    case StageKind::kGateCumsum: return 0.0;
    case StageKind::kIntraChunk: return f.akk + f.aqk;
    case StageKind::kSolveTril: return f.solve;
    case StageKind::kIntraSolve: return f.akk + f.aqk + f.solve;
    case StageKind::kRecomputeWu: return f.w + f.u;
    case StageKind::kPrepare:
    case StageKind::kPrepareInputs: return f.akk + f.aqk + f.solve + f.w + f.u;
    case StageKind::kStateRecurrence:
      return f.v_new + f.state_update + (output_folded(s) ? f.out_inter + f.out_intra : 0.0);
    case StageKind::kStateWithH: return f.v_new + f.state_update;
    case StageKind::kChunkOutput: return f.out_inter + f.out_intra;
  }
  return 0.0;
}

double e2e_bytes(const WorkShape& s) {
  const double T = double(num_tokens(s)), N = double(num_sequences(s)), H = s.H, K = s.K, V = s.V, E = s.io_bytes;
  const double inputs = T * H * (2 * K + V) * E  // q, k, v
                        + T * H * K * 4          // raw g, fp32
                        + T * H * 4;             // raw beta, fp32
  const double state = N * H * K * V * 4;        // one fp32 state per sequence
  const double output = T * H * V * E;           // o
  return inputs + state + output + state;        // + initial state read, final state written
}

double stage_bytes(const WorkShape& s, StageKind stage) {
  const double T = double(num_tokens(s)), N = double(num_sequences(s)), NT = double(num_chunks(s));
  const double H = s.H, K = s.K, V = s.V, E = s.io_bytes, BT = s.BT;
  const double tk_io = T * H * K * E, tv_io = T * H * V * E;  // a [T,H,K] / [T,H,V] tensor in the io dtype
  const double tk_f32 = T * H * K * 4, beta = T * H * 4;
  const double a_f32 = T * H * BT * 4;                       // Akk, Aqk or Tinv: [T,H,BT] fp32
  const double h_io = NT * H * K * V * E;                    // per-chunk states h
  const double state_f32 = N * H * K * V * 4;
  switch (stage) {
    case StageKind::kL2Norm: return 2 * tk_io + 2 * tk_io;                      // q, k -> q_norm, k_norm
    case StageKind::kGateCumsum: return tk_f32 + tk_f32;                        // raw g -> G
    case StageKind::kIntraChunk: return 2 * tk_io + beta + tk_f32 + 2 * a_f32;  // q, k, beta, G -> Akk, Aqk
    case StageKind::kSolveTril: return a_f32 + a_f32;                           // Akk -> Tinv
    case StageKind::kIntraSolve: return 2 * tk_io + beta + tk_f32 + 2 * a_f32;  // q, k, beta, G -> Aqk, Tinv
    case StageKind::kRecomputeWu:                                               // k, v, beta, G, Tinv -> w, u, kg
      return tk_io + tv_io + beta + tk_f32 + a_f32 + 2 * tk_io + tv_io;
    case StageKind::kPrepare:  // q, k, v, beta, G -> Aqk, w, u, kg
      return 2 * tk_io + tv_io + beta + tk_f32 + a_f32 + 2 * tk_io + tv_io;
    case StageKind::kPrepareInputs:  // q, k, v, raw g, beta -> Aqk, w, u, kg, qg, G of each chunk's last row
      return 2 * tk_io + tv_io + tk_f32 + beta + a_f32 + 3 * tk_io + tv_io + NT * H * K * 4;
    case StageKind::kStateRecurrence:  // folded: w, u, kg, G of each chunk's last row, qg, Aqk, h0 -> o, final state
      if (output_folded(s)) return 3 * tk_io + tv_io + NT * H * K * 4 + a_f32 + state_f32 + tv_io + state_f32;
      [[fallthrough]];
    case StageKind::kStateWithH:  // w, u, kg, G of each chunk's last row, h0 -> h, v_new, final state
      return 2 * tk_io + tv_io + NT * H * K * 4 + state_f32 + h_io + tv_io + state_f32;
    case StageKind::kChunkOutput: {  // fused form: qg (q exp2 G); staged: q_norm and G. Then h, Aqk, v_new -> o
      // The form chunk_kda_fwd picks (chunk_kda_inputs_fused_by_shape): K, V in {64, 128}, and chunks of 64 or >= 4
      // chunks per sequence.
      const bool fused = (s.K == 64 || s.K == 128) && (s.V == 64 || s.V == 128) && (BT == 64 || T >= 4 * BT * N);
      return (fused ? tk_io : tk_io + tk_f32) + h_io + a_f32 + tv_io + tv_io;
    }
  }
  return 0.0;
}

}  // namespace kda::bench
