// KVCacheManager: prefix-cache hits, allocation, eviction order and freeing, with exact block
// ids. Scenarios follow vLLM's tests/v1/core/test_prefix_caching.py (test_prefill,
// test_decode, test_evict, test_hash_block_correct_reuse, test_computed_blocks_not_evicted,
// test_basic_prefix_caching_disabled, test_prefill_not_enough_free_blocks_with_computed_blocks,
// test_reset_prefix_cache) and give the same block ids as current vLLM.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/block_hash.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_cache_utils.h"

namespace vllm::engine {
namespace test_kv_cache_manager {
namespace {

using Ids = std::vector<int32_t>;

// The engine Request's part that the manager sees: tokens, hashes kept up to date.
struct TestRequest {
  TestRequest(std::string request_id, std::vector<int32_t> prompt, int block_size)
      : id(std::move(request_id)), tokens(std::move(prompt)), block_size(block_size) {
    append_request_block_hashes(tokens, block_size, {}, hashes);
  }
  void append_output_token_ids(int32_t token, int count = 1) {
    for (int i = 0; i < count; ++i) tokens.push_back(token);
    append_request_block_hashes(tokens, block_size, {}, hashes);
  }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  KVCacheRequest view() const {
    return KVCacheRequest{
        id, tokens, num_computed_tokens, hashes, skip_reading_prefix_cache, num_preemptions};
  }

  std::string id;
  std::vector<int32_t> tokens;
  int block_size;
  std::vector<BlockHash> hashes;
  int64_t num_computed_tokens = 0;
  bool skip_reading_prefix_cache = false;
  int32_t num_preemptions = 0;
};

std::vector<int32_t> repeat_each(std::initializer_list<int32_t> values, int times) {
  std::vector<int32_t> out;
  for (int32_t v : values) out.insert(out.end(), times, v);
  return out;
}
std::vector<int32_t> range(int begin, int end) {
  std::vector<int32_t> out(end - begin);
  std::iota(out.begin(), out.end(), begin);
  return out;
}
std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
Ids free_ids(const KVCacheManager& m) {
  return m.block_pool().free_block_queue().get_all_free_block_ids();
}

// Admits a waiting request the way the scheduler does; returns the new block ids.
std::optional<Ids> admit(KVCacheManager& m, TestRequest& req) {
  ComputedBlocks hit = m.get_computed_blocks(req.view());
  const int64_t num_new_tokens = req.num_tokens() - hit.num_computed_tokens;
  std::optional<KVCacheBlocks> blocks =
      m.allocate_slots(req.view(), num_new_tokens, hit.num_computed_tokens, hit.blocks);
  if (!blocks) return std::nullopt;
  m.record_prefix_cache_stats(req.view(), hit.num_computed_tokens);
  req.num_computed_tokens = req.num_tokens();
  return blocks->get_block_ids();
}

TEST(KVCacheManager, PrefillSharesACachedPrefixAndEvictsInOrder) {
  KVCacheManager m(11, 16, true, 8192);
  const std::vector<int32_t> common = repeat_each({0, 1, 2}, 16);  // 3 full blocks

  TestRequest req0("0", concat(common, std::vector<int32_t>(7, 3)), 16);
  ASSERT_EQ(req0.hashes.size(), 3u);
  ComputedBlocks hit = m.get_computed_blocks(req0.view());
  EXPECT_TRUE(hit.blocks.empty());
  EXPECT_EQ(hit.num_computed_tokens, 0);
  std::optional<KVCacheBlocks> blocks = m.allocate_slots(req0.view(), 55, 0, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{1, 2, 3, 4}));
  for (int32_t id : {1, 2, 3}) {
    EXPECT_EQ(m.block_pool().block(id).block_hash, req0.hashes[id - 1]);
    EXPECT_EQ(m.block_pool().block(id).ref_cnt, 1);
  }
  EXPECT_FALSE(m.block_pool().block(4).block_hash.has_value());  // partial block

