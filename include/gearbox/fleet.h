// Fleet: what replicas of one model share through a store (docs/FLEET.md).
//
// FleetStore is the small set of operations the fleet needs; two
// implementations: RedisFleetStore (hiredis, synchronous, short timeouts, a
// circuit breaker) and InProcessFleetStore (the documented stand-in with the
// same semantics, expiry on an injected clock). Only the update path talks to
// a store; nothing on the request path may call it.
//
// Every key lives under a prefix derived from a FleetFingerprint (model,
// backend and its version, architecture, dtype, gearbox's fleet format
// version): replicas whose artifacts are not compatible never see each
// other's keys (a mismatch is a miss).
#ifndef GEARBOX_FLEET_H_
#define GEARBOX_FLEET_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gearbox/clock.h"
#include "gearbox/export.h"
#include "gearbox/log.h"

namespace gearbox {

// Bumped whenever a key layout or value encoding changes: replicas of
// different formats then use different prefixes.
inline constexpr int kFleetFormatVersion = 1;

// What makes compiled artifacts and statistics compatible between replicas.
struct FleetFingerprint {
  std::string model_id;         // required: a hash or name the user provides for the model
  std::string backend;          // e.g. "onednn", "cuda", "simulated"
  std::string backend_version;  // e.g. "2.6"
  std::string arch;             // CPU/GPU architecture, e.g. "x86_64", "sm_90"
  std::string dtype;            // e.g. "float32"
  int format_version = kFleetFormatVersion;
};
// Each field: at most 256 printable ASCII characters (model_id non-empty).
GEARBOX_EXPORT absl::Status ValidateFleetFingerprint(const FleetFingerprint& fingerprint);
// "gearbox:f<format>:<32 hex digits>", a 128-bit hash of every field
// (length-prefixed, so no two field lists hash the same text).
GEARBOX_EXPORT std::string FleetKeyPrefix(const FleetFingerprint& fingerprint);

// A hash's fields, as the store returns them (order unspecified).
using FleetHash = std::vector<std::pair<std::string, std::string>>;

struct FieldIncrement {
  std::string field;
  double delta = 0.0;
};

// A value with a version: 0 means absent (the first CompareAndSet expects 0).
struct VersionedValue {
  uint64_t version = 0;
  std::string payload;
};

// Calls and bytes a store exchanged (bytes: command arguments sent and reply
// payloads received, as the client counts them).
struct FleetStoreCounters {
  uint64_t calls = 0;     // round trips attempted (a pipeline counts once)
  uint64_t failures = 0;  // ... that failed (timeout, connection, error reply)
  uint64_t skipped = 0;   // calls refused at once by an open circuit breaker
  uint64_t connects = 0;  // connections established
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t rejected_values = 0;  // values read that failed validation (size, schema)
};

// Limits on what a store accepts from a read (a hostile value is an error).
struct FleetValueLimits {
  size_t max_value_bytes = 1 << 20;  // bytes of one string or one hash's fields and values
  size_t max_hash_fields = 65536;    // fields of one hash
};

// Thread-safety: every implementation is safe to call from any thread; calls
// serialize on the store's own lock (one connection). Keys are used as given
// (callers prefix them with FleetKeyPrefix). Every call either succeeds or
// returns a status (kUnavailable: the store cannot be reached or the breaker
// is open; kDataLoss: a value failed validation); none throws.
// A subscription to a channel (FleetStore::Subscribe): messages are
// delivered until it is destroyed; destroying it waits for a delivery in
// progress (so never destroy it from its own callback).
class GEARBOX_EXPORT FleetSubscription {
 public:
  virtual ~FleetSubscription() = default;
};

class GEARBOX_EXPORT FleetStore {
 public:
  virtual ~FleetStore() = default;

