#include "src/runtime/snapshot_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace gearbox::internal {
namespace {

// Version v has gears {v, v + 1}: a reader can check consistency.
GearSet SetOfVersion(uint64_t v) {
  const int64_t g = static_cast<int64_t>(v);
  return *GearSet::Create({{"BATCHSIZE", {g, g + 1}, true, false}}, v);
}

TEST(SnapshotStore, PinnedSnapshotsSurvivePublishes) {
  SnapshotStore store(SetOfVersion(1));
  SnapshotRef first = store.Get();
  for (uint64_t v = 2; v <= 10; ++v) store.Publish(SetOfVersion(v));
  EXPECT_EQ(first->version(), 1u);
  EXPECT_EQ(first->gears(0)[1], 2);
  EXPECT_EQ(store.Get()->version(), 10u);
  EXPECT_GT(store.Reclaim(), 0u);  // version 1 (and later ones) still pinned
  first.Reset();
  EXPECT_EQ(store.Reclaim(), 0u);
}

TEST(SnapshotStore, NestedPinsKeepTheOldestAlive) {
  SnapshotStore store(SetOfVersion(1));
  SnapshotRef outer = store.Get();
  store.Publish(SetOfVersion(2));
  {
    SnapshotRef inner = store.Get();
    EXPECT_EQ(inner->version(), 2u);
    store.Publish(SetOfVersion(3));
    EXPECT_EQ(inner->version(), 2u);
  }
  EXPECT_EQ(outer->version(), 1u);
  SnapshotRef moved = std::move(outer);
  EXPECT_FALSE(outer);
  EXPECT_EQ(moved->version(), 1u);
  moved.Reset();
  EXPECT_EQ(store.Reclaim(), 0u);
}

TEST(SnapshotStore, ConcurrentReadersAlwaysSeeAConsistentSet) {
  SnapshotStore store(SetOfVersion(1));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      uint64_t last = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        SnapshotRef s = store.Get();
        const uint64_t v = s->version();
        if (s->gears(0)[0] != static_cast<int64_t>(v) || v < last) bad.fetch_add(1);
        last = v;
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // Publish at least 3000 versions, and keep going until readers have
  // overlapped with publishing for a while.
  for (uint64_t v = 2; v <= 3000 || reads.load() < 20000; ++v) store.Publish(SetOfVersion(v));
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_EQ(store.Reclaim(), 0u);  // every superseded set freed once unpinned
}

}  // namespace
}  // namespace gearbox::internal
