// Fleet artifacts (gearbox/fleet_artifacts.h): SHA-256 against the
// standard's vectors; put/get, chunking, TTL and rejection of corrupt,
// truncated and hostile values, and single-flight Obtain, each on the
// in-process stand-in and on a real redis-server the test starts itself.
#include "gearbox/fleet_artifacts.h"

#include <hiredis/hiredis.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gearbox/clock.h"
#include "gearbox/fleet.h"
#include "gtest/gtest.h"
#include "tests/redis_fixture.h"

namespace gearbox {
namespace {

using ::gearbox::testing::RedisServer;

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7 + 3) % 256);
  return s;
}

TEST(FleetSha256Test, MatchesTheStandardsVectors) {
  EXPECT_EQ(FleetSha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(FleetSha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(FleetSha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(FleetSha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(FleetSha256Test, PaddingBoundaries) {
  // Lengths around the 55/56/64-byte padding cases (reference: Python's hashlib).
  const std::vector<std::pair<size_t, std::string>> cases = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {1000, "1e9bc38cbf860b9ec31918b065f9b52476c549a782e0e7990bed8ce3868d2371"}};
  for (const auto& [n, hex] : cases) EXPECT_EQ(FleetSha256Hex(Pattern(n)), hex) << n;
}

TEST(FleetArtifactCodecTest, ManifestRoundTripsAndRejectsHostileText) {
  FleetArtifactManifest m{"torchscript", 5000, 1024, 0};
  auto d = DecodeFleetArtifactManifest(EncodeFleetArtifactManifest(m));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, "torchscript");
  EXPECT_EQ(d->size, 5000);
  EXPECT_EQ(d->chunk_bytes, 1024);
  EXPECT_EQ(d->chunks, 5);
  for (const std::string& bad :
       {std::string(""),
        std::string("gearbox-artifact 1\nkind x\nsize 10\nchunk 4"),  // no final newline
        std::string("gearbox-artifact 2\nkind x\nsize 10\nchunk 4\n"),
        std::string("gearbox-artifact 1\nkind X!\nsize 10\nchunk 4\n"),
        std::string("gearbox-artifact 1\nkind x\nsize -1\nchunk 4\n"),
        std::string("gearbox-artifact 1\nkind x\nsize 010\nchunk 4\n"),
        std::string("gearbox-artifact 1\nkind x\nsize 99999999999999999999\nchunk 4\n"),
        std::string("gearbox-artifact 1\nkind x\nsize 10\nchunk 0\n"),
        std::string("gearbox-artifact 1\nkind x\nsize 4294967296\nchunk 1\n"),  // chunks
        std::string("gearbox-artifact 1\nkind x\nsize 10\nchunk 4\nextra 1\n"),
        std::string(2000, 'a')}) {
    auto r = DecodeFleetArtifactManifest(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    }
  }
  EXPECT_TRUE(CheckFleetDigest(FleetSha256Hex("x")).ok());
  EXPECT_FALSE(CheckFleetDigest("ABC").ok());
  EXPECT_FALSE(CheckFleetDigest(std::string(64, 'g')).ok());
}

TEST(FleetArtifactOptionsTest, ErrorsNameTheField) {
  InProcessFleetStore store;
  FleetFingerprint fp{"model", "simulated", "", "", "", kFleetFormatVersion};
  auto check = [&](FleetArtifactOptions o, const std::string& field) {
    auto s = FleetArtifactStore::Create(&store, fp, o);
    ASSERT_FALSE(s.ok()) << field;
    EXPECT_NE(s.status().message().find(field), std::string::npos) << s.status();
  };
  FleetArtifactOptions o;
  check(o, "replica_id");
  o.replica_id = "r";
  auto with = [&](auto f) {
    FleetArtifactOptions x = o;
    f(x);
    return x;
  };
  check(with([](auto& x) { x.chunk_bytes = 10; }), "chunk_bytes");
  check(with([](auto& x) { x.max_chunks = 0; }), "max_chunks");
  check(with([](auto& x) { x.ttl_ms = 0; }), "ttl_ms");
  check(with([](auto& x) { x.lease_ms = -5; }), "lease_ms");
  check(with([](auto& x) { x.wait_ms = -1; }), "wait_ms");
  check(with([](auto& x) { x.poll_ms = 0; }), "poll_ms");
  check(with([](auto& x) { x.chunks_per_read = 0; }), "chunks_per_read");
  EXPECT_TRUE(FleetArtifactStore::Create(&store, fp, o).ok());
  auto a = *FleetArtifactStore::Create(&store, fp, o);
  EXPECT_NE(a->Put("8 x 16", "tuning", "x").status().message().find("gear key"), std::string::npos);
  EXPECT_NE(a->Put("8", "Tuning!", "x").status().message().find("kind"), std::string::npos);
}

// A clock whose sleeps return at once after running a hook (a replica
// finishing its build, or real time passing for Redis's expiry).
class SteppingClock final : public Clock {
 public:
  explicit SteppingClock(double start) : now_(start) {}
  double NowSeconds() const override { return now_; }
  bool SleepUntil(double deadline, WakeSignal*) override {
    ++sleeps;
    if (on_sleep) on_sleep();
    now_ = std::max(now_, deadline);
    return true;
  }
  void Advance(double s) { now_ += s; }
  std::function<void()> on_sleep;
  int sleeps = 0;

 private:
  double now_;
};

enum class Kind { kInProcess, kRedis };

class ArtifactTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kInProcess) {
      auto s = std::make_unique<InProcessFleetStore>(&clock_);
      in_process_ = s.get();
      store_ = std::move(s);
    } else {
      server_ = std::make_unique<RedisServer>();
      GEARBOX_REQUIRE_REDIS(*server_);
      RedisFleetStoreOptions o;
      o.url = server_->url();
      o.command_timeout_ms = 2000;  // generous: a loaded CI machine must not fail a call
      auto s = RedisFleetStore::Create(o);
      ASSERT_TRUE(s.ok()) << s.status();
      store_ = *std::move(s);
    }
  }
  std::unique_ptr<FleetArtifactStore> Make(const std::string& replica,
                                           std::function<void(FleetArtifactOptions&)> tweak = {}) {
    FleetArtifactOptions o;
    o.replica_id = replica;
    o.chunk_bytes = 1024;
    o.max_chunks = 16;
    o.clock = &clock_;
    if (tweak) tweak(o);
    auto a = FleetArtifactStore::Create(store_.get(), fingerprint_, o,
                                        [this](LogLevel level, std::string_view m) {
                                          if (level == LogLevel::kError) errors_.emplace_back(m);
                                        });
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *std::move(a) : nullptr;
  }
  // Past a TTL: virtual time for the stand-in, real time for Redis.
  void Pass(int ms) {
    clock_.Advance(ms / 1000.0);
    if (GetParam() == Kind::kRedis) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  void Raw(const std::string& key, const std::string& value) {
    if (in_process_ != nullptr) {
      in_process_->PutRawString(key, value);
      return;
    }
    redisContext* c = redisConnect("127.0.0.1", server_->port());
    ASSERT_TRUE(c != nullptr && c->err == 0);
    const char* argv[3] = {"SET", key.c_str(), value.c_str()};
    const size_t lens[3] = {3, key.size(), value.size()};
    freeReplyObject(redisCommandArgv(c, 3, argv, lens));
    redisFree(c);
  }
  void Down() {
    if (in_process_ != nullptr) {
      in_process_->SetAvailable(false);
    } else {
      server_->Stop();
    }
  }

  SteppingClock clock_{1000.0};
  FleetFingerprint fingerprint_{"model-a", "simulated", "1",
                                "x86_64",  "float32",   kFleetFormatVersion};
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<FleetStore> store_;
  InProcessFleetStore* in_process_ = nullptr;
  std::vector<std::string> errors_;
};

TEST_P(ArtifactTest, PutThenGetReturnsTheBytesChunkedWhenLarge) {
  auto a = Make("r0");
  auto b = Make("r1");
  for (size_t n : {size_t{0}, size_t{10}, size_t{1024}, size_t{5000}, size_t{16 * 1024}}) {
    const std::string bytes = Pattern(n);
    const std::string gear = "g" + std::to_string(n);
    auto digest = a->Put(gear, "torchscript", bytes);
    ASSERT_TRUE(digest.ok()) << digest.status();
    EXPECT_EQ(*digest, FleetSha256Hex(bytes));
    auto got = b->Get(gear, "torchscript");
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << n;
    EXPECT_EQ((*got)->bytes, bytes);
    EXPECT_EQ((*got)->digest, *digest);
    // Another kind of the same gear is another artifact.
    auto other = b->Get(gear, "tuning");
    ASSERT_TRUE(other.ok());
    EXPECT_FALSE(other->has_value());
  }
  EXPECT_EQ(b->counters().loads, 5u);
  EXPECT_EQ(b->counters().corrupt, 0u);
  EXPECT_TRUE(errors_.empty());
  // Above max_chunks x chunk_bytes: refused, nothing written.
  auto big = a->Put("big", "torchscript", Pattern(16 * 1024 + 1));
  EXPECT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("artifact size"), std::string::npos) << big.status();
  EXPECT_EQ(a->counters().too_large, 1u);
  EXPECT_FALSE(b->Get("big", "torchscript")->has_value());
}

