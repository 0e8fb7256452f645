// RedisFleetStore: FleetStore over hiredis's synchronous API.
//
// Atomic operations are Lua scripts sent with EVAL (Redis runs a script
// alone, so its reads and writes are one step). Every reply is checked for
// its type and size before use; a reply of the wrong shape is kDataLoss.
#include <hiredis/hiredis.h>
#include <poll.h>
#include <sys/time.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "gearbox/fleet.h"
#include "src/common/errors.h"
#include "src/common/mutex.h"
#include "src/fleet/ttl.h"

namespace gearbox {

using internal::Cat;

namespace {

// KEYS[1] hash, KEYS[2] once-marker; ARGV[1] ttl ms, then field, delta pairs.
// Existing values are checked first, so a non-float value fails the script
// before anything is written.
constexpr std::string_view kIncrementOnceScript = R"lua(
for i = 2, #ARGV, 2 do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if v and not tonumber(v) then return redis.error_reply('hash value is not a float') end
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return 0 end
for i = 2, #ARGV, 2 do redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
)lua";

// KEYS[1]; ARGV[1] expected version ('0': absent), ARGV[2] new version,
// ARGV[3] payload, ARGV[4] ttl ms (0: none).
constexpr std::string_view kCompareAndSetScript = R"lua(
if redis.call('EXISTS', KEYS[1]) == 1 then
  local cur = redis.call('HGET', KEYS[1], 'v')
  if not cur or cur ~= ARGV[1] then return 0 end
elseif ARGV[1] ~= '0' then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'd', ARGV[3])
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 1
)lua";

// KEYS[1]; ARGV[1] owner, ARGV[2] ttl ms. Taken when free (SET NX PX),
// renewed only by its owner.
constexpr std::string_view kLeaseScript = R"lua(
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  return 1
end
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)lua";

constexpr std::string_view kReleaseScript = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)lua";

timeval Millis(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// The URL with anything before an '@' replaced: safe to put in a message.
std::string Redacted(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t at = url.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  const size_t from = scheme == std::string_view::npos ? 0 : scheme + 3;
  if (at < from) return std::string(url);
  return Cat(url.substr(0, from), "<redacted>", url.substr(at));
}

}  // namespace

absl::StatusOr<RedisEndpoint> ParseRedisUrl(std::string_view url, std::string_view field) {
  const std::string shown = Cat("\"", Redacted(url), "\"");
  constexpr std::string_view kAllowed =
      "redis://HOST:PORT (PORT 1..65535; no credentials in the URL: use "
      "GEARBOX_REDIS_USERNAME/GEARBOX_REDIS_PASSWORD or the config)";
  constexpr std::string_view kScheme = "redis://";
  if (url.size() > 512 || url.substr(0, kScheme.size()) != kScheme) {
    return internal::InvalidField(field, shown, kAllowed);
  }
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find('@') != std::string_view::npos) {
    return internal::InvalidField(field, shown, kAllowed);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return internal::InvalidField(field, shown, kAllowed);
  }
  RedisEndpoint e;
  e.host = std::string(rest.substr(0, colon));
  for (char c : e.host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) return internal::InvalidField(field, shown, kAllowed);
  }
  const std::string_view port = rest.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || e.port < 1 ||
      e.port > 65535) {
    return internal::InvalidField(field, shown, kAllowed);
  }
  return e;
}

