// FleetStore: the same behavioural tests on the in-process stand-in and on a
// real redis-server the test starts itself; Redis-only tests for the breaker,
// a killed server, AUTH and URL parsing.
#include <hiredis/hiredis.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "gearbox/clock.h"
#include "gearbox/fleet.h"
#include "gtest/gtest.h"
#include "src/common/mutex.h"
#include "tests/redis_fixture.h"

namespace gearbox {
namespace {

using ::gearbox::testing::RedisServer;

enum class Kind { kInProcess, kRedis };

// One store under test and how to move its time forward.
class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kInProcess) {
      auto s = std::make_unique<InProcessFleetStore>(&clock_);
      in_process_ = s.get();
      store_ = std::move(s);
      return;
    }
    server_ = std::make_unique<RedisServer>();
    GEARBOX_REQUIRE_REDIS(*server_);
    RedisFleetStoreOptions o;
    o.url = server_->url();
    o.command_timeout_ms = 2000;  // generous: a loaded CI machine must not fail a call
    auto s = RedisFleetStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  // Past a TTL: virtual time for the stand-in, real time for Redis (whose
  // expiry is exact on read once the time has passed).
  void Pass(int ms) {
    if (GetParam() == Kind::kInProcess) {
      clock_.Advance(ms / 1000.0);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  }
  // Writes a raw hash field as a hostile or buggy writer could.
  void RawHashField(const std::string& key, const std::string& field, const std::string& value) {
    if (in_process_ != nullptr) {
      in_process_->PutRawHashField(key, field, value);
      return;
    }
    redisContext* c = redisConnect("127.0.0.1", server_->port());
    ASSERT_TRUE(c != nullptr && c->err == 0);
    const char* argv[4] = {"HSET", key.c_str(), field.c_str(), value.c_str()};
    const size_t lens[4] = {4, key.size(), field.size(), value.size()};
    freeReplyObject(redisCommandArgv(c, 4, argv, lens));
    redisFree(c);
  }

  ManualClock clock_{1000.0};
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<FleetStore> store_;
  InProcessFleetStore* in_process_ = nullptr;
};

double FieldValue(const FleetHash& h, const std::string& field) {
  for (const auto& [f, v] : h) {
    if (f == field) return *DecodeFleetFloat(v);
  }
  return -1.0;
}

TEST_P(StoreTest, IncrementsAddUpAndADuplicatedPushChangesNothing) {
  const std::vector<FieldIncrement> a = {{"0:8", 1.5}, {"n", 1.0}};
  const std::vector<FieldIncrement> b = {{"0:8", 2.25}, {"0:16", 4.0}, {"n", 1.0}};
  ASSERT_EQ(*store_->IncrementOnce("t:h", a, "t:once:a", 60000), true);
  ASSERT_EQ(*store_->IncrementOnce("t:h", b, "t:once:b", 60000), true);
  EXPECT_EQ(*store_->IncrementOnce("t:h", a, "t:once:a", 60000), false);  // the retry of a
  const std::vector<std::string> keys = {"t:h", "t:missing"};
  auto got = store_->GetHashes(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  ASSERT_TRUE((*got)[0].has_value());
  EXPECT_FALSE((*got)[1].has_value());
  EXPECT_DOUBLE_EQ(FieldValue(*(*got)[0], "0:8"), 3.75);
  EXPECT_DOUBLE_EQ(FieldValue(*(*got)[0], "0:16"), 4.0);
  EXPECT_DOUBLE_EQ(FieldValue(*(*got)[0], "n"), 2.0);
}

TEST_P(StoreTest, KeysExpire) {
  const std::vector<FieldIncrement> a = {{"x", 1.0}};
  ASSERT_TRUE(*store_->IncrementOnce("t:e", a, "t:e:once", 100));
  ASSERT_TRUE(*store_->AcquireLease("t:lease", "me", 100));
  Pass(300);
  const std::vector<std::string> keys = {"t:e"};
  auto got = store_->GetHashes(keys);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE((*got)[0].has_value());
  // The marker expired with it: the same push applies again.
  EXPECT_TRUE(*store_->IncrementOnce("t:e", a, "t:e:once", 100));
  EXPECT_TRUE(*store_->AcquireLease("t:lease", "other", 100));
}

TEST_P(StoreTest, CompareAndSetMovesTheVersionByOne) {
  auto absent = store_->GetVersioned("t:plan");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->version, 0u);
  EXPECT_EQ(*store_->CompareAndSet("t:plan", 0, "first", 0), true);
  EXPECT_EQ(*store_->CompareAndSet("t:plan", 0, "lost race", 0), false);
  EXPECT_EQ(*store_->CompareAndSet("t:plan", 1, "second", 60000), true);
  EXPECT_EQ(*store_->CompareAndSet("t:plan", 1, "stale", 0), false);
  auto v = store_->GetVersioned("t:plan");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->version, 2u);
  EXPECT_EQ(v->payload, "second");
}

