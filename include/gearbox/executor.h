// GearedExecutor: the whole request path of the seed (§3.1) on real tensors:
// snapshot -> plan -> transform (pad / split the inputs) -> compile on miss
// (one compile per gear combination however many threads miss at once;
// compiled outside every lock; failures reported, never cached; a compile
// or run out of memory is served by a fallback: a larger cached gear, a
// split on smaller cached ones, or the exact sizes uncached, as
// ExecutorOptions::out_of_memory_fallback orders) -> run -> record ->
// recover (slice padding off, concatenate chunks into the outputs). Compiled executables live in
// the runtime's GraphResourcePool under cleanup keys attached to their gears (§3.4); the executor
// keeps its own references in a table published like the gear set (epoch-protected), so a request
// finds its executables without a lock or a shared reference count. An evicted gear's executable is
// dropped from the table by the update that evicts it (a runtime release listener) and released
// only after every run that uses it has finished; a request never fails because of a concurrent
// eviction.
//
// Thread-safety: Run may be called from any number of threads. A request
// pins the epoch for its whole Run (as a SnapshotRef does), which delays the
// freeing of superseded snapshots and tables until it returns.
#ifndef GEARBOX_EXECUTOR_H_
#define GEARBOX_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gearbox/backend.h"
#include "gearbox/export.h"
#include "gearbox/options.h"
#include "gearbox/runtime.h"

namespace gearbox {

struct ExecutorOptions {
  // Value written into padding of every input (converted to its dtype).
  double pad_value = 0.0;
  // Bytes the gears may hold (0: no limit). Before compiling a gear whose
  // memory the executor can predict (PredictGearBytes), it refuses the gear
  // if the prediction would take the gears past the budget: not compiled,
  // its variant runs on an executable compiled for its exact sizes (or at
  // the gear, when already exact), uncached
  // (ExecutorStats::predicted_over_budget_runs). Otherwise, after the
  // compile: the runtime's pool (per-gear
  // bytes) plus the backend's workspace arena, counted at its bound (largest
  // live gear's arena need x execution slots, or what it holds if more).
  // A compile that would take that past the budget is not cached: its
  // variant runs on the fresh executable, which is then dropped
  // (ExecutorStats::over_budget_runs).
  // Checked and registered under one lock, so this executor's concurrent
  // compiles cannot together pass it (what others register in the same
  // pool counts against it but is not held back).
  int64_t graph_memory_budget_bytes = 0;
  // What a variant runs as when its gear's compile or run fails for memory
  // (ResourceExhausted, std::bad_alloc), tried in this order
  // (gearbox/options.h, OutOfMemoryFallback; JSON config
  // "executor.out_of_memory_fallback"): "larger" (the smallest cached
  // combination at or above its gears, padded: no new memory), "split" (on
  // a splittable dimension, chunks of the largest cached gear below), then
  // "exact" (compiled at its exact sizes, cached nowhere). A kind that is
  // impossible for the variant, or that fails for memory in turn, passes to
  // the next; one that fails for another reason fails the request, as does
  // running out of kinds (with the memory error). Each kind at most once
  // (Create rejects a repeat, naming it).
  std::vector<OutOfMemoryFallback> out_of_memory_fallback{std::begin(kDefaultOutOfMemoryFallbacks),
                                                          std::end(kDefaultOutOfMemoryFallbacks)};
};

struct ExecutorStats {
  uint64_t requests = 0;
  uint64_t failed_requests = 0;
  uint64_t variants = 0;
  uint64_t zero_copy_requests = 0;  // ran on the caller's tensors, no padding or split
  uint64_t compiles = 0;
  uint64_t compile_failures = 0;
  double compile_seconds = 0.0;
  uint64_t eager_variants = 0;  // compiled for one run at the exact size, not cached
  // Compiled for one run, not cached: caching would have passed
  // graph_memory_budget_bytes.
  uint64_t over_budget_runs = 0;
  // Variants whose gear's compile ran out of memory (ResourceExhausted,
  // std::bad_alloc), or whose run on the gear did (ResourceExhausted: e.g.
  // the backend's workspace arena could not grow to it), and that a
  // fallback of ExecutorOptions::out_of_memory_fallback served (a variant
  // none served fails its request). A failed compile counts in
  // compile_failures, an "exact" fallback's compile in compiles.
  uint64_t out_of_memory_fallbacks = 0;
  // Of those, how many each kind served ("larger", "split", "exact"); they
  // sum to out_of_memory_fallbacks.
  uint64_t out_of_memory_larger = 0;
  uint64_t out_of_memory_split = 0;
  uint64_t out_of_memory_exact = 0;
  // Variants whose gear was refused before its compile: its predicted
  // memory would have passed graph_memory_budget_bytes (see there).
  uint64_t predicted_over_budget_runs = 0;
  // The largest bytes() + arena_bytes() of any executable compiled (the
  // largest single gear's memory had it a workspace of its own).
  int64_t largest_gear_bytes = 0;
  // Predictions of a gear's memory (bytes() + arena_bytes()) made before the
  // first compile of its combination (PredictGearBytes, from the gears
  // compiled before it), checked against what it took: how many, and their
  // mean and largest relative error |predicted - measured| / measured.
  uint64_t memory_predictions = 0;
  double memory_prediction_mean_error = 0.0;
  double memory_prediction_max_error = 0.0;
};

// One cached gear combination's memory, as its executable reports it.
struct GearMemory {
  std::vector<int64_t> gears;  // one size per dimension
  int64_t bytes = 0;           // per gear (Executable::bytes)
  int64_t arena_bytes = 0;     // of the backend's arena, per run (Executable::arena_bytes)
};

class GEARBOX_EXPORT GearedExecutor {
 public:
  // `runtime` and `backend` must outlive the executor. The backend's
  // signature must bind axes only to the runtime's dimensions, and every
  // runtime dimension must be bound by at least one input.
  static absl::StatusOr<std::unique_ptr<GearedExecutor>> Create(AdaptiveGearRuntime* runtime,
                                                                Backend* backend,
                                                                ExecutorOptions options = {});
  ~GearedExecutor();