  // A hit while the original blocks are in use.
  TestRequest req1("1", concat(common, std::vector<int32_t>(5, 3)), 16);
  hit = m.get_computed_blocks(req1.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2, 3}));
  EXPECT_EQ(hit.num_computed_tokens, 48);
  blocks = m.allocate_slots(req1.view(), 5, 48, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{5}));
  for (int32_t id : {1, 2, 3}) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 2);
  EXPECT_EQ(m.num_free_blocks(), 5);
  EXPECT_EQ(m.get_block_ids("1"), (Ids{1, 2, 3, 5}));

  m.free("0");
  m.free("1");
  EXPECT_EQ(m.num_free_blocks(), 10);
  // Partial blocks without hashes first (freed last first), unallocated, cached tail-first.
  EXPECT_EQ(free_ids(m), (Ids{5, 4, 6, 7, 8, 9, 10, 3, 2, 1}));

  // A hit on blocks that are already free.
  TestRequest req2("2", concat(common, std::vector<int32_t>(6, 3)), 16);
  hit = m.get_computed_blocks(req2.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2, 3}));
  blocks = m.allocate_slots(req2.view(), 6, 48, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{5}));
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_EQ(free_ids(m), (Ids{4, 6, 7, 8, 9, 10}));
  m.free("2");

  // A miss that evicts everything: the id order is the eviction order.
  TestRequest req3("3", std::vector<int32_t>(160, 99), 16);
  hit = m.get_computed_blocks(req3.view());
  EXPECT_TRUE(hit.blocks.empty());
  blocks = m.allocate_slots(req3.view(), 160, 0, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{5, 4, 6, 7, 8, 9, 10, 3, 2, 1}));
  EXPECT_EQ(m.num_free_blocks(), 0);
  EXPECT_TRUE(free_ids(m).empty());
  EXPECT_EQ(m.block_pool().get_cached_block(req0.hashes[0]), nullptr);
}

TEST(KVCacheManager, DecodeCachesBlocksAsTheyFill) {
  KVCacheManager m(11, 16, true, 8192);
  TestRequest req0("0", concat(repeat_each({0, 1, 2}, 16), std::vector<int32_t>(7, 3)), 16);
  ASSERT_EQ(admit(m, req0), (Ids{1, 2, 3, 4}));

  req0.append_output_token_ids(8, 4);  // 59 tokens: still inside block 4
  std::optional<KVCacheBlocks> blocks = m.allocate_slots(req0.view(), 4);
  ASSERT_TRUE(blocks);
  EXPECT_TRUE(blocks->empty());
  EXPECT_FALSE(m.block_pool().block(4).block_hash.has_value());

  req0.num_computed_tokens = 59;
  req0.append_output_token_ids(7, 19);  // 78 tokens: fills block 4, 14 into a new one
  blocks = m.allocate_slots(req0.view(), 19);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{5}));
  EXPECT_EQ(m.block_pool().block(4).block_hash, req0.hashes[3]);
  EXPECT_FALSE(m.block_pool().block(5).block_hash.has_value());
  EXPECT_EQ(m.get_block_ids("0"), (Ids{1, 2, 3, 4, 5}));
}

TEST(KVCacheManager, EvictOrderAfterFreeIsTailFirst) {
  KVCacheManager m(11, 16, true, 8192);
  TestRequest req0("0", range(0, 87), 16);  // 5 full + 7
  ASSERT_EQ(admit(m, req0)->size(), 6u);
  TestRequest req1("1", range(87, 87 + 48), 16);  // 3 full
  ASSERT_EQ(admit(m, req1)->size(), 3u);
  EXPECT_EQ(m.num_free_blocks(), 1);

  m.free("0");
  EXPECT_EQ(free_ids(m), (Ids{6, 10, 5, 4, 3, 2, 1}));
  m.free("1");
  EXPECT_EQ(m.num_free_blocks(), 10);
  EXPECT_EQ(free_ids(m), (Ids{6, 10, 5, 4, 3, 2, 1, 9, 8, 7}));

  // Touch the first two blocks again.
  TestRequest req2("2", range(0, 35), 16);
  ComputedBlocks hit = m.get_computed_blocks(req2.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2}));
  EXPECT_EQ(hit.num_computed_tokens, 32);
  std::optional<KVCacheBlocks> blocks = m.allocate_slots(req2.view(), 3, 32, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{6}));
  EXPECT_EQ(m.num_free_blocks(), 7);
}

TEST(KVCacheManager, ReusedCachedBlockLosesItsHash) {
  KVCacheManager m(2, 16, true, 8192);
  TestRequest req0("0", range(0, 16), 16);
  ASSERT_EQ(admit(m, req0), (Ids{1}));
  m.free("0");
  TestRequest req1("1", range(0, 15), 16);
  ASSERT_EQ(admit(m, req1), (Ids{1}));
  EXPECT_FALSE(m.block_pool().block(1).block_hash.has_value());
}

