// KVCacheManager with GDN state snapshots (hybrid models): a hit is the longest run of cached
// blocks ending in a block with a snapshot; snapshots follow the KV blocks out when those are
// evicted; a snapshot can go while its blocks stay, and hits fall back to a shorter prefix.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/block_hash.h"
#include "engine/kv_cache_manager.h"

namespace vllm::engine {
namespace test_kv_cache_manager_hybrid {
namespace {

using Ids = std::vector<int32_t>;
constexpr int kBlock = 4;

struct TestRequest {
  TestRequest(std::string request_id, std::vector<int32_t> prompt)
      : id(std::move(request_id)), tokens(std::move(prompt)) {
    append_request_block_hashes(tokens, kBlock, {}, hashes);
  }
  KVCacheRequest view() const { return KVCacheRequest{id, tokens, num_computed_tokens, hashes}; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }

  std::string id;
  std::vector<int32_t> tokens;
  std::vector<BlockHash> hashes;
  int64_t num_computed_tokens = 0;
};

std::vector<int32_t> range(int begin, int end) {
  std::vector<int32_t> out(end - begin);
  std::iota(out.begin(), out.end(), begin);
  return out;
}

// Computes a whole request as one chunk (no snapshots of its own).
ComputedBlocks admit(KVCacheManager& m, TestRequest& req) {
  ComputedBlocks hit = m.get_computed_blocks(req.view());
  EXPECT_TRUE(m.allocate_slots(req.view(), req.num_tokens() - hit.num_computed_tokens,
                               hit.num_computed_tokens, hit.blocks)
                  .has_value());
  req.num_computed_tokens = req.num_tokens();
  return hit;
}

void snapshot(KVCacheManager& m, const TestRequest& req, int64_t num_tokens, int32_t want_slot) {
  auto reserved = m.reserve_state_snapshot(req.view(), num_tokens);
  ASSERT_TRUE(reserved.has_value()) << num_tokens;
  EXPECT_EQ(reserved->slot, want_slot);
  EXPECT_EQ(reserved->block_hash, req.hashes[num_tokens / kBlock - 1]);
  m.commit_state_snapshot(reserved->block_hash);
}

TEST(KVCacheManagerHybrid, HitsEndWhereASnapshotIs) {
  KVCacheManager m(16, kBlock, true, 1024, StateSnapshotConfig{/*first_slot=*/8, 3});
  TestRequest a("a", range(0, 14));  // 3 full blocks
  EXPECT_TRUE(admit(m, a).blocks.empty());
  EXPECT_EQ(m.get_block_ids("a"), (Ids{1, 2, 3, 4}));

  TestRequest b("b", range(0, 20));
  ComputedBlocks hit = m.get_computed_blocks(b.view());
  EXPECT_TRUE(hit.blocks.empty());  // three cached blocks, but no state to resume from
  EXPECT_EQ(hit.num_cached_kv_tokens, 12);
  EXPECT_EQ(hit.state_snapshot_slot, std::nullopt);

  auto reserved = m.reserve_state_snapshot(a.view(), 8);
  ASSERT_TRUE(reserved.has_value());
  EXPECT_EQ(reserved->slot, 8);
  EXPECT_TRUE(m.get_computed_blocks(b.view()).blocks.empty());  // not written yet
  EXPECT_FALSE(m.reserve_state_snapshot(a.view(), 8).has_value());
  m.commit_state_snapshot(reserved->block_hash);

  hit = m.get_computed_blocks(b.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2}));
  EXPECT_EQ(hit.num_computed_tokens, 8);
  EXPECT_EQ(hit.num_cached_kv_tokens, 12);
  EXPECT_EQ(hit.state_snapshot_slot, 8);

  snapshot(m, a, 12, 9);
  hit = m.get_computed_blocks(b.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2, 3}));
  EXPECT_EQ(hit.state_snapshot_slot, 9);
  m.free("a");
  m.free("b");
}

TEST(KVCacheManagerHybrid, EvictedBlocksTakeTheirSnapshotsAlong) {
  // 7 usable blocks of 4 tokens; 4 snapshot slots.
  KVCacheManager m(8, kBlock, true, 1024, StateSnapshotConfig{2, 4});
  TestRequest a("a", range(0, 17));  // blocks 1..5, 4 full
  admit(m, a);
  snapshot(m, a, 8, 2);
  snapshot(m, a, 16, 3);
  m.free("a");
  EXPECT_EQ(m.state_snapshots()->num_snapshots(), 2);

  // 3 new blocks: a's partial tail 5 (no hash) and the 2 never used; no cached prefix lost.
  TestRequest c("c", range(100, 112));
  admit(m, c);
  EXPECT_EQ(m.state_snapshots()->num_snapshots(), 2);
  // 2 more: a's blocks 4 (hash of 16 tokens) and 3 go, and with 4 the snapshot at 16.
  TestRequest d("d", range(200, 208));
  admit(m, d);
  EXPECT_EQ(m.block_pool().get_cached_block(a.hashes[3]), nullptr);
  EXPECT_EQ(m.block_pool().get_cached_block(a.hashes[2]), nullptr);
  EXPECT_EQ(m.state_snapshots()->num_snapshots(), 1);
  EXPECT_EQ(m.state_snapshots()->num_free_slots(), 3);

  TestRequest b("b", range(0, 30));
  ComputedBlocks hit = m.get_computed_blocks(b.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2}));  // the snapshot at 8 survived
  EXPECT_EQ(hit.state_snapshot_slot, 2);
  m.free("c");
  m.free("d");
}

