// Probe (round 38): the fused prepare of a batch whose sequences are all at most 8 tokens (one chunk each: a
// speculative batch), with one warp per (sequence, head) and everything in registers, against the library's
// short-only kernel (chunk_prepare_inputs_short_only_mma_kernel, what chunk_kda_fwd runs on spec256x8).
//
// Why: that kernel spends ~9,000 warp instructions per (8-token chunk, head) on four warps (ncu, round 17), 283 per
// (token, channel), of which the arithmetic needs well under 100. A warp per item holds its 4 channels of all 8 rows
// in registers: the l2norm is a 5-step butterfly per row, the gate's running sum never leaves the lane, the 64 pair
// sums (Aqk's 36, Akk's 28) are formed per lane and reduced by one reduce-scatter butterfly (62 shuffles), the 8x8
// inverse is the library's diagonal_tile_inverse_column<8>, and w, u are fp32 FMAs. No block barrier.
//
// Not the library's bits: the pair sums and w, u are summed in another order (the l2norm, G, G_last, qg, kg and the
// right-hand sides use the library's expressions). The harness compares every output with the library kernel's and
// times both (CUDA events, 20 calls back to back, 5 repeats).
//
// Build: nvcc -O3 -std=c++17 --generate-code=arch=compute_90a,code=sm_90a -Iinclude -Ikernels \
//          docs/studies/warp_short_prepare/probe.cu -o probe
// Run:   ./probe [sequences (256)] [tokens per sequence, 1-8 (8)]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cmath>
#include <algorithm>

#include "kda/chunk_kda.hpp"

using namespace kda;

#include "warp_prepare.cuh"


#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

template <typename T>
static T* dalloc(size_t n) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, n * sizeof(T)));
  CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}
template <typename T>
static std::vector<T> fetch(const T* p, size_t n) {
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

struct Diff {
  double max_abs = 0, max_ref = 0;
  size_t differ = 0, n = 0;
};
static Diff compare_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = numeric::bf16_to_float(a[i]), y = numeric::bf16_to_float(b[i]);
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    d.max_ref = std::max(d.max_ref, std::fabs(y));
    d.differ += a[i] != b[i];
    ++d.n;
  }
  return d;
}
static Diff compare_f32(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    d.max_abs = std::max(d.max_abs, double(std::fabs(a[i] - b[i])));
    d.max_ref = std::max(d.max_ref, double(std::fabs(b[i])));
    d.differ += a[i] != b[i];
    ++d.n;
  }
  return d;
}
// Aqk as hi + lo pairs, compared as the fp32 value they carry.
static Diff compare_hilo(const std::vector<uint16_t>& ah, const std::vector<uint16_t>& al,
                         const std::vector<uint16_t>& bh, const std::vector<uint16_t>& bl) {
  Diff d;
  for (size_t i = 0; i < ah.size(); ++i) {
    const double x = double(numeric::bf16_to_float(ah[i])) + numeric::bf16_to_float(al[i]);
    const double y = double(numeric::bf16_to_float(bh[i])) + numeric::bf16_to_float(bl[i]);
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    d.max_ref = std::max(d.max_ref, std::fabs(y));
    d.differ += ah[i] != bh[i] || al[i] != bl[i];
    ++d.n;
  }
  return d;
}
static void print_diff(const char* name, const Diff& d) {
  std::printf("  %-7s max|probe-lib| %.3e (max|lib| %.3e), %zu of %zu elements differ\n", name, d.max_abs, d.max_ref,
              d.differ, d.n);
}

