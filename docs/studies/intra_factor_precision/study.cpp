// Numerics study: accuracy of the intra-chunk matrices (Akk, Aqk) when the matrix-unit factors of the off-diagonal
// tiles are single tf32 / fp16 / bf16 values instead of the GPU's hi + lo 16-bit pairs.
//
// Read-only use of the project's CPU reference (tests/reference, include/kda/numeric.hpp).
// The pipeline is a copy of kda::ref::chunked_kda with only the intra-chunk stage swapped.
//
// Modes:
//   0  exact fp32 (ref::intra_chunk_matrices)
//   1  GPU factored form, factors as hi + lo pairs in the io dtype E (hi*hi + hi*lo + lo*hi)
//   2  factored, single tf32 factor (cvt.rna.tf32.f32: round to nearest, ties away)
//   3  factored, single fp16 factor
//   4  factored, single bf16 factor
// Factoring (kernels/kda/intra_chunk_mma.hpp): see intra_factored below.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kda/numeric.hpp"
#include "reference/chunked_reference.hpp"
#include "reference/error_metrics.hpp"
#include "reference/problem_generator.hpp"
#include "reference/recurrent_reference.hpp"

using namespace kda;
using namespace kda::ref;

// ---- factor roundings -------------------------------------------------------------------------------------------