TEST_P(StoreTest, ALeaseIsRenewedOnlyByItsOwner) {
  // Long enough that a loaded machine does not let it lapse between two calls.
  constexpr int kLeaseMs = 1500;
  EXPECT_TRUE(*store_->AcquireLease("t:leader", "a", kLeaseMs));
  EXPECT_FALSE(*store_->AcquireLease("t:leader", "b", kLeaseMs));
  EXPECT_TRUE(*store_->AcquireLease("t:leader", "a", kLeaseMs));  // renewal
  ASSERT_TRUE(store_->ReleaseLease("t:leader", "b").ok());        // not b's: stays
  EXPECT_FALSE(*store_->AcquireLease("t:leader", "b", kLeaseMs));
  ASSERT_TRUE(store_->ReleaseLease("t:leader", "a").ok());
  EXPECT_TRUE(*store_->AcquireLease("t:leader", "b", kLeaseMs));
  Pass(2 * kLeaseMs);  // b never renewed: anyone may take over
  EXPECT_TRUE(*store_->AcquireLease("t:leader", "a", kLeaseMs));
}

TEST_P(StoreTest, HostileValuesAreErrorsNotCrashes) {
  RawHashField("t:bad", "0:8", "not-a-number");
  const std::vector<FieldIncrement> a = {{"0:8", 1.0}};
  auto r = store_->IncrementOnce("t:bad", a, "t:bad:once", 60000);
  EXPECT_FALSE(r.ok());
  // Nothing applied, so a later push with the same marker is not lost.
  RawHashField("t:bad", "0:8", "2");
  EXPECT_EQ(*store_->IncrementOnce("t:bad", a, "t:bad:once", 60000), true);

  RawHashField("t:ver", "v", "12abc");
  RawHashField("t:ver", "d", "payload");
  auto v = store_->GetVersioned("t:ver");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << v.status();
  EXPECT_EQ(*store_->CompareAndSet("t:ver", 12, "x", 0), false);  // never matches
  RawHashField("t:half", "v", "3");                               // no payload field
  EXPECT_FALSE(store_->GetVersioned("t:half").ok());
  EXPECT_GE(store_->counters().rejected_values, 2u);
}