TEST(KVCacheManager, ComputedBlocksAreNotEvictedForTheSameRequest) {
  KVCacheManager m(3, 16, true, 8192);
  TestRequest req0("0", range(0, 16), 16);
  ASSERT_EQ(admit(m, req0), (Ids{1}));
  TestRequest req1("1", range(16, 32), 16);
  ASSERT_EQ(admit(m, req1), (Ids{2}));
  m.free("0");
  m.free("1");

  TestRequest req2("2", range(0, 32), 16);
  ComputedBlocks hit = m.get_computed_blocks(req2.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1}));
  std::optional<KVCacheBlocks> blocks = m.allocate_slots(req2.view(), 16, 16, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->get_block_ids(), (Ids{2}));  // block 1 is the hit; 2 is evicted instead
  EXPECT_EQ(m.get_block_ids("2"), (Ids{1, 2}));
}

TEST(KVCacheManager, PrefixCachingDisabled) {
  KVCacheManager m(5, 4, false, 8192);
  TestRequest req1("1", range(0, 10), 4);
  ASSERT_EQ(admit(m, req1), (Ids{1, 2, 3}));
  req1.append_output_token_ids(5, 2);  // a running request keeps allocating
  ASSERT_TRUE(m.allocate_slots(req1.view(), 2));
  EXPECT_EQ(m.get_block_ids("1"), (Ids{1, 2, 3}));
  EXPECT_FALSE(m.block_pool().block(1).block_hash.has_value());
  m.free("1");
  EXPECT_EQ(free_ids(m), (Ids{3, 2, 1, 4}));

  TestRequest req2("2", range(0, 16), 4);  // shares a prefix, but no caching
  EXPECT_TRUE(m.get_computed_blocks(req2.view()).blocks.empty());
  ASSERT_EQ(admit(m, req2), (Ids{3, 2, 1, 4}));
  TestRequest req3("3", range(0, 4), 4);
  EXPECT_EQ(m.allocate_slots(req3.view(), 4), std::nullopt);
  EXPECT_EQ(m.prefix_cache_stats().requests, 0);  // nothing recorded without caching
}

TEST(KVCacheManager, NotEnoughBlocksReturnsNulloptAndChangesNothing) {
  KVCacheManager m(11, 16, true, 8192);
  const std::vector<int32_t> common = repeat_each({0, 1, 2}, 16);
  TestRequest req0("0", common, 16);
  ASSERT_EQ(admit(m, req0), (Ids{1, 2, 3}));
  TestRequest req1("1", concat(common, common), 16);
  ASSERT_EQ(admit(m, req1), (Ids{4, 5, 6}));
  m.free("1");
  for (int32_t id : {1, 2, 3}) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 1);
  for (int32_t id : {4, 5, 6}) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 0);
  TestRequest req2("2", std::vector<int32_t>(32, 7), 16);
  ASSERT_EQ(admit(m, req2), (Ids{7, 8}));
  EXPECT_EQ(m.num_free_blocks(), 5);

  // req3 hits 6 blocks (3 of them free) and needs 3 more: 6 > 5 free.
  TestRequest req3("3", concat(concat(common, common), common), 16);
  ComputedBlocks hit = m.get_computed_blocks(req3.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(hit.num_computed_tokens, 96);
  const Ids queue_before = free_ids(m);
  EXPECT_EQ(m.allocate_slots(req3.view(), 48, 96, hit.blocks), std::nullopt);
  for (int32_t id : {1, 2, 3}) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 1);
  for (int32_t id : {4, 5, 6}) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 0);
  EXPECT_EQ(free_ids(m), queue_before);
  EXPECT_EQ(m.num_free_blocks(), 5);
  EXPECT_TRUE(m.get_block_ids("3").empty());

  // Once req2 is gone it fits, and the hits are kept.
  m.free("2");
  std::optional<KVCacheBlocks> blocks = m.allocate_slots(req3.view(), 48, 96, hit.blocks);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->size(), 3u);
  EXPECT_EQ(m.get_block_ids("3").size(), 9u);
  for (int32_t id : {1, 2, 3}) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 2);
}