  // Runs one request. `inputs` and `outputs` follow the backend's signature
  // with the bound axes at the request's sizes (outputs are written).
  // Host tensors may be strided (they are staged); errors name the tensor
  // and the field, and leave the outputs unspecified.
  absl::Status Run(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs);

  ExecutorStats stats() const;
  // Bytes caching the last executable refused for graph_memory_budget_bytes
  // (after its compile, or before it on its prediction) would have added
  // (its bytes() and the arena's growth), or 0 when none was, or one was
  // cached within the budget since.
  int64_t OverBudgetBytes() const { return over_budget_bytes_.load(); }
  // Gear combinations with a cached executable (an evicted gear's are
  // dropped by the update that evicts it).
  size_t cached_executables() const;
  // The memory of every cached gear combination, ascending by gears.
  std::vector<GearMemory> cached_gear_memory() const;
  // What the gears hold now: the pool's bytes plus the backend's arena
  // (ArenaUsage::held_bytes).
  int64_t GearMemoryBytes() const;
  // A gear combination's memory (bytes() + arena_bytes()) predicted before
  // compiling it: GearMemoryModel (gearbox/memory_model.h) fitted to every
  // executable this executor compiled (cached or not), with the backend's
  // quadratic_memory_dimension(). FailedPrecondition until the compiled
  // gears determine the fit; errors name a bad gear count or size.
  // Thread-safe.
  absl::StatusOr<int64_t> PredictGearBytes(std::span<const int64_t> gears) const;
  // What compiling and caching `gears` would add to GearMemoryBytes() now,
  // as the budget check before a compile projects it: the prediction for a
  // backend without an arena in use, else its own growth of the arena's
  // bound; 0 when it is cached. FailedPrecondition while unpredictable.
  absl::StatusOr<int64_t> PredictAddedBytes(std::span<const int64_t> gears) const;
  // What `gears` would take with no other gear held: the prediction, and
  // with an arena in use the arena's bound for it alone (the prediction in
  // every slot). A gear above graph_memory_budget_bytes by this measure can
  // never fit: it is refused before its compile as any gear past the
  // budget, but its refusal is not pressure (OverBudgetBytes). Thread-safe;
  // FailedPrecondition while unpredictable.
  absl::StatusOr<int64_t> PredictAloneBytes(std::span<const int64_t> gears) const;
  // What releasing the cached executable of `gears` would free (its
  // bytes()), 0 when none is cached. Thread-safe.
  int64_t CachedGearBytes(std::span<const int64_t> gears) const;
  // Gives the runtime a GearBytesPredictor backed by this executor
  // (PredictAddedBytes, CachedGearBytes, GearMemoryBytes, PredictAloneBytes), so the policies
  // price gears by their predicted bytes and honour
  // AdaptiveOptions::memory_budget_bytes before any compile. Undone (and
  // the predictor detached: it then predicts nothing) when the executor is
  // destroyed.
  void InstallGearBytesPredictor();

 private:
  class BytesPredictor;
  GearedExecutor(AdaptiveGearRuntime* runtime, Backend* backend, ExecutorOptions options);
  class Cache;