TEST_P(StoreTest, BadTtlIsAnErrorNamingTheField) {
  const std::vector<FieldIncrement> a = {{"x", 1.0}};
  auto r = store_->IncrementOnce("t:x", a, "t:x:once", 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ttl_ms: 0"), absl::string_view::npos) << r.status();
  EXPECT_FALSE(store_->AcquireLease("t:l", "me", -5).ok());
}

TEST_P(StoreTest, CountsCallsAndBytes) {
  const FleetStoreCounters before = store_->counters();
  const std::vector<FieldIncrement> a = {{"field", 1.0}};
  ASSERT_TRUE(store_->IncrementOnce("t:c", a, "t:c:once", 60000).ok());
  const std::vector<std::string> keys = {"t:c"};
  ASSERT_TRUE(store_->GetHashes(keys).ok());
  const FleetStoreCounters after = store_->counters();
  EXPECT_EQ(after.calls - before.calls, GetParam() == Kind::kRedis ? 3u : 2u);  // + the connect
  EXPECT_GT(after.bytes_sent, before.bytes_sent);
  EXPECT_GT(after.bytes_received, before.bytes_received);
}

// Publish reaches each subscriber of the channel (and says how many), no
// other channel's; a destroyed subscription gets nothing more.
TEST_P(StoreTest, PublishReachesTheChannelsSubscribersUntilTheyUnsubscribe) {
  Mutex mu;
  std::vector<std::string> got;
  auto sub = store_->Subscribe("chan-a", [&](std::string_view m) {
    MutexLock lock(&mu);
    got.emplace_back(m);
  });
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto other = store_->Subscribe("chan-b", [](std::string_view) {});
  ASSERT_TRUE(other.ok()) << other.status();
  // Readiness (a Redis subscription connects on its own thread), up to ~30 s.
  bool listening = false;
  for (int i = 0; i < 3000 && !listening; ++i) {
    absl::StatusOr<int64_t> n = store_->Publish("chan-a", "probe");
    listening = n.ok() && *n == 1;
    if (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(listening);
  absl::StatusOr<int64_t> n = store_->Publish("chan-a", "7");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1);
  bool arrived = false;
  for (int i = 0; i < 3000 && !arrived; ++i) {
    {
      MutexLock lock(&mu);
      arrived = !got.empty() && got.back() == "7";
    }
    if (!arrived) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(arrived);
  sub->reset();
  n = store_->Publish("chan-a", "8");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0);
  MutexLock lock(&mu);
  for (const std::string& m : got) EXPECT_NE(m, "8");
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values(Kind::kInProcess, Kind::kRedis),
                         [](const ::testing::TestParamInfo<Kind>& p) {
                           return p.param == Kind::kRedis ? "Redis" : "InProcess";
                         });

TEST(InProcessFleetStoreTest, AnOutageFailsEveryCallUntilItEnds) {
  ManualClock clock(0.0);
  InProcessFleetStore store(&clock);
  store.SetAvailable(false);
  auto r = store.GetVersioned("k");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  store.SetAvailable(true);
  EXPECT_TRUE(store.GetVersioned("k").ok());
}

TEST(InProcessFleetStoreTest, ReadsAboveTheLimitsAreRejected) {
  ManualClock clock(0.0);
  FleetValueLimits limits;
  limits.max_hash_fields = 3;
  InProcessFleetStore store(&clock, limits);
  for (const char* field : {"f0", "f1", "f2", "f3"}) store.PutRawHashField("h", field, "1");
  const std::vector<std::string> keys = {"h"};
  auto got = store.GetHashes(keys);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("4 fields"), absl::string_view::npos) << got.status();
}

TEST(OutageFleetStoreTest, RefusesWhileDownAndCountsTheRefusals) {
  ManualClock clock(0.0);
  InProcessFleetStore inner(&clock);
  bool down = true;
  OutageFleetStore store(&inner, [&down] { return down; });
  EXPECT_EQ(store.GetVersioned("k").status().code(), absl::StatusCode::kUnavailable);
  down = false;
  EXPECT_TRUE(store.GetVersioned("k").ok());
  EXPECT_EQ(store.counters().calls, 2u);
  EXPECT_EQ(store.counters().failures, 1u);
}

// Down: publishing fails, and a message published on the inner store
// meanwhile is not delivered to the wrapper's subscribers.
TEST(OutageFleetStoreTest, DeliversNothingWhileDown) {
  InProcessFleetStore inner;
  std::atomic<bool> down{false};
  OutageFleetStore store(&inner, [&down] { return down.load(); });
  std::vector<std::string> got;
  auto sub = store.Subscribe("c", [&](std::string_view m) { got.emplace_back(m); });
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_TRUE(store.Publish("c", "1").ok());
  down = true;
  EXPECT_EQ(store.Publish("c", "2").status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(inner.Publish("c", "3").ok());
  down = false;
  ASSERT_TRUE(store.Publish("c", "4").ok());
  EXPECT_EQ(got, (std::vector<std::string>{"1", "4"}));
}

TEST(FleetFingerprintTest, EveryFieldChangesThePrefixAndBadFieldsAreNamed) {
  FleetFingerprint f{"model-a", "onednn", "2.6", "x86_64", "float32"};
  ASSERT_TRUE(ValidateFleetFingerprint(f).ok());
  const std::string base = FleetKeyPrefix(f);
  EXPECT_EQ(base, FleetKeyPrefix(f));
  EXPECT_EQ(base.rfind("gearbox:f1:", 0), 0u) << base;
  for (int field = 0; field < 6; ++field) {
    FleetFingerprint g = f;
    switch (field) {
      case 0:
        g.model_id = "model-b";
        break;
      case 1:
        g.backend = "cuda";
        break;
      case 2:
        g.backend_version = "2.7";
        break;
      case 3:
        g.arch = "aarch64";
        break;
      case 4:
        g.dtype = "bfloat16";
        break;
      case 5:
        g.format_version = 2;
        break;
    }
    EXPECT_NE(FleetKeyPrefix(g), base) << field;
  }
  // Field boundaries count: moving a character between fields is another fingerprint.
  FleetFingerprint h{"ab", "c", "", "", ""};
  FleetFingerprint i{"a", "bc", "", "", ""};
  EXPECT_NE(FleetKeyPrefix(h), FleetKeyPrefix(i));

  FleetFingerprint empty;
  auto s = ValidateFleetFingerprint(empty);
  EXPECT_NE(s.message().find("fleet.model_id"), absl::string_view::npos) << s;
  FleetFingerprint control = f;
  control.dtype = "float\n32";
  s = ValidateFleetFingerprint(control);
  EXPECT_NE(s.message().find("fleet.dtype"), absl::string_view::npos) << s;
}

TEST(FleetDecodeTest, VersionsAndFloats) {
  EXPECT_EQ(*DecodeFleetVersion("42"), 42u);
  for (const char* bad :
       {"", "0", "-1", "+1", " 1", "1 ", "1a", "99999999999999999999", "9223372036854775808"}) {
    EXPECT_FALSE(DecodeFleetVersion(bad).ok()) << bad;
  }
  EXPECT_DOUBLE_EQ(*DecodeFleetFloat("2.5"), 2.5);
  EXPECT_DOUBLE_EQ(*DecodeFleetFloat("1e+17"), 1e17);
  EXPECT_DOUBLE_EQ(*DecodeFleetFloat("-3"), -3.0);
  EXPECT_DOUBLE_EQ(*DecodeFleetFloat("1.5e3"), 1500.0);
  for (const char* bad : {"", "inf", "nan", "1e400", "abc", "1,5", " 1", "1e19"}) {
    EXPECT_FALSE(DecodeFleetFloat(bad).ok()) << bad;
  }
}

TEST(RedisUrlTest, BadUrlsNameTheFieldAndNeverEchoCredentials) {
  auto ok = ParseRedisUrl("redis://127.0.0.1:6380");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->host, "127.0.0.1");
  EXPECT_EQ(ok->port, 6380);
  for (const char* bad :
       {"http://127.0.0.1:1", "redis://127.0.0.1", "redis://:6379", "redis://127.0.0.1:0",
        "redis://127.0.0.1:70000", "redis://h:1/0", "redis://h h:1", "redis://127.0.0.1:6379x"}) {
    auto r = ParseRedisUrl(bad, "--store");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message().rfind("--store: ", 0), 0u) << r.status();
    EXPECT_NE(r.status().message().find("redis://HOST:PORT"), absl::string_view::npos);
  }
  auto creds = ParseRedisUrl("redis://user:hunter2@127.0.0.1:6379", "--store");
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().message().find("hunter2"), absl::string_view::npos) << creds.status();
  EXPECT_NE(creds.status().message().find("<redacted>"), absl::string_view::npos);
}

