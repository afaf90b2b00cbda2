// Runs the CPU references one head per thread. Heads never interact in KDA, so a problem splits exactly into H
// single-head problems; this keeps the float64 reference of a T=8192, H=32 batch to seconds on the GPU machine.
#pragma once

#include <algorithm>
#include <functional>
#include <thread>
#include <vector>

#include "reference/chunked_reference.hpp"
#include "reference/recurrent_reference.hpp"

namespace kda::test {

// Head h of p as a problem with H = 1.
inline ref::KdaProblem head_slice(const ref::KdaProblem& p, int h) {
  ref::KdaProblem s = p;
  s.H = 1;
  const int64_t T = p.T, N = p.num_sequences();
  auto rows = [&](const std::vector<float>& x, int dim) {
    std::vector<float> out(size_t(T) * dim);
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(x.begin() + (t * p.H + h) * dim, dim, out.begin() + t * dim);
    return out;
  };
  s.q = rows(p.q, p.K);
  s.k = rows(p.k, p.K);
  s.v = rows(p.v, p.V);
  s.g = rows(p.g, p.K);
  s.beta = rows(p.beta, 1);
  if (!p.A_log.empty()) s.A_log = {p.A_log[h]};
  if (!p.dt_bias.empty()) s.dt_bias.assign(p.dt_bias.begin() + int64_t(h) * p.K, p.dt_bias.begin() + (h + 1) * p.K);
  if (!p.initial_state.empty()) {
    const size_t kv = size_t(p.K) * p.V;
    s.initial_state.assign(size_t(N) * kv, 0.0f);
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(p.initial_state.begin() + (n * p.H + h) * kv, kv, s.initial_state.begin() + n * kv);
  }
  return s;
}

// Writes a single-head [T,1,D] tensor into head h of a [T,H,D] tensor (the same for [N,1,K*V] into [N,H,K*V]).
inline void scatter_head(const std::vector<float>& part, int64_t rows, int H, int h, size_t dim,
                         std::vector<float>* whole) {
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(part.begin() + r * dim, dim, whole->begin() + (r * H + h) * dim);
}

inline void for_each_head_parallel(int H, const std::function<void(int)>& body) {
  const int workers = std::max(1, std::min<int>(H, int(std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int h = w; h < H; h += workers) body(h);
    });
  for (auto& t : pool) t.join();
}

inline ref::KdaOutput recurrent_f64_parallel(const ref::KdaProblem& p) {
  ref::KdaOutput out;
  const int64_t N = p.num_sequences();
  out.o.assign(size_t(p.T) * p.H * p.V, 0.0f);
  if (p.want_final_state) out.final_state.assign(size_t(N) * p.H * p.K * p.V, 0.0f);
  for_each_head_parallel(p.H, [&](int h) {
    const ref::KdaOutput part = ref::recurrent_kda_f64(head_slice(p, h));
    scatter_head(part.o, p.T, p.H, h, p.V, &out.o);
    if (p.want_final_state) scatter_head(part.final_state, N, p.H, h, size_t(p.K) * p.V, &out.final_state);
  });
  return out;
}

// The rounded float32 chunked reference (the GPU stages' own formulas and rounding points), one head per thread:
// its o and final state.
inline ref::KdaOutput chunked_parallel(const ref::KdaProblem& p, int chunk_size) {
  ref::KdaOutput out;
  const int64_t N = p.num_sequences();
  out.o.assign(size_t(p.T) * p.H * p.V, 0.0f);
  if (p.want_final_state) out.final_state.assign(size_t(N) * p.H * p.K * p.V, 0.0f);
  for_each_head_parallel(p.H, [&](int h) {
    const ref::ChunkedIntermediates part = ref::chunked_kda(head_slice(p, h), chunk_size);
    scatter_head(part.o, p.T, p.H, h, p.V, &out.o);
    if (p.want_final_state) scatter_head(part.final_state, N, p.H, h, size_t(p.K) * p.V, &out.final_state);
  });
  return out;
}

}  // namespace kda::test
