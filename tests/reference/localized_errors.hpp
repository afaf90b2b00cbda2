// Errors that say where they are: a computed o ([T,H,D]) or final state ([N,H,K*V]) against its reference, per
// (sequence, head), with the worst place named. A whole-tensor RMS hides one wrong row of a large batch (one row in
// 8,192 x 32 moves it by ~0.2 %); the per-slice figures and the largest error relative to the tensor's scale do not.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace kda::ref {

struct LocalizedErrors {
  // A slice's RMS error is taken relative to max(rms of its reference, kSliceScaleFloor x rms(ref)): a slice whose
  // reference is nearly zero (a state decayed to nothing) is judged against the tensor's scale, not its own.
  static constexpr double kSliceScaleFloor = 0.1;

  double rms_rel = 0.0;  // rms(ref - got) / rms(ref) over the whole tensor
  double ref_rms = 0.0;  // rms(ref), the tensor's scale
  double worst_slice_rms_rel = 0.0;  // the (sequence, head) slice with the largest relative RMS error
  int64_t worst_slice_sequence = -1;
  int worst_slice_head = -1;
  double max_abs_rel = 0.0;  // the largest |ref - got| / rms(ref), and where it is (token -1 for a state)
  int64_t max_abs_sequence = -1, max_abs_token = -1;
  int max_abs_head = -1;
  size_t nonfinite = 0;  // entries of got that are NaN or Inf where ref is finite: every metric is then infinite
  bool size_mismatch = false;

  std::string describe() const {
    if (size_mismatch) return "sizes differ";
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "rms rel %.3e; worst slice (sequence %lld, head %d) %.3e; max |err| %.3e x rms(ref) at "
                  "(sequence %lld, head %d, token %lld); %zu non-finite",
                  rms_rel, static_cast<long long>(worst_slice_sequence), worst_slice_head, worst_slice_rms_rel,
                  max_abs_rel, static_cast<long long>(max_abs_sequence), max_abs_head,
                  static_cast<long long>(max_abs_token), nonfinite);
    return buf;
  }
};

namespace localized_detail {

// rows x H slices of `dim` values; row r belongs to sequence owner[r] and is reported as token token[r].
inline LocalizedErrors localize(const std::vector<float>& ref, const std::vector<float>& got, int64_t num_sequences,
                                int H, size_t dim, const std::vector<int64_t>& owner,
                                const std::vector<int64_t>& token) {
  LocalizedErrors e;
  const size_t rows = owner.size();
  if (ref.size() != got.size() || ref.size() != rows * size_t(H) * dim) {
    e.size_mismatch = true;
    e.rms_rel = e.worst_slice_rms_rel = e.max_abs_rel = std::numeric_limits<double>::infinity();
    return e;
  }
  const size_t slices = size_t(std::max<int64_t>(num_sequences, 0)) * size_t(H);
  std::vector<double> diff_sq(slices, 0.0), ref_sq(slices, 0.0), count(slices, 0.0);
  double max_abs = 0.0;
  for (size_t r = 0; r < rows; ++r)
    for (int h = 0; h < H; ++h) {
      const size_t slice = size_t(owner[r]) * size_t(H) + size_t(h), base = (r * size_t(H) + size_t(h)) * dim;
      for (size_t i = 0; i < dim; ++i) {
        const double want = ref[base + i], have = got[base + i];
        if (std::isfinite(want) && !std::isfinite(have)) ++e.nonfinite;
        double d = std::fabs(want - have);
        if (std::isnan(d)) d = std::numeric_limits<double>::infinity();  // the first non-finite entry is the worst
        if (d > max_abs) {
          max_abs = d;
          e.max_abs_sequence = owner[r];
          e.max_abs_head = h;
          e.max_abs_token = token[r];
        }
        diff_sq[slice] += d * d;
        ref_sq[slice] += want * want;
        count[slice] += 1.0;
      }
    }
  double all_diff = 0.0, all_ref = 0.0, all_count = 0.0;
  for (size_t s = 0; s < slices; ++s) {
    all_diff += diff_sq[s];
    all_ref += ref_sq[s];
    all_count += count[s];
  }
  e.ref_rms = std::sqrt(all_ref / std::max(all_count, 1.0));
  const double scale = e.ref_rms > 0.0 ? e.ref_rms : 1.0;  // an all-zero reference: errors are absolute
  e.rms_rel = std::sqrt(all_diff / std::max(all_count, 1.0)) / scale;
  e.max_abs_rel = max_abs / scale;
  for (size_t s = 0; s < slices; ++s) {
    if (count[s] == 0.0) continue;
    const double denom = std::max(std::sqrt(ref_sq[s] / count[s]), LocalizedErrors::kSliceScaleFloor * scale);
    const double rel = std::sqrt(diff_sq[s] / count[s]) / denom;
    if (!(rel <= e.worst_slice_rms_rel) && !std::isnan(e.worst_slice_rms_rel)) {
      e.worst_slice_rms_rel = rel;
      e.worst_slice_sequence = int64_t(s / size_t(H));
      e.worst_slice_head = int(s % size_t(H));
    }
  }
  if (e.nonfinite > 0 || !std::isfinite(all_diff)) {
    e.rms_rel = e.worst_slice_rms_rel = e.max_abs_rel = std::numeric_limits<double>::infinity();
  }
  return e;
}

}  // namespace localized_detail

// A token-major tensor [T,H,D] (o) over the packed sequences cu_seqlens ([N+1]).
inline LocalizedErrors token_errors(const std::vector<float>& ref, const std::vector<float>& got,
                                    const std::vector<int64_t>& cu_seqlens, int H, size_t D) {
  std::vector<int64_t> owner, token;
  for (size_t n = 0; n + 1 < cu_seqlens.size(); ++n)
    for (int64_t t = cu_seqlens[n]; t < cu_seqlens[n + 1]; ++t) {
      owner.push_back(int64_t(n));
      token.push_back(t);
    }
  return localized_detail::localize(ref, got, int64_t(cu_seqlens.size()) - 1, H, D, owner, token);
}

// A per-sequence tensor [N,H,D] (final states, D = K*V).
inline LocalizedErrors sequence_errors(const std::vector<float>& ref, const std::vector<float>& got, int64_t N, int H,
                                       size_t D) {
  std::vector<int64_t> owner(size_t(std::max<int64_t>(N, 0))), token(owner.size(), -1);
  for (size_t n = 0; n < owner.size(); ++n) owner[n] = int64_t(n);
  return localized_detail::localize(ref, got, N, H, D, owner, token);
}

// Bars for LocalizedErrors: the whole tensor's relative RMS, the worst slice's, and the largest error relative to the
// tensor's scale.
struct ErrorBars {
  double rms_rel, slice_rms_rel, max_abs_rel;
};

inline bool within(const LocalizedErrors& e, const ErrorBars& b) {
  return !e.size_mismatch && e.nonfinite == 0 && e.rms_rel <= b.rms_rel && e.worst_slice_rms_rel <= b.slice_rms_rel &&
         e.max_abs_rel <= b.max_abs_rel;
}

}  // namespace kda::ref
