// FleetPlanSync: leader lease, versioned plan, adoption by followers.
#include <atomic>
#include <charconv>
#include <cmath>

#include "gearbox/fleet_plan.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {

using internal::Cat;

namespace {

constexpr size_t kMaxPlanBytes = 64 * 1024;
constexpr int64_t kMaxGear = int64_t{1} << 40;
constexpr size_t kMaxGears = 64;

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

absl::Status Bad(size_t line, std::string_view what) {
  return absl::DataLossError(Cat("fleet plan line ", line + 1, ": ", what));
}

}  // namespace

std::string EncodeFleetPlan(const FleetPlan& plan, const std::vector<std::string>& dimensions) {
  std::string out = Cat("gearbox-plan 1\nleader ", plan.leader, "\ntime ", plan.time);
  for (size_t d = 0; d < dimensions.size() && d < plan.gears.size(); ++d) {
    out += Cat("\ndim ", dimensions[d], " ");
    for (size_t i = 0; i < plan.gears[d].size(); ++i) {
      out += Cat(i == 0 ? "" : ",", plan.gears[d][i]);
    }
  }
  return out;
}

absl::StatusOr<FleetPlan> DecodeFleetPlan(std::string_view payload,
                                          const std::vector<std::string>& dimensions) {
  if (payload.size() > kMaxPlanBytes) {
    return absl::DataLossError(
        Cat("fleet plan: ", payload.size(), " bytes is not allowed; at most ", kMaxPlanBytes));
  }
  const std::vector<std::string_view> lines = Lines(payload);
  if (lines.size() != 3 + dimensions.size()) {
    return absl::DataLossError(Cat("fleet plan: ", lines.size(), " lines is not allowed; ",
                                   3 + dimensions.size(), " for ", dimensions.size(),
                                   " dimensions"));
  }
  if (lines[0] != "gearbox-plan 1") return Bad(0, "not \"gearbox-plan 1\"");
  FleetPlan plan;
  if (lines[1].substr(0, 7) != "leader " || lines[1].size() > 7 + 64 || lines[1].size() == 7) {
    return Bad(1, "not \"leader <id of 1..64 characters>\"");
  }
  plan.leader = std::string(lines[1].substr(7));
  if (lines[2].substr(0, 5) != "time ") return Bad(2, "not \"time <seconds>\"");
  const std::string_view t = lines[2].substr(5);
  auto [tp, tec] = std::from_chars(t.data(), t.data() + t.size(), plan.time);
  if (t.empty() || tec != std::errc() || tp != t.data() + t.size() || !std::isfinite(plan.time) ||
      std::fabs(plan.time) > 1e15) {
    return Bad(2, "the time is not a finite number of seconds");
  }
  for (size_t d = 0; d < dimensions.size(); ++d) {
    const std::string_view line = lines[3 + d];
    const std::string prefix = Cat("dim ", dimensions[d], " ");
    if (line.substr(0, prefix.size()) != prefix) {
      return Bad(3 + d, Cat("not \"dim ", dimensions[d], " <gears>\" (dimension ", d, ")"));
    }
    std::string_view list = line.substr(prefix.size());
    std::vector<int64_t> gears;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string_view::npos) end = list.size();
      const std::string_view item = list.substr(start, end - start);
      int64_t g = 0;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), g);
      if (item.empty() || (item.size() > 1 && item[0] == '0') || ec != std::errc() ||
          p != item.data() + item.size() || g < 1 || g > kMaxGear ||
          (!gears.empty() && g <= gears.back()) || gears.size() == kMaxGears) {
        return Bad(3 + d, Cat("gears of ", dimensions[d],
                              ": 1..64 strictly ascending integers in 1..2^40, comma-separated"));
      }
      gears.push_back(g);
      start = end + 1;
    }
    plan.gears.push_back(std::move(gears));
  }
  return plan;
}

// Thread-safety: `mu` spans a whole Step.
class FleetPlanSync::Impl {
 public:
  Impl(FleetStore* s, std::string prefix, std::vector<std::string> dims, FleetPlanOptions o)
      : store(s),
        lease_key(prefix + ":plan:leader"),
        plan_key(prefix + ":plan"),
        channel(prefix + ":plan:changed"),
        dimensions(std::move(dims)),
        options(std::move(o)) {}

