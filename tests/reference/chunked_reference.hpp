// Float32 chunked KDA reference that follows the GPU stages one by one, so each GPU stage can be compared on its
// own (feed a stage the same inputs on both sides, compare its outputs). Declarations and the exact conventions;
// every GPU kernel mirrors these formulas, rounding points and layouts.
//
// Geometry: packed tokens, chunk size BT. Chunk c of sequence n covers tokens [cu[n] + c*BT, min(cu[n] + (c+1)*BT,
// cu[n+1])); its L = valid rows, i, j index rows inside the chunk (0 <= i, j < L). Zero-length sequences own no chunk.
// Global chunk id = chunk_offsets[n] + c (KDA_SPEC §2). "round" = round to the problem's io dtype (numeric::round_to).
//
// Layouts (all row-major, token-major):
//   G, q, k, w, kg: [T,H,K] fp32 values;  v, u, v_new, o: [T,H,V];  beta: [T,H]
//   Akk, Aqk, Tinv: [T,H,BT]: row of token t, head h holds columns j = 0..BT-1 of its chunk; entries with j >= L or
//                   above the stated triangle are exactly 0
//   h: [NT,H,K,V] (pre-chunk state, K-first); final_state: [N,H,K,V] fp32
//
// Every sum is accumulated in fp32 in increasing index order. Every exponent is G_i - G_j with j <= i, G_{L-1} - G_i
// or G itself, all <= 0 for non-positive gates, so no exp2 here can overflow whatever the gate magnitude.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kda/numeric.hpp"
#include "kda_problem.hpp"

namespace kda::ref {

struct ChunkGeometry {
  int64_t T = 0;
  int H = 1, K = 64, V = 64, BT = 64;
  std::vector<int64_t> cu;  // [N+1]
};

// ---- Helpers shared by the stages (and by tests that index the intermediates) ---------------------------------------

// The "round" of the formulas: to the io dtype, or the identity when unrounded intermediates are asked for
// (KdaProblem::round_intermediates == false): then the chunked path differs from exact math only by fp32 arithmetic.
struct Rounding {
  DType io = DType::kBF16;
  bool enabled = true;

  float operator()(float x) const {
    if (!enabled) return x;
    return io == DType::kFP16 ? numeric::round_to<fp16_t>(x) : numeric::round_to<bf16_t>(x);
  }
};

inline float round_io(DType io, float x) { return Rounding{io, true}(x); }
inline Rounding rounding_of(const KdaProblem& p) { return Rounding{p.io_dtype, p.round_intermediates}; }

// One chunk of one sequence: chunk `index` of sequence `sequence`, rows [first, first + length) of the packed tokens.
struct ChunkSpan {
  int64_t sequence = 0;  // n
  int64_t index = 0;     // c, inside the sequence
  int64_t global = 0;    // chunk_offsets[n] + c: the chunk's row of h
  int64_t first = 0;     // global token index of row 0
  int length = 0;        // L, valid rows (1..BT)
};

inline int64_t chunks_in(int64_t length, int BT) { return (length + BT - 1) / BT; }

// [0, cumsum(ceil(len_n / BT))]: N+1 entries, the last one is NT.
inline std::vector<int64_t> chunk_offsets_of(const std::vector<int64_t>& cu, int BT) {
  std::vector<int64_t> offsets(cu.empty() ? 1 : cu.size(), 0);
  for (size_t n = 0; n + 1 < cu.size(); ++n) offsets[n + 1] = offsets[n] + chunks_in(cu[n + 1] - cu[n], BT);
  return offsets;
}

// Every chunk, sequence-major (so chunks_of(cu, BT)[g].global == g); zero-length sequences contribute none.
inline std::vector<ChunkSpan> chunks_of(const std::vector<int64_t>& cu, int BT) {
  std::vector<ChunkSpan> chunks;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    const int64_t length = cu[n + 1] - cu[n];
    for (int64_t c = 0; c < chunks_in(length, BT); ++c) {
      ChunkSpan s;
      s.sequence = int64_t(n);
      s.index = c;
      s.global = int64_t(chunks.size());
      s.first = cu[n] + c * BT;
      s.length = int(std::min<int64_t>(BT, length - c * BT));
      chunks.push_back(s);
    }
  }
  return chunks;
}

