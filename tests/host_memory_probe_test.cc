// HostMemoryProbe against fake /proc and /sys trees in a temporary directory
// (cgroup v2 with and without a limit, meminfo only, byte budgets, malformed
// files), its parsers, and one reading of the real machine.
#include "gearbox/host_memory_probe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace gearbox {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kMeminfo[] =
    "MemTotal:       1000 kB\n"
    "MemFree:         100 kB\n"
    "MemAvailable:    250 kB\n"
    "Buffers:          10 kB\n";

// A fresh directory standing for "/", removed at the end of the test.
class FakeRoot {
 public:
  FakeRoot() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            (std::string("gearbox_probe_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~FakeRoot() { fs::remove_all(root_); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;

  void Write(const std::string& relative, const std::string& text) const {
    const fs::path p = root_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  HostMemoryProbeOptions Options(int64_t budget_bytes = 0) const {
    HostMemoryProbeOptions o;
    o.root = root_.string();
    o.budget_bytes = budget_bytes;
    return o;
  }
  std::string path(const std::string& relative) const { return (root_ / relative).string(); }

 private:
  fs::path root_;
};

TEST(ParseMeminfo, ReadsTotalAndAvailableInBytes) {
  auto m = ParseMeminfo(kMeminfo, "meminfo");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total, 1000 * 1024);
  EXPECT_EQ(m->available, 250 * 1024);
}

TEST(ParseMeminfo, MissingAvailableOrBadNumberNamesTheFile) {
  auto no_available = ParseMeminfo("MemTotal: 1000 kB\nMemFree: 5 kB\n", "/x/meminfo");
  ASSERT_FALSE(no_available.ok());
  EXPECT_THAT(no_available.status().message(), HasSubstr("/x/meminfo"));
  EXPECT_THAT(no_available.status().message(), HasSubstr("MemAvailable"));
  auto bad = ParseMeminfo("MemTotal: lots kB\nMemAvailable: 1 kB\n", "/x/meminfo");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("/x/meminfo: MemTotal"));
  EXPECT_THAT(bad.status().message(), HasSubstr("lots"));
  EXPECT_FALSE(ParseMeminfo("MemTotal: 0 kB\nMemAvailable: 0 kB\n", "m").ok());
}

TEST(ParseCgroupPath, FindsTheV2LineOrNone) {
  auto v2 = ParseCgroupPath("4:memory:/v1path\n0::/user.slice/app\n", "cgroup");
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->value_or(""), "/user.slice/app");
  auto v1_only = ParseCgroupPath("4:memory:/v1path\n1:cpu:/\n", "cgroup");
  ASSERT_TRUE(v1_only.ok());
  EXPECT_FALSE(v1_only->has_value());
  auto relative = ParseCgroupPath("0::oops\n", "/p/cgroup");
  ASSERT_FALSE(relative.ok());
  EXPECT_THAT(relative.status().message(), HasSubstr("/p/cgroup"));
  EXPECT_THAT(relative.status().message(), HasSubstr("oops"));
}

TEST(ParseCgroupMax, NumberOrMax) {
  auto limit = ParseCgroupMax("4096\n", "memory.max");
  ASSERT_TRUE(limit.ok());
  EXPECT_EQ(limit->value_or(-1), 4096);
  auto none = ParseCgroupMax("max\n", "memory.max");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto bad = ParseCgroupMax("12abc\n", "/c/memory.max");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("/c/memory.max"));
  EXPECT_THAT(bad.status().message(), HasSubstr("12abc"));
  EXPECT_FALSE(ParseByteCount("-3", "memory.current").ok());
}

TEST(HostMemoryProbe, CgroupV2WithALimit) {
  FakeRoot fake;
  fake.Write("proc/self/cgroup", "0::/app\n");
  fake.Write("sys/fs/cgroup/app/memory.max", "1000\n");
  fake.Write("sys/fs/cgroup/app/memory.current", "250\n");
  fake.Write("proc/meminfo", kMeminfo);
  HostMemoryProbe probe(fake.Options());
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.25);
  EXPECT_EQ(probe.source(), "cgroup v2: " + fake.path("sys/fs/cgroup/app/memory.max"));
}

TEST(HostMemoryProbe, AnAncestorsLimitNearerToBindingWins) {
  FakeRoot fake;
  fake.Write("proc/self/cgroup", "0::/parent/app\n");
  fake.Write("sys/fs/cgroup/parent/memory.max", "1000\n");
  fake.Write("sys/fs/cgroup/parent/memory.current", "900\n");
  fake.Write("sys/fs/cgroup/parent/app/memory.max", "max\n");
  fake.Write("sys/fs/cgroup/parent/app/memory.current", "100\n");
  fake.Write("proc/meminfo", kMeminfo);
  HostMemoryProbe probe(fake.Options());
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.9);
  EXPECT_EQ(probe.source(), "cgroup v2: " + fake.path("sys/fs/cgroup/parent/memory.max"));
}

