// Block pool, free block queue and block hashing: exact block ids and eviction order, as
// vLLM's tests/v1/core/test_kv_cache_utils.py and test_prefix_caching.py check them.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_block.h"

namespace vllm::engine {
namespace test_block_pool {
namespace {

std::vector<KVCacheBlock> make_blocks(int n) {
  std::vector<KVCacheBlock> blocks;
  for (int i = 0; i < n; ++i) blocks.emplace_back(i);
  return blocks;
}

std::vector<int32_t> ids(const std::vector<KVCacheBlock*>& blocks) {
  std::vector<int32_t> out;
  for (const KVCacheBlock* b : blocks) out.push_back(b->block_id);
  return out;
}

std::vector<int32_t> iota_tokens(int begin, int end) {
  std::vector<int32_t> tokens(end - begin);
  std::iota(tokens.begin(), tokens.end(), begin);
  return tokens;
}

TEST(FreeKVCacheBlockQueue, StartsInBlockIdOrderAndPopsFromTheFront) {
  std::vector<KVCacheBlock> blocks = make_blocks(6);
  FreeKVCacheBlockQueue queue(blocks);
  EXPECT_EQ(queue.num_free_blocks(), 6);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));

  KVCacheBlock* first = queue.popleft();
  EXPECT_EQ(first->block_id, 0);
  EXPECT_EQ(first->prev_free_block, nullptr);
  EXPECT_EQ(first->next_free_block, nullptr);
  EXPECT_EQ(ids(queue.popleft_n(2)), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(queue.num_free_blocks(), 3);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_TRUE(queue.popleft_n(0).empty());
}

TEST(FreeKVCacheBlockQueue, RemoveFromTheMiddleAppendAndPrepend) {
  std::vector<KVCacheBlock> blocks = make_blocks(5);
  FreeKVCacheBlockQueue queue(blocks);
  queue.remove(&blocks[2]);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{0, 1, 3, 4}));
  queue.remove(&blocks[0]);  // the head
  queue.remove(&blocks[4]);  // the tail
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(queue.num_free_blocks(), 2);

  queue.append(&blocks[4]);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{1, 3, 4}));
  KVCacheBlock* const to_append[] = {&blocks[2], &blocks[0]};
  queue.append_n(to_append);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{1, 3, 4, 2, 0}));

  std::vector<KVCacheBlock*> popped = queue.popleft_n(2);  // 1, 3
  queue.prepend_n(popped);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{1, 3, 4, 2, 0}));
  EXPECT_EQ(queue.num_free_blocks(), 5);
}