absl::Status ValidateRedisFleetStoreOptions(const RedisFleetStoreOptions& o) {
  if (auto e = ParseRedisUrl(o.url, "fleet.store_url"); !e.ok()) return e.status();
  auto positive = [](std::string_view name, int v, int max) -> absl::Status {
    if (v < 1 || v > max) {
      return internal::InvalidFieldValue(Cat("fleet.", name), v,
                                         Cat("milliseconds in [1, ", max, "]"));
    }
    return absl::OkStatus();
  };
  if (auto s = positive("connect_timeout_ms", o.connect_timeout_ms, 60000); !s.ok()) return s;
  if (auto s = positive("command_timeout_ms", o.command_timeout_ms, 60000); !s.ok()) return s;
  if (auto s = positive("breaker_initial_backoff_ms", o.breaker_initial_backoff_ms, 3600000);
      !s.ok())
    return s;
  if (auto s = positive("breaker_max_backoff_ms", o.breaker_max_backoff_ms, 3600000); !s.ok())
    return s;
  if (o.breaker_max_backoff_ms < o.breaker_initial_backoff_ms) {
    return internal::InvalidFieldValue(
        "fleet.breaker_max_backoff_ms", o.breaker_max_backoff_ms,
        Cat("at least breaker_initial_backoff_ms (", o.breaker_initial_backoff_ms, ")"));
  }
  if (!o.username.empty() && o.password.empty()) {
    return internal::InvalidField("fleet.username", "a username without a password",
                                  "set a password too (ACL AUTH needs both)");
  }
  if (o.username.size() > 256 || o.password.size() > 4096) {
    return internal::InvalidField("fleet.username/password", "(not shown)",
                                  "at most 256 / 4096 bytes");
  }
  if (o.limits.max_value_bytes < 1 || o.limits.max_hash_fields < 1) {
    return internal::InvalidField("fleet.limits", "0", "limits >= 1");
  }
  return absl::OkStatus();
}

// Thread-safety: every call takes `mu` for its whole round trip; the
// connection, breaker state and counters are guarded by it.
class RedisFleetStore::Impl {
 public:
  Impl(RedisFleetStoreOptions o, RedisEndpoint e)
      : options(std::move(o)),
        endpoint(std::move(e)),
        clock(options.clock != nullptr ? options.clock : SystemClock::Default()) {}
  ~Impl() {
    MutexLock lock(&mu);
    Drop();
  }

  const RedisFleetStoreOptions options;
  const RedisEndpoint endpoint;
  Clock* const clock;

  mutable Mutex mu;
  redisContext* context ABSL_GUARDED_BY(mu) = nullptr;
  int consecutive_failures ABSL_GUARDED_BY(mu) = 0;
  double open_until ABSL_GUARDED_BY(mu) = -1e300;  // breaker: calls fail at once before this
  std::string last_error ABSL_GUARDED_BY(mu);
  FleetStoreCounters counters ABSL_GUARDED_BY(mu);

  std::string Name() const { return Cat("redis://", endpoint.host, ":", endpoint.port); }

  void Log(LogLevel level, std::string_view message) const {
    if (options.log) {
      options.log(level, message);
    } else {
      StderrLogSink(level, message);
    }
  }

