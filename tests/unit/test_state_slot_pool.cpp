// GDN state slots: one per running request, none when the pool is empty, back on free.
#include <gtest/gtest.h>

#include "engine/state_slot_pool.h"

namespace vllm::engine {
namespace test_state_slot_pool {
namespace {

TEST(StateSlotPool, HandsOutSlotsInOrderUntilEmpty) {
  StateSlotPool pool(3);
  EXPECT_EQ(pool.num_slots(), 3);
  EXPECT_EQ(pool.num_free_slots(), 3);
  EXPECT_EQ(pool.allocate("a"), 0);
  EXPECT_EQ(pool.allocate("b"), 1);
  EXPECT_EQ(pool.allocate("c"), 2);
  EXPECT_EQ(pool.num_free_slots(), 0);
  EXPECT_EQ(pool.allocate("d"), std::nullopt);  // the scheduler waits / preempts
  EXPECT_EQ(pool.get_slot("d"), std::nullopt);
  EXPECT_EQ(pool.num_free_slots(), 0);
}

TEST(StateSlotPool, AllocateIsIdempotentForAHolder) {
  StateSlotPool pool(2);
  EXPECT_EQ(pool.allocate("a"), 0);
  EXPECT_EQ(pool.allocate("a"), 0);
  EXPECT_EQ(pool.num_free_slots(), 1);
  EXPECT_EQ(pool.get_slot("a"), 0);
}

TEST(StateSlotPool, FreedSlotsAreReusedLeastRecentlyFreedFirst) {
  StateSlotPool pool(3);
  ASSERT_EQ(pool.allocate("a"), 0);
  ASSERT_EQ(pool.allocate("b"), 1);
  pool.free("b");
  pool.free("a");
  pool.free("a");        // second free: no-op
  pool.free("unknown");  // never allocated (aborted before scheduling): no-op
  EXPECT_EQ(pool.num_free_slots(), 3);
  EXPECT_EQ(pool.allocate("c"), 2);  // never used yet
  EXPECT_EQ(pool.allocate("d"), 1);  // freed first
  EXPECT_EQ(pool.allocate("e"), 0);
  EXPECT_EQ(pool.get_slot("a"), std::nullopt);
  EXPECT_EQ(pool.num_free_slots(), 0);
}

}  // namespace
}  // namespace test_state_slot_pool
}  // namespace vllm::engine
