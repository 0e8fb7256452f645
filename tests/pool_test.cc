#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "gearbox/resource_pool.h"

namespace gearbox {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct Counted : GraphResource {
  Counted(std::atomic<int>* alive, int64_t size, GraphResourcePool* owner = nullptr)
      : alive_(alive), size_(size), owner_(owner) {
    alive_->fetch_add(1);
  }
  ~Counted() override {
    // Calls back into the pool: would deadlock if released under its lock.
    if (owner_ != nullptr) (void)owner_->size();
    alive_->fetch_sub(1);
  }
  int64_t bytes() const override { return size_; }
  std::atomic<int>* alive_;
  int64_t size_;
  GraphResourcePool* owner_;
};

TEST(Pool, RegisterConsumeRemoveLifecycle) {
  std::atomic<int> alive{0};  // outlives the pool, whose resources touch it
  GraphResourcePool pool;
  const GraphKey a = pool.Register(std::make_shared<Counted>(&alive, 10));
  const GraphKey b = pool.Register(std::make_shared<Counted>(&alive, 20));
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_THAT(pool.ConsumeRecentKeys(), ElementsAre(a, b));
  EXPECT_THAT(pool.ConsumeRecentKeys(), IsEmpty());  // consumed
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.bytes(), 30);
  const GraphKey both[] = {a, b, a, 999};
  EXPECT_EQ(pool.RemoveByKeys(both), 2u);
  EXPECT_EQ(pool.RemoveByKeys(both), 0u);  // idempotent
  EXPECT_EQ(alive.load(), 0);
  EXPECT_EQ(pool.bytes(), 0);
  EXPECT_EQ(pool.Acquire(a), nullptr);
  EXPECT_EQ(pool.registered(), 2u);
  EXPECT_EQ(pool.removed(), 2u);
  EXPECT_EQ(pool.Register(nullptr), 0u);
}

TEST(Pool, PendingKeysArePerThread) {
  std::atomic<int> alive{0};
  GraphResourcePool pool;
  const GraphKey mine = pool.Register(std::make_shared<Counted>(&alive, 1));
  std::vector<GraphKey> theirs;
  std::thread other([&] {
    pool.Register(std::make_shared<Counted>(&alive, 1));
    pool.Register(std::make_shared<Counted>(&alive, 1));
    theirs = pool.ConsumeRecentKeys();
  });
  other.join();
  EXPECT_EQ(theirs.size(), 2u);
  EXPECT_THAT(pool.ConsumeRecentKeys(), ElementsAre(mine));
}

TEST(Pool, HeldResourceIsReleasedOnlyWhenTheLastHolderLetsGo) {
  std::atomic<int> alive{0};
  GraphResourcePool pool;
  const GraphKey k = pool.Register(std::make_shared<Counted>(&alive, 5, &pool));
  std::shared_ptr<GraphResource> held = pool.Acquire(k);
  ASSERT_NE(held, nullptr);
  const GraphKey keys[] = {k};
  EXPECT_EQ(pool.RemoveByKeys(keys), 1u);
  EXPECT_EQ(alive.load(), 1);  // in use: not released
  EXPECT_EQ(pool.size(), 0u);
  held.reset();
  EXPECT_EQ(alive.load(), 0);
}

TEST(Pool, DestructionReleasesEverythingOutsideTheLock) {
  std::atomic<int> alive{0};
  {
    GraphResourcePool pool;
    pool.Register(std::make_shared<Counted>(&alive, 5));
    pool.Register(std::make_shared<Counted>(&alive, 5));
  }
  EXPECT_EQ(alive.load(), 0);
}

TEST(Pool, PerDeviceSingletons) {
  EXPECT_EQ(&GraphResourcePool::GetPool(0), &GraphResourcePool::GetPool(0));
  EXPECT_NE(&GraphResourcePool::GetPool(0), &GraphResourcePool::GetPool(1));
}

}  // namespace
}  // namespace gearbox