  absl::Status CheckTensors(std::span<const DLTensor> inputs, std::span<const DLTensor> outputs,
                            int64_t* raw) const;
  // One compile, errors named; nothing cached.
  absl::StatusOr<std::shared_ptr<Executable>> Compile(std::span<const int64_t> gears);
  // A miss: compiles once per combination however many threads miss at
  // once (they wait), publishes the result in the table unless its gear was
  // evicted meanwhile; failures are never cached.
  absl::StatusOr<std::shared_ptr<Executable>> CompileOnce(std::span<const int64_t> gears);
  // Tells the runtime that `gears` ran out of memory at `stage`, with its
  // predicted bytes when the memory model can say (the policies make room
  // and hold the gear back for the cooldown).
  // `served`: the fallback kind that served the variant, if any.
  void ReportOutOfMemory(std::span<const int64_t> gears, OutOfMemoryStage stage,
                         std::optional<OutOfMemoryFallback> served);
  // The "exact" out-of-memory (and the over-budget) fallback: `*exact`
  // becomes `v` at its exact sizes (padding off, eager), compiled for this
  // run alone.
  absl::StatusOr<std::shared_ptr<Executable>> CompileAtExactSizes(const Variant& v,
                                                                  std::optional<Variant>* exact);
  // Runs one executable for one variant (the request's staging).
  using RunVariant = absl::FunctionRef<absl::Status(Executable&, const Variant&)>;
  // Serves `v`, whose gear's compile or run failed for memory (`failure`),
  // with the first possible kind of options_.out_of_memory_fallback that
  // does not fail for memory (see there); counts the kind that served it in
  // `*served`, else leaves it empty. Reads the current table: the caller's
  // epoch pin keeps its executables alive. The shared path of compiles and
  // runs.
  absl::Status RunOutOfMemoryFallback(const Variant& v, const GearSet& set, RunVariant run,
                                      absl::Status failure,
                                      std::optional<OutOfMemoryFallback>* served);
  // The kinds; each returns nothing when it is impossible for `v`.
  std::optional<absl::Status> RunOnLargerGear(const Variant& v, RunVariant run) const;
  std::optional<absl::Status> RunSplit(const Variant& v, const GearSet& set, RunVariant run) const;
  std::optional<absl::Status> RunAtExactSizes(const Variant& v, RunVariant run);
  // Whether the predicted memory of `gears` would take the gears past
  // graph_memory_budget_bytes (false when there is none or no prediction);
  // `adds`: what caching it would add (its bytes, or the arena's growth).
  // `never_fits`: its bytes alone (PredictAloneBytes) pass the budget.
  bool PredictedOverBudget(std::span<const int64_t> gears, int64_t* adds, bool* never_fits) const;
  // Registers `exe` in the runtime's pool and returns its keys, or nothing
  // when that would take the pool past graph_memory_budget_bytes (counted).
  std::vector<GraphKey> RegisterWithinBudget(const std::shared_ptr<Executable>& exe);
  // The runtime's release listener: drops evicted executables from the table.
  void OnReleased(std::span<const GraphKey> keys);
  // Frees superseded tables no request still uses, unless a writer holds the lock.
  void TryReclaim();

  AdaptiveGearRuntime* const runtime_;
  Backend* const backend_;
  const ExecutorOptions options_;
  std::unique_ptr<Cache> cache_;
  uint64_t listener_ = 0;                      // our release listener on the runtime
  std::shared_ptr<BytesPredictor> predictor_;  // installed in the runtime, or null
  // Statistics only (relaxed).
  // Per-request counters, striped by thread so that request threads do not
  // share a cache line (stats() sums the stripes).
  struct alignas(64) RequestCounters {
    std::atomic<uint64_t> requests{0}, failed{0}, variants{0}, zero_copy{0};
  };
  static constexpr int kCounterStripes = 16;
  RequestCounters& Counters();
  RequestCounters counters_[kCounterStripes];
  std::atomic<uint64_t> compiles_{0}, compile_failures_{0}, eager_{0}, over_budget_{0},
      predicted_over_budget_{0};
  std::atomic<uint64_t> oom_served_[3] = {};    // per OutOfMemoryFallback kind
  std::atomic<int64_t> over_budget_bytes_{0};   // see OverBudgetBytes
  std::atomic<int64_t> largest_gear_bytes_{0};  // see ExecutorStats::largest_gear_bytes
  std::atomic<uint64_t> compile_nanos_{0};
  // Prediction errors, in parts per million (sum and max), and their count.
  std::atomic<uint64_t> predictions_{0}, prediction_error_ppm_sum_{0}, prediction_error_ppm_max_{0};
};

// Memory probe for host backends: the bytes the pool's executables hold
// against a byte budget (usage = pool bytes / budget).
// With Watch(executor), the bytes are that executor's GearMemoryBytes() (the
// pool plus its backend's arena), and the executable it last refused to
// cache for the budget counts too, until one fits again (the demand the
// budget turned away is pressure, though the pool never held it).
class GEARBOX_EXPORT PoolBudgetMemoryProbe final : public MemoryProbe {
 public:
  PoolBudgetMemoryProbe(const GraphResourcePool* pool, int64_t budget_bytes)
      : pool_(pool), budget_(budget_bytes) {}
  absl::StatusOr<double> UsageFraction() override;
  // `executor` must outlive the probe's use (or be unwatched with null).
  void Watch(const GearedExecutor* executor) { executor_.store(executor); }

 private:
  const GraphResourcePool* pool_;
  int64_t budget_;
  std::atomic<const GearedExecutor*> executor_{nullptr};
};

}  // namespace gearbox

#endif  // GEARBOX_EXECUTOR_H_
