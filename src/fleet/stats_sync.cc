// FleetStatsSync: pushes window slots as bucket increments, merges the fleet's window.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>

#include "gearbox/fleet_stats.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"

namespace gearbox {

using internal::Cat;

namespace {

constexpr int64_t kMaxSize = int64_t{1} << 40;
constexpr double kMaxWeight = 1e15;
constexpr double kMaxReplicas = 1e6;

// A decimal integer without sign or leading zeros, in [lo, hi].
bool ParseCanonicalInt(std::string_view text, int64_t lo, int64_t hi, int64_t* out) {
  if (text.empty() || text.size() > 19 || (text.size() > 1 && text[0] == '0')) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size() && *out >= lo && *out <= hi;
}

bool ValidReplicaId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

namespace {

// What a bucket's fields are: "<kind> field" in errors, the key after the
// dimension ("<key_name> lo..hi") and the value each such field may hold.
struct BucketSchema {
  const char* kind;      // "stats" or "drift"
  const char* key_name;  // "size", "size class"
  int64_t key_lo;
  int64_t key_hi;
  const char* key_range;    // as the error says it: "1..2^40"
  const char* value_name;   // "weight", "count"
  const char* value_range;  // "0..1e15", "an integer 0..2^52"
  bool (*value_ok)(double);
};

// A bucket hash (FleetStatsSync's buckets and drift bins alike): field "n"
// (the replicas that pushed it, 1..1e6) and fields "<dimension>:<key>" with
// a value the schema allows; per dimension the values by key, summed.
// Anything else is an error naming the field.
struct BucketFields {
  double replicas = 0.0;
  std::vector<std::map<int64_t, double>> values;  // [dimension]
};
absl::StatusOr<BucketFields> DecodeBucketFields(const FleetHash& hash, int num_dimensions,
                                                const FleetValueLimits& limits,
                                                const BucketSchema& schema) {
  if (auto s = CheckFleetHash(hash, limits); !s.ok()) return s;
  if (num_dimensions < 1 || num_dimensions > 64) {
    return internal::InvalidFieldValue("num_dimensions", num_dimensions, "1..64");
  }
  BucketFields out;
  out.values.resize(static_cast<size_t>(num_dimensions));
  bool have_replicas = false;
  for (const auto& [field, value] : hash) {
    absl::StatusOr<double> x = DecodeFleetFloat(value);
    if (!x.ok()) {
      return internal::WithContext(x.status(), Cat(schema.kind, " field \"", field, "\""));
    }
    if (field == "n") {
      if (!(*x >= 1.0 && *x <= kMaxReplicas)) {
        return absl::DataLossError(
            Cat(schema.kind, " field \"n\": ", *x, " is not allowed; a replica count in [1, 1e6]"));
      }
      out.replicas = *x;
      have_replicas = true;
      continue;
    }
    const size_t colon = field.find(':');
    int64_t d = 0;
    int64_t key = 0;
    if (colon == std::string::npos ||
        !ParseCanonicalInt(std::string_view(field).substr(0, colon), 0, num_dimensions - 1, &d) ||
        !ParseCanonicalInt(std::string_view(field).substr(colon + 1), schema.key_lo, schema.key_hi,
                           &key)) {
      return absl::DataLossError(Cat(schema.kind, " field \"", field.substr(0, 64),
                                     "\" is not allowed; \"n\" or \"<dimension 0..",
                                     num_dimensions - 1, ">:<", schema.key_name, " ",
                                     schema.key_range, ">\""));
    }
    if (!schema.value_ok(*x)) {
      return absl::DataLossError(Cat(schema.kind, " field \"", field, "\": ", schema.value_name,
                                     " ", *x, " is not allowed; ", schema.value_range));
    }
    out.values[static_cast<size_t>(d)][key] += *x;
  }
  if (!have_replicas) {
    return absl::DataLossError(
        Cat(schema.kind, " bucket: no \"n\" field (the replicas that pushed it)"));
  }
  return out;
}

constexpr double kMaxCount = 4503599627370496.0;  // 2^52: exact in a double
static_assert(kSizeDriftClasses == 504, "DecodeFleetDriftBucket's errors say 0..503");

}  // namespace

absl::StatusOr<FleetStatsBucket> DecodeFleetStatsBucket(const FleetHash& hash, int num_dimensions,
                                                        const FleetValueLimits& limits) {
  static constexpr BucketSchema kStats{
      .kind = "stats",
      .key_name = "size",
      .key_lo = 1,
      .key_hi = kMaxSize,
      .key_range = "1..2^40",
      .value_name = "weight",
      .value_range = "0..1e15",
      .value_ok = [](double x) { return x >= 0.0 && x <= kMaxWeight; }};
  absl::StatusOr<BucketFields> fields = DecodeBucketFields(hash, num_dimensions, limits, kStats);
  if (!fields.ok()) return fields.status();
  FleetStatsBucket bucket;
  bucket.replicas = fields->replicas;
  bucket.sizes.resize(fields->values.size());
  for (size_t d = 0; d < fields->values.size(); ++d) {
    for (const auto& [size, weight] : fields->values[d]) bucket.sizes[d].push_back({size, weight});
  }
  return bucket;
}

absl::StatusOr<FleetDriftBucket> DecodeFleetDriftBucket(const FleetHash& hash, int num_dimensions,
                                                        const FleetValueLimits& limits) {
  static constexpr BucketSchema kDrift{
      .kind = "drift",
      .key_name = "size class",
      .key_lo = 0,
      .key_hi = kSizeDriftClasses - 1,
      .key_range = "0..503",
      .value_name = "count",
      .value_range = "an integer 0..2^52",
      .value_ok = [](double x) { return x >= 0.0 && x <= kMaxCount && std::floor(x) == x; }};
  absl::StatusOr<BucketFields> fields = DecodeBucketFields(hash, num_dimensions, limits, kDrift);
  if (!fields.ok()) return fields.status();
  FleetDriftBucket bucket;
  bucket.replicas = fields->replicas;
  bucket.counts.resize(fields->values.size());
  for (size_t d = 0; d < fields->values.size(); ++d) {
    for (const auto& [k, c] : fields->values[d]) {
      if (c > 0) {
        bucket.counts[d].emplace_back(static_cast<int32_t>(k),
                                      static_cast<uint64_t>(std::min(c, kMaxCount)));
      }
    }
  }
  return bucket;
}

// Thread-safety: `mu` is held for a whole Merge (store calls included) and
// guards the counters, the push watermark and the outage flag.
class FleetStatsSync::Impl {
 public:
  Impl(FleetStore* s, std::string p, std::vector<std::string> dims, const AdaptiveOptions& a,
       FleetStatsOptions o, LogSink l)
      : store(s),
        prefix(std::move(p)),
        dimensions(std::move(dims)),
        window_seconds(a.window_seconds),
        slot_seconds(a.window_seconds / a.window_slots),
        lambda(std::log(2.0) / a.half_life_seconds),
        options(std::move(o)),
        log(std::move(l)),
        ttl_ms(static_cast<int64_t>(
            std::ceil((window_seconds + slot_seconds + options.extra_ttl_seconds) * 1000.0))),
        drift_bin_seconds(a.window_seconds / kSizeDriftBinsPerWindow),
        drift_prefix(
            Cat(prefix, ":d", static_cast<int64_t>(std::llround(drift_bin_seconds * 1000)))),
        drift_ttl_ms(static_cast<int64_t>(std::ceil(
            ((kSizeDriftBins + 1) * drift_bin_seconds + options.extra_ttl_seconds) * 1000.0))) {}

