#include "src/policy/gear_bytes.h"

#include <algorithm>

#include "src/common/errors.h"

namespace gearbox::internal {

GearBytes::GearBytes(const std::vector<std::vector<int64_t>>& grid, const MemoryState& memory)
    : grid_(grid), memory_(memory) {}

bool GearBytes::budgeted() const {
  return memory_.budget_bytes > 0 && memory_.predictor != nullptr &&
         memory_.bytes_in_use.has_value();
}

std::vector<std::vector<int64_t>> GearBytes::Combinations(int d, int64_t g) const {
  std::vector<std::vector<int64_t>> out(1);
  for (size_t e = 0; e < grid_.size(); ++e) {
    std::vector<std::vector<int64_t>> next;
    const std::vector<int64_t> mine{g};
    for (const std::vector<int64_t>& prefix : out) {
      for (int64_t x : static_cast<int>(e) == d ? mine : grid_[e]) {
        next.push_back(prefix);
        next.back().push_back(x);
      }
    }
    out = std::move(next);
  }
  return out;
}

std::optional<int64_t> GearBytes::Added(int d, int64_t g) const {
  if (memory_.predictor == nullptr) return std::nullopt;
  int64_t sum = 0;
  for (const std::vector<int64_t>& c : Combinations(d, g)) {
    const std::optional<int64_t> b = memory_.predictor->AddedBytes(c);
    if (!b.has_value()) return std::nullopt;
    sum += std::max<int64_t>(0, *b);
  }
  return sum;
}

int64_t GearBytes::Freed(int d, int64_t g) const {
  if (memory_.predictor == nullptr) return 0;
  int64_t sum = 0;
  for (const std::vector<int64_t>& c : Combinations(d, g)) {
    sum += std::max<int64_t>(0, memory_.predictor->FreedBytes(c));
  }
  return sum;
}

std::optional<double> GearBytes::Held(int d, int64_t g) const {
  if (memory_.predictor == nullptr) return std::nullopt;
  const std::vector<int64_t>& mine = grid_[static_cast<size_t>(d)];
  if (std::binary_search(mine.begin(), mine.end(), g)) return static_cast<double>(Freed(d, g));
  const std::optional<int64_t> added = Added(d, g);
  if (!added.has_value()) return std::nullopt;
  return static_cast<double>(*added);
}

std::string GearBytes::PastBudget(int64_t in_use_after_removals,
                                  std::optional<int64_t> added) const {
  if (!budgeted() || !added.has_value()) return "";
  if (in_use_after_removals + *added <= memory_.budget_bytes) return "";
  return Cat("its predicted ", *added, " bytes would take the gears' memory from ",
             in_use_after_removals, " to ", in_use_after_removals + *added,
             " bytes, past memory_budget_bytes = ", memory_.budget_bytes);
}

std::optional<double> OutOfMemoryAt(const MemoryState& memory, int d, int64_t g) {
  std::optional<double> at;
  for (const OutOfMemoryEvent& e : memory.recent_out_of_memory) {
    if (static_cast<size_t>(d) < e.gears.size() && e.gears[static_cast<size_t>(d)] == g)
      at = std::max(at.value_or(e.time), e.time);
  }
  return at;
}

}  // namespace gearbox::internal
