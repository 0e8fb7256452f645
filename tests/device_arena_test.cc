// The CUDA Graph backend's arena bookkeeping (src/backends/cuda/device_arena.h):
// pure, so it is tested here whether or not a GPU (or the CUDA toolkit) is.
#include "src/backends/cuda/device_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gearbox::internal {
namespace {

// x [B, S, hidden] -> y of the same shape, f32; axis 0 follows dimension 0, axis 1 dimension 1.
ModelSignature Signature(int64_t hidden) {
  ModelSignature m;
  for (auto* list : {&m.inputs, &m.outputs}) {
    TensorSpec& t = list->emplace_back();
    t.shape = {1, 1, hidden};
    t.bindings = {{0, 0}, {1, 1}};
  }
  return m;
}

TEST(DeviceArena, LayoutPlacesEveryTensorAlignedAtItsGearSize) {
  const int64_t gears[] = {4, 16};
  const ArenaLayout l = LayoutAt(Signature(64), gears);
  ASSERT_EQ(l.input_offset.size(), 1u);
  ASSERT_EQ(l.output_offset.size(), 1u);
  EXPECT_EQ(l.input_bytes[0], 4 * 16 * 64 * 4);
  EXPECT_EQ(l.output_bytes[0], 4 * 16 * 64 * 4);
  EXPECT_EQ(l.input_offset[0], 0);
  EXPECT_EQ(l.output_offset[0], 16384);
  EXPECT_EQ(l.valid_offset, 32768);
  EXPECT_EQ(l.total_bytes, 32768 + kArenaAlignment);  // 2 x int64, rounded up
  // Sizes that are no multiple of the alignment still start on one.
  const int64_t odd[] = {3, 5};
  const ArenaLayout o = LayoutAt(Signature(3), odd);
  EXPECT_EQ(o.input_bytes[0], 3 * 5 * 3 * 4);
  EXPECT_EQ(o.output_offset[0] % kArenaAlignment, 0);
  EXPECT_EQ(o.valid_offset % kArenaAlignment, 0);
  EXPECT_GE(o.output_offset[0], o.input_bytes[0]);
}

TEST(DeviceArena, HoldsTheLargestLiveGearGrowingAndShrinkingWithIt) {
  ArenaSizer a;
  EXPECT_TRUE(a.Add(100));  // the first gear: allocate
  EXPECT_EQ(a.capacity(), 100);
  EXPECT_EQ(a.generation(), 1u);
  EXPECT_FALSE(a.Add(50));  // fits: the same arena, graphs stay valid
  EXPECT_TRUE(a.Add(200));  // larger: grow, a new generation
  EXPECT_EQ(a.capacity(), 200);
  EXPECT_EQ(a.generation(), 2u);
  EXPECT_FALSE(a.Remove(50));  // not the largest: nothing moves
  EXPECT_TRUE(a.Remove(200));  // the largest goes: shrink to the next
  EXPECT_EQ(a.capacity(), 100);
  EXPECT_EQ(a.largest_need(), 100);
  EXPECT_EQ(a.generation(), 3u);
  EXPECT_TRUE(a.Remove(100));  // the last one: nothing held
  EXPECT_EQ(a.capacity(), 0);
  EXPECT_FALSE(a.Remove(999));  // unknown needs are ignored
  EXPECT_EQ(a.generation(), 4u);
}

TEST(DeviceArena, TwoGearsOfTheSameNeedShrinkOnlyWhenBothAreGone) {
  ArenaSizer a;
  EXPECT_TRUE(a.Add(100));
  EXPECT_FALSE(a.Add(100));
  EXPECT_FALSE(a.Remove(100));
  EXPECT_EQ(a.capacity(), 100);
  EXPECT_TRUE(a.Remove(100));
  EXPECT_EQ(a.capacity(), 0);
}

TEST(DeviceArena, ARunTakesAFreeSlotOrANewOne) {
  SlotList slots;
  bool created = false;
  EXPECT_EQ(slots.Checkout(&created), 0);
  EXPECT_TRUE(created);
  EXPECT_EQ(slots.Checkout(&created), 1);  // slot 0 is busy
  EXPECT_TRUE(created);
  slots.Return(0);
  EXPECT_EQ(slots.Checkout(&created), 0);  // free again: reused
  EXPECT_FALSE(created);
  slots.Return(1);
  slots.Return(0);
  EXPECT_EQ(slots.count(), 2);  // the most runs in flight at once
  EXPECT_EQ(slots.free().size(), 2u);
}

TEST(DeviceArena, ASlotGrowsToTheCapacityOnceAndShrinksAboveIt) {
  EXPECT_EQ(SlotGrowBytes(0, 100, 300), 300);    // empty: to the largest live need
  EXPECT_EQ(SlotGrowBytes(300, 200, 300), 0);    // holds enough
  EXPECT_EQ(SlotGrowBytes(100, 100, 300), 0);    // enough for this run: no growth
  EXPECT_EQ(SlotGrowBytes(100, 200, 300), 300);  // a larger run: to the capacity, once
  EXPECT_TRUE(SlotShrinks(300, 200));            // the largest gear went
  EXPECT_FALSE(SlotShrinks(200, 200));
  EXPECT_FALSE(SlotShrinks(100, 200));
}

}  // namespace
}  // namespace gearbox::internal