int main(int argc, char** argv) {
  using namespace probe;
  const int N = argc > 1 ? std::atoi(argv[1]) : 256;
  const int L = argc > 2 ? std::atoi(argv[2]) : 8;
  const int H = 32;
  if (N < 1 || L < 1 || L > kRows) {
    std::fprintf(stderr, "usage: probe [sequences >= 1] [tokens per sequence 1-8]\n");
    return 2;
  }
  const int64_t T = int64_t(N) * L;
  const size_t tk = size_t(T) * H * K, tv = size_t(T) * H * V, th = size_t(T) * H;
  uint16_t *q = dalloc<uint16_t>(tk), *k = dalloc<uint16_t>(tk), *v = dalloc<uint16_t>(tv);
  float *g = dalloc<float>(tk), *beta = dalloc<float>(th), *A_log = dalloc<float>(H), *dt_bias = dalloc<float>(size_t(H) * K);
  fill_bf16_uniform<<<1024, 256>>>(q, tk, 1);
  fill_bf16_uniform<<<1024, 256>>>(k, tk, 2);
  fill_bf16_uniform<<<1024, 256>>>(v, tv, 3);
  fill_f32_normalish<<<1024, 256>>>(g, tk, 4, 0, 0);
  fill_f32_normalish<<<1024, 256>>>(beta, th, 5, 0, 0);
  fill_f32_normalish<<<1, 32>>>(A_log, H, 6, 0, 1);
  fill_f32_normalish<<<64, 256>>>(dt_bias, size_t(H) * K, 7, 0, 0);
  std::vector<int32_t> cu_h(N + 1), idx_h(2 * size_t(N)), off_h(N + 1);
  for (int n = 0; n <= N; ++n) cu_h[n] = n * L, off_h[n] = n;
  for (int n = 0; n < N; ++n) idx_h[2 * n] = n, idx_h[2 * n + 1] = 0;
  int32_t *cu = dalloc<int32_t>(N + 1), *idx = dalloc<int32_t>(2 * size_t(N)), *off = dalloc<int32_t>(N + 1);
  CHECK(cudaMemcpy(cu, cu_h.data(), cu_h.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(idx, idx_h.data(), idx_h.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(off, off_h.data(), off_h.size() * 4, cudaMemcpyHostToDevice));

  // Two sets of outputs: the library's and the probe's.
  struct Out {
    uint16_t *w, *u, *kg, *qg, *hi, *lo;
    float* G_last;
  } out[2];
  for (Out& o : out) {
    o.w = dalloc<uint16_t>(tk), o.u = dalloc<uint16_t>(tv), o.kg = dalloc<uint16_t>(tk), o.qg = dalloc<uint16_t>(tk);
    o.hi = dalloc<uint16_t>(th * BT), o.lo = dalloc<uint16_t>(th * BT), o.G_last = dalloc<float>(size_t(N) * H * K);
  }

  ChunkPrepareInputsArgs a;
  StageGeometry& geo = a.geometry;
  geo.metadata.cu_seqlens = IndexSpan{cu, IndexType::kInt32};
  geo.metadata.num_sequences = N;
  geo.metadata.total_tokens = T;
  geo.metadata.chunk_indices = IndexSpan{idx, IndexType::kInt32};
  geo.metadata.chunk_offsets = IndexSpan{off, IndexType::kInt32};
  geo.metadata.num_chunks = N;
  geo.metadata.max_sequence_tokens = L;
  geo.num_heads = H;
  geo.head_dim_k = K;
  geo.head_dim_v = V;
  geo.chunk_size = BT;
  geo.dtype = DType::kBF16;
  a.q = contiguous_view(static_cast<const void*>(q), H, K);
  a.k = contiguous_view(static_cast<const void*>(k), H, K);
  a.v = contiguous_view(static_cast<const void*>(v), H, V);
  a.g = contiguous_view(static_cast<const void*>(g), H, K);
  a.g_type = ScalarType::kFloat32;
  a.beta = TensorView{beta, H, 1};
  a.beta_type = ScalarType::kFloat32;
  a.gate = GateKind::kSoftplus;
  a.A_log = A_log;
  a.dt_bias = dt_bias;
  a.beta_activation = BetaActivation::kSigmoid;
  a.qk_l2norm = true;
  a.scale = 0.0f;
  a.w = contiguous_view(static_cast<void*>(out[0].w), H, K);
  a.u = contiguous_view(static_cast<void*>(out[0].u), H, V);
  a.kg = contiguous_view(static_cast<void*>(out[0].kg), H, K);
  a.qg = contiguous_view(static_cast<void*>(out[0].qg), H, K);
  a.Aqk_hi = out[0].hi;
  a.Aqk_lo = out[0].lo;
  a.G_last = out[0].G_last;
  a.short_chunks = 1;

  Params p{q, k, v, g, beta, A_log, dt_bias, cu, N, H, 1.0f / std::sqrt(float(K)),
           out[1].w, out[1].u, out[1].kg, out[1].qg, out[1].hi, out[1].lo, out[1].G_last};
  const int64_t items = int64_t(N) * H;
  const dim3 grid(unsigned((items + kWarps - 1) / kWarps));
  auto run_lib = [&]() {
    const Status s = launch_chunk_prepare_inputs(a, nullptr, 0, 0);
    if (!s.is_ok()) {
      std::fprintf(stderr, "library launch: %s\n", s.message());
      std::exit(2);
    }
  };
  auto run_probe = [&]() { warp_prepare_kernel<1><<<grid, kWarps * 32>>>(p); };
  auto run_probe2 = [&]() { warp_prepare_kernel<2><<<grid, kWarps * 32>>>(p); };
  run_lib();
  run_probe2();  // its outputs are overwritten by run_probe's below; checked for bits against them
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> w2 = fetch(out[1].w, tk), u2 = fetch(out[1].u, tv), hi2 = fetch(out[1].hi, th * BT);
  run_probe();
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  const bool same2 = w2 == fetch(out[1].w, tk) && u2 == fetch(out[1].u, tv) && hi2 == fetch(out[1].hi, th * BT);

  std::printf("probe: N=%d sequences x %d tokens, H=%d, K=V=%d, bf16, softplus gate, l2norm, sigmoid beta\n", N, L, H, K);
  print_diff("G_last", compare_f32(fetch(out[1].G_last, size_t(N) * H * K), fetch(out[0].G_last, size_t(N) * H * K)));
  print_diff("qg", compare_bf16(fetch(out[1].qg, tk), fetch(out[0].qg, tk)));
  print_diff("kg", compare_bf16(fetch(out[1].kg, tk), fetch(out[0].kg, tk)));
  print_diff("w", compare_bf16(fetch(out[1].w, tk), fetch(out[0].w, tk)));
  print_diff("u", compare_bf16(fetch(out[1].u, tv), fetch(out[0].u, tv)));
  print_diff("Aqk", compare_hilo(fetch(out[1].hi, th * BT), fetch(out[1].lo, th * BT), fetch(out[0].hi, th * BT),
                                 fetch(out[0].lo, th * BT)));

  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  auto time_ms = [&](auto&& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> reps;
    for (int r = 0; r < 5; ++r) {
      CHECK(cudaEventRecord(e0));
      for (int i = 0; i < 20; ++i) fn();
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      reps.push_back(ms / 20);
    }
    std::sort(reps.begin(), reps.end());
    return reps[reps.size() / 2];
  };
  std::printf("  the 128-register build gives the same w, u, Aqk bits: %s\n", same2 ? "yes" : "NO");
  for (int round = 0; round < 2; ++round) {
    const float lib = time_ms(run_lib), pr = time_ms(run_probe), pr2 = time_ms(run_probe2);
    std::printf("round %d: library short-only prepare %.4f ms, warp probe %.4f ms (%.2fx), at 2 blocks/SM %.4f ms (%.2fx)\n",
                round, lib, pr, lib / pr, pr2, lib / pr2);
  }
  CHECK(cudaGetLastError());
  return 0;
}