  FleetStore* const store;
  const std::string prefix;  // "<fingerprint prefix>:stats:<dims>:w<slot ms>"
  const std::vector<std::string> dimensions;
  const double window_seconds;
  const double slot_seconds;
  const double lambda;
  const FleetStatsOptions options;
  const LogSink log;
  const int64_t ttl_ms;
  // The drift's bins: their width, key prefix and expiry (six windows).
  const double drift_bin_seconds;
  const std::string drift_prefix;  // "<prefix>:d<bin ms>"
  const int64_t drift_ttl_ms;

  mutable Mutex mu;
  FleetStatsCounters counters ABSL_GUARDED_BY(mu);
  // Every local slot up to this one is pushed (or had no samples).
  int64_t pushed_through ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::min();
  bool store_failing ABSL_GUARDED_BY(mu) = false;  // logs once per outage
  // Every local drift bin up to this one is pushed (or had no samples).
  int64_t drift_pushed_through ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::min();

  void Log(LogLevel level, std::string_view message) const {
    if (log) {
      log(level, message);
    } else {
      StderrLogSink(level, message);
    }
  }
  std::string Key(int64_t slot) const { return Cat(prefix, ":", slot); }
  std::string DriftKey(int64_t bin) const { return Cat(drift_prefix, ":", bin); }
  int64_t SlotOf(double t) const { return static_cast<int64_t>(std::floor(t / slot_seconds)); }

