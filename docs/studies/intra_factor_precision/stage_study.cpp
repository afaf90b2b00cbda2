// Stage-level study: test_stages.cu's cases and seeds, the intra stage with factored fp16 single factors (mode 3) or
// hi + lo pairs (mode 1), GPU-faithful quarter, against the reference's exact fp32 intra (mode 0 == chunked_kda).
// Reuses study.cpp's intra_factored (its main is renamed away).
#define main study_main_unused
#include "study.cpp"
#undef main

#include "kda/chunk_metadata.hpp"

struct StageCase {
  std::string name;
  std::vector<int64_t> cu;
  int H, K, V, BT;
};

static std::vector<int64_t> every_short_length_cu() {  // tests/gpu/device_problem.hpp
  std::vector<int64_t> lengths;
  for (int64_t l = 1; l <= 17; ++l) lengths.push_back(l);
  lengths.push_back(64 + 9);
  lengths.push_back(64 + 16);
  lengths.push_back(1);
  std::vector<int64_t> cu;
  if (!make_prefill_cu_seqlens(lengths, &cu).is_ok()) std::abort();
  return cu;
}

static std::vector<StageCase> stage_cases() {  // tests/gpu/test_stages.cu
  std::vector<int64_t> mix;
  if (!make_decode_prefill_cu_seqlens(6, {150, 64, 300}, &mix).is_ok()) std::abort();
  return {
      {"varlen_zero_len", {0, 15, 15, 100, 300, 300, 700, 700}, 4, 128, 128, 64},
      {"decodes_then_prefills", mix, 2, 128, 64, 64},
      {"d256_bt32", {0, 1, 100, 161}, 2, 256, 256, 32},
      {"d64_bt32_short", {0, 40, 41, 97}, 2, 64, 64, 32},
      {"every_short_length", every_short_length_cu(), 2, 128, 128, 64},
  };
}

static KdaProblem stage_problem(const StageCase& c, uint64_t seed, DType io) {
  ProblemOptions opt;
  opt.qk_l2norm_in_kernel = true;
  opt.beta_activation = BetaActivation::kSigmoid;
  opt.with_dt_bias = true;
  opt.with_initial_state = true;
  return make_random_problem(c.cu, c.H, c.K, c.V, io, GateKind::kSoftplus, seed, opt);
}

int main(int argc, char** argv) {
  const int extra_seeds = argc > 1 ? std::atoi(argv[1]) : 0;  // >0: seeds 1000+idx+100*s, s<extra, max only
  const bool signed_in = argc > 2 && std::atoi(argv[2]) != 0;  // random signs on q, k, v
  std::printf("%-22s %-4s %-5s %-12s %10s %10s %10s %10s %10s\n", "case", "io", "seed", "mode", "Akk", "Aqk", "Tinv",
              "w", "u");
  const auto cases = stage_cases();
  for (DType io : {DType::kBF16, DType::kFP16}) {
    for (int idx = 0; idx < int(cases.size()); ++idx) {
      const StageCase& c = cases[idx];
     for (int sv = 0; sv < std::max(1, extra_seeds); ++sv) {
      const uint64_t seed = 1000 + idx + 100 * sv;
      KdaProblem p = stage_problem(c, seed, io);
      if (signed_in) {
        TestRng rng(seed * 7919 + 1);
        for (std::vector<float>* x : {&p.q, &p.k, &p.v})
          for (float& v : *x)
            if (rng.next_u64() & 1) v = -v;
      }
      const int BT = c.BT;
      const ChunkedIntermediates R = chunked_kda(p, BT);
      const ChunkGeometry geo = geometry_of(p, BT);
      const Rounding round = rounding_of(p);
      // sanity: exact intra through this path reproduces R
      {
        std::vector<float> a, q;
        intra_chunk_matrices(geo, R.q, R.k, R.G, R.beta, p.effective_scale(), &a, &q);
        if (a != R.Akk || q != R.Aqk) { std::printf("mode-0 mismatch\n"); return 1; }
      }
      for (int mode : {1, 3}) {
        std::vector<float> Akk, Aqk, Tinv, w, u, kg;
        intra_factored(geo, R.q, R.k, R.G, R.beta, p.effective_scale(), io, mode, true, &Akk, &Aqk);
        solve_tril(geo, Akk, &Tinv);
        recompute_w_u(geo, R.k, p.v, R.G, R.beta, Tinv, round, &w, &u, &kg);
        std::printf("%-22s %-4s %-5llu %-12s %10.3e %10.3e %10.3e %10.3e %10.3e\n", c.name.c_str(),
                    io == DType::kFP16 ? "fp16" : "bf16", (unsigned long long)seed, mode_name(mode),
                    rms_relative_error(R.Akk, Akk), rms_relative_error(R.Aqk, Aqk), rms_relative_error(R.Tinv, Tinv),
                    rms_relative_error(R.w, w), rms_relative_error(R.u, u));
        std::fflush(stdout);
      }
     }
    }
  }
  return 0;
}