  // Once per `once_key`: adds each delta to its field of hash `key` (floats,
  // commutative) and sets the hash's expiry to ttl_ms, all atomically; the
  // marker `once_key` lives ttl_ms too. Returns true when applied, false when
  // `once_key` was already there (a duplicated push: nothing changes).
  virtual absl::StatusOr<bool> IncrementOnce(std::string_view key,
                                             std::span<const FieldIncrement> increments,
                                             std::string_view once_key, int64_t ttl_ms) = 0;
  // Several hashes in one round trip; nullopt for a missing (or expired) key.
  virtual absl::StatusOr<std::vector<std::optional<FleetHash>>> GetHashes(
      std::span<const std::string> keys) = 0;
  // The versioned value at `key` (version 0 and empty payload when absent).
  virtual absl::StatusOr<VersionedValue> GetVersioned(std::string_view key) = 0;
  // Writes `payload` as version expected_version + 1 if the stored version is
  // `expected_version` (0: absent), atomically; ttl_ms > 0 sets an expiry.
  // Returns false (nothing written) when the version differs.
  virtual absl::StatusOr<bool> CompareAndSet(std::string_view key, uint64_t expected_version,
                                             std::string_view payload, int64_t ttl_ms) = 0;
  // Takes the lease `key` for `owner` for ttl_ms if nobody holds it, or
  // renews it if `owner` holds it (SET NX PX semantics). Returns whether
  // `owner` holds it now.
  virtual absl::StatusOr<bool> AcquireLease(std::string_view key, std::string_view owner,
                                            int64_t ttl_ms) = 0;
  // Drops the lease if `owner` holds it (no-op otherwise).
  virtual absl::Status ReleaseLease(std::string_view key, std::string_view owner) = 0;
  // Writes each (key, value) as a string with expiry ttl_ms (SET PX), in
  // order and in one round trip; not atomic across keys (a reader may see
  // the first ones before the last).
  virtual absl::Status PutStrings(std::span<const std::pair<std::string, std::string>> entries,
                                  int64_t ttl_ms) = 0;
  // Several strings in one round trip (MGET): nullopt for a missing key or
  // one holding another type; a value above limits.max_value_bytes is kDataLoss.
  virtual absl::StatusOr<std::vector<std::optional<std::string>>> GetStrings(
      std::span<const std::string> keys) = 0;

  // Change notification, never on the request path, best effort: a
  // subscriber that is not connected when a message is sent misses it
  // (callers keep polling; a notification only makes them look sooner).
  // Publish sends `message` to the subscribers of `channel` (PUBLISH) and
  // returns how many got it.
  virtual absl::StatusOr<int64_t> Publish(std::string_view channel, std::string_view message) = 0;
  // Calls on_message(message) for each message published on `channel` from
  // now on, outside the store's locks, until the subscription is destroyed
  // (before the store). Redis: on a thread of its own with its own
  // connection, reconnecting with backoff while the server is away.
  virtual absl::StatusOr<std::unique_ptr<FleetSubscription>> Subscribe(
      std::string_view channel, std::function<void(std::string_view message)> on_message) = 0;

  virtual FleetStoreCounters counters() const = 0;
  // "redis://127.0.0.1:6379" or "in-process" (never credentials).
  virtual std::string Describe() const = 0;
};

// ---- value decoders (pure; fuzzed in fuzz/fleet_fuzz.cc) ----

// A version as stored: decimal digits, 1..2^63-1, no sign or spaces.
GEARBOX_EXPORT absl::StatusOr<uint64_t> DecodeFleetVersion(std::string_view text);
// A float as HINCRBYFLOAT stores it: finite, |x| <= 1e18, plain decimal or exponent form.
GEARBOX_EXPORT absl::StatusOr<double> DecodeFleetFloat(std::string_view text);
// Checks a hash against the limits (field count, total bytes).
GEARBOX_EXPORT absl::Status CheckFleetHash(const FleetHash& hash, const FleetValueLimits& limits);

// ---- in-process stand-in ----

// The same semantics as Redis's for every FleetStore call, in memory, with
// expiry read from `clock` (not owned; null: SystemClock). A test or replay
// can make it fail with SetAvailable(false) (every call then returns
// kUnavailable, as a dead server would).
// Thread-safety: all methods may be called from any thread (one lock).
class GEARBOX_EXPORT InProcessFleetStore final : public FleetStore {
 public:
  explicit InProcessFleetStore(Clock* clock = nullptr, FleetValueLimits limits = {});
  ~InProcessFleetStore() override;

