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

  // Bytes gear g of dimension d would take with nothing else held: the
  // cheapest of its combinations with the other dimensions' gears
  // (GearBytesPredictor::AloneBytes); nullopt when none can be predicted.
  std::optional<int64_t> Alone(int d, int64_t g) const;
  // Why the byte budget can never hold gear g of dimension d: its bytes
  // alone, plus what the fewest gears the policy must keep besides it hold
  // (`min_count` per dimension, the cheapest by Freed), pass the budget.
  // "" when it may fit, or without a budget or a prediction.
  std::string NeverFits(int d, int64_t g, int min_count) const;

  // Why an addition of `added` bytes is refused when the gears would hold
  // `in_use_after_removals` before it: "" when it fits the budget.
  std::string PastBudget(int64_t in_use_after_removals, std::optional<int64_t> added) const;

 private:
  std::vector<std::vector<int64_t>> Combinations(int d, int64_t g) const;

  const std::vector<std::vector<int64_t>>& grid_;
  const MemoryState& memory_;
};

// The never-fitting rule, for both policies: each gear of `grid` (the gears
// after the decision; `names` their dimensions) that is not held and that
// the byte budget can never hold (GearBytes::NeverFits) gets a declined
// ChangeRecord (action "add") whose reason gives its bytes and the budget.
// Such a gear is not compiled (the executor refuses it before the compile
// and runs its requests at their exact sizes) and its refusal is not memory
// pressure, so no other gear is evicted on its account.
void DeclineNeverFitting(const std::vector<std::vector<int64_t>>& grid,
                         const std::vector<std::string>& names, const MemoryState& memory,
                         int min_count, std::vector<ChangeRecord>* declined);

// When gear g of dimension d last ran out of memory (at its compile or a run), among
// MemoryState::recent_out_of_memory (the runtime keeps those within the
// cooldown); nullopt when it did not.
std::optional<double> OutOfMemoryAt(const MemoryState& memory, int d, int64_t g);

}  // namespace gearbox::internal

#endif  // GEARBOX_SRC_POLICY_GEAR_BYTES_H_