inline ChunkGeometry geometry_of(const KdaProblem& p, int chunk_size) {
  ChunkGeometry g;
  g.T = p.T;
  g.H = p.H;
  g.K = p.K;
  g.V = p.V;
  g.BT = chunk_size;
  g.cu = p.cu_seqlens;
  return g;
}

// Flat index of element [t, h, d] of a [T, H, D] tensor.
inline size_t at(int64_t t, int h, int d, int H, int D) {
  return (size_t(t) * size_t(H) + size_t(h)) * size_t(D) + size_t(d);
}

// ---- Stage 0: optional pre-steps ------------------------------------------------------------------------------------

// qn[r,:] = round(x[r,:] / sqrt(sum_d x[r,d]^2 + 1e-6)), the sum accumulated in fp32 in index order.
inline std::vector<float> l2norm_rows(const std::vector<float>& x, int64_t rows, int dim, Rounding round) {
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + size_t(r) * size_t(dim);
    float sum_sq = 0.0f;
    for (int d = 0; d < dim; ++d) sum_sq += row[d] * row[d];
    const float norm = std::sqrt(sum_sq + 1e-6f);  // the 1e-6 keeps a zero row finite (it maps to zero)
    for (int d = 0; d < dim; ++d) out[size_t(r) * size_t(dim) + size_t(d)] = round(row[d] / norm);
  }
  return out;
}
inline std::vector<float> l2norm_rows(const std::vector<float>& x, int64_t rows, int dim, DType io) {
  return l2norm_rows(x, rows, dim, Rounding{io, true});
}

// beta as used by the kernels: raw, sigmoid(raw) = 1/(1+exp(-raw)), or 2*sigmoid(raw). fp32.
inline std::vector<float> activate_beta(const std::vector<float>& raw, BetaActivation act) {
  std::vector<float> beta(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const float sigmoid = 1.0f / (1.0f + std::exp(-raw[i]));  // exp overflow to inf gives 0, never NaN
    beta[i] = act == BetaActivation::kNone ? raw[i] : act == BetaActivation::kSigmoid ? sigmoid : 2.0f * sigmoid;
  }
  return beta;
}

// ---- Stage 1: gate and chunk-local cumsum ---------------------------------------------------------------------------

// The per-element natural-log gate of one token (KDA_SPEC §1.1) in fp32, before the cumsum.
inline float gate_log_decay(const KdaProblem& p, int64_t t, int h, int d) {
  float x = p.g[at(t, h, d, p.H, p.K)];
  if (!p.dt_bias.empty()) x += p.dt_bias[size_t(h) * size_t(p.K) + size_t(d)];
  const float decay_rate = p.A_log.empty() ? 1.0f : std::exp(p.A_log[size_t(h)]);
  switch (p.gate) {
    case GateKind::kPrecomputed:
      return x;
    case GateKind::kSoftplus: {
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
      return -decay_rate * softplus;
    }
    case GateKind::kLowerBound:
      return p.lower_bound * (1.0f / (1.0f + std::exp(-(decay_rate * x))));
  }
  return x;
}

// Per-element gate (natural log), fp32, x = g_raw + dt_bias[h*K+d] (dt_bias optional):
//   kPrecomputed: x;  kSoftplus: -exp(A_log[h]) * softplus(x), softplus(x) = x if x > 20 else log1p(exp(x));
//   kLowerBound: lower_bound * sigmoid(exp(A_log[h]) * x) (A_log absent: lower_bound * sigmoid(x)).
// G[t,h,d] = kRcpLn2 * (sum of the gate over rows 0..i of t's chunk, accumulated in fp32 in row order).
inline std::vector<float> gate_chunk_cumsum(const KdaProblem& p, int chunk_size) {
  std::vector<float> G(size_t(p.T) * size_t(p.H) * size_t(p.K), 0.0f);
  std::vector<float> running(static_cast<size_t>(p.K));
  for (const ChunkSpan& c : chunks_of(p.cu_seqlens, chunk_size)) {
    for (int h = 0; h < p.H; ++h) {
      std::fill(running.begin(), running.end(), 0.0f);  // the cumsum restarts at every chunk
      for (int i = 0; i < c.length; ++i) {
        const int64_t t = c.first + i;
        for (int d = 0; d < p.K; ++d) {
          running[size_t(d)] += gate_log_decay(p, t, h, d);
          G[at(t, h, d, p.H, p.K)] = kRcpLn2 * running[size_t(d)];
        }
      }
    }
  }
  return G;
}

