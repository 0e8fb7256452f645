#include "gearbox/replay.h"

#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <unordered_set>

#include "gearbox/runtime.h"
#include "nlohmann/json.hpp"
#include "src/common/errors.h"
#include "src/sim/graph_combo.h"
#include "src/sim/replay_schedule.h"

namespace gearbox {
namespace {

using internal::Cat;

using internal::Combo;
using internal::ComboHash;

// Graphs alive in the simulated device. Single-threaded (the replay).
struct CompiledGraphs {
  std::unordered_set<Combo, ComboHash> alive;
  double bytes = 0.0;
};

// A simulated compiled graph: leaves the alive set when the pool releases it.
class SimulatedGraph final : public GraphResource {
 public:
  SimulatedGraph(CompiledGraphs* graphs, const Combo& combo, double bytes)
      : graphs_(graphs), combo_(combo), bytes_(bytes) {
    graphs_->alive.insert(combo_);
    graphs_->bytes += bytes_;
  }
  ~SimulatedGraph() override {
    graphs_->alive.erase(combo_);
    graphs_->bytes -= bytes_;
  }
  int64_t bytes() const override { return static_cast<int64_t>(bytes_); }

 private:
  CompiledGraphs* graphs_;
  Combo combo_;
  double bytes_;
};

class TimeAverage {
 public:
  explicit TimeAverage(double start) : last_(start) {}
  void Advance(double t, double value) {
    if (t > last_) {
      area_ += value * (t - last_);
      span_ += t - last_;
      last_ = t;
    }
  }
  double Mean(double fallback) const { return span_ > 0 ? area_ / span_ : fallback; }

 private:
  double last_;
  double area_ = 0.0;
  double span_ = 0.0;
};

// Add and evict times of every gear the policy touched, for the churn
// figures. Gears of the initial set have no add time: evicting one is not
// churn.
class ChurnTracker {
 public:
  ChurnTracker(int dimensions, double window) : adds_(dimensions), window_(window) {}
  void Update(const UpdateRecord& r) {
    for (size_t d = 0; d < adds_.size() && d < r.added.size(); ++d) {
      for (int64_t g : r.added[d]) adds_[d][g].push_back({r.time, -1.0});
      for (int64_t g : r.removed[d]) {
        auto it = adds_[d].find(g);
        if (it == adds_[d].end() || it->second.back().evicted >= 0) continue;
        it->second.back().evicted = r.time;
        if (r.time - it->second.back().added < window_) ++short_lived_;
      }
    }
  }
  uint64_t short_lived() const { return short_lived_; }
  // The most add-then-evict cycles of one gear whose adds lie within one window.
  uint64_t MaxCyclesPerWindow() const {
    uint64_t most = 0;
    for (const auto& dimension : adds_) {
      for (const auto& [gear, lives] : dimension) {
        size_t first = 0;
        uint64_t in_window = 0;
        for (size_t i = 0; i < lives.size(); ++i) {
          if (lives[i].evicted < 0) continue;
          ++in_window;
          while (lives[i].added - lives[first].added >= window_) {
            if (lives[first].evicted >= 0) --in_window;
            ++first;
          }
          most = std::max(most, in_window);
        }
      }
    }
    return most;
  }

 private:
  struct Life {
    double added;
    double evicted;  // < 0 while alive
  };
  std::vector<std::map<int64_t, std::vector<Life>>> adds_;
  double window_;
  uint64_t short_lived_ = 0;
};

// Whether each update after the warm-up changed the gear set (a look at the
// combinations is not an update, and moves no gear), for the flapping
// figure: the most changes within any kFlapUpdates consecutive updates.
class FlapTracker {
 public:
  explicit FlapTracker(double warmup_end) : warmup_end_(warmup_end) {}
  void Update(const UpdateRecord& r) {
    if (r.trigger == UpdateTrigger::kCombinations || r.time < warmup_end_) return;
    bool changed = false;
    for (size_t d = 0; d < r.added.size(); ++d) changed = changed || !r.added[d].empty();
    for (size_t d = 0; d < r.removed.size(); ++d) changed = changed || !r.removed[d].empty();
    changed_.push_back(changed);
  }
  uint64_t MaxChanges() const {
    uint64_t in_window = 0, most = 0;
    for (size_t i = 0; i < changed_.size(); ++i) {
      in_window += changed_[i];
      if (i >= kFlapUpdates) in_window -= changed_[i - kFlapUpdates];
      most = std::max(most, in_window);
    }
    return most;
  }