// PTX cvt.rna.tf32.f32: keep 10 explicit mantissa bits, round to nearest with ties away from zero (on the
// magnitude bits, so it is symmetric in sign). Inputs here are finite and small; no overflow handling needed.
static float round_tf32_rna(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN unchanged
  u += 0x1000u;                                       // half of the dropped 13 bits: ties go away from zero
  u &= 0xffffe000u;
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

struct Factor {
  float hi, lo;
};

// mode 1: hi + lo pair in the io dtype (numeric::split_hi_lo<E>); 2: tf32; 3: fp16; 4: bf16 (lo = 0).
static Factor make_factor(float x, int mode, DType io) {
  switch (mode) {
    case 1: {
      const float hi = io == DType::kFP16 ? numeric::round_to<fp16_t>(x) : numeric::round_to<bf16_t>(x);
      const float lo = io == DType::kFP16 ? numeric::round_to<fp16_t>(x - hi) : numeric::round_to<bf16_t>(x - hi);
      return {hi, lo};
    }
    case 2:
      return {round_tf32_rna(x), 0.0f};
    case 3:
      return {numeric::round_to<fp16_t>(x), 0.0f};
    case 4:
      return {numeric::round_to<bf16_t>(x), 0.0f};
  }
  return {x, 0.0f};
}

// One matrix-unit product term over a 16-channel slice: products exact, the 16 summed in double and rounded to fp32
// once, then added to the fp32 accumulator (the m16n8k16 mma's fp32 accumulation, modelled as one rounding per mma).
static inline void mma_term(float* acc, const float* a, const float* b, int d0) {
  double s = 0.0;
  for (int d = d0; d < d0 + 16; ++d) s += double(a[d]) * double(b[d]);
  *acc = *acc + float(s);
}

// ---- the factored intra-chunk stage (mirrors intra_chunk_mma_block) --------------------------------------------
//
// Chunk split into 16-row blocks. Off-diagonal tile (a, b), b < a, reference row r = 16 a:
//   L_i = x_i * exp2(G_i - G_r)   (x = k for Akk, q for Aqk; rows i of block a; rows past the chunk: 0)
//   R_j = k_j * exp2(G_r - G_j)   (rows j of block b)
// Diagonal tile a, middle row m = 16 a + 8, lower-left 8x8 quarter (rows m..m+7, cols 16a..m-1):
//   L'_i = x_i * exp2(G_i - G_m),  R'_j = k_j * exp2(G_m - G_j)        (factored, when quarter_factored)
// The two 8-row triangles of each diagonal tile (rows t..t+7, cols t..i, t = 16a, 16a+8): exact per element,
// kj*exp2(Gi-Gj) then ki*that, 4-channel partial sums, per-slice sums added to a running sum (exact_pair_sums16).
// Products per 16-channel slice: mode 1: hi*hi, hi*lo, lo*hi (three mma); modes 2-4: one mma of the single values.
// Then Akk[i,j] = beta_i * acc (j < i), Aqk[i,j] = scale * acc (j <= i).
static void intra_factored(const ChunkGeometry& g, const std::vector<float>& q, const std::vector<float>& k,
                           const std::vector<float>& G, const std::vector<float>& beta, float scale, DType io,
                           int mode, bool quarter_factored, std::vector<float>* Akk, std::vector<float>* Aqk) {
  const int H = g.H, K = g.K, BT = g.BT;
  Akk->assign(size_t(g.T) * size_t(H) * size_t(BT), 0.0f);
  Aqk->assign(size_t(g.T) * size_t(H) * size_t(BT), 0.0f);
  std::vector<float> kk(size_t(BT) * BT), qk(size_t(BT) * BT);
  // factor tiles: 16 rows x K, hi and lo
  std::vector<float> lk_hi(16 * K), lk_lo(16 * K), lq_hi(16 * K), lq_lo(16 * K), r_hi(16 * K), r_lo(16 * K);
  for (const ChunkSpan& c : chunks_of(g.cu, BT)) {
    const int L = c.length;
    for (int h = 0; h < H; ++h) {
      std::fill(kk.begin(), kk.end(), 0.0f);
      std::fill(qk.begin(), qk.end(), 0.0f);
      auto Gp = [&](int i) { return &G[at(c.first + i, h, 0, H, K)]; };
      auto qp = [&](int i) { return &q[at(c.first + i, h, 0, H, K)]; };
      auto kp = [&](int i) { return &k[at(c.first + i, h, 0, H, K)]; };

      // A factored product block: rows [i0, i0+16) (left factors vs reference row ref), columns [j0, j0 + ncols)
      // (right factors vs ref), output rows/cols limited as given.
      auto factored_block = [&](int ref, int i0, int nrows, int j0, int ncols) {
        const float* g_ref = Gp(ref);
        for (int ii = 0; ii < nrows; ++ii) {
          const int i = i0 + ii;
          for (int d = 0; d < K; ++d) {
            float lk = 0.0f, lq = 0.0f;
            if (i < L) {
              const float decay = std::exp2(Gp(i)[d] - g_ref[d]);
              lk = kp(i)[d] * decay;
              lq = qp(i)[d] * decay;
            }
            const Factor fk = make_factor(lk, mode, io), fq = make_factor(lq, mode, io);
            lk_hi[ii * K + d] = fk.hi;
            lk_lo[ii * K + d] = fk.lo;
            lq_hi[ii * K + d] = fq.hi;
            lq_lo[ii * K + d] = fq.lo;
          }
        }
        for (int jj = 0; jj < ncols; ++jj) {
          const int j = j0 + jj;
          for (int d = 0; d < K; ++d) {
            const float decay = std::exp2(g_ref[d] - Gp(j)[d]);
            const Factor f = make_factor(kp(j)[d] * decay, mode, io);
            r_hi[jj * K + d] = f.hi;
            r_lo[jj * K + d] = f.lo;
          }
        }
        for (int ii = 0; ii < nrows; ++ii) {
          const int i = i0 + ii;
          if (i >= L) continue;
          for (int jj = 0; jj < ncols; ++jj) {
            const int j = j0 + jj;
            float* akk = &kk[size_t(i) * BT + j];
            float* aqk = &qk[size_t(i) * BT + j];
            const float *kh = &lk_hi[ii * K], *kl = &lk_lo[ii * K], *qh = &lq_hi[ii * K], *ql = &lq_lo[ii * K];
            const float *rh = &r_hi[jj * K], *rl = &r_lo[jj * K];
            for (int d0 = 0; d0 < K; d0 += 16) {
              mma_term(akk, kh, rh, d0);
              mma_term(aqk, qh, rh, d0);
              if (mode == 1) {
                mma_term(akk, kh, rl, d0);
                mma_term(akk, kl, rh, d0);
                mma_term(aqk, qh, rl, d0);
                mma_term(aqk, ql, rh, d0);
              }
            }
          }
        }
      };
      // Exact per-element pair (i, j <= i), in the GPU's order.
      auto exact_pair = [&](int i, int j) {
        const float *qi = qp(i), *ki = kp(i), *gi = Gp(i), *kj = kp(j), *gj = Gp(j);
        float dkk = 0.0f, dqk = 0.0f;
        for (int d0 = 0; d0 < K; d0 += 16) {
          float skk = 0.0f, sqk = 0.0f;
          for (int d = d0; d < d0 + 16; d += 4) {
            float kjd[4];
            for (int e = 0; e < 4; ++e) kjd[e] = kj[d + e] * std::exp2(gi[d + e] - gj[d + e]);
            skk += ki[d] * kjd[0] + ki[d + 1] * kjd[1] + ki[d + 2] * kjd[2] + ki[d + 3] * kjd[3];
            sqk += qi[d] * kjd[0] + qi[d + 1] * kjd[1] + qi[d + 2] * kjd[2] + qi[d + 3] * kjd[3];
          }
          dkk += skk;
          dqk += sqk;
        }
        kk[size_t(i) * BT + j] = dkk;
        qk[size_t(i) * BT + j] = dqk;
      };

      const int nb = (L + 15) / 16;
      for (int a = 0; a < nb; ++a) {
        const int r = 16 * a;
        // off-diagonal tiles (a, b), b < a
        for (int b = 0; b < a; ++b) factored_block(r, r, 16, 16 * b, 16);
        // diagonal tile: two exact 8-row triangles
        for (int t : {r, r + 8})
          for (int i = t; i < std::min(t + 8, L); ++i)
            for (int j = t; j <= i; ++j) exact_pair(i, j);
        // lower-left quarter
        const int m = r + 8;
        if (m < L) {
          if (quarter_factored) {
            factored_block(m, m, 8, r, 8);
          } else {
            for (int i = m; i < std::min(m + 8, L); ++i)
              for (int j = r; j < m; ++j) exact_pair(i, j);
          }
        }
      }
      for (int i = 0; i < L; ++i) {
        const int64_t ti = c.first + i;
        const float b_i = beta[size_t(ti) * size_t(H) + size_t(h)];
        for (int j = 0; j <= i; ++j) {
          if (j < i) (*Akk)[at(ti, h, j, H, BT)] = b_i * kk[size_t(i) * BT + j];
          (*Aqk)[at(ti, h, j, H, BT)] = scale * qk[size_t(i) * BT + j];
        }
      }
    }
  }
}

// ---- the pipeline: a copy of ref::chunked_kda with the intra-chunk stage swapped ------------------------------

struct RunResult {
  std::vector<float> Akk, Aqk, o, final_state;
};

static RunResult run_pipeline(const KdaProblem& p, int mode, bool quarter_factored, int chunk_size = 64) {
  const ChunkGeometry geo = geometry_of(p, chunk_size);
  const Rounding round = rounding_of(p);
  const float scale = p.effective_scale();
  ChunkedIntermediates r;
  r.q = p.qk_l2norm ? l2norm_rows(p.q, p.T * p.H, p.K, round) : p.q;
  r.k = p.qk_l2norm ? l2norm_rows(p.k, p.T * p.H, p.K, round) : p.k;
  r.beta = activate_beta(p.beta, p.beta_activation);
  r.G = gate_chunk_cumsum(p, chunk_size);
  if (mode == 0)
    intra_chunk_matrices(geo, r.q, r.k, r.G, r.beta, scale, &r.Akk, &r.Aqk);
  else
    intra_factored(geo, r.q, r.k, r.G, r.beta, scale, p.io_dtype, mode, quarter_factored, &r.Akk, &r.Aqk);
  solve_tril(geo, r.Akk, &r.Tinv);
  recompute_w_u(geo, r.k, p.v, r.G, r.beta, r.Tinv, round, &r.w, &r.u, &r.kg);
  state_recurrence(geo, r.w, r.u, r.kg, r.G, p.initial_state, round, &r.h, &r.v_new, &r.final_state);
  chunk_output(geo, r.q, r.G, r.h, r.Aqk, r.v_new, scale, round, &r.o);
  return {r.Akk, r.Aqk, r.o, r.final_state};
}

// ---- problems ------------------------------------------------------------------------------------------------

struct NamedProblem {
  std::string name;
  KdaProblem p;
};

// kda_bench --kda_check's options (bench/accuracy_check.hpp run_accuracy_check).
static ProblemOptions check_options(GateKind kind) {
  ProblemOptions opt;
  opt.qk_l2norm_in_kernel = true;
  opt.beta_activation = BetaActivation::kSigmoid;
  opt.with_A_log = kind == GateKind::kSoftplus;
  opt.with_dt_bias = true;
  opt.lower_bound = -5.0f;
  opt.with_initial_state = true;
  return opt;
}

// tests/capi/test_capi_gpu.cpp make_problem's options.
static ProblemOptions capi_options(GateKind kind) {
  ProblemOptions o;
  o.with_initial_state = true;
  o.zero_gate_fraction = 0.02;
  o.extreme_gate_fraction = 0.01;
  if (kind != GateKind::kPrecomputed) {
    o.qk_l2norm_in_kernel = true;
    o.beta_activation = BetaActivation::kSigmoid;
    o.with_dt_bias = true;
    o.with_A_log = kind == GateKind::kSoftplus;
  }
  return o;
}

static std::vector<NamedProblem> make_problems(const std::string& which) {
  std::vector<NamedProblem> out;
  const std::vector<int64_t> cu_check = {0, 100, 357, 1000};
  const bool all = which == "all";
  if (all || which == "check") {
    out.push_back({"check/softplus", make_random_problem(cu_check, 4, 128, 128, DType::kBF16, GateKind::kSoftplus, 1,
                                                         check_options(GateKind::kSoftplus))});
    out.push_back({"check/lowerbnd", make_random_problem(cu_check, 4, 128, 128, DType::kBF16, GateKind::kLowerBound,
                                                         2, check_options(GateKind::kLowerBound))});
  }
  if (all || which == "unrounded") {  // same, no io rounding of intermediates: isolates the intra-chunk error
    for (GateKind kind : {GateKind::kSoftplus, GateKind::kLowerBound}) {
      ProblemOptions opt = check_options(kind);
      opt.round_intermediates = false;
      out.push_back({kind == GateKind::kSoftplus ? "unrnd/softplus" : "unrnd/lowerbnd",
                     make_random_problem(cu_check, 4, 128, 128, DType::kBF16, kind,
                                         kind == GateKind::kSoftplus ? 1 : 2, opt)});
    }
  }
  if (all || which == "long") {
    const std::vector<int64_t> cu_long = {0, 4096};
    out.push_back({"long4k/softplus", make_random_problem(cu_long, 2, 128, 128, DType::kBF16, GateKind::kSoftplus, 3,
                                                          check_options(GateKind::kSoftplus))});
    out.push_back({"long4k/lowerbnd", make_random_problem(cu_long, 2, 128, 128, DType::kBF16, GateKind::kLowerBound,
                                                          4, check_options(GateKind::kLowerBound))});
  }
  if (all || which == "masks") {
    out.push_back({"mask/softplus", make_random_problem(cu_check, 4, 128, 128, DType::kBF16, GateKind::kSoftplus, 5,
                                                        capi_options(GateKind::kSoftplus))});
    out.push_back({"mask/lowerbnd", make_random_problem(cu_check, 4, 128, 128, DType::kBF16, GateKind::kLowerBound, 6,
                                                        capi_options(GateKind::kLowerBound))});
    out.push_back({"mask/precomp", make_random_problem(cu_check, 4, 128, 128, DType::kBF16, GateKind::kPrecomputed, 7,
                                                       capi_options(GateKind::kPrecomputed))});
  }
  if (all || which == "signed") {  // q, k, v with random signs (the generator's are all >= 0): dot products cancel
    auto signed_problem = [](const std::vector<int64_t>& cu, int H, DType io, GateKind kind, uint64_t seed) {
      KdaProblem p = make_random_problem(cu, H, 128, 128, io, kind, seed, check_options(kind));
      TestRng rng(seed * 7919 + 1);
      for (std::vector<float>* x : {&p.q, &p.k, &p.v})
        for (float& v : *x)
          if (rng.next_u64() & 1) v = -v;  // exact in any dtype
      return p;
    };
    {
      KdaProblem p = signed_problem(cu_check, 4, DType::kBF16, GateKind::kLowerBound, 12);
      p.round_intermediates = false;  // same as sgn/lowerbnd, no io rounding of intermediates
      out.push_back({"sgn-unrnd/lb", p});
    }
    out.push_back({"sgn/softplus", signed_problem(cu_check, 4, DType::kBF16, GateKind::kSoftplus, 11)});
    out.push_back({"sgn/lowerbnd", signed_problem(cu_check, 4, DType::kBF16, GateKind::kLowerBound, 12)});
    out.push_back({"sgn-long4k/lb", signed_problem({0, 4096}, 2, DType::kBF16, GateKind::kLowerBound, 13)});
    out.push_back({"sgn-fp16/lb", signed_problem(cu_check, 4, DType::kFP16, GateKind::kLowerBound, 14)});
  }
  if (all || which == "fp16") {
    out.push_back({"fp16/softplus", make_random_problem(cu_check, 4, 128, 128, DType::kFP16, GateKind::kSoftplus, 8,
                                                        check_options(GateKind::kSoftplus))});
    out.push_back({"fp16/lowerbnd", make_random_problem(cu_check, 4, 128, 128, DType::kFP16, GateKind::kLowerBound, 9,
                                                        check_options(GateKind::kLowerBound))});
    out.push_back({"fp16/mask-sp", make_random_problem(cu_check, 4, 128, 128, DType::kFP16, GateKind::kSoftplus, 10,
                                                       capi_options(GateKind::kSoftplus))});
  }
  return out;
}

static const char* mode_name(int mode) {
  static const char* names[] = {"0 exact fp32", "1 hi+lo(io)", "2 tf32", "3 fp16", "4 bf16"};
  return names[mode];
}

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  const auto t_start = std::chrono::steady_clock::now();
  std::printf("%-16s %-14s %-5s %11s %11s %10s %10s %10s %10s %10s\n", "problem", "mode", "quart", "o_rms", "st_rms",
              "o_maxabs", "Akk_vs0", "Aqk_vs0", "o_vs0", "st_vs0");
  for (const NamedProblem& np : make_problems(which)) {
    const KdaProblem& p = np.p;
    const KdaOutput truth = recurrent_kda_f64(p);

    // Validate the copied pipeline: mode 0 must reproduce ref::chunked_kda bit for bit.
    const ChunkedIntermediates ref_run = chunked_kda(p, 64);
    const RunResult m0 = run_pipeline(p, 0, true);
    const bool same_o = ref_run.o == m0.o, same_state = ref_run.final_state == m0.final_state;
    if (!same_o || !same_state) {
      std::printf("%s: copied pipeline DIFFERS from chunked_kda (o %s, state %s)\n", np.name.c_str(),
                  same_o ? "same" : "differs", same_state ? "same" : "differs");
      return 1;
    }

    auto report = [&](int mode, bool quarter, const RunResult& r) {
      std::printf("%-16s %-14s %-5s %11.5e %11.5e %10.3e %10.3e %10.3e %10.3e %10.3e\n", np.name.c_str(),
                  mode_name(mode), mode == 0 ? "-" : quarter ? "fact" : "exact",
                  rms_relative_error(truth.o, r.o), rms_relative_error(truth.final_state, r.final_state),
                  max_abs_error(truth.o, r.o), rms_relative_error(m0.Akk, r.Akk), rms_relative_error(m0.Aqk, r.Aqk),
                  rms_relative_error(m0.o, r.o), rms_relative_error(m0.final_state, r.final_state));
      std::fflush(stdout);
    };
    report(0, true, m0);
    for (bool quarter : {true, false})
      for (int mode = 1; mode <= 4; ++mode) report(mode, quarter, run_pipeline(p, mode, quarter));
    std::printf("%-16s (mode 0 == chunked_kda bit for bit: yes; T=%lld H=%d K=%d V=%d io=%s gate=%d)\n",
                np.name.c_str(), (long long)p.T, p.H, p.K, p.V, p.io_dtype == DType::kFP16 ? "fp16" : "bf16",
                int(p.gate));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::printf("total %.1f s\n", secs);
  return 0;
}
