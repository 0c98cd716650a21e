// GDN state snapshots: the pool (reserve / commit / LRU / demote / evict, exact slots) and the
// policy that says where a hybrid request's chunks stop to save one.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "engine/block_hash.h"
#include "engine/state_snapshot_policy.h"
#include "engine/state_snapshot_pool.h"

namespace vllm::engine {
namespace test_state_snapshot_pool {
namespace {

BlockHash h(uint64_t i) {
  return BlockHash{i, ~i};
}

std::vector<uint64_t> order(const StateSnapshotPool& pool) {
  std::vector<uint64_t> out;
  for (const BlockHash& hash : pool.eviction_order()) out.push_back(hash.low);
  return out;
}

TEST(StateSnapshotPool, ReservedSnapshotsAreInvisibleUntilCommitted) {
  StateSnapshotPool pool(/*first_slot=*/4, /*capacity=*/3);
  EXPECT_EQ(pool.num_free_slots(), 3);
  EXPECT_EQ(pool.reserve(h(1)), 4);
  EXPECT_EQ(pool.lookup(h(1)), std::nullopt);
  EXPECT_EQ(pool.reserve(h(1)), std::nullopt);  // already being written
  EXPECT_EQ(pool.num_reserved(), 1);
  pool.commit(h(1));
  EXPECT_EQ(pool.lookup(h(1)), 4);
  EXPECT_EQ(pool.reserve(h(1)), std::nullopt);  // already there
  EXPECT_EQ(pool.num_snapshots(), 1);
  EXPECT_EQ(pool.num_reserved(), 0);
  EXPECT_EQ(pool.num_free_slots(), 2);
}

TEST(StateSnapshotPool, FullPoolEvictsLeastRecentlyUsedAndSparesReserved) {
  StateSnapshotPool pool(0, 3);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(pool.reserve(h(i)).has_value());
    pool.commit(h(i));
  }
  EXPECT_EQ(order(pool), (std::vector<uint64_t>{1, 2, 3}));
  pool.touch(h(1));  // a hit
  EXPECT_EQ(order(pool), (std::vector<uint64_t>{2, 3, 1}));
  EXPECT_EQ(pool.reserve(h(4)), 1);  // h(2)'s slot
  EXPECT_EQ(pool.lookup(h(2)), std::nullopt);
  EXPECT_EQ(pool.reserve(h(5)), 2);  // h(3)'s
  EXPECT_EQ(pool.reserve(h(6)), 0);  // h(1)'s: the reserved h(4), h(5) are never evicted
  EXPECT_EQ(pool.reserve(h(7)), std::nullopt);
  EXPECT_EQ(pool.num_snapshots(), 0);
  pool.commit(h(5));
  pool.commit(h(4));
  pool.commit(h(6));
  EXPECT_EQ(order(pool), (std::vector<uint64_t>{5, 4, 6}));
}

TEST(StateSnapshotPool, DemotedSnapshotGoesFirst) {
  StateSnapshotPool pool(0, 3);
  for (uint64_t i = 1; i <= 3; ++i) {
    ASSERT_TRUE(pool.reserve(h(i)).has_value());
    pool.commit(h(i));
  }
  pool.demote(h(3));
  EXPECT_EQ(order(pool), (std::vector<uint64_t>{3, 1, 2}));
  EXPECT_EQ(pool.reserve(h(9)), 2);
  EXPECT_EQ(pool.lookup(h(3)), std::nullopt);
  EXPECT_EQ(pool.lookup(h(1)), 0);
}

TEST(StateSnapshotPool, EvictFreesAtOnceOrAtCommitWhenReserved) {
  StateSnapshotPool pool(2, 2);
  ASSERT_EQ(pool.reserve(h(1)), 2);
  pool.commit(h(1));
  ASSERT_EQ(pool.reserve(h(2)), 3);
  pool.evict(h(1));
  EXPECT_EQ(pool.lookup(h(1)), std::nullopt);
  EXPECT_EQ(pool.num_free_slots(), 1);
  pool.evict(h(2));  // being written: its slot stays taken ...
  EXPECT_EQ(pool.num_free_slots(), 1);
  EXPECT_EQ(pool.reserve(h(2)), std::nullopt);
  pool.commit(h(2));  // ... until the step that writes it is over
  EXPECT_EQ(pool.lookup(h(2)), std::nullopt);
  EXPECT_EQ(pool.num_free_slots(), 2);
  EXPECT_EQ(pool.num_reserved(), 0);
  pool.evict(h(42));  // unknown: no-op
}

TEST(StateSnapshotPool, ResetForgetsEverythingButNotWhileReserved) {
  StateSnapshotPool pool(0, 2);
  ASSERT_TRUE(pool.reserve(h(1)).has_value());
  EXPECT_FALSE(pool.reset());
  pool.commit(h(1));
  ASSERT_TRUE(pool.reserve(h(2)).has_value());
  pool.commit(h(2));
  EXPECT_TRUE(pool.reset());
  EXPECT_EQ(pool.num_snapshots(), 0);
  EXPECT_EQ(pool.num_free_slots(), 2);
  EXPECT_EQ(pool.lookup(h(1)), std::nullopt);
  EXPECT_EQ(pool.reserve(h(3)), 0);
}

// --- Policy ---

std::vector<int64_t> stops(const StateSnapshotPolicy& policy, SnapshotRequestView r,
                           int64_t from = 0) {
  std::vector<int64_t> out;
  for (auto next = next_snapshot_position(policy, r, from); next.has_value();
       next = next_snapshot_position(policy, r, *next)) {
    out.push_back(*next);
  }
  return out;
}

TEST(StateSnapshotPolicy, PromptEndOnly) {
  const StateSnapshotPolicy policy{16, 0};
  EXPECT_EQ(stops(policy, {100, 100, 0}), (std::vector<int64_t>{96}));
  EXPECT_EQ(stops(policy, {96, 96, 0}), (std::vector<int64_t>{96}));
  EXPECT_EQ(stops(policy, {15, 15, 0}), (std::vector<int64_t>{}));  // no full block
  EXPECT_EQ(snapshot_kind_at(policy, {100, 100, 0}, 96), SnapshotKind::kPrompt);
  EXPECT_EQ(snapshot_kind_at(policy, {100, 100, 0}, 80), SnapshotKind::kNone);
  EXPECT_EQ(snapshot_kind_at(policy, {100, 100, 0}, 100), SnapshotKind::kNone);
}

TEST(StateSnapshotPolicy, IntervalAndJunction) {
  const StateSnapshotPolicy policy{16, 64};
  EXPECT_EQ(stops(policy, {200, 200, 0}), (std::vector<int64_t>{64, 128, 192}));
  EXPECT_EQ(stops(policy, {200, 200, 80}), (std::vector<int64_t>{64, 80, 128, 192}));
  EXPECT_EQ(stops(policy, {200, 200, 80}, 80), (std::vector<int64_t>{128, 192}));
  EXPECT_EQ(stops(policy, {150, 150, 0}, 70), (std::vector<int64_t>{128, 144}));
  EXPECT_EQ(snapshot_kind_at(policy, {200, 200, 80}, 80), SnapshotKind::kPrompt);
  EXPECT_EQ(snapshot_kind_at(policy, {200, 200, 80}, 128), SnapshotKind::kPrompt);
  EXPECT_EQ(snapshot_kind_at(policy, {200, 200, 80}, 96), SnapshotKind::kNone);
}

TEST(StateSnapshotPolicy, OutputBoundariesWhileDecoding) {
  const StateSnapshotPolicy policy{16, 0};
  // Decoding: num_tokens - 1 computed, one token scheduled.
  EXPECT_EQ(next_snapshot_position(policy, {112, 100, 0}, 111), 112);
  EXPECT_EQ(snapshot_kind_at(policy, {112, 100, 0}, 112), SnapshotKind::kOutput);
  EXPECT_EQ(next_snapshot_position(policy, {113, 100, 0}, 112), std::nullopt);
  EXPECT_EQ(snapshot_kind_at(policy, {113, 100, 0}, 113), SnapshotKind::kNone);
  // A resumed request recomputing prompt + 30 outputs stops at the prompt end, then at its
  // last block boundary only.
  EXPECT_EQ(stops(policy, {130, 100, 0}), (std::vector<int64_t>{96, 128}));
  EXPECT_EQ(snapshot_kind_at(policy, {130, 100, 0}, 128), SnapshotKind::kOutput);
  EXPECT_EQ(snapshot_kind_at(policy, {130, 100, 0}, 112), SnapshotKind::kNone);
}

}  // namespace
}  // namespace test_state_snapshot_pool
}  // namespace vllm::engine