 private:
  double warmup_end_;
  std::vector<bool> changed_;
};

}  // namespace

absl::Status CheckReplayRun(const RuntimeConfig& config, const Trace& trace,
                            const ReplayRunOptions& run) {
  if (auto s = internal::CheckReplayInputs(config, trace, run); !s.ok()) return s;
  ManualClock clock(trace.time.front());
  GraphResourcePool pool;
  const RuntimeOptions ro = internal::ReplayRuntimeOptions(config, run, &clock, &pool);
  auto created = AdaptiveGearRuntime::Create(config.dims, ro);
  if (!created.ok()) return internal::WithContext(created.status(), internal::ReplayRunName(run));
  return absl::OkStatus();
}

absl::StatusOr<ReplayResult> Replay(const RuntimeConfig& config, const Trace& trace,
                                    const ReplayOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(config.dims.size());
  if (auto s = internal::CheckReplayInputs(config, trace, options); !s.ok()) return s;
  if (!(options.churn_window_seconds > 0)) {
    return internal::InvalidFieldValue("churn_window_seconds", options.churn_window_seconds,
                                       "seconds > 0");
  }
  const double span = trace.time.back() - trace.time.front();
  if (!(options.timeline_bucket_seconds > 0) ||
      !(span / options.timeline_bucket_seconds < static_cast<double>(kMaxTimelineBuckets))) {
    return internal::InvalidFieldValue(
        "--bucket-seconds", options.timeline_bucket_seconds,
        Cat("seconds > 0 and at most ", kMaxTimelineBuckets, " buckets over the trace's ", span,
            " s (at least ", span / static_cast<double>(kMaxTimelineBuckets), ")"));
  }

  const double t0 = trace.time.front();
  const double t_end = trace.time.back();
  ReplayResult result;
  result.policy = internal::ReplayRunName(options);
  for (const auto& d : config.dims) result.dimensions.push_back(d.name);
  result.requests = trace.rows();
  result.trace_seconds = t_end - t0;
  result.dimension_padded.assign(n, 0.0);
  result.dimension_raw.assign(n, 0.0);

  // Declared before the pool: simulated graphs touch it when the pool releases them.
  CompiledGraphs graphs;
  GraphResourcePool pool;
  ManualClock clock(t0);
  FixedMemoryProbe trace_memory(trace.mem_usage.empty() ? 0.0 : trace.mem_usage.front());
  std::optional<MemoryModel> model = config.memory_model;
  FunctionMemoryProbe model_memory([&graphs, model]() -> absl::StatusOr<double> {
    return (model->base_bytes + graphs.bytes) / model->device_bytes;
  });

  std::vector<TimeAverage> gear_counts(n, TimeAverage(t0));
  TimeAverage graph_count(t0);
  std::vector<int64_t> current_counts(n);
  ChurnTracker churn(n, options.churn_window_seconds);
  FlapTracker flaps(t0 + kFlapWarmupSeconds);

  RuntimeOptions ro = internal::ReplayRuntimeOptions(config, options, &clock, &pool);
  result.scheme = ro.combination_spec.scheme;
  if (!trace.mem_usage.empty()) {
    ro.memory_probe = &trace_memory;
  } else if (model.has_value()) {
    ro.memory_probe = &model_memory;
  }
  ro.on_update = [&](const UpdateRecord& r) {
    internal::CountUpdate(r, &result);
    churn.Update(r);
    flaps.Update(r);
    for (int d = 0; d < n; ++d) {
      gear_counts[d].Advance(r.time, static_cast<double>(current_counts[d]));
      current_counts[d] = static_cast<int64_t>(r.gears_after[d].size());
    }
    result.gear_timeline.push_back({r.time, r.gears_after});
    if (options.on_update) options.on_update(r);
  };
  auto created = AdaptiveGearRuntime::Create(config.dims, ro);
  if (!created.ok()) return created.status();
  AdaptiveGearRuntime& runtime = **created;
  {
    SnapshotRef initial = runtime.GetSnapshot();
    GearSetSample sample{t0, {}};
    for (int d = 0; d < n; ++d) {
      sample.gears.emplace_back(initial->gears(d).begin(), initial->gears(d).end());
      current_counts[d] = static_cast<int64_t>(initial->gears(d).size());
    }
    result.gear_timeline.push_back(std::move(sample));
  }

  internal::ReplaySchedule schedule(options, t0, t_end, &runtime, &clock);
  // Before each check or update: the graphs alive until then.
  const auto advance_graphs = [&](double at) {
    graph_count.Advance(at, static_cast<double>(graphs.alive.size()));
  };

  const size_t rows = trace.rows();
  const size_t progress_step = std::max<size_t>(1, rows / 100);
  uint64_t compiles_after_first_hour = 0;
  Plan plan;
  std::array<VariantGroup, size_t{1} << kMaxDimensions> variant_groups;
  Combo combo;
  combo.n = n;
  for (size_t i = 0; i < rows; ++i) {
    const double t = trace.time[i];
    if (auto s = schedule.RunThrough(t, advance_graphs); !s.ok()) return s;
    if (!trace.mem_usage.empty()) trace_memory.Set(trace.mem_usage[i]);
    if (options.progress && i % progress_step == 0) options.progress(i, rows);

    SnapshotRef snap = runtime.GetSnapshot();
    const absl::Status planned =
        MakePlan(*snap, std::span<const int64_t>(trace.row(i), static_cast<size_t>(n)), &plan);
    if (!planned.ok()) {
      if (result.rejected_requests++ == 0) {
        result.first_rejection = Cat("row ", i + 1, " (t=", t, "): ", internal::Message(planned));
      }
      continue;
    }
    ++result.served_requests;
    if (plan.any_split()) ++result.split_requests;
    if (plan.any_uncompiled()) ++result.eager_requests;
    result.variants += static_cast<uint64_t>(plan.num_variants());
    // The plan's variant groups, once (at most 2^dimensions).
    const int groups = plan.num_variant_groups();
    for (int g = 0; g < groups; ++g) variant_groups[static_cast<size_t>(g)] = plan.variant_group(g);
    // Compile each gear combination the plan runs that is not alive.
    double padded = 0;
    for (int g = 0; g < groups; ++g) {
      const VariantGroup& vg = variant_groups[static_cast<size_t>(g)];
      double volume = static_cast<double>(vg.count);
      for (int d = 0; d < n; ++d) volume *= static_cast<double>(vg.gear[d]);
      padded += volume;
      if (vg.eager) continue;  // runs uncompiled
      for (int d = 0; d < n; ++d) combo.gear[d] = vg.gear[d];
      if (graphs.alive.count(combo)) continue;
      graph_count.Advance(t, static_cast<double>(graphs.alive.size()));
      const double bytes = model ? model->GraphBytes({combo.gear, static_cast<size_t>(n)}) : 0.0;
      pool.Register(std::make_shared<SimulatedGraph>(&graphs, combo, bytes));
      const std::vector<GraphKey> keys = pool.ConsumeRecentKeys();
      runtime.AttachCleanupKeys({combo.gear, static_cast<size_t>(n)}, keys);
      ++result.compiles;
      if (t - t0 >= 3600.0) ++compiles_after_first_hour;
      result.peak_graphs = std::max<uint64_t>(result.peak_graphs, graphs.alive.size());
      result.peak_graph_bytes = std::max(result.peak_graph_bytes, graphs.bytes);
    }
    runtime.RecordPlan(plan, t);
    for (int d = 0; d < n; ++d) {
      // Each chunk of this dimension runs once per combination of the others'
      // chunks; per dimension alone, count each chunk once, at the gear its
      // variants ran on (their mean, when a joint set's combinations differ).
      const DimensionPlan& dp = plan.dimension(d);
      double gear_sum = 0;
      for (int g = 0; g < groups; ++g) {
        const VariantGroup& vg = variant_groups[static_cast<size_t>(g)];
        gear_sum += static_cast<double>(vg.count) * static_cast<double>(vg.gear[d]);
      }
      result.dimension_padded[d] += static_cast<double>(dp.num_chunks()) * gear_sum /
                                    static_cast<double>(plan.num_variants());
      result.dimension_raw[d] += static_cast<double>(dp.raw);
    }
    const double raw = plan.raw_volume();  // padded: summed above (Plan::padded_volume)
    result.padded_volume += padded;
    result.raw_volume += raw;
    const size_t bucket = static_cast<size_t>((t - t0) / options.timeline_bucket_seconds);
    if (result.waste_timeline.size() <= bucket) {
      const size_t from = result.waste_timeline.size();
      result.waste_timeline.resize(bucket + 1);
      for (size_t b = from; b <= bucket; ++b) {
        result.waste_timeline[b].start =
            t0 + static_cast<double>(b) * options.timeline_bucket_seconds;
      }
    }
    WasteBucket& wb = result.waste_timeline[bucket];
    wb.padded += padded;
    wb.raw += raw;
    ++wb.requests;
  }
  if (options.progress) options.progress(rows, rows);
  if (auto s = schedule.RunRest(advance_graphs); !s.ok()) return s;

  const double end = schedule.end();
  result.replay_seconds = end - t0;
  for (int d = 0; d < n; ++d) gear_counts[d].Advance(end, static_cast<double>(current_counts[d]));
  graph_count.Advance(end, static_cast<double>(graphs.alive.size()));
  SnapshotRef last = runtime.GetSnapshot();
  for (int d = 0; d < n; ++d) {
    result.avg_gears.push_back(gear_counts[d].Mean(static_cast<double>(current_counts[d])));
    result.final_gears.emplace_back(last->gears(d).begin(), last->gears(d).end());
  }
  result.compiles_per_hour =
      static_cast<double>(result.compiles) / std::max(1.0, result.trace_seconds / 3600.0);
  if (result.trace_seconds > 3600.0) {
    result.compiles_per_hour_after_first_hour =
        static_cast<double>(compiles_after_first_hour) / (result.trace_seconds / 3600.0 - 1.0);
  }
  result.short_lived_gears = churn.short_lived();
  result.max_gear_cycles_per_hour = churn.MaxCyclesPerWindow();
  result.max_gear_set_changes_in_25_updates = flaps.MaxChanges();
  result.avg_graphs = graph_count.Mean(static_cast<double>(graphs.alive.size()));
  result.padding_waste =
      result.raw_volume > 0 ? result.padded_volume / result.raw_volume - 1.0 : 0.0;
  last.Reset();
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

std::string ReplayResultJson(const ReplayResult& r, int indent) {
  nlohmann::ordered_json j;
  j["policy"] = r.policy;
  j["scheme"] = GearSchemeName(r.scheme);
  j["requests"] = r.requests;
  j["served_requests"] = r.served_requests;
  j["rejected_requests"] = r.rejected_requests;
  if (!r.first_rejection.empty()) j["first_rejection"] = r.first_rejection;
  j["split_requests"] = r.split_requests;
  j["eager_requests"] = r.eager_requests;
  j["variants"] = r.variants;
  j["padding_waste"] = r.padding_waste;
  j["padded_volume"] = r.padded_volume;
  j["raw_volume"] = r.raw_volume;
  j["compiles"] = r.compiles;
  j["compiles_per_hour"] = r.compiles_per_hour;
  j["compiles_per_hour_after_first_hour"] = r.compiles_per_hour_after_first_hour;
  j["short_lived_gears"] = r.short_lived_gears;
  j["max_gear_cycles_per_hour"] = r.max_gear_cycles_per_hour;
  j["max_gear_set_changes_in_25_updates"] = r.max_gear_set_changes_in_25_updates;
  j["updates"] = r.updates;
  j["updates_changed"] = r.updates_changed;
  j["combination_looks"] = r.combination_looks;
  j["combination_looks_changed"] = r.combination_looks_changed;
  nlohmann::ordered_json avg = nlohmann::ordered_json::object();
  nlohmann::ordered_json fin = nlohmann::ordered_json::object();
  for (size_t d = 0; d < r.dimensions.size(); ++d) {
    avg[r.dimensions[d]] = r.avg_gears[d];
    fin[r.dimensions[d]] = r.final_gears[d];
  }
  nlohmann::ordered_json dim_waste = nlohmann::ordered_json::object();
  for (size_t d = 0; d < r.dimensions.size(); ++d) {
    dim_waste[r.dimensions[d]] = r.dimension_waste(static_cast<int>(d));
  }
  j["avg_gears"] = avg;
  j["dimension_waste"] = dim_waste;
  j["final_gears"] = fin;
  j["peak_graphs"] = r.peak_graphs;
  j["avg_graphs"] = r.avg_graphs;
  j["peak_graph_bytes"] = r.peak_graph_bytes;
  j["trace_seconds"] = r.trace_seconds;
  j["replay_seconds"] = r.replay_seconds;
  j["wall_seconds"] = r.wall_seconds;
  return j.dump(indent);
}

}  // namespace gearbox