  // One slot of the merged window: the fleet's bucket (replicas > 0: that
  // many pushed it) or this replica's own slot (replicas 0), weights
  // relative to the slot's start, `decay` to now.
  struct MergedSlot {
    int64_t slot;
    double start;
    double decay;
    double replicas;
    std::vector<std::vector<WeightedSize>> sizes;  // [dimension]
  };

  // kFleetTotal: the other replicas push at their own updates, so the
  // window's newest slots hold fewer replicas than the fleet has (this
  // replica alone in its own unpushed slots). Each slot newer than the
  // newest one with the most replicas (`complete`), and started within
  // fill_recent_seconds, gets the missing replicas' weight, estimated as
  // its own weight per replica, with the distribution of the complete
  // slots: the window weighs the recent traffic as one runtime serving the
  // whole fleet's would, without taking this replica's share for the
  // fleet's shape (a hash split gives replicas different sizes).
  void FillRecentSlots(double now, std::vector<MergedSlot>* slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (options.weighting != FleetWeighting::kFleetTotal || options.fill_recent_seconds <= 0) {
      return;
    }
    double fleet = 0;
    size_t complete = 0;
    for (size_t i = 0; i < slots->size(); ++i) {
      if ((*slots)[i].replicas >= fleet && (*slots)[i].replicas > 0) {
        fleet = (*slots)[i].replicas;
        complete = i;
      }
    }
    if (fleet <= 1) return;
    // The complete slots' distribution per dimension (decayed), normalized.
    std::vector<std::map<int64_t, double>> shape(dimensions.size());
    std::vector<double> shape_total(dimensions.size(), 0.0);
    for (size_t i = 0; i <= complete; ++i) {
      const MergedSlot& s = (*slots)[i];
      if (s.replicas < fleet) continue;
      for (size_t d = 0; d < dimensions.size(); ++d) {
        for (const WeightedSize& w : s.sizes[d]) {
          shape[d][w.size] += w.weight * s.decay;
          shape_total[d] += w.weight * s.decay;
        }
      }
    }
    for (size_t i = complete + 1; i < slots->size(); ++i) {
      MergedSlot& s = (*slots)[i];
      const double have = std::max(s.replicas, 1.0);
      if (have >= fleet || s.start < now - options.fill_recent_seconds) continue;
      bool filled = false;
      for (size_t d = 0; d < dimensions.size(); ++d) {
        if (shape_total[d] <= 0) continue;
        double own = 0;
        for (const WeightedSize& w : s.sizes[d]) own += w.weight;
        const double missing = own * (fleet / have - 1.0);
        if (missing <= 0) continue;
        std::map<int64_t, double> sizes;
        for (const WeightedSize& w : s.sizes[d]) sizes[w.size] += w.weight;
        for (const auto& [size, weight] : shape[d]) {
          sizes[size] += missing * weight / shape_total[d];
        }
        s.sizes[d].clear();
        for (const auto& [size, weight] : sizes) s.sizes[d].push_back({size, weight});
        filled = true;
      }
      if (filled) ++counters.slots_filled;
    }
  }