TEST_P(ArtifactTest, AnotherFingerprintNeverSeesTheArtifact) {
  auto a = Make("r0");
  ASSERT_TRUE(a->Put("8", "tuning", "choice").ok());
  fingerprint_.backend_version = "2";
  auto b = Make("r1");
  auto got = b->Get("8", "tuning");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
}

TEST_P(ArtifactTest, CorruptTruncatedAndHostileValuesAreMissesNeverCrashes) {
  auto a = Make("r0");
  auto b = Make("r1");
  const std::string bytes = Pattern(3000);  // 3 chunks of 1024, 1024, 952
  auto digest = a->Put("g", "torchscript", bytes);
  ASSERT_TRUE(digest.ok());
  const std::string base = a->prefix() + ":art:" + *digest;
  const std::string index = a->prefix() + ":art:idx:torchscript:g";
  auto expect_rejected = [&](const std::string& what) {
    const uint64_t before = b->counters().corrupt;
    const size_t logged = errors_.size();
    auto got = b->Get("g", "torchscript");
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    EXPECT_FALSE(got->has_value()) << what;
    EXPECT_EQ(b->counters().corrupt, before + 1) << what;
    EXPECT_EQ(errors_.size(), logged + 1) << what;
  };
  // A flipped byte, same length: only the digest catches it.
  std::string flipped = bytes.substr(1024, 1024);
  flipped[100] ^= 1;
  Raw(base + ":c1", flipped);
  expect_rejected("flipped byte");
  Raw(base + ":c1", bytes.substr(1024, 1000));
  expect_rejected("truncated chunk");
  Raw(base + ":c1", bytes.substr(1024, 1024) + "tail");
  expect_rejected("over-long chunk");
  Raw(base + ":c1", std::string(2 << 20, 'x'));  // above the store's 1 MiB value limit
  expect_rejected("oversized chunk");
  Raw(base + ":c1", bytes.substr(1024, 1024));
  ASSERT_TRUE(b->Get("g", "torchscript")->has_value());  // repaired
  Raw(base + ":m", "gearbox-artifact 1\nkind torchscript\nsize 4294967296\nchunk 1\n");
  expect_rejected("hostile manifest: 2^32 chunks");
  Raw(base + ":m", "gearbox-artifact 1\nkind torchscript\nsize 100000\nchunk 1024\n");
  expect_rejected("manifest above max_chunks");
  Raw(base + ":m", "gearbox-artifact 1\nkind tuning\nsize 3000\nchunk 1024\n");
  expect_rejected("manifest of another kind");
  Raw(base + ":m", "gearbox-artifact 1\nkind torchscript\nsize 3000\nchunk 1024\n");
  ASSERT_TRUE(b->Get("g", "torchscript")->has_value());
  Raw(index, "not a digest");
  expect_rejected("index not a digest");
  Raw(index, FleetSha256Hex("something else"));  // a digest with no manifest: a plain miss
  auto got = b->Get("g", "torchscript");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  // A put repairs everything.
  ASSERT_TRUE(a->Put("g", "torchscript", bytes).ok());
  got = b->Get("g", "torchscript");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->bytes, bytes);
}

