#include "gearbox/memory_model.h"

#include <algorithm>
#include <cmath>

#include "gearbox/gear_set.h"  // kMaxDimensions
#include "src/common/errors.h"

namespace gearbox {

using internal::Cat;
using internal::InvalidFieldValue;

absl::Status ValidateGearMemoryModelOptions(const GearMemoryModelOptions& o) {
  if (o.num_dimensions < 1 || o.num_dimensions > kMaxDimensions) {
    return InvalidFieldValue("num_dimensions", o.num_dimensions,
                             Cat("an integer in [1, ", kMaxDimensions, "]"));
  }
  if (o.quadratic_dimension < -1 || o.quadratic_dimension >= o.num_dimensions) {
    return InvalidFieldValue("quadratic_dimension", o.quadratic_dimension,
                             Cat("-1 (none) or a dimension in [0, ", o.num_dimensions, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<GearMemoryModel> GearMemoryModel::Create(const GearMemoryModelOptions& options) {
  if (auto s = ValidateGearMemoryModelOptions(options); !s.ok()) return s;
  return GearMemoryModel(options);
}

absl::Status GearMemoryModel::CheckGears(std::span<const int64_t> gears) const {
  if (static_cast<int>(gears.size()) != options_.num_dimensions) {
    return InvalidFieldValue("gears", Cat(gears.size(), " sizes"),
                             Cat(options_.num_dimensions, " (num_dimensions)"));
  }
  for (size_t d = 0; d < gears.size(); ++d) {
    if (gears[d] < 1) return InvalidFieldValue(Cat("gears[", d, "]"), gears[d], "a size >= 1");
  }
  return absl::OkStatus();
}

std::array<double, 3> GearMemoryModel::Features(std::span<const int64_t> gears) const {
  double p = 1.0;
  for (int64_t g : gears) p *= static_cast<double>(g);
  const int q = options_.quadratic_dimension;
  return {1.0, p, q >= 0 ? p * static_cast<double>(gears[static_cast<size_t>(q)]) : 0.0};
}

absl::Status GearMemoryModel::Observe(std::span<const int64_t> gears, int64_t bytes) {
  if (auto s = CheckGears(gears); !s.ok()) return s;
  if (bytes < 0) return InvalidFieldValue("bytes", bytes, "bytes >= 0");
  points_[std::vector<int64_t>(gears.begin(), gears.end())] = bytes;
  Fit();
  return absl::OkStatus();
}

// Weighted least squares minimizing the relative errors, sum of
// ((fit - bytes) / bytes)^2 (a gear of 1 KiB counts as much as one of
// 1 GiB), through the normal equations on columns scaled to at most 1, by
// Gaussian elimination with partial pivoting; a pivot below 1e-9 of its
// column's scale means the points do not determine the fit.
void GearMemoryModel::Fit() {
  const int k = terms();
  fit_ok_ = false;
  if (static_cast<int>(points_.size()) < k) return;
  std::array<double, 3> scale{0, 0, 0};
  for (const auto& [gears, bytes] : points_) {
    const auto f = Features(gears);
    for (int i = 0; i < k; ++i) scale[i] = std::max(scale[i], std::fabs(f[i]));
  }
  double a[3][4] = {};  // [X^T W X | X^T W y], scaled columns
  for (const auto& [gears, bytes] : points_) {
    const auto f = Features(gears);
    const double y = static_cast<double>(bytes);
    const double w = 1.0 / std::max(1.0, y * y);
    for (int i = 0; i < k; ++i) {
      const double fi = f[i] / scale[i];
      for (int j = 0; j < k; ++j) a[i][j] += w * fi * f[j] / scale[j];
      a[i][k] += w * fi * y;
    }
  }
  double norm = 0;
  for (int i = 0; i < k; ++i) norm = std::max(norm, std::fabs(a[i][i]));
  for (int c = 0; c < k; ++c) {
    int pivot = c;
    for (int r = c + 1; r < k; ++r) {
      if (std::fabs(a[r][c]) > std::fabs(a[pivot][c])) pivot = r;
    }
    if (!(std::fabs(a[pivot][c]) > 1e-9 * norm)) return;
    for (int j = 0; j <= k; ++j) std::swap(a[c][j], a[pivot][j]);
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double m = a[r][c] / a[c][c];
      for (int j = c; j <= k; ++j) a[r][j] -= m * a[c][j];
    }
  }
  coef_ = {0, 0, 0};
  for (int i = 0; i < k; ++i) coef_[i] = a[i][k] / a[i][i] / scale[i];
  fit_ok_ = true;
}

absl::StatusOr<std::vector<double>> GearMemoryModel::Coefficients() const {
  if (!fit_ok_) {
    return absl::FailedPreconditionError(
        Cat("memory model: ", points_.size(), " gear combination(s) observed determine no fit; ",
            "it needs at least ", terms(), " whose sizes differ (bytes = c0 + c1 P",
            options_.quadratic_dimension >= 0
                ? Cat(" + c2 P x dimension ", options_.quadratic_dimension)
                : std::string(),
            ")"));
  }
  return std::vector<double>(coef_.begin(), coef_.begin() + terms());
}

absl::StatusOr<int64_t> GearMemoryModel::Predict(std::span<const int64_t> gears) const {
  if (auto s = CheckGears(gears); !s.ok()) return s;
  auto coef = Coefficients();
  if (!coef.ok()) return coef.status();
  const auto f = Features(gears);
  double bytes = 0;
  for (int i = 0; i < terms(); ++i) bytes += (*coef)[static_cast<size_t>(i)] * f[i];
  return static_cast<int64_t>(std::llround(std::clamp(bytes, 0.0, 9.0e18)));
}

}  // namespace gearbox