  absl::StatusOr<bool> IncrementOnce(std::string_view key,
                                     std::span<const FieldIncrement> increments,
                                     std::string_view once_key, int64_t ttl_ms) override;
  absl::StatusOr<std::vector<std::optional<FleetHash>>> GetHashes(
      std::span<const std::string> keys) override;
  absl::StatusOr<VersionedValue> GetVersioned(std::string_view key) override;
  absl::StatusOr<bool> CompareAndSet(std::string_view key, uint64_t expected_version,
                                     std::string_view payload, int64_t ttl_ms) override;
  absl::StatusOr<bool> AcquireLease(std::string_view key, std::string_view owner,
                                    int64_t ttl_ms) override;
  absl::Status ReleaseLease(std::string_view key, std::string_view owner) override;
  absl::Status PutStrings(std::span<const std::pair<std::string, std::string>> entries,
                          int64_t ttl_ms) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetStrings(
      std::span<const std::string> keys) override;
  absl::StatusOr<int64_t> Publish(std::string_view channel, std::string_view message) override;
  absl::StatusOr<std::unique_ptr<FleetSubscription>> Subscribe(
      std::string_view channel, std::function<void(std::string_view message)> on_message) override;
  FleetStoreCounters counters() const override;
  std::string Describe() const override { return "in-process"; }

  void SetAvailable(bool available);
  // Publish delivers on the publisher's thread, to each subscriber in turn.
  // Test hook: stores a raw hash field / string as a hostile writer could.
  void PutRawHashField(std::string_view key, std::string_view field, std::string_view value);
  void PutRawVersioned(std::string_view key, std::string_view version, std::string_view payload);
  void PutRawString(std::string_view key, std::string_view value);
  size_t live_keys() const;  // keys not expired at the clock's now

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// ---- Redis ----

struct RedisFleetStoreOptions {
  // "redis://HOST:PORT" (HOST a name or IPv4 address, PORT 1..65535; no
  // credentials, path or query:
  // credentials come from `username`/`password` or the environment).
  std::string url = "redis://127.0.0.1:6379";
  // AUTH credentials; empty: read GEARBOX_REDIS_USERNAME / GEARBOX_REDIS_PASSWORD
  // from the environment at Create (empty there too: no AUTH). A username
  // needs a password (ACL: AUTH user pass). Never logged or described.
  std::string username;
  std::string password;
  // Milliseconds a connect may take before it fails (the cost of a dead
  // store: one connect timeout per breaker cycle).
  int connect_timeout_ms = 200;
  // Milliseconds one command (send and reply) may take.
  int command_timeout_ms = 200;
  // Circuit breaker: after a failure, calls fail at once for this long,
  // doubling per consecutive failure up to breaker_max_backoff_ms;
  // a success resets it. Milliseconds, on `clock`.
  int breaker_initial_backoff_ms = 500;
  int breaker_max_backoff_ms = 30000;
  // Time for the breaker; null: SystemClock. Not owned.
  Clock* clock = nullptr;
  FleetValueLimits limits;
  // Where connection errors go (rate-limited: one per breaker opening); null: stderr.
  LogSink log;
};
// Every field checked; errors name it (credentials never appear in messages).
GEARBOX_EXPORT absl::Status ValidateRedisFleetStoreOptions(const RedisFleetStoreOptions& options);

// Parses "redis://HOST:PORT"; errors name the field `field`, quote the URL
// (credentials redacted) and say what is allowed.
struct RedisEndpoint {
  std::string host;
  int port = 0;
};
GEARBOX_EXPORT absl::StatusOr<RedisEndpoint> ParseRedisUrl(std::string_view url,
                                                           std::string_view field = "url");

// A FleetStore on one Redis server through hiredis's synchronous API.
// Connects lazily (the first call, and after a failure once the breaker's
// backoff has passed); Create does not need the server to be up.
// Thread-safety: all methods may be called from any thread; calls serialize
// on one mutex guarding the connection (the update path is its only caller).
class GEARBOX_EXPORT RedisFleetStore final : public FleetStore {
 public:
  static absl::StatusOr<std::unique_ptr<RedisFleetStore>> Create(RedisFleetStoreOptions options);
  ~RedisFleetStore() override;