  void StoreFailed(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (!store_failing) {
      Log(LogLevel::kWarning,
          Cat("fleet statistics: ", internal::Message(s), "; planning from local statistics"));
    }
    store_failing = true;
  }

  // Per index (a slot, a drift bin), each dimension's entry (null where it
  // has none), from the per-dimension lists `member` of `stats`.
  template <typename Entry>
  std::map<int64_t, std::vector<const Entry*>> RowsByIndex(
      const WindowStats& stats, const std::vector<Entry> DimensionStats::*member,
      int64_t Entry::*index) const {
    std::map<int64_t, std::vector<const Entry*>> rows;
    for (size_t d = 0; d < dimensions.size(); ++d) {
      for (const Entry& e : stats.dimensions[d].*member) {
        std::vector<const Entry*>& row = rows[e.*index];
        row.resize(dimensions.size(), nullptr);
        row[d] = &e;
      }
    }
    return rows;
  }

  // Pushes every row after *through up to last_complete, oldest first, once
  // per replica (IncrementOnce with this replica's marker): "n" + 1 and
  // `fields(dimension, entry, &increments)`. Advances *through (to
  // last_complete when all went); on a store failure counts and logs it and
  // returns false, the rest left for the next update.
  template <typename Entry, typename Fields>
  bool PushRows(const std::map<int64_t, std::vector<const Entry*>>& rows, int64_t last_complete,
                int64_t* through, const std::function<std::string(int64_t)>& key_of, int64_t ttl,
                Fields&& fields, uint64_t* applied, uint64_t* duplicate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    for (auto it = rows.upper_bound(*through); it != rows.end() && it->first <= last_complete;
         ++it) {
      std::vector<FieldIncrement> increments;
      increments.push_back({"n", 1.0});
      for (size_t d = 0; d < it->second.size(); ++d) {
        if (it->second[d] != nullptr) fields(d, *it->second[d], &increments);
      }
      const std::string key = key_of(it->first);
      absl::StatusOr<bool> r =
          store->IncrementOnce(key, increments, Cat(key, ":r:", options.replica_id), ttl);
      if (!r.ok()) {
        ++counters.push_failures;
        StoreFailed(r.status());
        return false;
      }
      ++*(*r ? applied : duplicate);
      *through = it->first;
    }
    *through = std::max(*through, last_complete);
    return true;
  }

  // The buckets at `keys` in one pipelined read; nullopt (counted, logged)
  // when the store failed.
  std::optional<std::vector<std::optional<FleetHash>>> ReadBuckets(
      const std::vector<std::string>& keys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::StatusOr<std::vector<std::optional<FleetHash>>> read = store->GetHashes(keys);
    if (!read.ok() || read->size() != keys.size()) {
      ++counters.read_failures;
      StoreFailed(read.ok() ? absl::DataLossError("wrong number of replies") : read.status());
      return std::nullopt;
    }
    return *std::move(read);
  }

