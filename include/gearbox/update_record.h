// The explanation of one update: every gear's numbers and the filter that
// decided its fate, every proposed addition with its trigger and outcome,
// the memory state and the addition budget. The runtime returns it from
// RunOnce; the tools print it as one JSON line (UpdateRecordToJson).
#ifndef GEARBOX_UPDATE_RECORD_H_
#define GEARBOX_UPDATE_RECORD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/export.h"
#include "gearbox/gear_set.h"
#include "gearbox/options.h"

namespace gearbox {

enum class UpdateTrigger {
  kManual,    // RunOnce called directly (tests, tools, operators)
  kInterval,  // update_interval_seconds passed since the last update
  kMemory,    // memory usage at or above the threshold
  // Joint and sparse gear sets under the replan policy: between updates,
  // ReplanOptions::combination_interval_seconds passed since the last look
  // and a variant ran off its cell's combination since (compiles
  // combinations on the current grid; no gear moves).
  kCombinations,
};
GEARBOX_EXPORT std::string_view TriggerName(UpdateTrigger trigger);

// What the policies may ask about gear memory in bytes, before any compile.
// The runtime is given one (AdaptiveGearRuntime::SetGearBytesPredictor; the
// executor's GearedExecutor::MakeGearBytesPredictor answers from its fitted
// memory model) and hands it to the policies in MemoryState. Thread-safety:
// called from the updating thread while requests run; implementations must
// be safe to call concurrently with their own writers. During one decision
// the policy treats its answers as fixed inputs.
class GearBytesPredictor {
 public:
  virtual ~GearBytesPredictor() = default;
  // Bytes the gears' memory would grow by if the combination `gears` (one
  // gear per dimension, gear-set order) were compiled now; nullopt when it
  // cannot be predicted yet (too few gears compiled).
  virtual std::optional<int64_t> AddedBytes(std::span<const int64_t> gears) const = 0;
  // Bytes releasing the combination would free now (0 when none is held).
  virtual int64_t FreedBytes(std::span<const int64_t> gears) const = 0;
  // The gears' memory now, bytes.
  virtual int64_t InUseBytes() const = 0;
  // Bytes the combination would take with no other gear held (its own bytes
  // and, with a workspace arena, the arena at its bound for it alone); the
  // policies compare it with the budget to find a gear that can never fit.
  // nullopt (the default) when it cannot say.
  virtual std::optional<int64_t> AloneBytes(std::span<const int64_t> gears) const {
    (void)gears;
    return std::nullopt;
  }
};

// Where a gear ran out of memory: its compile, or a run of it (the backend's
// workspace arena could not grow to it, or the run itself failed for memory).
enum class OutOfMemoryStage {
  kCompile,  // JSON "compile"
  kRun,      // JSON "run"
};

// A compile or a run that ran out of memory, as reported to the runtime
// (AdaptiveGearRuntime::ReportOutOfMemory), and which of the executor's
// fallbacks (ExecutorOptions::out_of_memory_fallback) served its variants.
struct OutOfMemoryEvent {
  std::vector<int64_t> gears;    // the gear combination, one gear per dimension
  std::optional<int64_t> bytes;  // its predicted bytes, when the memory model could say
  double time = 0.0;             // the runtime clock's seconds at the (latest) failure
  uint64_t count = 1;            // failures of this combination and stage folded into the event
  OutOfMemoryStage stage = OutOfMemoryStage::kCompile;
  // Of the `count` failures, how many each fallback kind served, indexed by
  // OutOfMemoryFallback (JSON "served": {"larger": n, ...}, the kinds that
  // served any); count minus their sum found no fallback (request failed).
  uint64_t served[3] = {};
};

// What the probe said this update, and the byte budget's inputs.
struct MemoryState {
  std::optional<double> usage;      // fraction in use, when the probe answered sensibly
  std::optional<double> threshold;  // device_memory_usage_threshold_ratio
  bool high = false;                // usage >= threshold
  std::string error;                // why `usage` is missing, when it is
  // The byte budget (AdaptiveOptions::memory_budget_bytes; 0: none), the
  // gears' memory in bytes when the update began (known with a predictor),
  // and the predictor the policies price gears with (null: none; the
  // policies then price memory from the cost model's config, as before).
  int64_t budget_bytes = 0;
  std::optional<int64_t> bytes_in_use;
  std::shared_ptr<const GearBytesPredictor> predictor;
  // Compiles and runs that ran out of memory within out_of_memory_cooldown_seconds
  // before the update (the latest per combination): the policies do not add
  // their gears again until the cooldown has passed. Not in the JSON (the
  // record's out_of_memory lists the new ones).
  std::vector<OutOfMemoryEvent> recent_out_of_memory;
};

// The eviction filters in the order they run; a gear's verdict is the first
// one that stopped it (or kEvicted).
enum class GearVerdict {
  kMaxGear,    // the largest gear is never evicted
  kProtected,  // created, hit or protected within recent_use_protect_seconds
  kMinCount,   // its dimension is at min_gear_count_per_type
  // With a byte budget (not in the seed): the next larger gear, which would
  // serve its samples, can never fit the budget ("replacement_never_fits"):
  // evicting it would send them to a gear that never runs compiled.
  kReplacementNeverFits,
  kCandidate,    // passed the filters; another gear ranked lower this round
  kReplaceLoss,  // examined; its samples would lose > replace_loss_threshold: kept, protected
  kWouldReadd,   // examined; the addition rule would undo it (hysteresis): kept, protected
  kEvicted,
  kKept,  // replan policy: the gear stays (see the record's changes)
};
GEARBOX_EXPORT std::string_view VerdictName(GearVerdict verdict);

// What a replan change does (JSON: the lower-case name).
enum class ChangeAction {
  kAdd,      // "add": a gear
  kRemove,   // "remove": a gear
  kReplace,  // "replace": one gear by another
  kReplan,   // "replan": the whole planned target at once
  kCompile,  // "compile": a joint or sparse combination
  kDrop,     // "drop": a joint or sparse combination
  kNone,     // "none": declined, nothing to do (e.g. too little traffic)
};
GEARBOX_EXPORT std::string_view ChangeActionName(ChangeAction action);

// A gear change the replan policy took, or the best one it declined.
struct ChangeRecord {
  std::string dimension;  // joint and sparse combinations: "A,B"
  ChangeAction action = ChangeAction::kAdd;
  int64_t gear = 0;               // added (or, for "remove", removed)
  int64_t replaced = 0;           // for "replace": the gear removed
  double gain_seconds = 0.0;      // padding (and memory, weighted) saved over the payback horizon
  double compile_seconds = 0.0;   // what the addition costs to compile (weighted)
  double net_seconds = 0.0;       // gain - compile
  std::string reason;             // why it was taken or declined
  GearCombination combination{};  // for "compile" and "drop"
};

struct GearRecord {
  std::string dimension;
  int64_t gear = 0;
  double weighted_hits = 0.0;
  double hit_rate = 0.0;
  double avg_pad_ratio = 0.0;
  double avg_split_ratio = 0.0;
  double score = 0.0;
  uint64_t samples = 0;
  uint64_t pad_samples = 0;
  uint64_t split_samples = 0;
  int64_t median_raw = 0;
  // Eviction order tier: 0 unused in the window, 1 fewer samples than
  // min_samples_per_gear, 2 in use. Lower tiers go first.
  int tier = 0;
  GearVerdict verdict = GearVerdict::kCandidate;
  // Set when the gear was examined for eviction:
  bool examined = false;
  double replace_loss = 0.0;
  int64_t replacement_gear = 0;  // where its samples would go
  double readd_pad_ratio = 0.0;  // the receiving gear's pad ratio after the move
  int64_t readd_candidate = 0;   // what the addition rule would then propose (0: none)
};

enum class AdditionOutcome {
  kAdded,
  kDuplicate,    // already a gear (or proposed twice)
  kJustEvicted,  // evicted in this same update
  kThin,         // it would serve too few of the window's samples to be
                 // confidently in use (see docs/POLICY.md, hysteresis)
  kCap,          // the dimension is at max_gears_per_type
  kBudget,       // memory pressure: no budget left
  kMemoryBytes,  // its predicted bytes would pass memory_budget_bytes ("memory_bytes")
  kOutOfMemory,  // its compile (or a run of it) ran out of memory within
                 // out_of_memory_cooldown_seconds ("out_of_memory")
};
GEARBOX_EXPORT std::string_view OutcomeName(AdditionOutcome outcome);

// What proposed an addition (JSON: "pad" or "split").
enum class AdditionTrigger {
  kPad,    // the source gear's average pad ratio reached pad_add_threshold
  kSplit,  // the largest gear's average split ratio reached split_add_threshold
};
GEARBOX_EXPORT std::string_view AdditionTriggerName(AdditionTrigger trigger);

struct AdditionRecord {
  std::string dimension;
  int64_t gear = 0;  // the proposed gear: median of the source's raw sizes
  AdditionTrigger trigger = AdditionTrigger::kPad;
  int64_t source_gear = 0;  // the gear whose statistics proposed it
  double ratio = 0.0;       // the source's avg pad (or split) ratio
  double pressure = 0.0;    // ratio - threshold; higher goes first
  uint64_t samples = 0;     // the source's sample count
  uint64_t share = 0;       // of those, how many the new gear would serve
  AdditionOutcome outcome = AdditionOutcome::kAdded;
  // With a byte budget and a prediction: what the gear would add, bytes
  // (JSON "predicted_bytes", only when known).
  std::optional<int64_t> predicted_bytes;
};

struct UpdateRecord {
  UpdatePolicy policy = UpdatePolicy::kAdaptive;  // the policy that decided
  uint64_t sequence = 0;                          // 1 for the runtime's first update
  double time = 0.0;
  UpdateTrigger trigger = UpdateTrigger::kManual;
  MemoryState memory;
  std::optional<int64_t> addition_budget;         // nullopt: unlimited
  std::vector<std::string> dimensions;            // names, in gear-set order
  std::vector<GearRecord> gears;                  // every active gear before the update
  std::vector<AdditionRecord> additions;          // every proposal, in pressure order
  std::vector<std::vector<int64_t>> removed;      // per dimension
  std::vector<std::vector<int64_t>> added;        // per dimension
  std::vector<std::vector<int64_t>> gears_after;  // per dimension
  uint64_t version_before = 0;
  uint64_t version_after = 0;
  uint64_t cleanup_keys = 0;  // graph resources handed to remove_by_keys
  // Per dimension, the gears (kept) whose graphs this update released
  // because no request had run on them for ReplanOptions::
  // idle_graph_release_seconds; their keys count in cleanup_keys. A gear's
  // next request compiles it again (JSON "graphs_released_idle", per
  // dimension; empty dimensions left out).
  std::vector<std::vector<int64_t>> graphs_released_idle;
  // Events the request path dropped since the previous RunOnce because a
  // thread's recording ring was full (the window is then a sample; only
  // with the worker running). 0 in an operator's CommitUpdate record.
  uint64_t events_dropped = 0;
  // Compiles and runs that ran out of memory since the previous update (JSON
  // "out_of_memory": [{"gears": {dim: gear}, "stage": "compile" or "run",
  // "bytes": N or null, "time": t, "count": n}]). Any makes this update one
  // under memory pressure.
  std::vector<OutOfMemoryEvent> out_of_memory;
  bool changed = false;
  // Replan policy only: the planned target per dimension, the changes taken
  // and the best change declined per dimension.
  std::vector<std::vector<int64_t>> targets;
  // Per dimension, what the window says about drift (DimensionStats::
  // size_drift_*) and whether the target followed it (JSON "drift": {dim:
  // {"per_second": slope of log size, "agreement": a, "bins": n,
  // "followed": bool}}).
  struct Drift {
    double per_second = 0.0;
    double agreement = 0.0;
    int bins = 0;
    bool followed = false;
  };
  std::vector<Drift> drift;
  // Per dimension, the regime the target was planned on (docs/POLICY.md,
  // "The regime"): how many seconds of traffic (0: the window alone), and
  // of the regime's tests the one nearest to rejecting, its statistic and
  // the value that would have rejected it (JSON "regime": {dim: {"seconds":
  // s, "statistic": d, "critical": c}}, only where a regime was used); at
  // the cold-start review (ReplanOptions::cold_start_review_seconds) the
  // gears it reviewed, ascending: those the lifetime held that it no longer
  // holds at this update (JSON "reviewed": [g, ...], only then).
  struct Regime {
    double seconds = 0.0;
    double statistic = 0.0;
    double critical = 0.0;
    std::vector<int64_t> reviewed;
  };
  std::vector<Regime> regime;
  std::vector<ChangeRecord> changes;
  std::vector<ChangeRecord> declined;
  // Joint and sparse gear sets: the scheme, the compiled combinations after
  // the update, and those it compiled and dropped.
  GearScheme scheme = GearScheme::kIndependent;
  std::vector<GearCombination> combinations_after;
  std::vector<GearCombination> combinations_added;
  std::vector<GearCombination> combinations_removed;
};

// One line of JSON (no newline), the decisions-file format (README).
GEARBOX_EXPORT std::string UpdateRecordToJson(const UpdateRecord& record);

}  // namespace gearbox

#endif  // GEARBOX_UPDATE_RECORD_H_