TEST(FreeKVCacheBlockQueue, EmptiesAndRefills) {
  std::vector<KVCacheBlock> blocks = make_blocks(3);
  FreeKVCacheBlockQueue queue(blocks);
  std::vector<KVCacheBlock*> all = queue.popleft_n(3);
  EXPECT_EQ(queue.num_free_blocks(), 0);
  EXPECT_TRUE(queue.get_all_free_blocks().empty());
  queue.prepend_n(std::vector<KVCacheBlock*>{all[2]});  // prepend into an empty queue
  queue.append(all[0]);
  EXPECT_EQ(queue.get_all_free_block_ids(), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(queue.popleft()->block_id, 2);
  EXPECT_EQ(queue.popleft()->block_id, 0);
  EXPECT_EQ(queue.num_free_blocks(), 0);
}

TEST(BlockHash, ChainsOnTheParentAndCoversTokensAndExtraKeys) {
  const std::vector<int32_t> tokens = iota_tokens(0, 4);
  const BlockHash root = hash_block_tokens(std::nullopt, tokens);
  EXPECT_EQ(root, hash_block_tokens(std::nullopt, tokens));
  EXPECT_EQ(root, hash_block_tokens(none_hash(), tokens));  // None parent == NONE_HASH
  // Same tokens, another parent: another hash (the key is the whole prefix).
  EXPECT_NE(hash_block_tokens(root, tokens), root);
  EXPECT_NE(hash_block_tokens(std::nullopt, iota_tokens(1, 5)), root);
  const std::vector<std::string> salt = {"salt"};
  EXPECT_NE(hash_block_tokens(std::nullopt, tokens, salt), root);
  // Length-prefixed: moving bytes between the tokens and a key changes the hash.
  EXPECT_NE(hash_block_tokens(std::nullopt, std::vector<int32_t>{}), none_hash());
}

TEST(BlockHash, RequestHashesAreIncrementalAndSkipThePartialBlock) {
  const std::vector<int32_t> tokens = iota_tokens(0, 11);  // block_size 4: 2 full + 3
  std::vector<BlockHash> hashes;
  EXPECT_EQ(append_request_block_hashes(std::span(tokens).first(5), 4, {}, hashes), 1);
  EXPECT_EQ(append_request_block_hashes(std::span(tokens).first(7), 4, {}, hashes), 0);
  EXPECT_EQ(append_request_block_hashes(tokens, 4, {}, hashes), 1);
  ASSERT_EQ(hashes.size(), 2u);

  const BlockHash h0 = hash_block_tokens(std::nullopt, iota_tokens(0, 4));
  EXPECT_EQ(hashes[0], h0);
  EXPECT_EQ(hashes[1], hash_block_tokens(h0, iota_tokens(4, 8)));

  // The cache salt keys the first block only; the LoRA name every block.
  std::vector<BlockHash> salted;
  append_request_block_hashes(tokens, 4, BlockHashExtras{"", "s"}, salted);
  const std::vector<std::string> salt = {"s"};
  EXPECT_EQ(salted[0], hash_block_tokens(std::nullopt, iota_tokens(0, 4), salt));
  EXPECT_EQ(salted[1], hash_block_tokens(salted[0], iota_tokens(4, 8)));
  EXPECT_NE(salted[1], hashes[1]);
  std::vector<BlockHash> lora;
  append_request_block_hashes(tokens, 4, BlockHashExtras{"adapter", ""}, lora);
  const std::vector<std::string> lora_key = {"adapter"};
  EXPECT_EQ(lora[1], hash_block_tokens(lora[0], iota_tokens(4, 8), lora_key));
}

TEST(BlockPool, BlockZeroIsTheNullBlock) {
  BlockPool pool(5, /*enable_caching=*/true);
  EXPECT_EQ(pool.null_block()->block_id, 0);
  EXPECT_TRUE(pool.null_block()->is_null);
  EXPECT_EQ(pool.get_num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool.get_usage(), 0.0);
  EXPECT_EQ(pool.free_block_queue().get_all_free_block_ids(), (std::vector<int32_t>{1, 2, 3, 4}));
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(4);
  EXPECT_EQ(ids(blocks), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_DOUBLE_EQ(pool.get_usage(), 1.0);
  for (const KVCacheBlock* b : blocks) EXPECT_EQ(b->ref_cnt, 1);
}

TEST(BlockPool, CacheFullBlocksFromTheStartAndFromTheMiddle) {
  BlockPool pool(5, true);
  const std::vector<int32_t> tokens = iota_tokens(0, 14);
  std::vector<BlockHash> hashes;
  append_request_block_hashes(tokens, 4, {}, hashes);  // 3 full blocks
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(2);
  pool.cache_full_blocks(blocks, hashes, 0, 2);
  EXPECT_EQ(pool.num_cached_hashes(), 2u);
  EXPECT_EQ(blocks[0]->block_hash, hashes[0]);
  EXPECT_EQ(blocks[1]->block_hash, hashes[1]);

  std::vector<KVCacheBlock*> more = pool.get_new_blocks(1);
  blocks.push_back(more[0]);
  pool.cache_full_blocks(blocks, hashes, 2, 3);
  EXPECT_EQ(pool.num_cached_hashes(), 3u);
  EXPECT_EQ(pool.get_cached_block(hashes[2]), blocks[2]);
  EXPECT_EQ(pool.get_cached_block(hashes[0]), blocks[0]);
  EXPECT_EQ(pool.get_cached_block(hash_block_tokens(std::nullopt, iota_tokens(100, 104))), nullptr);
}

TEST(BlockPool, FreedBlocksWithoutHashGoFirstCachedOnesLast) {
  BlockPool pool(8, true);
  std::vector<BlockHash> hashes;
  append_request_block_hashes(iota_tokens(0, 8), 4, {}, hashes);
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(3);  // 1, 2, 3
  pool.cache_full_blocks(blocks, hashes, 0, 2);                // 1, 2 cached; 3 partial
  // Free in reverse (the manager's order): 3 to the front, then 2, 1 to the back.
  std::vector<KVCacheBlock*> reversed(blocks.rbegin(), blocks.rend());
  pool.free_blocks(reversed);
  EXPECT_EQ(pool.free_block_queue().get_all_free_block_ids(),
            (std::vector<int32_t>{3, 4, 5, 6, 7, 2, 1}));
  EXPECT_EQ(pool.get_num_free_blocks(), 7);
  // A freed cached block still hits until it is reused.
  EXPECT_EQ(pool.get_cached_block(hashes[0]), blocks[0]);
}

TEST(BlockPool, TouchTakesAFreeCachedBlockOutOfTheQueue) {
  BlockPool pool(4, true);
  std::vector<BlockHash> hashes;
  append_request_block_hashes(iota_tokens(0, 4), 4, {}, hashes);
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(1);  // 1
  pool.cache_full_blocks(blocks, hashes, 0, 1);
  pool.free_blocks(blocks);
  EXPECT_EQ(pool.free_block_queue().get_all_free_block_ids(), (std::vector<int32_t>{2, 3, 1}));

  KVCacheBlock* hit = pool.get_cached_block(hashes[0]);
  ASSERT_EQ(hit, blocks[0]);
  KVCacheBlock* const touched[] = {hit};
  pool.touch(touched);
  EXPECT_EQ(hit->ref_cnt, 1);
  EXPECT_EQ(pool.free_block_queue().get_all_free_block_ids(), (std::vector<int32_t>{2, 3}));
  pool.touch(touched);  // a second sharer: no queue change
  EXPECT_EQ(hit->ref_cnt, 2);
  EXPECT_EQ(pool.get_num_free_blocks(), 2);
  pool.free_blocks(touched);
  EXPECT_EQ(pool.get_num_free_blocks(), 2);  // still held once
  pool.free_blocks(touched);
  EXPECT_EQ(pool.free_block_queue().get_all_free_block_ids(), (std::vector<int32_t>{2, 3, 1}));
}

TEST(BlockPool, ReusingACachedBlockEvictsItsHash) {
  BlockPool pool(2, true);  // one usable block
  std::vector<BlockHash> hashes;
  append_request_block_hashes(iota_tokens(0, 4), 4, {}, hashes);
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(1);
  pool.cache_full_blocks(blocks, hashes, 0, 1);
  pool.free_blocks(blocks);
  ASSERT_NE(pool.get_cached_block(hashes[0]), nullptr);

  std::vector<KVCacheBlock*> reused = pool.get_new_blocks(1);
  EXPECT_EQ(reused[0]->block_id, 1);
  EXPECT_FALSE(reused[0]->block_hash.has_value());
  EXPECT_EQ(pool.get_cached_block(hashes[0]), nullptr);
  EXPECT_EQ(pool.num_cached_hashes(), 0u);
}

TEST(BlockPool, DuplicateBlocksAreKeptAndTheFirstIsHandedOut) {
  BlockPool pool(4, true);
  std::vector<BlockHash> hashes;
  append_request_block_hashes(iota_tokens(0, 4), 4, {}, hashes);
  std::vector<KVCacheBlock*> a = pool.get_new_blocks(1);  // 1
  std::vector<KVCacheBlock*> b = pool.get_new_blocks(1);  // 2, same content
  pool.cache_full_blocks(a, hashes, 0, 1);
  pool.cache_full_blocks(b, hashes, 0, 1);
  EXPECT_EQ(pool.get_cached_block(hashes[0])->block_id, 1);
  EXPECT_TRUE(pool.maybe_evict_cached_block(a[0]));
  EXPECT_EQ(pool.get_cached_block(hashes[0])->block_id, 2);
  EXPECT_FALSE(pool.maybe_evict_cached_block(a[0]));
}

TEST(BlockPool, ResetPrefixCacheOnlyWhenNothingIsInUse) {
  BlockPool pool(4, true);
  std::vector<BlockHash> hashes;
  append_request_block_hashes(iota_tokens(0, 8), 4, {}, hashes);
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(2);
  pool.cache_full_blocks(blocks, hashes, 0, 2);
  EXPECT_FALSE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.num_cached_hashes(), 2u);
  pool.free_blocks(blocks);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.num_cached_hashes(), 0u);
  EXPECT_EQ(pool.get_cached_block(hashes[0]), nullptr);
  for (int32_t id = 0; id < pool.num_gpu_blocks(); ++id) {
    EXPECT_FALSE(pool.block(id).block_hash.has_value());
  }
  EXPECT_EQ(pool.get_num_free_blocks(), 3);
}

TEST(BlockPool, WithoutCachingEveryFreedBlockGoesToTheFront) {
  BlockPool pool(5, false);
  std::vector<KVCacheBlock*> blocks = pool.get_new_blocks(3);  // 1, 2, 3
  std::vector<KVCacheBlock*> reversed(blocks.rbegin(), blocks.rend());
  pool.free_blocks(reversed);
  EXPECT_EQ(pool.free_block_queue().get_all_free_block_ids(), (std::vector<int32_t>{3, 2, 1, 4}));
}

}  // namespace
}  // namespace test_block_pool
}  // namespace vllm::engine