  void Merge(double now, WindowStats* stats) {
    MutexLock lock(&mu);
    if (stats->dimensions.size() != dimensions.size()) return;
    for (size_t d = 0; d < dimensions.size(); ++d) {
      if (stats->dimensions[d].name != dimensions[d]) return;  // not this runtime's statistics
    }
    // Local slots by index: per dimension its sizes.
    const std::map<int64_t, std::vector<const SlotSizes*>> local =
        RowsByIndex(*stats, &DimensionStats::slot_sizes, &SlotSizes::slot);
    // 1. Push the completed slots not pushed yet, oldest first.
    PushRows(
        local, SlotOf(now - options.push_lag_seconds) - 1, &pushed_through,
        [this](int64_t slot) { return Key(slot); }, ttl_ms,
        [](size_t d, const SlotSizes& slot, std::vector<FieldIncrement>* out) {
          for (const WeightedSize& w : slot.sizes) out->push_back({Cat(d, ":", w.size), w.weight});
        },
        &counters.slots_pushed, &counters.slots_duplicate);

    // 2. Read the window's buckets.
    const int64_t first = SlotOf(now - window_seconds);
    const int64_t last = SlotOf(now);
    std::vector<std::string> keys;
    for (int64_t k = first; k <= last; ++k) keys.push_back(Key(k));
    const std::optional<std::vector<std::optional<FleetHash>>> read = ReadBuckets(keys);
    if (!read.has_value()) {
      ++counters.local_only;
      return;
    }
    if (store_failing) {
      Log(LogLevel::kInfo, "fleet statistics: store reachable again; merging the fleet's window");
    }
    store_failing = false;

    // 3. Merge: fleet buckets, and local slots the fleet does not hold (not
    // pushed yet, or a bucket lost or rejected); then the recent slots fewer
    // replicas pushed than the fleet's newest complete one are filled.
    std::vector<MergedSlot> slots;
    const double window_start = now - window_seconds;
    for (int64_t k = first; k <= last; ++k) {
      const double start = static_cast<double>(k) * slot_seconds;
      if (start > now || start + slot_seconds <= window_start) continue;
      MergedSlot slot{k, start, std::exp(-lambda * (now - start)), 0.0, {}};
      const std::optional<FleetHash>& raw = (*read)[static_cast<size_t>(k - first)];
      if (raw.has_value() && k <= pushed_through) {
        absl::StatusOr<FleetStatsBucket> bucket =
            DecodeFleetStatsBucket(*raw, static_cast<int>(dimensions.size()));
        if (!bucket.ok()) {
          ++counters.buckets_rejected;
          Log(LogLevel::kError, Cat("fleet statistics: bucket ", Key(k),
                                    " rejected (left out): ", internal::Message(bucket.status())));
        } else {
          slot.replicas = bucket->replicas;
          slot.sizes = std::move(bucket->sizes);
        }
      }
      if (slot.replicas == 0) {
        auto mine = local.find(k);
        if (mine == local.end()) continue;
        slot.sizes.resize(dimensions.size());
        for (size_t d = 0; d < mine->second.size(); ++d) {
          if (mine->second[d] != nullptr) slot.sizes[d] = mine->second[d]->sizes;
        }
      }
      slots.push_back(std::move(slot));
    }
    bool any_fleet = false;
    double newest_replicas = 0;
    for (const MergedSlot& slot : slots) {
      if (slot.replicas == 0) continue;
      any_fleet = true;
      newest_replicas = slot.replicas;
    }
    if (any_fleet) FillRecentSlots(now, &slots);
    std::vector<std::map<int64_t, double>> merged(dimensions.size());
    double oldest = std::numeric_limits<double>::infinity();
    for (const MergedSlot& slot : slots) {
      const double scale = options.weighting == FleetWeighting::kPerReplicaMean && slot.replicas > 0
                               ? 1.0 / slot.replicas
                               : 1.0;
      for (size_t d = 0; d < dimensions.size(); ++d) {
        for (const WeightedSize& w : slot.sizes[d]) {
          merged[d][w.size] += w.weight * slot.decay * scale;
        }
      }
      oldest = std::min(oldest, slot.start);
    }
    counters.fleet_replicas_seen = newest_replicas;
    if (!any_fleet) {
      ++counters.local_only;
      // Nothing shared yet (the fleet's start: no complete slot pushed):
      // the local window, scaled to the fleet's size when it is known.
      if (options.weighting == FleetWeighting::kFleetTotal && options.expected_replicas > 1) {
        for (DimensionStats& ds : stats->dimensions) {
          for (WeightedSize& w : ds.sizes) w.weight *= options.expected_replicas;
        }
      }
      MergeDrift(now, stats);
      return;
    }
    ++counters.merges;
    for (size_t d = 0; d < dimensions.size(); ++d) {
      DimensionStats& ds = stats->dimensions[d];
      ds.sizes.clear();
      for (const auto& [size, weight] : merged[d]) ds.sizes.push_back({size, weight});
      const double fleet_observed = std::clamp(now - oldest, 0.0, window_seconds);
      ds.observed_seconds = std::max(ds.observed_seconds, fleet_observed);
      MarkFleetTraffic(&ds);
    }
    MergeDrift(now, stats);
  }