TEST(KVCacheManager, ThreeBlockSharedPrefixHitsExactlyThreeBlocks) {
  KVCacheManager m(20, 16, true, 8192);
  const std::vector<int32_t> prefix = range(1000, 1048);
  TestRequest a("a", concat(prefix, range(0, 5)), 16);
  ASSERT_EQ(admit(m, a), (Ids{1, 2, 3, 4}));
  TestRequest b("b", concat(prefix, range(50, 59)), 16);
  ComputedBlocks hit = m.get_computed_blocks(b.view());
  EXPECT_EQ(hit.blocks.size(), 3u);
  ASSERT_EQ(admit(m, b), (Ids{5}));
  EXPECT_EQ(m.get_block_ids("b"), (Ids{1, 2, 3, 5}));

  const PrefixCacheStats& stats = m.prefix_cache_stats();
  EXPECT_EQ(stats.requests, 2);
  EXPECT_EQ(stats.queries, 53 + 57);
  EXPECT_EQ(stats.hits, 48);  // exactly 3 blocks of 16 tokens
  EXPECT_EQ(stats.preempted_requests, 0);
  PrefixCacheStats taken = m.make_prefix_cache_stats();
  EXPECT_EQ(taken.hits, 48);
  EXPECT_EQ(m.prefix_cache_stats().hits, 0);
  EXPECT_EQ(m.prefix_cache_stats().requests, 0);
}

TEST(KVCacheManager, FullyCachedPromptRecomputesItsLastBlock) {
  KVCacheManager m(10, 16, true, 8192);
  TestRequest a("a", range(0, 48), 16);
  ASSERT_EQ(admit(m, a), (Ids{1, 2, 3}));
  TestRequest b("b", range(0, 48), 16);
  ComputedBlocks hit = m.get_computed_blocks(b.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2}));  // at most 47 tokens
  EXPECT_EQ(hit.num_computed_tokens, 32);
  ASSERT_EQ(admit(m, b), (Ids{4}));
  // Block 4 holds the same content as block 3; both stay cached, 3 is handed out first.
  EXPECT_EQ(m.block_pool().block(4).block_hash, a.hashes[2]);
  EXPECT_EQ(m.block_pool().get_cached_block(a.hashes[2])->block_id, 3);
}

TEST(KVCacheManager, RefCountsAndCommonPrefixWithSharedPrefixes) {
  KVCacheManager m(20, 4, true, 8192);
  const std::vector<int32_t> prefix = range(0, 8);  // 2 blocks
  TestRequest a("a", concat(prefix, {100, 101}), 4);
  TestRequest b("b", concat(prefix, {200, 201, 202}), 4);
  TestRequest c("c", concat(prefix, {300}), 4);
  ASSERT_EQ(admit(m, a), (Ids{1, 2, 3}));
  ASSERT_EQ(admit(m, b), (Ids{4}));
  ASSERT_EQ(admit(m, c), (Ids{5}));
  EXPECT_EQ(m.block_pool().block(1).ref_cnt, 3);
  EXPECT_EQ(m.block_pool().block(2).ref_cnt, 3);
  EXPECT_EQ(m.block_pool().block(3).ref_cnt, 1);
  EXPECT_EQ(m.get_num_common_prefix_blocks("b"), 2);

  m.free("a");
  EXPECT_EQ(m.block_pool().block(1).ref_cnt, 2);
  EXPECT_EQ(m.block_pool().block(3).ref_cnt, 0);
  EXPECT_EQ(m.get_num_common_prefix_blocks("c"), 2);
  TestRequest d("d", range(50, 55), 4);
  ASSERT_EQ(admit(m, d)->size(), 2u);
  EXPECT_EQ(m.get_num_common_prefix_blocks("c"), 0);  // d shares nothing

  for (const char* id : {"b", "c", "d"}) m.free(id);
  EXPECT_EQ(m.block_pool().block(1).ref_cnt, 0);
  EXPECT_EQ(m.num_free_blocks(), m.num_usable_blocks());
}