  void Drop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (context != nullptr) redisFree(context);
    context = nullptr;
  }

  // A connection-level failure: drop the connection and open the breaker.
  absl::Status Fail(std::string what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Drop();
    ++counters.failures;
    ++consecutive_failures;
    const int shift = std::min(consecutive_failures - 1, 20);
    const double backoff_ms = std::min<double>(
        options.breaker_max_backoff_ms,
        static_cast<double>(options.breaker_initial_backoff_ms) * std::ldexp(1.0, shift));
    open_until = clock->NowSeconds() + backoff_ms / 1000.0;
    last_error = what;
    if (consecutive_failures == 1) {
      Log(LogLevel::kWarning, Cat("fleet store ", Name(), " unreachable (", what,
                                  "); running on local state, retrying with backoff"));
    }
    return absl::UnavailableError(Cat("fleet store ", Name(), ": ", what));
  }

  // A usable connection, or why not (the breaker refuses while open).
  absl::Status Ready() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (context != nullptr) return absl::OkStatus();
    const double now = clock->NowSeconds();
    if (now < open_until) {
      ++counters.skipped;
      return absl::UnavailableError(Cat("fleet store ", Name(), ": circuit open for ",
                                        std::ceil((open_until - now) * 1000.0),
                                        " ms more after: ", last_error));
    }
    ++counters.calls;
    context = redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port,
                                      Millis(options.connect_timeout_ms));
    if (context == nullptr) return Fail("connect: out of memory");
    if (context->err != 0) return Fail(Cat("connect: ", context->errstr));
    if (redisSetTimeout(context, Millis(options.command_timeout_ms)) != REDIS_OK) {
      return Fail("setting the command timeout failed");
    }
    if (!options.password.empty()) {
      std::vector<std::string_view> args = {"AUTH"};
      if (!options.username.empty()) args.push_back(options.username);
      args.push_back(options.password);
      absl::StatusOr<Reply> r = RoundTrip(args, /*count_call=*/false);
      if (!r.ok()) return r.status();
      if ((*r)->type != REDIS_REPLY_STATUS) {
        // The server's message (WRONGPASS, NOAUTH...) never contains the password.
        const std::string why = (*r)->type == REDIS_REPLY_ERROR ? std::string((*r)->str, (*r)->len)
                                                                : "unexpected reply";
        return Fail(Cat("AUTH failed: ", why));
      }
    }
    ++counters.connects;
    if (consecutive_failures > 0) {
      Log(LogLevel::kInfo, Cat("fleet store ", Name(), " reachable again after ",
                               consecutive_failures, " failed attempts"));
    }
    consecutive_failures = 0;
    return absl::OkStatus();
  }

  // One command; connection errors open the breaker.
  absl::StatusOr<Reply> RoundTrip(const std::vector<std::string_view>& args, bool count_call = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (count_call) ++counters.calls;
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
      counters.bytes_sent += a.size();
    }
    void* raw = redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (raw == nullptr) return Fail(Cat("command failed: ", context->errstr));
    Reply reply(static_cast<redisReply*>(raw));
    counters.bytes_received += ReplyBytes(reply.get());
    return reply;
  }

  static size_t ReplyBytes(const redisReply* r) {
    size_t n = r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                       r->type == REDIS_REPLY_ERROR
                   ? r->len
                   : 8;
    if (r->type == REDIS_REPLY_ARRAY) {
      for (size_t i = 0; i < r->elements; ++i) n += ReplyBytes(r->element[i]);
    }
    return n;
  }

  // An error reply: a command problem, not a connection one (no breaker).
  absl::Status ErrorReply(const redisReply* r, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    ++counters.failures;
    if (r->type == REDIS_REPLY_ERROR) {
      return absl::FailedPreconditionError(
          Cat("fleet store ", Name(), ": ", what, ": ", std::string_view(r->str, r->len)));
    }
    ++counters.rejected_values;
    return absl::DataLossError(
        Cat("fleet store ", Name(), ": ", what, ": reply of unexpected type ", r->type));
  }

  absl::StatusOr<int64_t> EvalInteger(std::string_view script, std::string_view what,
                                      std::vector<std::string_view> keys,
                                      std::vector<std::string_view> args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (auto s = Ready(); !s.ok()) return s;
    const std::string num_keys = Cat(keys.size());
    std::vector<std::string_view> all = {"EVAL", script, num_keys};
    all.insert(all.end(), keys.begin(), keys.end());
    all.insert(all.end(), args.begin(), args.end());
    absl::StatusOr<Reply> r = RoundTrip(all);
    if (!r.ok()) return r.status();
    if ((*r)->type != REDIS_REPLY_INTEGER) return ErrorReply(r->get(), what);
    return static_cast<int64_t>((*r)->integer);
  }
};

absl::StatusOr<std::unique_ptr<RedisFleetStore>> RedisFleetStore::Create(
    RedisFleetStoreOptions options) {
  if (options.username.empty()) {
    if (const char* u = std::getenv("GEARBOX_REDIS_USERNAME")) options.username = u;
  }
  if (options.password.empty()) {
    if (const char* p = std::getenv("GEARBOX_REDIS_PASSWORD")) options.password = p;
  }
  if (auto s = ValidateRedisFleetStoreOptions(options); !s.ok()) return s;
  RedisEndpoint endpoint = *ParseRedisUrl(options.url, "fleet.store_url");
  return std::unique_ptr<RedisFleetStore>(
      new RedisFleetStore(std::make_unique<Impl>(std::move(options), std::move(endpoint))));
}