  // Step 3 (fleet_stats.h): push the completed drift bins, read the last
  // kSizeDriftBins, and re-estimate each dimension's drift from the fleet's
  // bins (this replica's own where the fleet has none yet). On a store
  // failure the local estimate stays.
  void MergeDrift(double now, WindowStats* stats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto bin_of = [&](double t) { return static_cast<int64_t>(std::floor(t / drift_bin_seconds)); };
    // Local bins by index: per dimension its counts.
    const std::map<int64_t, std::vector<const DriftBinCounts*>> local =
        RowsByIndex(*stats, &DimensionStats::drift_bins, &DriftBinCounts::bin);
    PushRows(
        local, bin_of(now - options.push_lag_seconds) - 1, &drift_pushed_through,
        [this](int64_t bin) { return DriftKey(bin); }, drift_ttl_ms,
        [](size_t d, const DriftBinCounts& bin, std::vector<FieldIncrement>* out) {
          for (const auto& [k, c] : bin.counts) {
            out->push_back({Cat(d, ":", k), static_cast<double>(c)});
          }
        },
        &counters.drift_bins_pushed, &counters.drift_bins_pushed);

    const int64_t newest = bin_of(now);
    const int64_t first = newest - kSizeDriftBins + 1;
    std::vector<std::string> keys;
    for (int64_t b = first; b <= newest; ++b) keys.push_back(DriftKey(b));
    const std::optional<std::vector<std::optional<FleetHash>>> read = ReadBuckets(keys);
    if (!read.has_value()) return;
    std::vector<std::vector<DriftBinCounts>> merged(dimensions.size());
    bool any_fleet = false;
    for (int64_t b = first; b <= newest; ++b) {
      const std::optional<FleetHash>& raw = (*read)[static_cast<size_t>(b - first)];
      bool from_fleet = false;
      if (raw.has_value() && b <= drift_pushed_through) {
        absl::StatusOr<FleetDriftBucket> bucket =
            DecodeFleetDriftBucket(*raw, static_cast<int>(dimensions.size()));
        if (!bucket.ok()) {
          ++counters.buckets_rejected;
          Log(LogLevel::kError, Cat("fleet statistics: drift bin ", DriftKey(b),
                                    " rejected (left out): ", internal::Message(bucket.status())));
        } else {
          for (size_t d = 0; d < dimensions.size(); ++d) {
            merged[d].push_back({b, std::move(bucket->counts[d])});
          }
          from_fleet = any_fleet = true;
        }
      }
      if (from_fleet) continue;
      auto mine = local.find(b);
      if (mine == local.end()) continue;
      for (size_t d = 0; d < mine->second.size(); ++d) {
        if (mine->second[d] != nullptr) merged[d].push_back(*mine->second[d]);
      }
    }
    if (!any_fleet) return;
    ++counters.drift_merges;
    for (size_t d = 0; d < dimensions.size(); ++d) {
      DimensionStats& ds = stats->dimensions[d];
      const SizeDriftEstimate e = EstimateSizeDrift(merged[d], drift_bin_seconds, now);
      ds.size_drift_per_second = e.per_second;
      ds.size_drift_agreement = e.agreement;
      ds.size_drift_bins = e.bins;
      ds.drift_bins = std::move(merged[d]);
    }
  }