TEST(RedisFleetStoreTest, OptionsAreValidated) {
  RedisFleetStoreOptions o;
  o.command_timeout_ms = 0;
  auto s = ValidateRedisFleetStoreOptions(o);
  EXPECT_NE(s.message().find("fleet.command_timeout_ms: 0"), absl::string_view::npos) << s;
  o = {};
  o.breaker_initial_backoff_ms = 1000;
  o.breaker_max_backoff_ms = 10;
  EXPECT_FALSE(ValidateRedisFleetStoreOptions(o).ok());
  o = {};
  o.username = "alice";
  s = ValidateRedisFleetStoreOptions(o);
  EXPECT_NE(s.message().find("fleet.username"), absl::string_view::npos) << s;
}

// A store nobody listens on: one failed connect, then nothing until the
// backoff (on the injected clock) has passed; the backoff doubles.
TEST(RedisFleetStoreTest, ADeadStoreCostsOneAttemptPerBackoff) {
  ManualClock clock(0.0);
  std::vector<std::string> logs;
  RedisFleetStoreOptions o;
  o.url = "redis://127.0.0.1:" + std::to_string(testing::FreeLocalPort());
  o.clock = &clock;
  o.breaker_initial_backoff_ms = 1000;
  o.breaker_max_backoff_ms = 4000;
  o.log = [&logs](LogLevel, std::string_view m) { logs.emplace_back(m); };
  auto store = RedisFleetStore::Create(o);
  ASSERT_TRUE(store.ok()) << store.status();
  auto first = (*store)->GetVersioned("k");
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kUnavailable) << first.status();
  EXPECT_TRUE((*store)->breaker_open());
  for (int i = 0; i < 5; ++i) EXPECT_FALSE((*store)->GetVersioned("k").ok());
  FleetStoreCounters c = (*store)->counters();
  EXPECT_EQ(c.calls, 1u);
  EXPECT_EQ(c.skipped, 5u);
  clock.Advance(1.001);
  EXPECT_FALSE((*store)->GetVersioned("k").ok());  // second attempt: backoff now 2 s
  clock.Advance(1.5);
  EXPECT_FALSE((*store)->GetVersioned("k").ok());
  c = (*store)->counters();
  EXPECT_EQ(c.calls, 2u);
  EXPECT_EQ(c.skipped, 6u);
  EXPECT_EQ(logs.size(), 1u);  // one warning per outage, not one per call
}

