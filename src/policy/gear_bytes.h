// Internal to the policies: a gear's memory in bytes from MemoryState's
// predictor (update_record.h), and the byte budget (memory_budget_bytes).
// Pure given the predictor's answers.
#ifndef GEARBOX_SRC_POLICY_GEAR_BYTES_H_
#define GEARBOX_SRC_POLICY_GEAR_BYTES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gearbox/gear_set.h"
#include "gearbox/update_record.h"

namespace gearbox::internal {

// One dimension's gear priced as every combination it forms with the other
// dimensions' gears (`grid`: the gears per dimension the decision starts
// from), summed over those combinations.
class GearBytes {
 public:
  GearBytes(const std::vector<std::vector<int64_t>>& grid, const MemoryState& memory);

  // Whether a predictor is set (the cost model then prices with it).
  bool predicts() const { return memory_.predictor != nullptr; }
  // Whether the byte budget binds: a budget, a predictor and the bytes in use.
  bool budgeted() const;
  int64_t budget() const { return memory_.budget_bytes; }
  int64_t in_use() const { return memory_.bytes_in_use.value_or(0); }

  // Bytes adding gear g to dimension d would add; nullopt when any of its
  // combinations cannot be predicted.
  std::optional<int64_t> Added(int d, int64_t g) const;
  // Bytes removing gear g of dimension d would free now.
  int64_t Freed(int d, int64_t g) const;
  // What holding gear g costs in the cost model: Freed for a gear of the
  // grid, Added otherwise; nullopt without a predictor or a prediction.
  std::optional<double> Held(int d, int64_t g) const;

  // Why an addition of `added` bytes is refused when the gears would hold
  // `in_use_after_removals` before it: "" when it fits the budget.
  std::string PastBudget(int64_t in_use_after_removals, std::optional<int64_t> added) const;

 private:
  std::vector<std::vector<int64_t>> Combinations(int d, int64_t g) const;

  const std::vector<std::vector<int64_t>>& grid_;
  const MemoryState& memory_;
};

// When gear g of dimension d last ran out of memory at its compile, among
// MemoryState::recent_out_of_memory (the runtime keeps those within the
// cooldown); nullopt when it did not.
std::optional<double> OutOfMemoryAt(const MemoryState& memory, int d, int64_t g);

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_POLICY_GEAR_BYTES_H_
