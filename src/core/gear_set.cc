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
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
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

std::vector<GearCombination> EveryCombination(std::span<const int64_t> a,
                                              std::span<const int64_t> b) {
  std::vector<GearCombination> out;
  out.reserve(a.size() * b.size());
  for (int64_t x : a) {
    for (int64_t y : b) out.push_back({x, y});
  }
  return out;
}

CombinationSpec InitialCombinations(const std::vector<DimensionSpec>& dimensions,
                                    CombinationSpec spec) {
  if (spec.scheme != GearScheme::kIndependent && spec.combinations.empty() &&
      dimensions.size() == kJointDimensions) {
    spec.combinations = EveryCombination(dimensions[0].gears, dimensions[1].gears);
  }
  return spec;
}

std::string_view GearSchemeName(GearScheme scheme) {
  switch (scheme) {
    case GearScheme::kIndependent:
      return "independent";
    case GearScheme::kJoint:
      return "joint";
    case GearScheme::kSparse:
      return "sparse";
  }
  return "unknown";
}

absl::StatusOr<GearScheme> ParseGearScheme(std::string_view name, std::string_view field) {
  if (name == "independent") return GearScheme::kIndependent;
  if (name == "joint") return GearScheme::kJoint;
  if (name == "sparse") return GearScheme::kSparse;
  return InvalidField(field, internal::Cat("\"", name, "\""),
                      "\"independent\", \"joint\" or \"sparse\"");
}

absl::StatusOr<GearSet> GearSet::Create(std::vector<DimensionSpec> dimensions, uint64_t version,
                                        double created_at, CombinationSpec combinations) {
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
  set.BuildLookup();
  set.version_ = version;
  set.created_at_ = created_at;
  set.scheme_ = combinations.scheme;
  if (combinations.scheme == GearScheme::kIndependent) {
    if (!combinations.combinations.empty()) {
      return InvalidField("combinations",
                          internal::Cat(combinations.combinations.size(), " combinations"),
                          "combinations go with the joint and sparse schemes only");
    }
    return set;
  }
  const std::string_view scheme = GearSchemeName(combinations.scheme);
  if (set.num_dimensions() != kJointDimensions) {
    return InvalidField(
        "scheme", internal::Cat("\"", scheme, "\" with ", set.num_dimensions(), " dimensions"),
        internal::Cat("the joint and sparse schemes need exactly ", kJointDimensions,
                      " dimensions"));
  }
  std::vector<GearCombination>& combos = combinations.combinations;
  if (combinations.scheme == GearScheme::kSparse) combinations.cover_ratio = 1.0;
  if (!(combinations.cover_ratio >= 1.0)) {  // also NaN; infinity is allowed
    return InvalidFieldValue("cover_ratio", combinations.cover_ratio, "a ratio >= 1 (or infinity)");
  }
  set.cover_ratio_ = combinations.cover_ratio;
  for (size_t i = 0; i < combos.size(); ++i) {
    for (int d = 0; d < kJointDimensions; ++d) {
      if (!set.Contains(d, combos[i][d])) {
        return InvalidFieldValue(internal::Cat("combinations[", i, "][", d, "]"), combos[i][d],
                                 internal::Cat("a gear of ", set.dimensions_[d].name));
      }
    }
  }
  std::sort(combos.begin(), combos.end());
  combos.erase(std::unique(combos.begin(), combos.end()), combos.end());
  set.combinations_ = std::move(combos);
  // The cell table: per cell, the cheapest combination covering it within
  // cover_ratio (the smallest product, then the first), or -1.
  const std::vector<int64_t>& g0 = set.dimensions_[0].gears;
  const std::vector<int64_t>& g1 = set.dimensions_[1].gears;
  set.cell_combination_.assign(g0.size() * g1.size(), -1);
  for (size_t i = 0; i < g0.size(); ++i) {
    for (size_t j = 0; j < g1.size(); ++j) {
      int best = -1;
      double best_volume = 0;
      const double limit =
          set.cover_ratio_ * static_cast<double>(g0[i]) * static_cast<double>(g1[j]);
      for (size_t c = 0; c < set.combinations_.size(); ++c) {
        const GearCombination& k = set.combinations_[c];
        const double volume = static_cast<double>(k[0]) * static_cast<double>(k[1]);
        if (k[0] < g0[i] || k[1] < g1[j] || volume > limit) continue;
        if (best < 0 || volume < best_volume) {
          best = static_cast<int>(c);
          best_volume = volume;
        }
      }
      set.cell_combination_[i * g1.size() + j] = static_cast<int16_t>(best);
    }
  }
  return set;
}

void GearSet::BuildLookup() {
  lookup_gears_.clear();
  for (size_t d = 0; d < dimensions_.size(); ++d) {
    const std::vector<int64_t>& g = dimensions_[d].gears;
    Lookup& l = lookup_[d];
    l.max_gear = g.back();
    l.num_gears = static_cast<int>(g.size());
    l.gears_offset = lookup_gears_.size();
    lookup_gears_.insert(lookup_gears_.end(), g.begin(), g.end());
    // Entry b covers the sizes (2^(b-1), 2^b] (entry 0: sizes <= 1): they
    // map to the gears from the smallest size's to the largest's. Entries
    // above the largest gear are never read (MapToGearIndex returns -1).
    for (int b = 0; b < 64; ++b) {
      const int64_t lowest = b == 0 ? 1 : (int64_t{1} << (b - 1)) + 1;
      if (lowest > l.max_gear) break;
      const int64_t highest = b == 63 ? l.max_gear : std::min(int64_t{1} << b, l.max_gear);
      const int first = SearchGearIndex(static_cast<int>(d), lowest);
      const int last = SearchGearIndex(static_cast<int>(d), highest);
      l.ranges[static_cast<size_t>(b)] = {static_cast<uint8_t>(first),
                                          static_cast<uint8_t>(last - first + 1)};
    }
  }
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
                                           uint64_t version, double created_at,
                                           const std::vector<GearCombination>* combinations) const {
  if (gears.size() != dimensions_.size()) {
    return InvalidField("gears", internal::Cat(gears.size(), " lists"),
                        internal::Cat("one list per dimension (", dimensions_.size(), ")"));
  }
  std::vector<DimensionSpec> dims = dimensions_;
  for (size_t d = 0; d < dims.size(); ++d) dims[d].gears = gears[d];
  CombinationSpec spec{scheme_, {}, cover_ratio_};
  if (combinations != nullptr) {
    spec.combinations = *combinations;
  } else if (scheme_ != GearScheme::kIndependent) {
    auto has = [&](int d, int64_t g) {
      const std::vector<int64_t>& list = gears[static_cast<size_t>(d)];
      return std::find(list.begin(), list.end(), g) != list.end();
    };
    for (const GearCombination& c : combinations_) {
      if (has(0, c[0]) && has(1, c[1])) spec.combinations.push_back(c);
    }
  }
  return Create(std::move(dims), version, created_at, std::move(spec));
}

std::string GearSet::DebugString() const {
  std::string out;
  for (const auto& dim : dimensions_) {
    if (!out.empty()) out += ' ';
    out += internal::Cat(dim.name, "=[", fmt::format("{}", fmt::join(dim.gears, ",")), "]");
  }
  if (scheme_ != GearScheme::kIndependent) {
    out += internal::Cat(" ", GearSchemeName(scheme_), "=[");
    for (size_t c = 0; c < combinations_.size(); ++c) {
      out += internal::Cat(c ? "," : "", "(", combinations_[c][0], ",", combinations_[c][1], ")");
    }
    out += "]";
  }
  return out;
}

}  // namespace gearbox
