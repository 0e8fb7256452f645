#include "gearbox/gear_set.h"

#include <algorithm>
#include <set>

#include "fmt/ranges.h"
#include "src/common/errors.h"

namespace gearbox {
namespace {

using internal::InvalidField;
using internal::InvalidFieldValue;

bool ValidNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == '-';
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> MakeTimesGears(int64_t min, int64_t max,
                                                    std::string_view field) {
  if (min < 1) {
    return InvalidFieldValue(internal::Cat(field, ".min"), min, "min must be an integer >= 1");
  }
  if (max < min) {
    return InvalidField(internal::Cat(field, ".max"), internal::Cat(max),
                        internal::Cat("max must be >= min (", min, ")"));
  }
  std::vector<int64_t> gears{min};
  // First power of two strictly above min, then doubling while <= max.
  int64_t power = 1;
  while (power <= min) power <<= 1;
  while (power <= max) {
    gears.push_back(power);
    if (power > max / 2) break;  // the next doubling would pass max (or overflow)
    power <<= 1;
  }
  if (gears.back() != max) gears.push_back(max);
  if (static_cast<int>(gears.size()) > kMaxGearsPerDimension) {
    return InvalidField(internal::Cat(field, ".max"), internal::Cat(max),
                        internal::Cat("the TIMES ladder would hold ", gears.size(),
                                     " gears, more than ", kMaxGearsPerDimension));
  }
  return gears;
}

absl::StatusOr<std::vector<int64_t>> NormalizeGears(std::vector<int64_t> gears,
                                                    std::string_view field) {
  if (gears.empty()) {
    return InvalidField(field, "[]", "a dimension needs at least one gear");
  }
  for (size_t i = 0; i < gears.size(); ++i) {
    if (gears[i] < 1) {
      return InvalidFieldValue(internal::Cat(field, "[", i, "]"), gears[i],
                               "gears must be integers >= 1");
    }
  }
  std::sort(gears.begin(), gears.end());
  gears.erase(std::unique(gears.begin(), gears.end()), gears.end());
  if (static_cast<int>(gears.size()) > kMaxGearsPerDimension) {
    return InvalidField(field, internal::Cat(gears.size(), " distinct gears"),
                        internal::Cat("at most ", kMaxGearsPerDimension, " per dimension"));
  }
  return gears;
}

bool DefaultSplittable(std::string_view dimension_name) { return dimension_name == kBatchSize; }

absl::StatusOr<GearSet> GearSet::Create(std::vector<DimensionSpec> dimensions, uint64_t version,
                                        double created_at) {
  if (dimensions.empty()) {
    return InvalidField("dims", "[]", "a gear set needs at least one dimension");
  }
  if (static_cast<int>(dimensions.size()) > kMaxDimensions) {
    return InvalidField("dims", internal::Cat(dimensions.size(), " dimensions"),
                        internal::Cat("at most ", kMaxDimensions));
  }
  std::set<std::string> names;
  for (size_t d = 0; d < dimensions.size(); ++d) {
    DimensionSpec& dim = dimensions[d];
    const std::string field = internal::Cat("dims[", d, "]");
    if (dim.name.empty() || !std::all_of(dim.name.begin(), dim.name.end(), ValidNameChar)) {
      return InvalidField(internal::Cat(field, ".name"), internal::Cat("\"", dim.name, "\""),
                          "names are non-empty and use only letters, digits, '_', '.', '-'");
    }
    if (!names.insert(dim.name).second) {
      return InvalidField(internal::Cat(field, ".name"), internal::Cat("\"", dim.name, "\""),
                          "each dimension name may appear once");
    }
    auto gears = NormalizeGears(std::move(dim.gears), internal::Cat(field, ".gears"));
    if (!gears.ok()) return gears.status();
    dim.gears = *std::move(gears);
    if (dim.splittable && dim.eager_fallback) {
      return InvalidField(internal::Cat(field, ".eager_fallback"), "true",
                          "eager fallback applies only to non-splittable dimensions");
    }
  }
  GearSet set;
  set.dimensions_ = std::move(dimensions);
  set.version_ = version;
  set.created_at_ = created_at;
  return set;
}

int GearSet::FindDimension(std::string_view name) const {
  for (int d = 0; d < num_dimensions(); ++d) {
    if (dimensions_[d].name == name) return d;
  }
  return -1;
}

bool GearSet::Contains(int d, int64_t gear) const {
  const auto& g = dimensions_[d].gears;
  return std::binary_search(g.begin(), g.end(), gear);
}

absl::StatusOr<GearSet> GearSet::WithGears(const std::vector<std::vector<int64_t>>& gears,
                                           uint64_t version, double created_at) const {
  if (gears.size() != dimensions_.size()) {
    return InvalidField("gears", internal::Cat(gears.size(), " lists"),
                        internal::Cat("one list per dimension (", dimensions_.size(), ")"));
  }
  std::vector<DimensionSpec> dims = dimensions_;
  for (size_t d = 0; d < dims.size(); ++d) dims[d].gears = gears[d];
  return Create(std::move(dims), version, created_at);
}

std::string GearSet::DebugString() const {
  std::string out;
  for (const auto& dim : dimensions_) {
    if (!out.empty()) out += ' ';
    out += internal::Cat(dim.name, "=[", fmt::format("{}", fmt::join(dim.gears, ",")), "]");
  }
  return out;
}

}  // namespace gearbox
