// Fingerprint, value decoders, the in-process stand-in and the outage wrapper.
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "gearbox/fleet.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"
#include "src/fleet/ttl.h"

namespace gearbox {

using internal::Cat;

namespace {

constexpr size_t kMaxFingerprintField = 256;

absl::Status CheckFingerprintField(std::string_view name, std::string_view value, bool required) {
  if (required && value.empty()) {
    return internal::InvalidField(Cat("fleet.", name), "\"\"", "a non-empty string is required");
  }
  if (value.size() > kMaxFingerprintField) {
    return internal::InvalidField(Cat("fleet.", name), Cat(value.size(), " characters"),
                                  Cat("at most ", kMaxFingerprintField));
  }
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) {
      return internal::InvalidField(
          Cat("fleet.", name),
          Cat("a string with character code ", static_cast<int>(static_cast<unsigned char>(c))),
          "printable ASCII only");
    }
  }
  return absl::OkStatus();
}

// FNV-1a over the bytes from two offset bases, each finished with a
// splitmix64 avalanche: 128 bits, stable across platforms and builds.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t Fnv(std::string_view s, uint64_t basis) {
  uint64_t h = basis;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return Mix(h);
}

}  // namespace

absl::Status ValidateFleetFingerprint(const FleetFingerprint& f) {
  if (auto s = CheckFingerprintField("model_id", f.model_id, true); !s.ok()) return s;
  if (auto s = CheckFingerprintField("backend", f.backend, false); !s.ok()) return s;
  if (auto s = CheckFingerprintField("backend_version", f.backend_version, false); !s.ok())
    return s;
  if (auto s = CheckFingerprintField("arch", f.arch, false); !s.ok()) return s;
  if (auto s = CheckFingerprintField("dtype", f.dtype, false); !s.ok()) return s;
  if (f.format_version < 1) {
    return internal::InvalidFieldValue("fleet.format_version", f.format_version, "an integer >= 1");
  }
  return absl::OkStatus();
}

std::string FleetKeyPrefix(const FleetFingerprint& f) {
  std::string canonical;
  for (const std::string* field :
       {&f.model_id, &f.backend, &f.backend_version, &f.arch, &f.dtype}) {
    canonical += Cat(field->size(), ":", *field, ";");
  }
  canonical += Cat(f.format_version);
  return fmt::format("gearbox:f{}:{:016x}{:016x}", f.format_version,
                     Fnv(canonical, 14695981039346656037ull),
                     Fnv(canonical, 0x9e3779b97f4a7c15ull));
}

absl::StatusOr<uint64_t> DecodeFleetVersion(std::string_view text) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  if (text.empty() || text.size() > 19 || text[0] < '0' || text[0] > '9') {
    return absl::DataLossError(Cat("fleet version: ", text.size(), "-byte value is not allowed; ",
                                   "decimal digits for 1..2^63-1"));
  }
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || v == 0 ||
      v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::DataLossError(
        Cat("fleet version: value is not allowed; decimal digits for 1..2^63-1"));
  }
  return v;
}

absl::StatusOr<double> DecodeFleetFloat(std::string_view text) {
  if (text.empty() || text.size() > 64) {
    return absl::DataLossError(
        Cat("fleet counter: ", text.size(), "-byte value is not allowed; a finite decimal number"));
  }
  double x = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, x);
  if (ec != std::errc() || ptr != end || !std::isfinite(x) || std::fabs(x) > 1e18) {
    return absl::DataLossError(
        "fleet counter: value is not allowed; a finite decimal number with |x| <= 1e18");
  }
  return x;
}

absl::Status CheckFleetHash(const FleetHash& hash, const FleetValueLimits& limits) {
  if (hash.size() > limits.max_hash_fields) {
    return absl::DataLossError(Cat("fleet hash: ", hash.size(), " fields is not allowed; at most ",
                                   limits.max_hash_fields));
  }
  size_t bytes = 0;
  for (const auto& [field, value] : hash) bytes += field.size() + value.size();
  if (bytes > limits.max_value_bytes) {
    return absl::DataLossError(
        Cat("fleet hash: ", bytes, " bytes is not allowed; at most ", limits.max_value_bytes));
  }
  return absl::OkStatus();
}

// ---- InProcessFleetStore ----