RedisFleetStore::RedisFleetStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisFleetStore::~RedisFleetStore() = default;

std::string RedisFleetStore::Describe() const { return impl_->Name(); }

bool RedisFleetStore::breaker_open() const {
  MutexLock lock(&impl_->mu);
  return impl_->context == nullptr && impl_->clock->NowSeconds() < impl_->open_until;
}

FleetStoreCounters RedisFleetStore::counters() const {
  MutexLock lock(&impl_->mu);
  return impl_->counters;
}

absl::StatusOr<bool> RedisFleetStore::IncrementOnce(std::string_view key,
                                                    std::span<const FieldIncrement> increments,
                                                    std::string_view once_key, int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, false); !s.ok()) return s;
  const std::string ttl = Cat(ttl_ms);
  std::vector<std::string> deltas;
  deltas.reserve(increments.size());
  for (const FieldIncrement& inc : increments) {
    if (!std::isfinite(inc.delta)) {
      return internal::InvalidFieldValue(Cat("increment of \"", inc.field, "\""), inc.delta,
                                         "a finite number");
    }
    deltas.push_back(fmt::format("{}", inc.delta));
  }
  std::vector<std::string_view> args = {ttl};
  for (size_t i = 0; i < increments.size(); ++i) {
    args.push_back(increments[i].field);
    args.push_back(deltas[i]);
  }
  MutexLock lock(&impl_->mu);
  absl::StatusOr<int64_t> r =
      impl_->EvalInteger(kIncrementOnceScript, "increment", {key, once_key}, std::move(args));
  if (!r.ok()) return r.status();
  return *r == 1;
}

absl::StatusOr<std::vector<std::optional<FleetHash>>> RedisFleetStore::GetHashes(
    std::span<const std::string> keys) {
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Ready(); !s.ok()) return s;
  ++impl_->counters.calls;
  // A pipeline: every HGETALL written, then every reply read.
  for (const std::string& k : keys) {
    const char* argv[2] = {"HGETALL", k.c_str()};
    const size_t lens[2] = {7, k.size()};
    impl_->counters.bytes_sent += 7 + k.size();
    if (redisAppendCommandArgv(impl_->context, 2, argv, lens) != REDIS_OK) {
      return impl_->Fail(Cat("pipeline append failed: ", impl_->context->errstr));
    }
  }
  std::vector<Reply> replies;
  for (size_t i = 0; i < keys.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(impl_->context, &raw) != REDIS_OK || raw == nullptr) {
      return impl_->Fail(Cat("reading a reply failed: ", impl_->context->errstr));
    }
    replies.emplace_back(static_cast<redisReply*>(raw));
    impl_->counters.bytes_received += Impl::ReplyBytes(replies.back().get());
  }
  std::vector<std::optional<FleetHash>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* r = replies[i].get();
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
      return internal::WithContext(impl_->ErrorReply(r, "HGETALL"), Cat("key \"", keys[i], "\""));
    }
    if (r->elements == 0) {
      out.emplace_back();
      continue;
    }
    if (r->elements / 2 > impl_->options.limits.max_hash_fields) {
      ++impl_->counters.rejected_values;
      return absl::DataLossError(Cat("fleet hash at \"", keys[i], "\": ", r->elements / 2,
                                     " fields is not allowed; at most ",
                                     impl_->options.limits.max_hash_fields));
    }
    FleetHash h;
    for (size_t e = 0; e + 1 < r->elements; e += 2) {
      const redisReply* f = r->element[e];
      const redisReply* v = r->element[e + 1];
      if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
        ++impl_->counters.rejected_values;
        return absl::DataLossError(Cat("fleet hash at \"", keys[i], "\": a non-string element"));
      }
      h.emplace_back(std::string(f->str, f->len), std::string(v->str, v->len));
    }
    if (auto s = CheckFleetHash(h, impl_->options.limits); !s.ok()) {
      ++impl_->counters.rejected_values;
      return internal::WithContext(s, Cat("key \"", keys[i], "\""));
    }
    out.emplace_back(std::move(h));
  }
  return out;
}

