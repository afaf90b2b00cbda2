// Error metrics for comparing a computed tensor against a reference (KDA_SPEC §6, FLA's assert_close).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kda::ref {

// Largest |ref - got|. Infinity when the sizes differ or `got` holds a NaN or an infinity where ref is finite.
inline double max_abs_error(const std::vector<float>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(double(ref[i]) - double(got[i]));
    if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();  // NaN must not compare as "small"
    worst = std::max(worst, diff);
  }
  return worst;
}

// rms(ref - got) / rms(ref). When rms(ref) == 0 (an all-zero reference) the relative error is undefined; the
// absolute rms(got) is returned instead, so all-zero vs all-zero is 0 and anything else is judged on its own size.
// Infinity when the sizes differ or anything is not finite.
inline double rms_relative_error(const std::vector<float>& ref, const std::vector<float>& got) {
  if (ref.size() != got.size()) return std::numeric_limits<double>::infinity();
  double diff_sq = 0.0, ref_sq = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = double(ref[i]) - double(got[i]);
    diff_sq += diff * diff;
    ref_sq += double(ref[i]) * double(ref[i]);
  }
  if (!std::isfinite(diff_sq) || !std::isfinite(ref_sq)) return std::numeric_limits<double>::infinity();
  return ref_sq > 0.0 ? std::sqrt(diff_sq / ref_sq) : std::sqrt(diff_sq / double(std::max<size_t>(ref.size(), 1)));
}

// FLA's assert_close rule: pass if max |ref - got| <= 1e-6, otherwise if rms_relative_error < ratio.
inline bool fla_close(const std::vector<float>& ref, const std::vector<float>& got, double ratio) {
  return max_abs_error(ref, got) <= 1e-6 || rms_relative_error(ref, got) < ratio;
}

inline bool all_finite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); });
}

}  // namespace kda::ref