  absl::StatusOr<bool> IncrementOnce(std::string_view key,
                                     std::span<const FieldIncrement> increments,
                                     std::string_view once_key, int64_t ttl_ms) override;
  absl::StatusOr<std::vector<std::optional<FleetHash>>> GetHashes(
      std::span<const std::string> keys) override;
  absl::StatusOr<VersionedValue> GetVersioned(std::string_view key) override;
  absl::StatusOr<bool> CompareAndSet(std::string_view key, uint64_t expected_version,
                                     std::string_view payload, int64_t ttl_ms) override;
  absl::StatusOr<bool> AcquireLease(std::string_view key, std::string_view owner,
                                    int64_t ttl_ms) override;
  absl::Status ReleaseLease(std::string_view key, std::string_view owner) override;
  absl::Status PutStrings(std::span<const std::pair<std::string, std::string>> entries,
                          int64_t ttl_ms) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetStrings(
      std::span<const std::string> keys) override;
  absl::StatusOr<int64_t> Publish(std::string_view channel, std::string_view message) override;
  absl::StatusOr<std::unique_ptr<FleetSubscription>> Subscribe(
      std::string_view channel, std::function<void(std::string_view message)> on_message) override;
  FleetStoreCounters counters() const override;
  std::string Describe() const override;

  // Whether the breaker refuses calls now (for tests and status pages).
  bool breaker_open() const;

 private:
  class Impl;
  explicit RedisFleetStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A store wrapper that fails every call (kUnavailable) while `down()` says
// so, e.g. a replay's simulated outage between two virtual times (messages
// published meanwhile are not delivered to its subscribers). Not owned:
// `inner`. Thread-safety: as the inner store's; `down` must be thread-safe.
class GEARBOX_EXPORT OutageFleetStore final : public FleetStore {
 public:
  OutageFleetStore(FleetStore* inner, std::function<bool()> down)
      : inner_(inner), down_(std::move(down)) {}
  absl::StatusOr<bool> IncrementOnce(std::string_view key,
                                     std::span<const FieldIncrement> increments,
                                     std::string_view once_key, int64_t ttl_ms) override;
  absl::StatusOr<std::vector<std::optional<FleetHash>>> GetHashes(
      std::span<const std::string> keys) override;
  absl::StatusOr<VersionedValue> GetVersioned(std::string_view key) override;
  absl::StatusOr<bool> CompareAndSet(std::string_view key, uint64_t expected_version,
                                     std::string_view payload, int64_t ttl_ms) override;
  absl::StatusOr<bool> AcquireLease(std::string_view key, std::string_view owner,
                                    int64_t ttl_ms) override;
  absl::Status ReleaseLease(std::string_view key, std::string_view owner) override;
  absl::Status PutStrings(std::span<const std::pair<std::string, std::string>> entries,
                          int64_t ttl_ms) override;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetStrings(
      std::span<const std::string> keys) override;
  absl::StatusOr<int64_t> Publish(std::string_view channel, std::string_view message) override;
  absl::StatusOr<std::unique_ptr<FleetSubscription>> Subscribe(
      std::string_view channel, std::function<void(std::string_view message)> on_message) override;
  FleetStoreCounters counters() const override;
  std::string Describe() const override { return inner_->Describe(); }

 private:
  absl::Status Down() const;
  FleetStore* inner_;
  std::function<bool()> down_;
  std::atomic<uint64_t> refused_{0};  // calls refused while down (statistics only)
};

// "redis://..." → RedisFleetStore; "" or "in-process" → InProcessFleetStore on `clock`.
GEARBOX_EXPORT absl::StatusOr<std::unique_ptr<FleetStore>> OpenFleetStore(std::string_view url,
                                                                          Clock* clock,
                                                                          LogSink log = nullptr);

}  // namespace gearbox

#endif  // GEARBOX_FLEET_H_