// ---- Stage 2: intra-chunk matrices ----------------------------------------------------------------------------------

// Akk[i,j] = beta_i * sum_d k_i[d] k_j[d] exp2(G_i[d] - G_j[d])   for j < i  (0 for j >= i)
// Aqk[i,j] = scale  * sum_d q_i[d] k_j[d] exp2(G_i[d] - G_j[d])   for j <= i (0 for j > i)
// q and k here are the values the kernels read (after l2norm when it is on).
inline void intra_chunk_matrices(const ChunkGeometry& g, const std::vector<float>& q, const std::vector<float>& k,
                                 const std::vector<float>& G, const std::vector<float>& beta, float scale,
                                 std::vector<float>* Akk, std::vector<float>* Aqk) {
  const int H = g.H, K = g.K, BT = g.BT;
  Akk->assign(size_t(g.T) * size_t(H) * size_t(BT), 0.0f);
  Aqk->assign(size_t(g.T) * size_t(H) * size_t(BT), 0.0f);
  for (const ChunkSpan& c : chunks_of(g.cu, BT)) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < c.length; ++i) {
        const int64_t ti = c.first + i;
        const float* q_i = &q[at(ti, h, 0, H, K)];
        const float* k_i = &k[at(ti, h, 0, H, K)];
        const float* G_i = &G[at(ti, h, 0, H, K)];
        for (int j = 0; j <= i; ++j) {
          const int64_t tj = c.first + j;
          const float* k_j = &k[at(tj, h, 0, H, K)];
          const float* G_j = &G[at(tj, h, 0, H, K)];
          float kk = 0.0f, qk = 0.0f;
          for (int d = 0; d < K; ++d) {
            const float decay = std::exp2(G_i[d] - G_j[d]);  // j <= i: exponent <= 0
            kk += k_i[d] * k_j[d] * decay;
            qk += q_i[d] * k_j[d] * decay;
          }
          if (j < i) (*Akk)[at(ti, h, j, H, BT)] = beta[size_t(ti) * size_t(H) + size_t(h)] * kk;
          (*Aqk)[at(ti, h, j, H, BT)] = scale * qk;
        }
      }
    }
  }
}

// ---- Stage 3: solve_tril --------------------------------------------------------------------------------------------

// Tinv = (I + Akk)^-1 per chunk (unit lower triangular), by forward substitution in fp32:
//   Tinv[i,:] = e_i - sum_{j<i} Akk[i,j] * Tinv[j,:].
inline void solve_tril(const ChunkGeometry& g, const std::vector<float>& Akk, std::vector<float>* Tinv) {
  const int H = g.H, BT = g.BT;
  Tinv->assign(size_t(g.T) * size_t(H) * size_t(BT), 0.0f);
  for (const ChunkSpan& c : chunks_of(g.cu, BT)) {
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < c.length; ++i) {
        const int64_t ti = c.first + i;
        for (int col = 0; col <= i; ++col) {  // Tinv[j, col] = 0 for col > j, so only col <= i can be nonzero
          float sum = 0.0f;
          for (int j = col; j < i; ++j) sum += Akk[at(ti, h, j, H, BT)] * (*Tinv)[at(c.first + j, h, col, H, BT)];
          (*Tinv)[at(ti, h, col, H, BT)] = (col == i ? 1.0f : 0.0f) - sum;
        }
      }
    }
  }
}

// ---- Stage 4: w, u, kg ----------------------------------------------------------------------------------------------