// One lock over the key space; expiry is checked lazily on every access, on
// the clock's now (as Redis's passive expiry; nothing runs in the background).
class InProcessFleetStore::Impl {
 public:
  struct Entry {
    bool is_hash = false;
    std::map<std::string, std::string, std::less<>> hash;
    std::string str;
    double expires_at = std::numeric_limits<double>::infinity();
  };

  Impl(Clock* c, FleetValueLimits l)
      : clock(c != nullptr ? c : SystemClock::Default()), limits(l) {}

  Clock* const clock;
  const FleetValueLimits limits;
  // A subscriber: its callback runs under its own mutex (so destroying the
  // subscription waits for a delivery in progress), never under `mu`.
  struct Subscriber {
    Mutex mu;
    bool alive ABSL_GUARDED_BY(mu) = true;
    std::function<void(std::string_view)> on_message;
  };

  mutable Mutex mu;
  std::map<std::string, Entry, std::less<>> data ABSL_GUARDED_BY(mu);
  std::multimap<std::string, std::shared_ptr<Subscriber>, std::less<>> subscribers
      ABSL_GUARDED_BY(mu);
  bool available ABSL_GUARDED_BY(mu) = true;
  FleetStoreCounters counters ABSL_GUARDED_BY(mu);

  // The live entry at `key`, or null (an expired one is erased).
  Entry* Find(std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = data.find(key);
    if (it == data.end()) return nullptr;
    if (clock->NowSeconds() >= it->second.expires_at) {
      data.erase(it);
      return nullptr;
    }
    return &it->second;
  }
  double ExpiryOf(int64_t ttl_ms) const {
    return clock->NowSeconds() + static_cast<double>(ttl_ms) / 1000.0;
  }
  absl::Status Begin(size_t bytes_sent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++counters.calls;
    counters.bytes_sent += bytes_sent;
    if (!available) {
      ++counters.failures;
      return absl::UnavailableError("fleet store in-process: unavailable (simulated outage)");
    }
    return absl::OkStatus();
  }
  absl::Status WrongType(std::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++counters.failures;
    return absl::FailedPreconditionError(
        Cat("fleet store in-process: key \"", key, "\" holds the wrong kind of value"));
  }
};

namespace {}  // namespace

InProcessFleetStore::InProcessFleetStore(Clock* clock, FleetValueLimits limits)
    : impl_(std::make_unique<Impl>(clock, limits)) {}
InProcessFleetStore::~InProcessFleetStore() = default;

absl::StatusOr<bool> InProcessFleetStore::IncrementOnce(std::string_view key,
                                                        std::span<const FieldIncrement> increments,
                                                        std::string_view once_key, int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, false); !s.ok()) return s;
  size_t bytes = key.size() + once_key.size();
  for (const FieldIncrement& inc : increments) bytes += inc.field.size() + 24;
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(bytes); !s.ok()) return s;
  if (impl_->Find(once_key) != nullptr) return false;
  Impl::Entry* entry = impl_->Find(key);
  if (entry != nullptr && !entry->is_hash) return impl_->WrongType(key);
  // Validate every existing value first: Redis's script would fail midway
  // on a non-float; here nothing is applied.
  if (entry != nullptr) {
    for (const FieldIncrement& inc : increments) {
      auto it = entry->hash.find(inc.field);
      if (it != entry->hash.end() && !DecodeFleetFloat(it->second).ok()) {
        ++impl_->counters.failures;
        return absl::FailedPreconditionError(
            Cat("fleet store in-process: hash value is not a float (key \"", key, "\", field \"",
                inc.field, "\")"));
      }
    }
  }
  Impl::Entry marker;
  marker.str.push_back('1');
  marker.expires_at = impl_->ExpiryOf(ttl_ms);
  impl_->data.insert_or_assign(std::string(once_key), std::move(marker));
  Impl::Entry& hash = impl_->data[std::string(key)];
  hash.is_hash = true;
  for (const FieldIncrement& inc : increments) {
    std::string& value = hash.hash[inc.field];
    const double before = value.empty() ? 0.0 : *DecodeFleetFloat(value);
    value = fmt::format("{}", before + inc.delta);
  }
  hash.expires_at = impl_->ExpiryOf(ttl_ms);
  return true;
}