TEST(KVCacheManager, EvictionUnderPressureIsLruAndSparesTouchedBlocks) {
  KVCacheManager m(7, 4, true, 8192);  // 6 usable blocks
  TestRequest a("a", range(0, 8), 4), b("b", range(10, 18), 4), c("c", range(20, 28), 4);
  ASSERT_EQ(admit(m, a), (Ids{1, 2}));
  ASSERT_EQ(admit(m, b), (Ids{3, 4}));
  ASSERT_EQ(admit(m, c), (Ids{5, 6}));
  m.free("a");
  m.free("b");
  m.free("c");
  EXPECT_EQ(free_ids(m), (Ids{2, 1, 4, 3, 6, 5}));

  // a's prefix comes back: its blocks leave the free queue; the new block evicts b's tail.
  TestRequest a2("a2", concat(range(0, 8), {9}), 4);
  ASSERT_EQ(admit(m, a2), (Ids{4}));
  EXPECT_EQ(m.get_block_ids("a2"), (Ids{1, 2, 4}));
  EXPECT_EQ(free_ids(m), (Ids{3, 6, 5}));
  TestRequest b2("b2", concat(range(10, 18), {9}), 4);
  EXPECT_EQ(m.get_computed_blocks(b2.view()).blocks.get_block_ids(), (Ids{3}));
  TestRequest c2("c2", concat(range(20, 28), {9}), 4);
  EXPECT_EQ(m.get_computed_blocks(c2.view()).blocks.get_block_ids(), (Ids{5, 6}));

  // A miss takes the rest, oldest first; every cached block still free is evicted.
  TestRequest d("d", range(40, 52), 4);
  ASSERT_EQ(admit(m, d), (Ids{3, 6, 5}));
  EXPECT_TRUE(m.get_computed_blocks(b2.view()).blocks.empty());
  EXPECT_TRUE(m.get_computed_blocks(c2.view()).blocks.empty());
  EXPECT_EQ(m.get_computed_blocks(TestRequest("a3", range(0, 9), 4).view()).blocks.size(), 2u);
  TestRequest e("e", range(60, 62), 4);
  EXPECT_EQ(m.allocate_slots(e.view(), 2), std::nullopt);
}

TEST(KVCacheManager, PreemptedRequestHitsItsOwnBlocksAndCountsAsPreempted) {
  KVCacheManager m(20, 4, true, 8192);
  TestRequest r("r", range(0, 10), 4);
  ASSERT_EQ(admit(m, r), (Ids{1, 2, 3}));
  for (int step = 0; step < 6; ++step) {  // decode 6 tokens, one per step
    r.append_output_token_ids(500 + step);
    ASSERT_TRUE(m.allocate_slots(r.view(), 1));
    r.num_computed_tokens += 1;
  }
  EXPECT_EQ(r.num_tokens(), 16);
  EXPECT_EQ(m.get_block_ids("r"), (Ids{1, 2, 3, 4}));
  EXPECT_TRUE(m.block_pool().block(4).block_hash.has_value());  // the 16th token filled it

  m.free("r");  // preempted: recompute from scratch later
  r.num_computed_tokens = 0;
  r.num_preemptions = 1;
  ComputedBlocks hit = m.get_computed_blocks(r.view());
  EXPECT_EQ(hit.blocks.get_block_ids(), (Ids{1, 2, 3}));  // at most 15 of 16 tokens
  // The last block is recomputed into a fresh block from the queue head (block 4, cached
  // and free, sits at the tail).
  ASSERT_EQ(admit(m, r), (Ids{5}));
  EXPECT_EQ(m.prefix_cache_stats().preempted_requests, 1);
  EXPECT_EQ(m.prefix_cache_stats().preempted_queries, 16);
  EXPECT_EQ(m.prefix_cache_stats().preempted_hits, 12);
  EXPECT_EQ(m.prefix_cache_stats().requests, 1);
}

TEST(KVCacheManager, SkipReadingPrefixCacheStillCachesItsBlocks) {
  KVCacheManager m(11, 16, true, 8192);
  TestRequest a("a", range(0, 40), 16);
  ASSERT_EQ(admit(m, a), (Ids{1, 2, 3}));
  TestRequest plp("plp", range(0, 40), 16);
  plp.skip_reading_prefix_cache = true;  // prompt logprobs need every position computed
  EXPECT_TRUE(m.get_computed_blocks(plp.view()).blocks.empty());
  ASSERT_EQ(admit(m, plp), (Ids{4, 5, 6}));
  EXPECT_EQ(m.block_pool().block(4).block_hash, a.hashes[0]);
  EXPECT_EQ(m.prefix_cache_stats().requests, 1);  // the skipped lookup is not counted
}

TEST(KVCacheManager, SlotsAreCappedAtMaxModelLen) {
  KVCacheManager m(20, 4, true, 20);
  TestRequest r("r", range(0, 18), 4);
  std::optional<KVCacheBlocks> blocks =
      m.allocate_slots(r.view(), 18, 0, {}, /*num_lookahead_tokens=*/8);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(blocks->size(), 5u);  // min(26, 20) tokens
}