// w[i,:]  = round( sum_{j<=i} Tinv[i,j] * round(beta_j * k_j[:] * exp2(G_j[:])) )
// u[i,:]  = round( sum_{j<=i} Tinv[i,j] * round(beta_j * v_j[:]) )
// kg[i,:] = round( k_i[:] * exp2(G_{L-1}[:] - G_i[:]) )       (G_{L-1}: the chunk's last valid row)
// T @ round(beta ⊙ k ⊙ exp(G)): the right-hand side enters the product in the I/O type (as in FLA, and as a matrix
// unit takes it); Tinv stays fp32 (the kernels carry it as a hi + lo pair of 16-bit values).
inline void recompute_w_u(const ChunkGeometry& g, const std::vector<float>& k, const std::vector<float>& v,
                          const std::vector<float>& G, const std::vector<float>& beta, const std::vector<float>& Tinv,
                          Rounding round, std::vector<float>* w, std::vector<float>* u, std::vector<float>* kg) {
  const int H = g.H, K = g.K, V = g.V, BT = g.BT;
  w->assign(size_t(g.T) * size_t(H) * size_t(K), 0.0f);
  kg->assign(size_t(g.T) * size_t(H) * size_t(K), 0.0f);
  u->assign(size_t(g.T) * size_t(H) * size_t(V), 0.0f);
  std::vector<float> w_row(static_cast<size_t>(K)), u_row(static_cast<size_t>(V));
  for (const ChunkSpan& c : chunks_of(g.cu, BT)) {
    const int64_t t_last = c.first + c.length - 1;
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < c.length; ++i) {
        const int64_t ti = c.first + i;
        std::fill(w_row.begin(), w_row.end(), 0.0f);
        std::fill(u_row.begin(), u_row.end(), 0.0f);
        for (int j = 0; j <= i; ++j) {
          const int64_t tj = c.first + j;
          const float t_ij = Tinv[at(ti, h, j, H, BT)];
          const float beta_j = beta[size_t(tj) * size_t(H) + size_t(h)];
          for (int d = 0; d < K; ++d)
            w_row[size_t(d)] += t_ij * round(beta_j * k[at(tj, h, d, H, K)] * std::exp2(G[at(tj, h, d, H, K)]));
          for (int e = 0; e < V; ++e) u_row[size_t(e)] += t_ij * round(beta_j * v[at(tj, h, e, H, V)]);
        }
        for (int d = 0; d < K; ++d) {
          (*w)[at(ti, h, d, H, K)] = round(w_row[size_t(d)]);
          const float decay_to_end = std::exp2(G[at(t_last, h, d, H, K)] - G[at(ti, h, d, H, K)]);
          (*kg)[at(ti, h, d, H, K)] = round(k[at(ti, h, d, H, K)] * decay_to_end);
        }
        for (int e = 0; e < V; ++e) (*u)[at(ti, h, e, H, V)] = round(u_row[size_t(e)]);
      }
    }
  }
}
inline void recompute_w_u(const ChunkGeometry& g, const std::vector<float>& k, const std::vector<float>& v,
                          const std::vector<float>& G, const std::vector<float>& beta, const std::vector<float>& Tinv,
                          DType io, std::vector<float>* w, std::vector<float>* u, std::vector<float>* kg) {
  recompute_w_u(g, k, v, G, beta, Tinv, Rounding{io, true}, w, u, kg);
}

// ---- Stage 5: state recurrence over chunks --------------------------------------------------------------------------