absl::StatusOr<VersionedValue> RedisFleetStore::GetVersioned(std::string_view key) {
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Ready(); !s.ok()) return s;
  absl::StatusOr<Reply> r = impl_->RoundTrip({"HMGET", key, "v", "d"});
  if (!r.ok()) return r.status();
  const redisReply* a = r->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements != 2) return impl_->ErrorReply(a, "HMGET");
  const redisReply* v = a->element[0];
  const redisReply* d = a->element[1];
  if (v->type == REDIS_REPLY_NIL && d->type == REDIS_REPLY_NIL) return VersionedValue{};
  if (v->type != REDIS_REPLY_STRING || d->type != REDIS_REPLY_STRING) {
    ++impl_->counters.rejected_values;
    return absl::DataLossError(Cat("fleet value at \"", key, "\": no version or payload field"));
  }
  absl::StatusOr<uint64_t> version = DecodeFleetVersion(std::string_view(v->str, v->len));
  if (!version.ok()) {
    ++impl_->counters.rejected_values;
    return internal::WithContext(version.status(), Cat("key \"", key, "\""));
  }
  if (d->len > impl_->options.limits.max_value_bytes) {
    ++impl_->counters.rejected_values;
    return absl::DataLossError(Cat("fleet value at \"", key, "\": ", d->len,
                                   " bytes is not allowed; at most ",
                                   impl_->options.limits.max_value_bytes));
  }
  return VersionedValue{*version, std::string(d->str, d->len)};
}

absl::StatusOr<bool> RedisFleetStore::CompareAndSet(std::string_view key, uint64_t expected_version,
                                                    std::string_view payload, int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, true); !s.ok()) return s;
  const std::string expected = Cat(expected_version);
  const std::string next = Cat(expected_version + 1);
  const std::string ttl = Cat(ttl_ms);
  MutexLock lock(&impl_->mu);
  absl::StatusOr<int64_t> r = impl_->EvalInteger(kCompareAndSetScript, "compare-and-set", {key},
                                                 {expected, next, payload, ttl});
  if (!r.ok()) return r.status();
  return *r == 1;
}

absl::StatusOr<bool> RedisFleetStore::AcquireLease(std::string_view key, std::string_view owner,
                                                   int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, false); !s.ok()) return s;
  const std::string ttl = Cat(ttl_ms);
  MutexLock lock(&impl_->mu);
  absl::StatusOr<int64_t> r = impl_->EvalInteger(kLeaseScript, "lease", {key}, {owner, ttl});
  if (!r.ok()) return r.status();
  return *r == 1;
}

absl::Status RedisFleetStore::ReleaseLease(std::string_view key, std::string_view owner) {
  MutexLock lock(&impl_->mu);
  absl::StatusOr<int64_t> r = impl_->EvalInteger(kReleaseScript, "release", {key}, {owner});
  return r.status();
}

absl::StatusOr<int64_t> RedisFleetStore::Publish(std::string_view channel,
                                                 std::string_view message) {
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Ready(); !s.ok()) return s;
  absl::StatusOr<Reply> r = impl_->RoundTrip({"PUBLISH", channel, message});
  if (!r.ok()) return r.status();
  if ((*r)->type != REDIS_REPLY_INTEGER) return impl_->ErrorReply(r->get(), "publish");
  return static_cast<int64_t>((*r)->integer);
}

