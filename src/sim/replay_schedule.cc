#include "src/sim/replay_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "gearbox/update_worker.h"
#include "src/common/errors.h"

namespace gearbox::internal {

absl::Status CheckReplayInputs(const RuntimeConfig& config, const Trace& trace,
                               const ReplayRunOptions& options) {
  const size_t n = config.dims.size();
  if (trace.dimensions.size() != n) {
    return InvalidField("trace", Cat(trace.dimensions.size(), " dimension columns"),
                        Cat("one per config dimension (", n, ")"));
  }
  for (size_t d = 0; d < n; ++d) {
    if (trace.dimensions[d] != config.dims[d].name) {
      return InvalidField(Cat("trace column ", d), trace.dimensions[d],
                          Cat("the config's dimension ", config.dims[d].name));
    }
  }
  if (trace.rows() == 0) return absl::InvalidArgumentError("trace: no rows");
  for (double t : options.update_at) {
    if (!std::isfinite(t)) return InvalidFieldValue("--update-at", t, "finite times");
  }
  return CheckReplayUpdateCount(config, trace, options);
}

absl::Status CheckReplayUpdateCount(const RuntimeConfig& config, const Trace& trace,
                                    const ReplayRunOptions& options) {
  if (options.update_at.size() > options.max_updates) {
    return InvalidField(
        "--update-at", Cat(options.update_at.size(), " times"),
        Cat("at most ", options.max_updates, " updates per replay (--max-updates)"));
  }
  if (options.policy == UpdatePolicy::kStatic || !options.update_at.empty())
    return absl::OkStatus();
  // The worker's schedule: one check per interval over the trace's span; the
  // shortest interval the runtime may use bounds their number.
  double interval = config.adaptive.check_interval_seconds;
  const char* field = "adaptive.check_interval_seconds";
  if (options.policy == UpdatePolicy::kReplan && config.replan.warmup_check_seconds < interval) {
    interval = config.replan.warmup_check_seconds;
    field = "replan.warmup_check_seconds";
  }
  // Joint and sparse sets: the looks at the combinations between updates.
  const double look = config.replan.combination_interval_seconds;
  if (options.policy == UpdatePolicy::kReplan && look > 0 && look < interval &&
      options.scheme.value_or(config.combination_spec.scheme) != GearScheme::kIndependent) {
    interval = look;
    field = "replan.combination_interval_seconds";
  }
  const double span = trace.time.back() - trace.time.front();
  const double checks = span / interval;
  const double scale = std::max(std::fabs(trace.time.front()), std::fabs(trace.time.back()));
  if (!(interval > 0) || !(checks <= static_cast<double>(options.max_updates)) ||
      !(scale + interval > scale)) {
    return absl::InvalidArgumentError(Cat(
        "the trace spans ", span, " s: with ", field, " = ", interval, " that is ", checks,
        " update checks; at most ", options.max_updates,
        " per replay (raise the interval or --max-updates, or check the t column is in seconds)"));
  }
  return absl::OkStatus();
}

std::string ReplayRunName(const ReplayRunOptions& options) {
  std::string name(UpdatePolicyName(options.policy));
  if (options.scheme.has_value()) name += Cat("/", GearSchemeName(*options.scheme));
  return name;
}

RuntimeOptions ReplayRuntimeOptions(const RuntimeConfig& config, const ReplayRunOptions& options,
                                    ManualClock* clock, GraphResourcePool* pool) {
  RuntimeOptions ro;
  ro.adaptive = config.adaptive;
  // The static policy never updates; kReplan lets it hold any gear scheme.
  ro.policy = options.policy;
  ro.replan = config.replan;
  // A scheme override starts from every cell of the initial gears; the
  // config's own scheme keeps its combinations.
  ro.combination_spec = config.combination_spec;
  if (options.scheme.has_value() && *options.scheme != config.combination_spec.scheme) {
    ro.combination_spec.scheme = *options.scheme;
    ro.combination_spec.combinations.clear();
  }
  ro.clock = clock;
  ro.pool = pool;
  ro.start_worker = false;
  ro.log = [](LogLevel, std::string_view) {};
  return ro;
}

ReplaySchedule::ReplaySchedule(const ReplayRunOptions& options, double first_row, double last_row,
                               AdaptiveGearRuntime* runtime, ManualClock* clock)
    : runtime_(runtime),
      clock_(clock),
      checks_(options.policy != UpdatePolicy::kStatic && options.update_at.empty()),
      max_updates_(options.max_updates),
      last_row_(last_row),
      next_check_(first_row + runtime->CheckIntervalSeconds()),
      end_(last_row) {
  if (options.policy != UpdatePolicy::kStatic) update_at_ = options.update_at;
  std::sort(update_at_.begin(), update_at_.end());
}

absl::Status ReplaySchedule::RunThrough(double t, const std::function<void(double)>& before) {
  if (checks_) {
    const double until = std::min(t, last_row_);
    while (next_check_ <= until) {
      if (before) before(next_check_);
      clock_->Set(next_check_);
      runtime_->worker()->CheckOnce(next_check_);
      end_ = std::max(end_, next_check_);
      const double next = next_check_ + runtime_->CheckIntervalSeconds();
      if (!(next > next_check_) || ++checks_run_ > max_updates_) {
        return absl::InvalidArgumentError(
            Cat("update checks: more than ", max_updates_, " per replay, or an interval of ",
                runtime_->CheckIntervalSeconds(), " s too short at t = ", next_check_,
                " (raise adaptive.check_interval_seconds)"));
      }
      next_check_ = next;
    }
    return absl::OkStatus();
  }
  while (next_update_ < update_at_.size() && update_at_[next_update_] <= t) {
    const double at = update_at_[next_update_++];
    if (before) before(at);
    clock_->Set(at);
    auto record = runtime_->RunOnce(at, UpdateTrigger::kManual);
    if (!record.ok()) return record.status();
    end_ = std::max(end_, at);
  }
  return absl::OkStatus();
}

double ReplaySchedule::NextTime() const {
  double next = std::numeric_limits<double>::infinity();
  if (checks_ && next_check_ <= last_row_) next = next_check_;
  if (next_update_ < update_at_.size()) next = std::min(next, update_at_[next_update_]);
  return next;
}

absl::Status ReplaySchedule::RunRest(const std::function<void(double)>& before) {
  return RunThrough(std::numeric_limits<double>::infinity(), before);
}

}  // namespace gearbox::internal