// Per sequence n and head h, S (fp32 [K,V]) starts at initial_state[n,h] (or 0 when it is empty); for each chunk:
//   h[chunk]     = round(S)
//   v_new[i,:]   = round( u[i,:] - sum_d w[i,d] * round(S)[d,:] )   (S enters the product in the I/O type, as
//                                                                  in FLA and as a matrix unit takes it)
//   S[d,:]       = exp2(G_{L-1}[d]) * S[d,:] + sum_{i<L} kg[i,d] * v_new[i,:]
// final_state[n,h] = S (also for zero-length sequences: then it is the initial state). h has NT rows.
inline void state_recurrence(const ChunkGeometry& g, const std::vector<float>& w, const std::vector<float>& u,
                             const std::vector<float>& kg, const std::vector<float>& G,
                             const std::vector<float>& initial_state, Rounding round, std::vector<float>* h,
                             std::vector<float>* v_new, std::vector<float>* final_state) {
  const int H = g.H, K = g.K, V = g.V, BT = g.BT;
  const size_t state_size = size_t(K) * size_t(V);
  const int64_t N = int64_t(g.cu.size()) - 1;
  const std::vector<int64_t> offsets = chunk_offsets_of(g.cu, BT);
  h->assign(size_t(offsets.back()) * size_t(H) * state_size, 0.0f);
  v_new->assign(size_t(g.T) * size_t(H) * size_t(V), 0.0f);
  final_state->assign(size_t(N) * size_t(H) * state_size, 0.0f);
  std::vector<float> S(state_size), update(static_cast<size_t>(V)), vn_row(static_cast<size_t>(V));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t length = g.cu[size_t(n) + 1] - g.cu[size_t(n)];
    for (int hd = 0; hd < H; ++hd) {
      const size_t state_at = (size_t(n) * size_t(H) + size_t(hd)) * state_size;
      if (initial_state.empty())
        std::fill(S.begin(), S.end(), 0.0f);
      else
        std::copy(initial_state.begin() + std::ptrdiff_t(state_at),
                  initial_state.begin() + std::ptrdiff_t(state_at + state_size), S.begin());
      for (int64_t c = 0; c < chunks_in(length, BT); ++c) {
        const int64_t first = g.cu[size_t(n)] + c * BT;
        const int L = int(std::min<int64_t>(BT, length - c * BT));
        float* h_chunk = h->data() + (size_t(offsets[size_t(n)] + c) * size_t(H) + size_t(hd)) * state_size;
        for (size_t x = 0; x < state_size; ++x) h_chunk[x] = round(S[x]);
        for (int i = 0; i < L; ++i) {  // v_new against the pre-chunk state, rounded like the matrix-unit operand
          const int64_t t = first + i;
          std::fill(vn_row.begin(), vn_row.end(), 0.0f);
          for (int d = 0; d < K; ++d) {
            const float w_id = w[at(t, hd, d, H, K)];
            for (int e = 0; e < V; ++e) vn_row[size_t(e)] += w_id * h_chunk[size_t(d) * size_t(V) + size_t(e)];
          }
          for (int e = 0; e < V; ++e) (*v_new)[at(t, hd, e, H, V)] = round(u[at(t, hd, e, H, V)] - vn_row[size_t(e)]);
        }
        const int64_t t_last = first + L - 1;
        for (int d = 0; d < K; ++d) {
          std::fill(update.begin(), update.end(), 0.0f);
          for (int i = 0; i < L; ++i) {
            const float kg_id = kg[at(first + i, hd, d, H, K)];
            for (int e = 0; e < V; ++e) update[size_t(e)] += kg_id * (*v_new)[at(first + i, hd, e, H, V)];
          }
          const float decay = std::exp2(G[at(t_last, hd, d, H, K)]);
          float* S_d = S.data() + size_t(d) * size_t(V);
          for (int e = 0; e < V; ++e) S_d[e] = decay * S_d[e] + update[size_t(e)];
        }
      }
      std::copy(S.begin(), S.end(), final_state->begin() + std::ptrdiff_t(state_at));
    }
  }
}
inline void state_recurrence(const ChunkGeometry& g, const std::vector<float>& w, const std::vector<float>& u,
                             const std::vector<float>& kg, const std::vector<float>& G,
                             const std::vector<float>& initial_state, DType io, std::vector<float>* h,
                             std::vector<float>* v_new, std::vector<float>* final_state) {
  state_recurrence(g, w, u, kg, G, initial_state, Rounding{io, true}, h, v_new, final_state);
}

// ---- Stage 6: output ------------------------------------------------------------------------------------------------

