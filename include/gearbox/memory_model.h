// GearMemoryModel: a gear's memory predicted before it is compiled, from the
// gears of the same backend compiled so far (docs/MEMORY.md).
//
// The model, with P(g) the product of the gear's sizes over its dimensions
// and q the quadratic dimension (GearMemoryModelOptions):
//
//   bytes(g) = c0 + c1 * P(g)                 (q = -1: affine in P)
//   bytes(g) = c0 + c1 * P(g) + c2 * P(g) * g[q]   (q >= 0)
//
// The second form is for models whose memory has a term quadratic in one
// size, such as attention scores (batch x heads x seq x seq): there P * seq.
// The coefficients are the least-squares fit over the observed points (one
// per gear combination: observing a combination again replaces its bytes);
// a prediction is the fit's value, never below 0. A fit needs at least as
// many points with distinct features as it has terms (2 or 3); fewer is a
// FailedPrecondition error.
//
// A value type: not thread-safe (callers that share one guard it).
#ifndef GEARBOX_MEMORY_MODEL_H_
#define GEARBOX_MEMORY_MODEL_H_

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/export.h"

namespace gearbox {

struct GearMemoryModelOptions {
  // Sizes per gear combination (one per gear dimension); in [1, kMaxDimensions].
  int num_dimensions = 1;
  // The dimension whose size multiplies P in the third term, or -1 (no
  // third term: bytes affine in P). In [-1, num_dimensions).
  int quadratic_dimension = -1;
};

// OK, or an error naming the field, its value and what is allowed.
GEARBOX_EXPORT absl::Status ValidateGearMemoryModelOptions(const GearMemoryModelOptions& options);

class GEARBOX_EXPORT GearMemoryModel {
 public:
  // Fails when the options are invalid.
  static absl::StatusOr<GearMemoryModel> Create(const GearMemoryModelOptions& options);

  // Records that `gears` took `bytes`. Errors (nothing recorded): a gear
  // count other than num_dimensions, a size < 1, bytes < 0.
  absl::Status Observe(std::span<const int64_t> gears, int64_t bytes);

  // The predicted bytes of `gears` (checked as in Observe), or
  // FailedPrecondition while the points cannot determine the fit.
  absl::StatusOr<int64_t> Predict(std::span<const int64_t> gears) const;

  size_t points() const { return points_.size(); }
  // Whether `gears` was observed (false for a malformed gear list).
  bool Observed(std::span<const int64_t> gears) const {
    return points_.count(std::vector<int64_t>(gears.begin(), gears.end())) != 0;
  }
  int terms() const { return options_.quadratic_dimension >= 0 ? 3 : 2; }
  // c0, c1 (and c2) of the current fit, or the same error as Predict.
  absl::StatusOr<std::vector<double>> Coefficients() const;

 private:
  explicit GearMemoryModel(const GearMemoryModelOptions& options) : options_(options) {}
  absl::Status CheckGears(std::span<const int64_t> gears) const;
  std::array<double, 3> Features(std::span<const int64_t> gears) const;
  // Refits from points_ (fit_ok_ false when they do not determine it).
  void Fit();

  GearMemoryModelOptions options_;
  std::map<std::vector<int64_t>, int64_t> points_;  // gears -> bytes
  std::array<double, 3> coef_{};
  bool fit_ok_ = false;
};

}  // namespace gearbox

#endif  // GEARBOX_MEMORY_MODEL_H_