  // A gear this replica saw no request of in the window, whose range the
  // fleet's window has traffic in (sizes are capped at the gear that
  // served them), carries the fleet's traffic (GearStats::fleet_traffic).
  static void MarkFleetTraffic(DimensionStats* ds) {
    size_t s = 0;
    int64_t below = 0;
    for (GearStats& g : ds->gears) {
      bool used = false;
      while (s < ds->sizes.size() && ds->sizes[s].size <= g.gear) {
        used |= ds->sizes[s].size > below && ds->sizes[s].weight > 0;
        ++s;
      }
      below = g.gear;
      g.fleet_traffic = used && g.sample_count == 0;
    }
  }
};

absl::StatusOr<std::unique_ptr<FleetStatsSync>> FleetStatsSync::Create(
    FleetStore* store, const FleetFingerprint& fingerprint, std::vector<std::string> dimensions,
    const AdaptiveOptions& adaptive, FleetStatsOptions options, LogSink log) {
  if (store == nullptr) return internal::InvalidField("store", "null", "a FleetStore");
  if (auto s = ValidateFleetFingerprint(fingerprint); !s.ok()) return s;
  if (auto s = ValidateAdaptiveOptions(adaptive); !s.ok()) return s;
  if (!ValidReplicaId(options.replica_id)) {
    return internal::InvalidField("fleet.replica_id",
                                  Cat("\"", options.replica_id.substr(0, 80), "\""),
                                  "1..64 characters of A-Z a-z 0-9 . _ -");
  }
  if (!(options.push_lag_seconds >= 0 && options.push_lag_seconds <= adaptive.window_seconds)) {
    return internal::InvalidFieldValue(
        "fleet.push_lag_seconds", options.push_lag_seconds,
        Cat("seconds in [0, window_seconds = ", adaptive.window_seconds, "]"));
  }
  if (!(options.extra_ttl_seconds > 0 && options.extra_ttl_seconds <= 86400)) {
    return internal::InvalidFieldValue("fleet.extra_ttl_seconds", options.extra_ttl_seconds,
                                       "seconds in (0, 86400]");
  }
  if (!(options.fill_recent_seconds >= 0 &&
        options.fill_recent_seconds <= adaptive.window_seconds)) {
    return internal::InvalidFieldValue(
        "fleet.fill_recent_seconds", options.fill_recent_seconds,
        Cat("seconds in [0, window_seconds = ", adaptive.window_seconds, "] (0: off)"));
  }
  if (!(options.expected_replicas >= 0 && options.expected_replicas <= kMaxReplicas)) {
    return internal::InvalidFieldValue("fleet.expected_replicas", options.expected_replicas,
                                       "replicas in [0, 1e6] (0: unknown)");
  }
  if (dimensions.empty() || dimensions.size() > 64) {
    return internal::InvalidField("dimensions", Cat(dimensions.size(), " names"), "1..64");
  }
  std::string names;
  for (const std::string& n : dimensions) names += Cat(n.size(), ":", n, ";");
  // The dimension names and the slot width are part of the bucket key:
  // replicas configured differently never add into one bucket.
  FleetFingerprint named = fingerprint;
  named.model_id = Cat(fingerprint.model_id, "|", names);
  const std::string dims_hash = FleetKeyPrefix(named).substr(FleetKeyPrefix(named).size() - 8);
  const double slot_ms = adaptive.window_seconds / adaptive.window_slots * 1000.0;
  std::string prefix = Cat(FleetKeyPrefix(fingerprint), ":stats:", dims_hash, ":w",
                           static_cast<int64_t>(std::llround(slot_ms)));
  return std::unique_ptr<FleetStatsSync>(
      new FleetStatsSync(std::make_unique<Impl>(store, std::move(prefix), std::move(dimensions),
                                                adaptive, std::move(options), std::move(log))));
}

FleetStatsSync::FleetStatsSync(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FleetStatsSync::~FleetStatsSync() = default;

void FleetStatsSync::Merge(double now, WindowStats* stats) { impl_->Merge(now, stats); }

std::function<void(double, WindowStats*)> FleetStatsSync::Hook() {
  return [this](double now, WindowStats* stats) { Merge(now, stats); };
}

FleetStatsCounters FleetStatsSync::counters() const {
  MutexLock lock(&impl_->mu);
  return impl_->counters;
}

std::string FleetStatsSync::BucketKey(int64_t slot) const { return impl_->Key(slot); }
std::string FleetStatsSync::DriftBucketKey(int64_t bin) const { return impl_->DriftKey(bin); }

}  // namespace gearbox