// o[i,:] = round( scale * sum_d round(q_i[d] * exp2(G_i[d])) * h[chunk][d,:] + sum_{j<=i} Aqk[i,j] * v_new[j,:] )
// h is the pre-chunk state, so this is the chunked identity o = scale (q ⊙ exp G) S_chunk_start + Aqk v_new.
inline void chunk_output(const ChunkGeometry& g, const std::vector<float>& q, const std::vector<float>& G,
                         const std::vector<float>& h, const std::vector<float>& Aqk, const std::vector<float>& v_new,
                         float scale, Rounding round, std::vector<float>* o) {
  const int H = g.H, K = g.K, V = g.V, BT = g.BT;
  const size_t state_size = size_t(K) * size_t(V);
  o->assign(size_t(g.T) * size_t(H) * size_t(V), 0.0f);
  std::vector<float> inter(static_cast<size_t>(V)), intra(static_cast<size_t>(V));
  for (const ChunkSpan& c : chunks_of(g.cu, BT)) {
    for (int hd = 0; hd < H; ++hd) {
      const float* h_chunk = h.data() + (size_t(c.global) * size_t(H) + size_t(hd)) * state_size;
      for (int i = 0; i < c.length; ++i) {
        const int64_t ti = c.first + i;
        std::fill(inter.begin(), inter.end(), 0.0f);
        std::fill(intra.begin(), intra.end(), 0.0f);
        for (int d = 0; d < K; ++d) {
          const float qg = round(q[at(ti, hd, d, H, K)] * std::exp2(G[at(ti, hd, d, H, K)]));
          for (int e = 0; e < V; ++e) inter[size_t(e)] += qg * h_chunk[size_t(d) * size_t(V) + size_t(e)];
        }
        for (int j = 0; j <= i; ++j) {
          const float a = Aqk[at(ti, hd, j, H, BT)];
          for (int e = 0; e < V; ++e) intra[size_t(e)] += a * v_new[at(c.first + j, hd, e, H, V)];
        }
        for (int e = 0; e < V; ++e) (*o)[at(ti, hd, e, H, V)] = round(scale * inter[size_t(e)] + intra[size_t(e)]);
      }
    }
  }
}
inline void chunk_output(const ChunkGeometry& g, const std::vector<float>& q, const std::vector<float>& G,
                         const std::vector<float>& h, const std::vector<float>& Aqk, const std::vector<float>& v_new,
                         float scale, DType io, std::vector<float>* o) {
  chunk_output(g, q, G, h, Aqk, v_new, scale, Rounding{io, true}, o);
}

// ---- The whole pipeline ---------------------------------------------------------------------------------------------

struct ChunkedIntermediates {
  std::vector<float> q, k;     // what the kernels read (normalised and rounded when qk_l2norm)
  std::vector<float> beta;     // activated
  std::vector<float> G;
  std::vector<float> Akk, Aqk, Tinv;
  std::vector<float> w, u, kg;
  std::vector<float> h, v_new;
  std::vector<float> o, final_state;
};

// Runs every stage above in order. Chunk size 64 unless stated. final_state is always filled (the stage computes
// it anyway); with p.round_intermediates == false no value is rounded to the io dtype.
inline ChunkedIntermediates chunked_kda(const KdaProblem& p, int chunk_size = 64) {
  const ChunkGeometry geo = geometry_of(p, chunk_size);
  const Rounding round = rounding_of(p);
  const float scale = p.effective_scale();
  ChunkedIntermediates r;
  r.q = p.qk_l2norm ? l2norm_rows(p.q, p.T * p.H, p.K, round) : p.q;
  r.k = p.qk_l2norm ? l2norm_rows(p.k, p.T * p.H, p.K, round) : p.k;
  r.beta = activate_beta(p.beta, p.beta_activation);
  r.G = gate_chunk_cumsum(p, chunk_size);
  intra_chunk_matrices(geo, r.q, r.k, r.G, r.beta, scale, &r.Akk, &r.Aqk);
  solve_tril(geo, r.Akk, &r.Tinv);
  recompute_w_u(geo, r.k, p.v, r.G, r.beta, r.Tinv, round, &r.w, &r.u, &r.kg);
  state_recurrence(geo, r.w, r.u, r.kg, r.G, p.initial_state, round, &r.h, &r.v_new, &r.final_state);
  chunk_output(geo, r.q, r.G, r.h, r.Aqk, r.v_new, scale, round, &r.o);
  return r;
}

}  // namespace kda::ref