  FleetStore* const store;
  const std::string lease_key;
  const std::string plan_key;
  const std::string channel;
  const std::vector<std::string> dimensions;
  const FleetPlanOptions options;
  Mutex mu;
  uint64_t adopted ABSL_GUARDED_BY(mu) = 0;         // the last version adopted or published
  std::string adopted_payload ABSL_GUARDED_BY(mu);  // ... its payload
  double adopted_at ABSL_GUARDED_BY(mu) = -1e300;   // when the follower last committed a plan
  // For NewerPlanAnnounced, lock-free: the newest version announced on the
  // channel (written by the subscription's callback) and the newest the
  // store held at a Step (written by Step under mu).
  std::atomic<uint64_t> announced{0};
  std::atomic<uint64_t> seen_at_step{0};
  // Last: destroyed first, so no callback runs on a dying Impl.
  std::unique_ptr<FleetSubscription> subscription ABSL_GUARDED_BY(mu);

  void Settle(uint64_t version, std::string payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    adopted = version;
    adopted_payload = std::move(payload);
    Saw(version);
  }
  void Saw(uint64_t version) {
    if (version > seen_at_step.load(std::memory_order_acquire)) {
      seen_at_step.store(version, std::memory_order_release);
    }
  }

  // A message on the channel: untrusted (anyone with access may publish).
  void Announce(std::string_view message, const std::function<void(uint64_t)>& on_version) {
    absl::StatusOr<uint64_t> v = DecodeFleetVersion(message);
    if (!v.ok()) return;
    uint64_t seen = announced.load(std::memory_order_acquire);
    while (*v > seen && !announced.compare_exchange_weak(seen, *v, std::memory_order_acq_rel)) {
    }
    if (*v > seen && on_version) on_version(*v);
  }

  absl::Status Watch(std::function<void(uint64_t)> on_version) {
    auto sub = store->Subscribe(
        channel, [this, on_version](std::string_view m) { Announce(m, on_version); });
    if (!sub.ok()) return sub.status();
    MutexLock lock(&mu);
    subscription = *std::move(sub);
    return absl::OkStatus();
  }

  static std::vector<std::vector<int64_t>> GearsOf(const AdaptiveGearRuntime& runtime) {
    SnapshotRef s = runtime.GetSnapshot();
    std::vector<std::vector<int64_t>> gears;
    for (int d = 0; d < s->num_dimensions(); ++d)
      gears.emplace_back(s->gears(d).begin(), s->gears(d).end());
    return gears;
  }

  absl::StatusOr<bool> Lead() {
    MutexLock lock(&mu);
    if (!options.may_lead) return false;
    return store->AcquireLease(lease_key, options.replica_id, options.lease_ms);
  }

  absl::Status Resign() {
    MutexLock lock(&mu);
    if (!options.may_lead) return absl::OkStatus();
    return store->ReleaseLease(lease_key, options.replica_id);
  }

  absl::StatusOr<FleetPlanStep> Step(AdaptiveGearRuntime* runtime, double now) {
    MutexLock lock(&mu);
    FleetPlanStep step;
    if (options.may_lead) {
      absl::StatusOr<bool> leader =
          store->AcquireLease(lease_key, options.replica_id, options.lease_ms);
      if (!leader.ok()) return leader.status();
      step.leader = *leader;
    }
    absl::StatusOr<VersionedValue> stored = store->GetVersioned(plan_key);
    if (!stored.ok()) return stored.status();
    step.version = stored->version;
    if (stored->version < adopted ||
        (stored->version == adopted && stored->payload != adopted_payload)) {
      // The store lost the plan (a restart without persistence): versions
      // start over, and what was announced before means nothing now.
      adopted = 0;
      seen_at_step.store(stored->version, std::memory_order_release);
      announced.store(stored->version, std::memory_order_release);
    }
    Saw(stored->version);
    const std::vector<std::vector<int64_t>> mine = GearsOf(*runtime);
    std::optional<FleetPlan> current;
    if (stored->version > 0) {
      absl::StatusOr<FleetPlan> decoded = DecodeFleetPlan(stored->payload, dimensions);
      if (!decoded.ok() && !step.leader) return decoded.status();
      if (decoded.ok()) current = *std::move(decoded);  // a leader overwrites a corrupt plan
    }
    if (step.leader) {
      if (current.has_value() && current->gears == mine) return step;
      FleetPlan plan;
      plan.leader = options.replica_id;
      plan.time = now;
      plan.gears = mine;
      std::string payload = EncodeFleetPlan(plan, dimensions);
      absl::StatusOr<bool> written =
          store->CompareAndSet(plan_key, stored->version, payload, options.plan_ttl_ms);
      if (!written.ok()) return written.status();
      if (*written) {
        step.published = true;
        step.version = stored->version + 1;
        Settle(step.version, std::move(payload));
        // Best effort: a follower that misses it finds the version at its next Step.
        step.announced = store->Publish(channel, Cat(step.version)).ok();
      }
      return step;
    }
    if (!current.has_value() || stored->version <= adopted) return step;
    if (current->gears == mine) {
      Settle(stored->version, stored->payload);
      return step;
    }
    if (options.max_graphs > 0) {
      // Saturating product: 64 dimensions of 64 gears overflow int64.
      int64_t graphs = 1;
      for (const auto& g : current->gears) {
        const int64_t k = static_cast<int64_t>(g.size());
        graphs = graphs > options.max_graphs / k ? options.max_graphs + 1 : graphs * k;
      }
      if (graphs > options.max_graphs) {
        Settle(stored->version, stored->payload);  // refused once per version
        step.refused = true;
        return step;
      }
    }
    if (now - adopted_at < options.min_adopt_interval_seconds) {
      step.deferred = true;  // not marked adopted: a later Step takes it (or a newer one)
      return step;
    }
    Settle(stored->version, stored->payload);
    absl::StatusOr<UpdateRecord> r = runtime->CommitUpdate(current->gears, now);
    if (!r.ok()) {
      return internal::WithContext(r.status(),
                                   Cat("fleet plan version ", stored->version, " not adopted"));
    }
    step.adopted = true;
    adopted_at = now;
    return step;
  }
};