TEST_P(ArtifactTest, ExpiresAfterItsTtl) {
  auto a = Make("r0", [](FleetArtifactOptions& o) { o.ttl_ms = 300; });
  ASSERT_TRUE(a->Put("g", "tuning", Pattern(2500)).ok());
  ASSERT_TRUE(a->Get("g", "tuning")->has_value());
  Pass(400);
  auto got = a->Get("g", "tuning");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(a->counters().corrupt, 0u);
}

TEST_P(ArtifactTest, ObtainBuildsOnceAndTheOthersLoad) {
  int builds = 0;
  auto build = [&]() -> absl::StatusOr<std::string> {
    ++builds;
    return Pattern(4000);
  };
  auto a = Make("r0");
  auto b = Make("r1");
  auto first = a->Obtain("8x16", "torchscript", build);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->source, ArtifactSource::kBuilt);
  auto second = b->Obtain("8x16", "torchscript", build);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->source, ArtifactSource::kLoaded);
  EXPECT_FALSE(second->waited);
  EXPECT_EQ(second->artifact.bytes, Pattern(4000));
  EXPECT_EQ(builds, 1);
  // A failed build is returned, never stored; the lease is released.
  auto failing = []() -> absl::StatusOr<std::string> {
    return absl::InternalError("compiler crashed");
  };
  auto f = a->Obtain("32", "torchscript", failing);
  EXPECT_FALSE(f.ok());
  auto again = b->Obtain("32", "torchscript", build);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->source, ArtifactSource::kBuilt);
  EXPECT_FALSE(again->waited);  // a's lease was released after its failure
}