absl::StatusOr<std::vector<std::optional<FleetHash>>> InProcessFleetStore::GetHashes(
    std::span<const std::string> keys) {
  size_t bytes = 0;
  for (const std::string& k : keys) bytes += k.size();
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(bytes); !s.ok()) return s;
  std::vector<std::optional<FleetHash>> out;
  for (const std::string& k : keys) {
    Impl::Entry* entry = impl_->Find(k);
    if (entry == nullptr) {
      out.emplace_back();
      continue;
    }
    if (!entry->is_hash) return impl_->WrongType(k);
    FleetHash h(entry->hash.begin(), entry->hash.end());
    for (const auto& [f, v] : h) impl_->counters.bytes_received += f.size() + v.size();
    if (auto s = CheckFleetHash(h, impl_->limits); !s.ok()) {
      ++impl_->counters.rejected_values;
      return internal::WithContext(s, Cat("key \"", k, "\""));
    }
    out.emplace_back(std::move(h));
  }
  return out;
}

absl::StatusOr<VersionedValue> InProcessFleetStore::GetVersioned(std::string_view key) {
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(key.size()); !s.ok()) return s;
  Impl::Entry* entry = impl_->Find(key);
  if (entry == nullptr) return VersionedValue{};
  if (!entry->is_hash) return impl_->WrongType(key);
  auto v = entry->hash.find("v");
  auto d = entry->hash.find("d");
  if (v == entry->hash.end() || d == entry->hash.end()) {
    ++impl_->counters.rejected_values;
    return absl::DataLossError(Cat("fleet value at \"", key, "\": no version or payload field"));
  }
  impl_->counters.bytes_received += v->second.size() + d->second.size();
  absl::StatusOr<uint64_t> version = DecodeFleetVersion(v->second);
  if (!version.ok()) {
    ++impl_->counters.rejected_values;
    return internal::WithContext(version.status(), Cat("key \"", key, "\""));
  }
  if (d->second.size() > impl_->limits.max_value_bytes) {
    ++impl_->counters.rejected_values;
    return absl::DataLossError(Cat("fleet value at \"", key, "\": ", d->second.size(),
                                   " bytes is not allowed; at most ",
                                   impl_->limits.max_value_bytes));
  }
  return VersionedValue{*version, d->second};
}

absl::StatusOr<bool> InProcessFleetStore::CompareAndSet(std::string_view key,
                                                        uint64_t expected_version,
                                                        std::string_view payload, int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, true); !s.ok()) return s;
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(key.size() + payload.size()); !s.ok()) return s;
  Impl::Entry* entry = impl_->Find(key);
  if (entry != nullptr) {
    if (!entry->is_hash) return impl_->WrongType(key);
    // Compared as text, as the Redis script does (a malformed version never matches).
    auto v = entry->hash.find("v");
    if (v == entry->hash.end() || v->second != Cat(expected_version)) return false;
  } else if (expected_version != 0) {
    return false;
  }
  Impl::Entry& e = impl_->data[std::string(key)];
  e = Impl::Entry{};
  e.is_hash = true;
  e.hash["v"] = Cat(expected_version + 1);
  e.hash["d"] = std::string(payload);
  if (ttl_ms > 0) e.expires_at = impl_->ExpiryOf(ttl_ms);
  return true;
}

absl::StatusOr<bool> InProcessFleetStore::AcquireLease(std::string_view key, std::string_view owner,
                                                       int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, false); !s.ok()) return s;
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(key.size() + owner.size()); !s.ok()) return s;
  Impl::Entry* entry = impl_->Find(key);
  if (entry != nullptr) {
    if (entry->is_hash) return impl_->WrongType(key);
    if (entry->str != owner) return false;
    entry->expires_at = impl_->ExpiryOf(ttl_ms);
    return true;
  }
  Impl::Entry& e = impl_->data[std::string(key)];
  e.str = std::string(owner);
  e.expires_at = impl_->ExpiryOf(ttl_ms);
  return true;
}

absl::Status InProcessFleetStore::ReleaseLease(std::string_view key, std::string_view owner) {
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(key.size() + owner.size()); !s.ok()) return s;
  Impl::Entry* entry = impl_->Find(key);
  if (entry != nullptr && entry->is_hash) return impl_->WrongType(key);
  if (entry != nullptr && entry->str == owner) {
    impl_->data.erase(impl_->data.find(key));
  }
  return absl::OkStatus();
}