namespace {

// A channel subscription on its own connection and thread (SUBSCRIBE puts a
// connection in a mode where it only receives). The thread connects (AUTH
// when configured), subscribes, then waits for messages in poll() slices of
// kPollMs so that the destructor's stop is seen within one slice; a lost
// connection (the server went away) is dropped and retried after a backoff
// doubling from breaker_initial_backoff_ms to breaker_max_backoff_ms (real
// time). Messages published while it is not connected are lost.
// Thread-safety: the callback runs on the thread only; the destructor sets
// `stop_` and joins it (so a delivery in progress ends first).
class RedisSubscription final : public FleetSubscription {
 public:
  RedisSubscription(RedisFleetStoreOptions options, RedisEndpoint endpoint, std::string channel,
                    std::function<void(std::string_view)> on_message)
      : options_(std::move(options)),
        endpoint_(std::move(endpoint)),
        channel_(std::move(channel)),
        on_message_(std::move(on_message)),
        thread_([this] { Loop(); }) {}
  ~RedisSubscription() override {
    stop_.store(true, std::memory_order_release);
    thread_.join();
  }

 private:
  static constexpr int kPollMs = 50;

  void Loop() {
    int backoff_ms = options_.breaker_initial_backoff_ms;
    while (!stop_.load(std::memory_order_acquire)) {
      redisContext* c = Connect();
      if (c == nullptr) {
        Sleep(backoff_ms);
        backoff_ms = std::min(options_.breaker_max_backoff_ms, 2 * backoff_ms);
        continue;
      }
      backoff_ms = options_.breaker_initial_backoff_ms;
      Receive(c);
      redisFree(c);
    }
  }

  // A connection subscribed to the channel, or null.
  redisContext* Connect() {
    redisContext* c = redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port,
                                              Millis(options_.connect_timeout_ms));
    if (c == nullptr) return nullptr;
    bool ok = c->err == 0 && redisSetTimeout(c, Millis(options_.command_timeout_ms)) == REDIS_OK;
    if (ok && !options_.password.empty()) {
      std::vector<const char*> argv = {"AUTH"};
      std::vector<size_t> lens = {4};
      if (!options_.username.empty()) {
        argv.push_back(options_.username.data());
        lens.push_back(options_.username.size());
      }
      argv.push_back(options_.password.data());
      lens.push_back(options_.password.size());
      Reply r(static_cast<redisReply*>(
          redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
      ok = r != nullptr && r->type == REDIS_REPLY_STATUS;
    }
    if (ok) {
      const char* argv[2] = {"SUBSCRIBE", channel_.data()};
      const size_t lens[2] = {9, channel_.size()};
      Reply r(static_cast<redisReply*>(redisCommandArgv(c, 2, argv, lens)));
      ok = r != nullptr && r->type == REDIS_REPLY_ARRAY;
    }
    if (!ok) {
      redisFree(c);
      return nullptr;
    }
    return c;
  }

  // Delivers messages until the connection fails or stop.
  void Receive(redisContext* c) {
    while (!stop_.load(std::memory_order_acquire)) {
      void* raw = nullptr;
      while (redisGetReplyFromReader(c, &raw) == REDIS_OK && raw != nullptr) {
        Reply r(static_cast<redisReply*>(raw));
        raw = nullptr;
        Deliver(r.get());
      }
      if (c->err != 0) return;
      pollfd p{c->fd, POLLIN, 0};
      const int ready = poll(&p, 1, kPollMs);
      if (ready < 0 && errno != EINTR) return;
      if (ready <= 0) continue;
      if (redisBufferRead(c) != REDIS_OK) return;  // closed or failed: reconnect
    }
  }

  // ["message", channel, payload]; anything else (a reply of another shape) is ignored.
  void Deliver(const redisReply* r) {
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
    const redisReply* kind = r->element[0];
    const redisReply* payload = r->element[2];
    if (kind->type != REDIS_REPLY_STRING || std::string_view(kind->str, kind->len) != "message" ||
        payload->type != REDIS_REPLY_STRING || payload->len > options_.limits.max_value_bytes) {
      return;
    }
    on_message_(std::string_view(payload->str, payload->len));
  }

  void Sleep(int ms) {
    for (int waited = 0; waited < ms && !stop_.load(std::memory_order_acquire); waited += kPollMs) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    }
  }