TEST_P(ArtifactTest, AWaiterLoadsTheHoldersArtifact) {
  auto a = Make("r0");
  auto b = Make("r1");
  const std::string lease = a->prefix() + ":art:lease:torchscript:8";
  ASSERT_TRUE(*store_->AcquireLease(lease, "r0", 30000));  // r0 is compiling
  clock_.on_sleep = [&] {
    if (clock_.sleeps == 2) {
      ASSERT_TRUE(a->Put("8", "torchscript", "compiled").ok());
    }
  };
  int builds = 0;
  auto got = b->Obtain("8", "torchscript", [&]() -> absl::StatusOr<std::string> {
    ++builds;
    return std::string("mine");
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->source, ArtifactSource::kLoaded);
  EXPECT_TRUE(got->waited);
  EXPECT_EQ(got->artifact.bytes, "compiled");
  EXPECT_EQ(builds, 0);
  EXPECT_EQ(clock_.sleeps, 2);
  EXPECT_EQ(b->counters().lease_waits, 1u);
}

TEST_P(ArtifactTest, AWaiterBuildsItselfWhenTheLeaseLapses) {
  // The holder died: its lease (300 ms) expires during the wait (2 s).
  auto b = Make("r1", [](FleetArtifactOptions& o) {
    o.wait_ms = 2000;
    o.poll_ms = 100;
  });
  const std::string lease = b->prefix() + ":art:lease:torchscript:8";
  ASSERT_TRUE(*store_->AcquireLease(lease, "dead-replica", 300));
  clock_.on_sleep = [&] {
    if (GetParam() == Kind::kRedis) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  auto got = b->Obtain("8", "torchscript", [] { return absl::StatusOr<std::string>("mine"); });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->source, ArtifactSource::kBuilt);
  EXPECT_TRUE(got->waited);
  EXPECT_EQ(b->counters().builds_after_wait, 1u);
  // It put what it built: the next replica loads it.
  auto c = Make("r2");
  auto next = c->Get("8", "torchscript");
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ((*next)->bytes, "mine");
}

TEST_P(ArtifactTest, WithoutWaitingABusyLeaseMeansBuildingAtOnce) {
  auto b = Make("r1", [](FleetArtifactOptions& o) { o.wait_ms = 0; });
  ASSERT_TRUE(*store_->AcquireLease(b->prefix() + ":art:lease:tuning:8", "r0", 30000));
  auto got = b->Obtain("8", "tuning", [] { return absl::StatusOr<std::string>("t"); });
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->source, ArtifactSource::kBuilt);
  EXPECT_EQ(clock_.sleeps, 0);
}

TEST_P(ArtifactTest, TheStoreDownMeansBuildingLocallyNeverAnError) {
  auto a = Make("r0");
  Down();
  int builds = 0;
  auto got = a->Obtain("8", "tuning", [&]() -> absl::StatusOr<std::string> {
    ++builds;
    return std::string("t");
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->source, ArtifactSource::kBuilt);
  EXPECT_EQ(builds, 1);
  EXPECT_GE(a->counters().store_failures, 1u);
  auto get = a->Get("8", "tuning");
  EXPECT_EQ(get.status().code(), absl::StatusCode::kUnavailable);
}

// The wait on the real clock (what a fleet of processes does): a holder
// that died leaves a short lease; the waiter takes over once it lapses.
TEST(FleetArtifactRealClockTest, AWaiterOnTheSystemClockTakesOverALapsedLease) {
  InProcessFleetStore store;  // expiry on the system clock
  FleetFingerprint fp{"model", "simulated", "", "", "", kFleetFormatVersion};
  FleetArtifactOptions o;
  o.replica_id = "r1";
  o.wait_ms = 5000;
  o.poll_ms = 10;
  auto a = FleetArtifactStore::Create(&store, fp, o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(*store.AcquireLease((*a)->prefix() + ":art:lease:tuning:8", "dead", 50));
  auto got = (*a)->Obtain("8", "tuning", [] { return absl::StatusOr<std::string>("t"); });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->source, ArtifactSource::kBuilt);
  EXPECT_TRUE(got->waited);
  EXPECT_EQ((*a)->counters().builds_after_wait, 1u);
}

INSTANTIATE_TEST_SUITE_P(Stores, ArtifactTest, ::testing::Values(Kind::kInProcess, Kind::kRedis),
                         [](const ::testing::TestParamInfo<Kind>& p) {
                           return p.param == Kind::kRedis ? "Redis" : "InProcess";
                         });

}  // namespace
}  // namespace gearbox