TEST(KVCacheManagerHybrid, SnapshotEvictedWhileItsBlocksStayCached) {
  KVCacheManager m(32, kBlock, true, 1024, StateSnapshotConfig{1, 2});
  TestRequest a("a", range(0, 13));
  admit(m, a);
  snapshot(m, a, 4, 1);
  snapshot(m, a, 12, 2);
  TestRequest b("b", range(0, 20));
  EXPECT_EQ(m.get_computed_blocks(b.view()).num_computed_tokens, 12);

  // Another prefix needs a slot: the least recently used snapshot (a's at 4) goes.
  TestRequest other("other", range(50, 60));
  admit(m, other);
  snapshot(m, other, 8, 1);
  EXPECT_EQ(m.get_computed_blocks(b.view()).num_computed_tokens, 12);
  // And once more: a's snapshot at 12 goes too, though all of a's blocks are still cached.
  snapshot(m, other, 4, 2);
  ComputedBlocks hit = m.get_computed_blocks(b.view());
  EXPECT_TRUE(hit.blocks.empty());
  EXPECT_EQ(hit.num_cached_kv_tokens, 12);
  EXPECT_NE(m.block_pool().get_cached_block(a.hashes[2]), nullptr);
  m.free("a");
  m.free("other");
  EXPECT_EQ(m.num_free_blocks(), m.num_usable_blocks());
}

TEST(KVCacheManagerHybrid, TakingAHitRefreshesItsSnapshot) {
  KVCacheManager m(32, kBlock, true, 1024, StateSnapshotConfig{1, 2});
  TestRequest a("a", range(0, 9));
  admit(m, a);
  snapshot(m, a, 8, 1);
  TestRequest other("other", range(50, 60));
  admit(m, other);
  snapshot(m, other, 8, 2);
  TestRequest b("b", range(0, 11));
  EXPECT_EQ(admit(m, b).state_snapshot_slot, 1);  // touches a's snapshot
  // A third snapshot evicts other's (now least recently used), not a's.
  snapshot(m, other, 4, 2);
  EXPECT_EQ(m.get_computed_blocks(TestRequest("c", range(0, 12)).view()).num_computed_tokens, 8);
}

TEST(KVCacheManagerHybrid, ResetForgetsSnapshotsToo) {
  KVCacheManager m(16, kBlock, true, 1024, StateSnapshotConfig{1, 2});
  TestRequest a("a", range(0, 9));
  admit(m, a);
  snapshot(m, a, 8, 1);
  EXPECT_FALSE(m.reset_prefix_cache());  // a holds blocks
  m.free("a");
  EXPECT_TRUE(m.reset_prefix_cache());
  EXPECT_EQ(m.state_snapshots()->num_snapshots(), 0);
  EXPECT_EQ(m.state_snapshots()->num_free_slots(), 2);
  EXPECT_TRUE(m.get_computed_blocks(TestRequest("b", range(0, 12)).view()).blocks.empty());
}

TEST(KVCacheManagerHybrid, CachedPrefixEndIsWhereOthersCachedBlocksStop) {
  KVCacheManager m(32, kBlock, true, 1024, StateSnapshotConfig{1, 2});
  TestRequest a("a", range(0, 21));  // 5 full blocks
  admit(m, a);
  TestRequest b("b", range(0, 30));
  EXPECT_EQ(m.cached_prefix_end(b.view(), 0), 20);
  EXPECT_EQ(m.cached_prefix_end(b.view(), 9), 20);   // from the block holding token 9
  EXPECT_EQ(m.cached_prefix_end(b.view(), 20), 20);  // nothing cached from there
  EXPECT_EQ(m.cached_prefix_end(b.view(), 23), 20);
  TestRequest c("c", range(0, 12));
  EXPECT_EQ(m.cached_prefix_end(c.view(), 0), 8);  // at most num_tokens - 1 = 11 tokens
  m.free("a");
}

TEST(KVCacheManagerHybrid, NoSnapshotForAnUncachedPrefix) {
  KVCacheManager m(16, kBlock, true, 1024, StateSnapshotConfig{1, 2});
  TestRequest a("a", range(0, 9));
  ComputedBlocks hit = m.get_computed_blocks(a.view());
  ASSERT_TRUE(m.allocate_slots(a.view(), 4, 0, hit.blocks).has_value());  // first chunk only
  EXPECT_TRUE(m.reserve_state_snapshot(a.view(), 4).has_value());
  EXPECT_FALSE(m.reserve_state_snapshot(a.view(), 8).has_value());  // block 2 not cached yet
  m.free("a");
}

}  // namespace
}  // namespace test_kv_cache_manager_hybrid
}  // namespace vllm::engine
