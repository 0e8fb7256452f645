#include "gearbox/stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "gearbox/replan_policy.h"
#include "src/stats/gear_window.h"
#include "src/stats/size_drift.h"
#include "src/stats/size_history.h"
#include "src/stats/window_store.h"

namespace gearbox {
namespace {

using internal::GearWindow;
using internal::WindowGeometry;
using internal::WindowStore;

TEST(RawSampleHistogram, ExactBelow256) {
  for (int64_t v = 1; v < 256; ++v) {
    EXPECT_EQ(RawSampleHistogram::BinValue(RawSampleHistogram::BinOf(v)), v);
  }
}

TEST(RawSampleHistogram, BinsTileTheRangeAndBoundTheError) {
  int64_t expected_low = 256;
  for (int64_t bin = 256; bin < 256 + 128 * 20; ++bin) {
    ASSERT_EQ(RawSampleHistogram::BinLow(bin), expected_low) << bin;
    expected_low += RawSampleHistogram::BinWidth(bin);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const int64_t v = 1 + static_cast<int64_t>(rng() % (int64_t{1} << (1 + rng() % 40)));
    const int64_t bin = RawSampleHistogram::BinOf(v);
    ASSERT_GE(v, RawSampleHistogram::BinLow(bin));
    ASSERT_LT(v, RawSampleHistogram::BinLow(bin) + RawSampleHistogram::BinWidth(bin));
    const double err = std::abs(static_cast<double>(RawSampleHistogram::BinValue(bin) - v)) /
                       static_cast<double>(v);
    ASSERT_LE(err, 1.0 / 256.0) << v;
  }
  EXPECT_GT(RawSampleHistogram::BinOf(INT64_MAX), 0);
}

TEST(RawSampleHistogram, MedianMatchesPythonIntStatisticsMedian) {
  RawSampleHistogram h;
  EXPECT_EQ(h.Median(), 0);
  for (int64_t v : {5, 1, 9}) h.Add(v);
  EXPECT_EQ(h.Median(), 5);  // odd: the middle
  h.Add(10);
  EXPECT_EQ(h.Median(), 7);  // even: (5 + 9) / 2
  h.Add(2);
  h.Add(2, 4);
  EXPECT_EQ(h.total(), 9u);
  EXPECT_EQ(h.Median(), 2);  // 1,2,2,2,2,2,5,9,10
  RawSampleHistogram even;
  even.Add(3);
  even.Add(6);
  EXPECT_EQ(even.Median(), 4);  // int(4.5)
}

TEST(RawSampleHistogram, MergeAndRandomMedianWithinBound) {
  std::mt19937_64 rng(11);
  std::vector<int64_t> all;
  RawSampleHistogram a, b;
  for (int i = 0; i < 5001; ++i) {
    const int64_t v = 1 + static_cast<int64_t>(rng() % 9000);
    all.push_back(v);
    (i % 2 ? a : b).Add(v);
  }
  a.Merge(b);
  EXPECT_EQ(a.total(), all.size());
  std::sort(all.begin(), all.end());
  const int64_t truth = all[all.size() / 2];
  EXPECT_LE(std::abs(a.Median() - truth), truth / 256 + 1);
}

TEST(GearWindow, DecayedSumsAreExact) {
  const WindowGeometry geo = WindowGeometry::Make(300, 30, 150);
  GearWindow w(32, 0.0, geo);
  // Two padded events and one split event against gear 32.
  ASSERT_TRUE(w.Add(100.0, 16, 1, geo));
  ASSERT_TRUE(w.Add(175.0, 32, 2, geo));
  ASSERT_TRUE(w.Add(250.0, 48, 1, geo));
  const double now = 250.0;
  const GearStats s = w.Summarize(now, geo);
  const std::vector<RawEvent> events = {{16, 100.0, 1}, {32, 175.0, 2}, {48, 250.0, 1}};
  const GearStats exact = MakeGearStats(32, events, now, 150.0);
  const double l = std::log(2.0) / 150.0;
  const double w1 = std::exp(-l * 150), w2 = 2 * std::exp(-l * 75), w3 = 1.0;
  EXPECT_NEAR(s.weighted_hits, w1 + w2 + w3, 1e-12);
  EXPECT_NEAR(s.weighted_hits, exact.weighted_hits, 1e-12);
  EXPECT_NEAR(s.avg_pad_ratio, (w1 * 0.5) / (w1 + w2 + w3), 1e-12);
  EXPECT_NEAR(s.avg_split_ratio, (w3 * 16.0 / 48.0) / (w1 + w2 + w3), 1e-12);
  EXPECT_NEAR(s.avg_pad_ratio, exact.avg_pad_ratio, 1e-12);
  EXPECT_NEAR(s.avg_split_ratio, exact.avg_split_ratio, 1e-12);
  EXPECT_EQ(s.sample_count, 4u);
  EXPECT_EQ(s.pad_sample_count, 1u);
  EXPECT_EQ(s.split_sample_count, 1u);
  EXPECT_EQ(s.unsplit_sample_count, 3u);
  EXPECT_NEAR(s.unsplit_raw_weighted, w1 * 16 + w2 * 32, 1e-9);
  EXPECT_EQ(s.raw_samples.Median(), 32);  // 16, 32, 32, 48
  EXPECT_EQ(s.last_hit_ts, 250.0);
  EXPECT_EQ(s.created_ts, 0.0);
}

TEST(GearWindow, HalfLifeHalvesTheWeight) {
  const WindowGeometry geo = WindowGeometry::Make(300, 30, 150);
  GearWindow w(8, 0.0, geo);
  ASSERT_TRUE(w.Add(10.0, 8, 1, geo));
  EXPECT_NEAR(w.Summarize(160.0, geo).weighted_hits, 0.5, 1e-12);
  EXPECT_NEAR(w.Summarize(10.0, geo).weighted_hits, 1.0, 1e-12);
}

TEST(GearWindow, SlotsLeaveTheWindowWhole) {
  const WindowGeometry geo = WindowGeometry::Make(300, 30, 150);  // 10 s slots
  GearWindow w(8, 0.0, geo);
  ASSERT_TRUE(w.Add(5.0, 4, 1, geo));                   // slot [0, 10)
  ASSERT_TRUE(w.Add(15.0, 8, 1, geo));                  // slot [10, 20)
  EXPECT_EQ(w.Summarize(309.0, geo).sample_count, 2u);  // slot [0,10) overlaps [9, 309]
  EXPECT_EQ(w.Summarize(310.0, geo).sample_count, 1u);  // [0,10) ends at the window start
  EXPECT_EQ(w.Summarize(320.0, geo).sample_count, 0u);
  // Slots that start after `now` are not counted.
  EXPECT_EQ(w.Summarize(-1.0, geo).sample_count, 0u);
}

TEST(GearWindow, LateEventsBeyondTheRingAreRejected) {
  const WindowGeometry geo = WindowGeometry::Make(300, 30, 150);
  GearWindow w(8, 0.0, geo);
  ASSERT_TRUE(w.Add(1000.0, 8, 1, geo));
  EXPECT_FALSE(w.Add(1000.0 - 320.0, 8, 1, geo));  // ring holds 31 slots of 10 s
  EXPECT_TRUE(w.Add(1000.0 - 250.0, 8, 1, geo));
  EXPECT_EQ(w.Summarize(1000.0, geo).sample_count, 2u);
}

TEST(GearWindow, MemoryStaysBoundedWhateverTheRate) {
  const WindowGeometry geo = WindowGeometry::Make(300, 30, 150);
  GearWindow w(1024, 0.0, geo);
  std::mt19937_64 rng(3);
  // 10k requests/s for 10 simulated minutes: 6 million samples.
  for (int64_t i = 0; i < 6000000; ++i) {
    const double t = static_cast<double>(i) / 10000.0;
    ASSERT_TRUE(w.Add(t, 513 + static_cast<int64_t>(rng() % 512), 1, geo));
  }
  // Raw sizes 513..1024 span 129 bins; a slot's counts never hold more than
  // twice that (vector growth), whatever the number of samples.
  EXPECT_LT(w.MemoryBytes(), 31u * (2 * 130 * sizeof(uint64_t) + 256)) << w.MemoryBytes();
  const GearStats s = w.Summarize(600.0, geo);
  EXPECT_GT(s.sample_count, 2900000u);
  EXPECT_NEAR(static_cast<double>(s.raw_samples.Median()), 768.0, 768.0 / 100);
}

// ---- SizeDrift: whether the sizes drift (DimensionStats::size_drift_*) ----

using internal::SizeDrift;

// 30 minutes of sizes around 1000 exp(slope t), 5 a second, with a
// log-normal spread (sigma 0.5); `burst` adds, from minute 20 to 23, 4x the traffic at
// 8x the size.
SizeDrift DriftOf(double slope, bool burst, uint64_t seed) {
  SizeDrift drift(60.0, 30);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> spread(0.0, 1.0);
  for (int i = 0; i < 5 * 1800; ++i) {
    const double t = 0.2 * i;
    const double log_size = std::log(1000.0) + slope * t + 0.5 * spread(rng);
    drift.Add(t, static_cast<int64_t>(std::exp(log_size)) + 1, 1);
    if (burst && t >= 1200 && t < 1380) {
      for (int k = 0; k < 4; ++k) {
        drift.Add(t, static_cast<int64_t>(std::exp(std::log(8000.0) + 0.3 * spread(rng))), 1);
      }
    }
  }
  return drift;
}

TEST(SizeDrift, ADriftIsMeasuredAndMostPairsAgree) {
  // x4 an hour: log(4) / 3600 per second.
  const double slope = std::log(4.0) / 3600.0;
  // At 1800 s the ring holds minutes 1..30; minute 30 has no sample yet.
  const SizeDrift::Estimate e = DriftOf(slope, false, 1).At(1800.0);
  EXPECT_EQ(e.bins, 29);
  EXPECT_NEAR(e.per_second, slope, 0.25 * slope);
  EXPECT_GE(e.agreement, ReplanOptions{}.drift_agreement);
  const SizeDrift::Estimate down = DriftOf(-slope, false, 2).At(1800.0);
  EXPECT_NEAR(down.per_second, -slope, 0.25 * slope);
  EXPECT_GE(down.agreement, ReplanOptions{}.drift_agreement);
}

TEST(SizeDrift, StationaryTrafficAndABurstDoNotLookLikeADrift) {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const SizeDrift::Estimate flat = DriftOf(0.0, false, seed).At(1800.0);
    EXPECT_LT(flat.agreement, 0.75) << seed;  // ReplanOptions::drift_agreement is 0.9
    // A burst moves three of the thirty bins' medians a long way: most pairs
    // of bins still disagree about a trend.
    const SizeDrift::Estimate burst = DriftOf(0.0, true, seed).At(1800.0);
    EXPECT_LT(burst.agreement, 0.75) << seed;
  }
}

TEST(SizeDrift, ThinBinsAndOldSamplesDoNotCount) {
  SizeDrift drift(60.0, 30);
  EXPECT_EQ(drift.At(0.0).bins, 0);
  for (int minute = 0; minute < 40; ++minute) {
    // 25 samples a minute spread over a factor e around 100 x 1.05^minute,
    // except 5 in minute 35.
    const int n = minute == 35 ? 5 : 25;
    for (int i = 0; i < n; ++i) {
      const double size = 100.0 * std::pow(1.05, minute) * std::exp((i - 12) / 24.0);
      drift.Add(minute * 60.0 + i, static_cast<int64_t>(size), 1);
    }
  }
  // Minutes 10..39 are in the ring; minute 35 is too thin.
  EXPECT_EQ(drift.At(40 * 60.0 - 1).bins, 29);
  // A sample older than the ring holds is ignored, not folded into a bin.
  drift.Add(0.0, 1 << 20, 1000);
  EXPECT_EQ(drift.At(40 * 60.0 - 1).bins, 29);
  EXPECT_GE(drift.At(40 * 60.0 - 1).agreement, 0.95);  // sizes grew every minute
  // Bad input is ignored.
  drift.Add(std::nan(""), 100, 1);
  drift.Add(1.0, 0, 1);
  drift.Add(1.0, 100, -3);
  EXPECT_EQ(drift.At(40 * 60.0 - 1).bins, 29);
}

// What a fleet does with its replicas' bins (gearbox/fleet_stats.h): the
// bins of two halves of the traffic, their counts added, estimate exactly
// what the whole traffic's bins do; each half alone is too thin.
TEST(SizeDrift, TheBinsOfTwoHalvesAddUpToTheWholesEstimate) {
  SizeDrift whole(60.0, 30), even(60.0, 30), odd(60.0, 30);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> spread(0.0, 1.0);
  const double slope = std::log(4.0) / 3600.0;
  for (int i = 0; i < 30 * 30; ++i) {  // 30 a minute: 15 a minute each half
    const double t = 2.0 * i;
    const auto size =
        static_cast<int64_t>(std::exp(std::log(1000.0) + slope * t + 0.3 * spread(rng)));
    whole.Add(t, size, 1);
    (i % 2 == 0 ? even : odd).Add(t, size, 1);
  }
  const double now = 1800.0;
  EXPECT_EQ(even.At(now).bins, 0);
  EXPECT_EQ(odd.At(now).bins, 0);
  std::map<int64_t, std::map<int32_t, uint64_t>> added;
  for (const SizeDrift* half : {&even, &odd}) {
    for (const DriftBinCounts& b : half->Bins(now)) {
      for (const auto& [k, c] : b.counts) added[b.bin][k] += c;
    }
  }
  std::vector<DriftBinCounts> merged;
  for (const auto& [bin, counts] : added) {
    DriftBinCounts& b = merged.emplace_back();
    b.bin = bin;
    b.counts.assign(counts.begin(), counts.end());
  }
  const SizeDriftEstimate fleet = EstimateSizeDrift(merged, 60.0, now);
  const SizeDriftEstimate one = whole.At(now);
  EXPECT_EQ(fleet.bins, 29);
  EXPECT_EQ(fleet.bins, one.bins);
  EXPECT_DOUBLE_EQ(fleet.per_second, one.per_second);
  EXPECT_DOUBLE_EQ(fleet.agreement, one.agreement);
  EXPECT_GE(fleet.agreement, ReplanOptions{}.drift_agreement);
  // Bins outside the last 30 up to `now`, and a bad width, count nothing.
  EXPECT_EQ(EstimateSizeDrift(merged, 60.0, now + 3600).bins, 0);
  EXPECT_EQ(EstimateSizeDrift(merged, 0.0, now).bins, 0);
  EXPECT_EQ(EstimateSizeDrift(merged, 60.0, std::nan("")).bins, 0);
}

TEST(WindowStore, AGearAddedAgainWithinAnHourOfItsEvictionIsMarkedReadded) {
  const GearSet gears = *GearSet::Create({{"SEQLEN", {64, 128}, false, false}});
  WindowStore store(gears, AdaptiveOptions{}, 0.0);
  const GearSet with_100 = *GearSet::Create({{"SEQLEN", {64, 100, 128}, false, false}});
  auto readded = [&](double now) {
    const WindowStats stats = store.Summarize(now, with_100);
    for (const GearStats& g : stats.dimensions[0].gears)
      if (g.gear == 100) return g.readded;
    ADD_FAILURE() << "no gear 100";
    return false;
  };
  store.ApplyCommit({{}}, {{100}}, 10.0);
  EXPECT_FALSE(readded(10.0));  // its first life
  store.ApplyCommit({{100}}, {{}}, 20.0);
  store.ApplyCommit({{}}, {{100}}, 30.0);
  EXPECT_TRUE(readded(30.0));  // back 10 s after its eviction
  store.ApplyCommit({{100}}, {{}}, 40.0);
  store.ApplyCommit({{}}, {{100}}, 40.0 + 3700.0);
  EXPECT_FALSE(readded(3740.0));  // back more than an hour after it: a new life
}

using internal::SizeHistory;

TEST(SizeHistory, KeepsEachBinsSizesAsTheWindowDoes) {
  SizeHistory history(60.0, 30);
  EXPECT_TRUE(history.Bins(0.0).empty());
  history.Add(5.0, 100, 128, 2);  // exact below 256
  history.Add(6.0, 100, 128, 1);
  history.Add(7.0, 300, 512, 1);  // bin [300, 301]: at its largest value
  history.Add(8.0, 301, 300, 1);  // above its gear (a split, an overflow): at the top
  history.Add(9.0, 300, 300, 4);  // padded by nothing: at most the gear that served it
  history.Add(70.0, 1000, 1024, 1);
  const std::vector<SizeHistoryBin> bins = history.Bins(70.0);
  ASSERT_EQ(bins.size(), 2u);
  EXPECT_EQ(bins[0].bin, 0);
  using Entry = std::pair<int64_t, uint64_t>;
  EXPECT_THAT(bins[0].sizes, ::testing::ElementsAre(Entry{100, 3}, Entry{300, 4}, Entry{301, 2}));
  EXPECT_EQ(bins[1].bin, 1);
  EXPECT_THAT(bins[1].sizes, ::testing::ElementsAre(Entry{1003, 1}));  // bin [1000, 1003]
  // Bins not yet reached are left out; bins older than the ring are
  // dropped, and a sample older than the ring holds is ignored.
  EXPECT_EQ(history.Bins(30.0).size(), 1u);
  history.Add(31 * 60.0, 100, 128, 1);
  ASSERT_EQ(history.Bins(31 * 60.0).size(), 1u);  // bins 0 and 1 are past the 30 held
  EXPECT_EQ(history.Bins(31 * 60.0).front().bin, 31);
  history.Add(0.0, 100, 128, 1);
  EXPECT_EQ(history.Bins(31 * 60.0).size(), 1u);
  // Bad input is ignored.
  history.Add(std::nan(""), 100, 128, 1);
  history.Add(31 * 60.0, 0, 128, 1);
  history.Add(31 * 60.0, 100, 128, -1);
  EXPECT_EQ(history.Bins(31 * 60.0).back().sizes.size(), 1u);
  EXPECT_EQ(history.Bins(31 * 60.0).back().sizes[0].second, 1u);
}

TEST(SizeHistory, MemoryIsBoundedByTheSizesNotTheRate) {
  // 100,000 requests a minute over sizes 1..4096 for 40 minutes: each of the
  // 30 bins holds at most one entry per histogram bin the sizes span (1..255
  // exact, then 128 an octave, and 4096: 768 here), 16 bytes each, in a
  // vector at most twice as large as it is full.
  SizeHistory history(60.0, 30);
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> size(1, 4096);
  for (int i = 0; i < 40 * 100000; ++i) history.Add(i * 60.0 / 100000, size(rng), 4096, 1);
  const std::vector<SizeHistoryBin> bins = history.Bins(40 * 60.0 - 1);
  ASSERT_EQ(bins.size(), 30u);
  for (const SizeHistoryBin& bin : bins) EXPECT_EQ(bin.sizes.size(), 768u);
  EXPECT_LT(history.MemoryBytes(), 30u * 2 * 768 * 16 + 4096);
}

TEST(WindowStore, FillsTheSizeHistoryUnlessTheWindowIsAFleets) {
  const GearSet gears = *GearSet::Create({{"SEQLEN", {64, 128}, false, false}});
  WindowStore store(gears, AdaptiveOptions{}, 0.0);
  const int64_t raw[] = {100};
  const int64_t gear[] = {128};
  for (int i = 0; i < 10; ++i) store.FoldEvent(i * 30.0, 1, raw, gear);
  const WindowStats local = store.Summarize(300.0, gears, /*with_sizes=*/true);
  ASSERT_EQ(local.dimensions[0].size_history.size(), 5u);  // one-minute bins 0..4
  EXPECT_EQ(local.dimensions[0].size_history[0].sizes[0], (std::pair<int64_t, uint64_t>{100, 2}));
  // With a merge hook (with_slots) the fleet's window has no history.
  EXPECT_TRUE(
      store.Summarize(300.0, gears, true, /*with_slots=*/true).dimensions[0].size_history.empty());
  EXPECT_TRUE(store.Summarize(300.0, gears).dimensions[0].size_history.empty());
}

}  // namespace
}  // namespace gearbox