TEST(RedisFleetStoreTest, AKilledServerIsSurvivedAndReconnected) {
  RedisServer server;
  GEARBOX_REQUIRE_REDIS(server);
  ManualClock clock(0.0);
  RedisFleetStoreOptions o;
  o.url = server.url();
  o.clock = &clock;
  o.command_timeout_ms = 2000;
  o.log = [](LogLevel, std::string_view) {};
  auto store = RedisFleetStore::Create(o);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(*(*store)->CompareAndSet("k", 0, "v1", 0));
  server.Kill();
  auto down = (*store)->GetVersioned("k");
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();
  ASSERT_TRUE(server.Start()) << server.error();
  EXPECT_FALSE((*store)->GetVersioned("k").ok());  // breaker still open
  clock.Advance(10.0);
  auto back = (*store)->GetVersioned("k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 0u);  // a fresh server (no persistence): a miss, not an error
  EXPECT_EQ((*store)->counters().connects, 2u);
}

TEST(RedisFleetStoreTest, AuthFromTheEnvironmentAndNoPasswordInErrors) {
  RedisServer server({"--requirepass", "s3cret-pw"});
  GEARBOX_REQUIRE_REDIS(server);
  RedisFleetStoreOptions o;
  o.url = server.url();
  o.command_timeout_ms = 2000;
  o.log = [](LogLevel, std::string_view) {};
  unsetenv("GEARBOX_REDIS_PASSWORD");
  unsetenv("GEARBOX_REDIS_USERNAME");
  auto anonymous = RedisFleetStore::Create(o);
  ASSERT_TRUE(anonymous.ok());
  auto refused = (*anonymous)->GetVersioned("k");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("NOAUTH"), absl::string_view::npos) << refused.status();

  RedisFleetStoreOptions wrong = o;
  wrong.password = "wrong-pw-123";
  auto bad = RedisFleetStore::Create(wrong);
  ASSERT_TRUE(bad.ok());
  auto denied = (*bad)->GetVersioned("k");
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().message().find("wrong-pw-123"), absl::string_view::npos)
      << denied.status();
  EXPECT_EQ((*bad)->Describe().find("wrong-pw-123"), std::string::npos);

  setenv("GEARBOX_REDIS_PASSWORD", "s3cret-pw", 1);
  auto good = RedisFleetStore::Create(o);
  unsetenv("GEARBOX_REDIS_PASSWORD");
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE((*good)->CompareAndSet("k", 0, "v", 0).ok());
}

}  // namespace
}  // namespace gearbox