absl::StatusOr<std::unique_ptr<FleetPlanSync>> FleetPlanSync::Create(
    FleetStore* store, const FleetFingerprint& fingerprint, std::vector<std::string> dimensions,
    FleetPlanOptions options) {
  if (store == nullptr) return internal::InvalidField("store", "null", "a FleetStore");
  if (auto s = ValidateFleetFingerprint(fingerprint); !s.ok()) return s;
  bool id_ok = !options.replica_id.empty() && options.replica_id.size() <= 64;
  for (char c : options.replica_id) {
    id_ok &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
  }
  if (!id_ok) {
    return internal::InvalidField("fleet.replica_id",
                                  Cat("\"", options.replica_id.substr(0, 80), "\""),
                                  "1..64 characters of A-Z a-z 0-9 . _ -");
  }
  if (options.lease_ms < 1 || options.lease_ms > int64_t{86400000}) {
    return internal::InvalidFieldValue("fleet.lease_ms", options.lease_ms,
                                       "milliseconds in [1, 86400000]");
  }
  if (options.plan_ttl_ms < 0 || options.plan_ttl_ms > int64_t{365} * 86400000) {
    return internal::InvalidFieldValue("fleet.plan_ttl_ms", options.plan_ttl_ms,
                                       "milliseconds in [0, one year] (0: no expiry)");
  }
  if (options.max_graphs < 0 || options.max_graphs > (int64_t{1} << 40)) {
    return internal::InvalidFieldValue("fleet.max_graphs", options.max_graphs,
                                       "an integer in [0, 2^40] (0: no local limit)");
  }
  if (!(options.min_adopt_interval_seconds >= 0) ||
      !(options.min_adopt_interval_seconds <= 86400)) {
    return internal::InvalidFieldValue("fleet.min_adopt_interval_seconds",
                                       options.min_adopt_interval_seconds,
                                       "seconds in [0, 86400] (0: adopt at once)");
  }
  if (dimensions.empty() || dimensions.size() > 64) {
    return internal::InvalidField("dimensions", Cat(dimensions.size(), " names"), "1..64");
  }
  for (const std::string& d : dimensions) {
    if (d.empty() || d.find_first_of(" \n") != std::string::npos) {
      return internal::InvalidField("dimensions", Cat("\"", d, "\""),
                                    "non-empty names without spaces or newlines");
    }
  }
  return std::unique_ptr<FleetPlanSync>(new FleetPlanSync(std::make_unique<Impl>(
      store, FleetKeyPrefix(fingerprint), std::move(dimensions), std::move(options))));
}

FleetPlanSync::FleetPlanSync(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FleetPlanSync::~FleetPlanSync() = default;

absl::StatusOr<FleetPlanStep> FleetPlanSync::Step(AdaptiveGearRuntime* runtime, double now) {
  if (runtime == nullptr) return internal::InvalidField("runtime", "null", "a runtime");
  return impl_->Step(runtime, now);
}

absl::StatusOr<bool> FleetPlanSync::Lead() { return impl_->Lead(); }

absl::Status FleetPlanSync::Watch(std::function<void(uint64_t version)> on_version) {
  return impl_->Watch(std::move(on_version));
}

bool FleetPlanSync::NewerPlanAnnounced() const {
  return impl_->announced.load(std::memory_order_acquire) >
         impl_->seen_at_step.load(std::memory_order_acquire);
}

absl::Status FleetPlanSync::Resign() { return impl_->Resign(); }

}  // namespace gearbox