absl::Status InProcessFleetStore::PutStrings(
    std::span<const std::pair<std::string, std::string>> entries, int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, false); !s.ok()) return s;
  size_t bytes = 0;
  for (const auto& [k, v] : entries) bytes += k.size() + v.size();
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(bytes); !s.ok()) return s;
  for (const auto& [k, v] : entries) {
    Impl::Entry e;
    e.str = v;
    e.expires_at = impl_->ExpiryOf(ttl_ms);
    impl_->data.insert_or_assign(k, std::move(e));  // SET replaces a value of any type
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::optional<std::string>>> InProcessFleetStore::GetStrings(
    std::span<const std::string> keys) {
  size_t bytes = 0;
  for (const std::string& k : keys) bytes += k.size();
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Begin(bytes); !s.ok()) return s;
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) {
    Impl::Entry* entry = impl_->Find(k);
    if (entry == nullptr || entry->is_hash) {  // MGET: nil for another type
      out.emplace_back();
      continue;
    }
    impl_->counters.bytes_received += entry->str.size();
    if (entry->str.size() > impl_->limits.max_value_bytes) {
      ++impl_->counters.rejected_values;
      return absl::DataLossError(Cat("fleet value at \"", k, "\": ", entry->str.size(),
                                     " bytes is not allowed; at most ",
                                     impl_->limits.max_value_bytes));
    }
    out.emplace_back(entry->str);
  }
  return out;
}

FleetStoreCounters InProcessFleetStore::counters() const {
  MutexLock lock(&impl_->mu);
  return impl_->counters;
}

absl::StatusOr<int64_t> InProcessFleetStore::Publish(std::string_view channel,
                                                     std::string_view message) {
  std::vector<std::shared_ptr<Impl::Subscriber>> to;
  {
    MutexLock lock(&impl_->mu);
    if (auto s = impl_->Begin(channel.size() + message.size()); !s.ok()) return s;
    auto [from, end] = impl_->subscribers.equal_range(channel);
    for (auto it = from; it != end; ++it) to.push_back(it->second);
  }
  int64_t delivered = 0;
  for (const auto& sub : to) {
    MutexLock lock(&sub->mu);
    if (!sub->alive) continue;
    sub->on_message(message);
    ++delivered;
  }
  return delivered;
}