TEST(HostMemoryProbe, CgroupV2WithoutALimitFallsBackToMeminfo) {
  FakeRoot fake;
  fake.Write("proc/self/cgroup", "0::/app\n");
  fake.Write("sys/fs/cgroup/app/memory.max", "max\n");
  fake.Write("sys/fs/cgroup/app/memory.current", "250\n");
  fake.Write("proc/meminfo", kMeminfo);
  HostMemoryProbe probe(fake.Options());
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.75);  // (1000 - 250) / 1000
  EXPECT_EQ(probe.source(), "meminfo");
}

TEST(HostMemoryProbe, NoCgroupFileOrV1OnlyReadsMeminfo) {
  FakeRoot fake;
  fake.Write("proc/meminfo", kMeminfo);
  HostMemoryProbe probe(fake.Options());
  EXPECT_EQ(probe.source(), "");
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.75);
  EXPECT_EQ(probe.source(), "meminfo");
  fake.Write("proc/self/cgroup", "4:memory:/v1path\n0::/\n");  // root cgroup: no memory.max
  usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.75);
}

TEST(HostMemoryProbe, BudgetAgainstCgroupCurrent) {
  FakeRoot fake;
  fake.Write("proc/self/cgroup", "0::/app\n");
  fake.Write("sys/fs/cgroup/app/memory.max", "max\n");
  fake.Write("sys/fs/cgroup/app/memory.current", "300\n");
  HostMemoryProbe probe(fake.Options(/*budget_bytes=*/200));
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 1.5);
  EXPECT_EQ(probe.source(), "cgroup v2 memory.current vs budget");
}

TEST(HostMemoryProbe, BudgetAgainstRssWithoutCgroup) {
  FakeRoot fake;
  fake.Write("proc/self/statm", "765 425 396 5 0 123 0\n");
  const int64_t page = sysconf(_SC_PAGESIZE);
  HostMemoryProbe probe(fake.Options(/*budget_bytes=*/1000 * page));
  auto usage = probe.UsageFraction();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ(*usage, 0.425);
  EXPECT_EQ(probe.source(), "rss vs budget");
}

TEST(HostMemoryProbe, MalformedFilesAreErrorsNamingTheFileAndValue) {
  {
    FakeRoot fake;
    fake.Write("proc/self/cgroup", "0::/app\n");
    fake.Write("sys/fs/cgroup/app/memory.max", "lots\n");
    fake.Write("sys/fs/cgroup/app/memory.current", "1\n");
    auto usage = HostMemoryProbe(fake.Options()).UsageFraction();
    ASSERT_FALSE(usage.ok());
    EXPECT_THAT(usage.status().message(), HasSubstr(fake.path("sys/fs/cgroup/app/memory.max")));
    EXPECT_THAT(usage.status().message(), HasSubstr("lots"));
  }
  {
    FakeRoot fake;
    fake.Write("proc/self/cgroup", "0::/app\n");
    fake.Write("sys/fs/cgroup/app/memory.max", "1000\n");
    auto usage = HostMemoryProbe(fake.Options()).UsageFraction();
    ASSERT_FALSE(usage.ok());  // a limit but no memory.current
    EXPECT_THAT(usage.status().message(), HasSubstr(fake.path("sys/fs/cgroup/app/memory.current")));
  }
  {
    FakeRoot fake;
    fake.Write("proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: ?? kB\n");
    HostMemoryProbe probe(fake.Options());
    auto usage = probe.UsageFraction();
    ASSERT_FALSE(usage.ok());
    EXPECT_THAT(usage.status().message(), HasSubstr(fake.path("proc/meminfo")));
    EXPECT_THAT(usage.status().message(), HasSubstr("??"));
    EXPECT_EQ(probe.source(), "");  // no successful reading
  }
  {
    FakeRoot fake;  // nothing at all
    auto usage = HostMemoryProbe(fake.Options()).UsageFraction();
    ASSERT_FALSE(usage.ok());
    EXPECT_THAT(usage.status().message(), HasSubstr(fake.path("proc/meminfo")));
  }
  {
    FakeRoot fake;
    fake.Write("proc/self/statm", "garbage\n");
    auto usage = HostMemoryProbe(fake.Options(100)).UsageFraction();
    ASSERT_FALSE(usage.ok());
    EXPECT_THAT(usage.status().message(), HasSubstr(fake.path("proc/self/statm")));
    EXPECT_THAT(usage.status().message(), HasSubstr("garbage"));
  }
}

// The real machine: whichever source applies, a finite fraction in [0, 2].
TEST(HostMemoryProbe, RealMachine) {
  if (!fs::exists("/proc/meminfo")) GTEST_SKIP() << "no /proc";
  for (int64_t budget : {int64_t{0}, int64_t{1} << 40}) {
    HostMemoryProbeOptions o;
    o.budget_bytes = budget;
    HostMemoryProbe probe(o);
    auto usage = probe.UsageFraction();
    ASSERT_TRUE(usage.ok()) << usage.status();
    EXPECT_TRUE(std::isfinite(*usage));
    EXPECT_GE(*usage, 0.0);
    EXPECT_LE(*usage, 2.0);
    EXPECT_FALSE(probe.source().empty());
    std::cout << "budget " << budget << ": " << *usage << " from " << probe.source() << "\n";
  }
}

}  // namespace
}  // namespace gearbox