  const RedisFleetStoreOptions options_;
  const RedisEndpoint endpoint_;
  const std::string channel_;
  const std::function<void(std::string_view)> on_message_;
  std::atomic<bool> stop_{false};  // set by the destructor, read by the thread
  std::thread thread_;             // last: starts once the fields above are set
};

}  // namespace

absl::StatusOr<std::unique_ptr<FleetSubscription>> RedisFleetStore::Subscribe(
    std::string_view channel, std::function<void(std::string_view message)> on_message) {
  if (!on_message) return internal::InvalidField("on_message", "empty", "a callback");
  return std::unique_ptr<FleetSubscription>(new RedisSubscription(
      impl_->options, impl_->endpoint, std::string(channel), std::move(on_message)));
}

absl::Status RedisFleetStore::PutStrings(
    std::span<const std::pair<std::string, std::string>> entries, int64_t ttl_ms) {
  if (auto s = internal::CheckTtl(ttl_ms, false); !s.ok()) return s;
  const std::string ttl = Cat(ttl_ms);
  MutexLock lock(&impl_->mu);
  if (auto s = impl_->Ready(); !s.ok()) return s;
  ++impl_->counters.calls;
  // A pipeline: Redis runs one connection's commands in order, so a reader
  // that sees the last key written also sees the earlier ones.
  for (const auto& [k, v] : entries) {
    const char* argv[5] = {"SET", k.data(), v.data(), "PX", ttl.c_str()};
    const size_t lens[5] = {3, k.size(), v.size(), 2, ttl.size()};
    impl_->counters.bytes_sent += 5 + k.size() + v.size() + ttl.size();
    if (redisAppendCommandArgv(impl_->context, 5, argv, lens) != REDIS_OK) {
      return impl_->Fail(Cat("pipeline append failed: ", impl_->context->errstr));
    }
  }
  absl::Status first_error = absl::OkStatus();
  for (size_t i = 0; i < entries.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(impl_->context, &raw) != REDIS_OK || raw == nullptr) {
      return impl_->Fail(Cat("reading a reply failed: ", impl_->context->errstr));
    }
    Reply reply(static_cast<redisReply*>(raw));
    impl_->counters.bytes_received += Impl::ReplyBytes(reply.get());
    if (reply->type != REDIS_REPLY_STATUS && first_error.ok()) {
      first_error = internal::WithContext(impl_->ErrorReply(reply.get(), "SET"),
                                          Cat("key \"", entries[i].first, "\""));
    }
  }
  return first_error;
}

absl::StatusOr<std::vector<std::optional<std::string>>> RedisFleetStore::GetStrings(
    std::span<const std::string> keys) {
  std::vector<std::string_view> args = {"MGET"};
  for (const std::string& k : keys) args.push_back(k);
  MutexLock lock(&impl_->mu);
  if (keys.empty()) return std::vector<std::optional<std::string>>{};
  if (auto s = impl_->Ready(); !s.ok()) return s;
  absl::StatusOr<Reply> r = impl_->RoundTrip(args);
  if (!r.ok()) return r.status();
  const redisReply* a = r->get();
  if (a->type != REDIS_REPLY_ARRAY || a->elements != keys.size()) {
    return impl_->ErrorReply(a, "MGET");
  }
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* e = a->element[i];
    if (e->type == REDIS_REPLY_NIL) {
      out.emplace_back();
      continue;
    }
    if (e->type != REDIS_REPLY_STRING) {
      ++impl_->counters.rejected_values;
      return absl::DataLossError(Cat("fleet value at \"", keys[i], "\": a non-string reply"));
    }
    if (e->len > impl_->options.limits.max_value_bytes) {
      ++impl_->counters.rejected_values;
      return absl::DataLossError(Cat("fleet value at \"", keys[i], "\": ", e->len,
                                     " bytes is not allowed; at most ",
                                     impl_->options.limits.max_value_bytes));
    }
    out.emplace_back(std::string(e->str, e->len));
  }
  return out;
}

}  // namespace gearbox
