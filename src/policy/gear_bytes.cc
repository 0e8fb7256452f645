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

std::optional<int64_t> GearBytes::Alone(int d, int64_t g) const {
  if (memory_.predictor == nullptr) return std::nullopt;
  std::optional<int64_t> cheapest;
  for (const std::vector<int64_t>& c : Combinations(d, g)) {
    const std::optional<int64_t> b = memory_.predictor->AloneBytes(c);
    if (b.has_value()) cheapest = std::min(cheapest.value_or(*b), std::max<int64_t>(0, *b));
  }
  return cheapest;
}

std::string GearBytes::NeverFits(int d, int64_t g, int min_count) const {
  if (!budgeted()) return "";
  const std::optional<int64_t> alone = Alone(d, g);
  if (!alone.has_value()) return "";
  int64_t kept = 0;  // the cheapest gears the policy must keep besides g
  for (size_t e = 0; e < grid_.size(); ++e) {
    std::vector<int64_t> freed;
    for (int64_t x : grid_[e]) {
      if (static_cast<int>(e) != d || x != g) freed.push_back(Freed(static_cast<int>(e), x));
    }
    std::sort(freed.begin(), freed.end());
    const size_t keep = static_cast<size_t>(std::max(0, min_count - (static_cast<int>(e) == d)));
    for (size_t i = 0; i < std::min(keep, freed.size()); ++i) kept += freed[i];
  }
  if (*alone + kept <= memory_.budget_bytes) return "";
  return Cat(
      "the byte budget can never hold it: its predicted ", *alone, " bytes alone, plus ", kept,
      " bytes the fewest gears kept besides it hold (", min_count,
      " per dimension, min_gear_count_per_type), pass memory_budget_bytes = ", memory_.budget_bytes,
      "; not compiled (its requests run at their exact sizes), not memory pressure");
}

void DeclineNeverFitting(const std::vector<std::vector<int64_t>>& grid,
                         const std::vector<std::string>& names, const MemoryState& memory,
                         int min_count, std::vector<ChangeRecord>* declined) {
  const GearBytes bytes(grid, memory);
  if (!bytes.budgeted()) return;
  for (size_t d = 0; d < grid.size() && d < names.size(); ++d) {
    for (int64_t g : grid[d]) {
      if (bytes.Freed(static_cast<int>(d), g) > 0) continue;  // held: it fits
      std::string reason = bytes.NeverFits(static_cast<int>(d), g, min_count);
      if (reason.empty()) continue;
      ChangeRecord c;
      c.dimension = names[d];
      c.action = ChangeAction::kAdd;
      c.gear = g;
      c.reason = std::move(reason);
      declined->push_back(std::move(c));
    }
  }
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