TEST(KVCacheManager, FreeingEverythingRestoresTheFullFreeCount) {
  KVCacheManager m(32, 4, true, 8192);
  std::vector<TestRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.emplace_back("r" + std::to_string(i), range(i % 2, 9 + i), 4);
  for (TestRequest& r : reqs) ASSERT_TRUE(admit(m, r));
  for (int step = 0; step < 5; ++step) {
    for (TestRequest& r : reqs) {
      r.append_output_token_ids(step);
      ASSERT_TRUE(m.allocate_slots(r.view(), 1));
      r.num_computed_tokens += 1;
    }
  }
  EXPECT_GT(m.usage(), 0.0);
  m.free("never-scheduled");  // an abort before allocation is a no-op
  for (const TestRequest& r : reqs) m.free(r.id);
  EXPECT_EQ(m.num_free_blocks(), m.num_usable_blocks());
  EXPECT_EQ(m.num_free_blocks(), 31);
  EXPECT_DOUBLE_EQ(m.usage(), 0.0);
  for (int32_t id = 1; id < 32; ++id) EXPECT_EQ(m.block_pool().block(id).ref_cnt, 0);
}

TEST(KVCacheManager, ResetPrefixCache) {
  KVCacheManager m(11, 16, true, 8192);
  const std::vector<int32_t> full = repeat_each({0, 1, 2}, 16);
  TestRequest req0("0", concat(full, std::vector<int32_t>(7, 3)), 16);
  ASSERT_EQ(admit(m, req0), (Ids{1, 2, 3, 4}));
  TestRequest req1("1", concat(full, std::vector<int32_t>(7, 4)), 16);
  ASSERT_EQ(admit(m, req1), (Ids{5}));

  EXPECT_FALSE(m.reset_prefix_cache());  // blocks in use
  EXPECT_GT(m.block_pool().num_cached_hashes(), 0u);
  EXPECT_FALSE(m.prefix_cache_stats().reset);
  m.free("0");
  m.free("1");
  EXPECT_TRUE(m.reset_prefix_cache());
  EXPECT_EQ(m.block_pool().num_cached_hashes(), 0u);
  for (int32_t id = 0; id < 11; ++id) {
    EXPECT_FALSE(m.block_pool().block(id).block_hash.has_value());
  }
  EXPECT_TRUE(m.prefix_cache_stats().reset);
  EXPECT_TRUE(m.get_computed_blocks(req1.view()).blocks.empty());
}

TEST(KVCacheSizing, BlocksFromAMemoryBudget) {
  const KVCacheSpec spec{16, 8, 128, 2, 32};
  EXPECT_EQ(kv_cache_page_size_bytes(spec), 2 * 16 * 8 * 128 * 2);
  EXPECT_EQ(kv_cache_bytes_per_block(spec), 2LL * 16 * 8 * 128 * 2 * 32);  // 2 MiB
  Expected<int32_t> n = determine_num_gpu_blocks(spec, {11LL << 20, std::nullopt, 64});
  ASSERT_TRUE(n) << n.status().to_string();
  EXPECT_EQ(*n, 5);  // floor(11 MiB / 2 MiB)
  EXPECT_EQ(kv_cache_size_tokens(*n, 16), 80);
  EXPECT_DOUBLE_EQ(max_concurrency(*n, 16, 64), 1.25);
}

TEST(KVCacheSizing, BudgetMustHoldOneMaxLengthRequest) {
  const KVCacheSpec spec{16, 8, 128, 2, 32};
  Expected<int32_t> n = determine_num_gpu_blocks(spec, {10LL << 20, std::nullopt, 100});
  ASSERT_FALSE(n);
  EXPECT_EQ(n.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(n.status().message().find("max_model_len"), std::string::npos);
  EXPECT_NE(n.status().message().find("80"), std::string::npos);  // the estimated max length
  EXPECT_FALSE(determine_num_gpu_blocks(spec, {0, std::nullopt, 16}));
}

TEST(KVCacheSizing, OverrideWinsButNeedsTwoBlocks) {
  const KVCacheSpec spec{16, 8, 128, 2, 32};
  Expected<int32_t> n = determine_num_gpu_blocks(spec, {0, 3, 4096});
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 3);
  Expected<int32_t> too_small = determine_num_gpu_blocks(spec, {1LL << 30, 1, 64});
  ASSERT_FALSE(too_small);
  EXPECT_EQ(too_small.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(too_small.status().message().find("--num-gpu-blocks-override"), std::string::npos);
  EXPECT_FALSE(determine_num_gpu_blocks(KVCacheSpec{16, 0, 128, 2, 32}, {1LL << 30, 8, 64}));
}

}  // namespace
}  // namespace test_kv_cache_manager
}  // namespace vllm::engine