namespace {

class InProcessSubscription final : public FleetSubscription {
 public:
  explicit InProcessSubscription(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  ~InProcessSubscription() override { cancel_(); }

 private:
  std::function<void()> cancel_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<FleetSubscription>> InProcessFleetStore::Subscribe(
    std::string_view channel, std::function<void(std::string_view message)> on_message) {
  if (!on_message) return internal::InvalidField("on_message", "empty", "a callback");
  auto sub = std::make_shared<Impl::Subscriber>();
  sub->on_message = std::move(on_message);
  {
    MutexLock lock(&impl_->mu);
    impl_->subscribers.emplace(std::string(channel), sub);
  }
  Impl* impl = impl_.get();
  return std::unique_ptr<FleetSubscription>(new InProcessSubscription([impl, sub] {
    {
      MutexLock lock(&sub->mu);  // waits for a delivery in progress
      sub->alive = false;
    }
    MutexLock lock(&impl->mu);
    for (auto it = impl->subscribers.begin(); it != impl->subscribers.end(); ++it) {
      if (it->second == sub) {
        impl->subscribers.erase(it);
        break;
      }
    }
  }));
}

void InProcessFleetStore::SetAvailable(bool available) {
  MutexLock lock(&impl_->mu);
  impl_->available = available;
}

void InProcessFleetStore::PutRawHashField(std::string_view key, std::string_view field,
                                          std::string_view value) {
  MutexLock lock(&impl_->mu);
  Impl::Entry& e = impl_->data[std::string(key)];
  e.is_hash = true;
  e.hash[std::string(field)] = std::string(value);
}

void InProcessFleetStore::PutRawVersioned(std::string_view key, std::string_view version,
                                          std::string_view payload) {
  MutexLock lock(&impl_->mu);
  Impl::Entry& e = impl_->data[std::string(key)];
  e = Impl::Entry{};
  e.is_hash = true;
  e.hash["v"] = std::string(version);
  e.hash["d"] = std::string(payload);
}

void InProcessFleetStore::PutRawString(std::string_view key, std::string_view value) {
  MutexLock lock(&impl_->mu);
  Impl::Entry& e = impl_->data[std::string(key)];
  e = Impl::Entry{};
  e.str = std::string(value);
}

size_t InProcessFleetStore::live_keys() const {
  MutexLock lock(&impl_->mu);
  const double now = impl_->clock->NowSeconds();
  size_t n = 0;
  for (const auto& [k, e] : impl_->data) n += now < e.expires_at ? 1 : 0;
  return n;
}

// ---- OutageFleetStore ----

absl::Status OutageFleetStore::Down() const {
  if (!down_ || !down_()) return absl::OkStatus();
  return absl::UnavailableError(Cat("fleet store ", inner_->Describe(), ": down (outage)"));
}

#define GEARBOX_OUTAGE_GUARD()                        \
  if (absl::Status down = Down(); !down.ok()) {       \
    refused_.fetch_add(1, std::memory_order_relaxed); \
    return down;                                      \
  }

absl::StatusOr<bool> OutageFleetStore::IncrementOnce(std::string_view key,
                                                     std::span<const FieldIncrement> increments,
                                                     std::string_view once_key, int64_t ttl_ms) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->IncrementOnce(key, increments, once_key, ttl_ms);
}
absl::StatusOr<std::vector<std::optional<FleetHash>>> OutageFleetStore::GetHashes(
    std::span<const std::string> keys) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->GetHashes(keys);
}
absl::StatusOr<VersionedValue> OutageFleetStore::GetVersioned(std::string_view key) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->GetVersioned(key);
}
absl::StatusOr<bool> OutageFleetStore::CompareAndSet(std::string_view key,
                                                     uint64_t expected_version,
                                                     std::string_view payload, int64_t ttl_ms) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->CompareAndSet(key, expected_version, payload, ttl_ms);
}
absl::StatusOr<bool> OutageFleetStore::AcquireLease(std::string_view key, std::string_view owner,
                                                    int64_t ttl_ms) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->AcquireLease(key, owner, ttl_ms);
}
absl::Status OutageFleetStore::ReleaseLease(std::string_view key, std::string_view owner) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->ReleaseLease(key, owner);
}
absl::Status OutageFleetStore::PutStrings(
    std::span<const std::pair<std::string, std::string>> entries, int64_t ttl_ms) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->PutStrings(entries, ttl_ms);
}
absl::StatusOr<int64_t> OutageFleetStore::Publish(std::string_view channel,
                                                  std::string_view message) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->Publish(channel, message);
}
absl::StatusOr<std::unique_ptr<FleetSubscription>> OutageFleetStore::Subscribe(
    std::string_view channel, std::function<void(std::string_view message)> on_message) {
  // Subscribing is local; while down, messages are dropped (a dead server delivers none).
  std::function<bool()> down = down_;
  return inner_->Subscribe(channel, [down, on_message](std::string_view m) {
    if (!down || !down()) on_message(m);
  });
}
absl::StatusOr<std::vector<std::optional<std::string>>> OutageFleetStore::GetStrings(
    std::span<const std::string> keys) {
  GEARBOX_OUTAGE_GUARD();
  return inner_->GetStrings(keys);
}
#undef GEARBOX_OUTAGE_GUARD

FleetStoreCounters OutageFleetStore::counters() const {
  FleetStoreCounters c = inner_->counters();
  // A refused call costs nothing on the wire; it is counted as a failed one.
  const uint64_t refused = refused_.load(std::memory_order_relaxed);
  c.calls += refused;
  c.failures += refused;
  return c;
}

absl::StatusOr<std::unique_ptr<FleetStore>> OpenFleetStore(std::string_view url, Clock* clock,
                                                           LogSink log) {
  if (url.empty() || url == "in-process") {
    return std::unique_ptr<FleetStore>(std::make_unique<InProcessFleetStore>(clock));
  }
  RedisFleetStoreOptions o;
  o.url = std::string(url);
  o.clock = clock;
  o.log = std::move(log);
  auto store = RedisFleetStore::Create(std::move(o));
  if (!store.ok()) return store.status();
  return std::unique_ptr<FleetStore>(*std::move(store));
}

}  // namespace gearbox
