// The pool of paged KV-cache blocks: allocation, freeing, and the prefix cache's hash index.
//
// Port of vLLM V1's BlockPool (vllm/v1/core/block_pool.py), single KV-cache group.
//
// Invariants (as vLLM):
// - A block with ref_cnt == 0 is in the free queue, except the null block.
// - Block 0 is the null block: popped from the free queue at construction and never handed
//   out, cached or freed (a placeholder id for padding). So a pool of N blocks has N - 1
//   usable ones, and "all free" means get_num_free_blocks() == N - 1.
// - A block's hash is set when it becomes a full, cached block and is kept after the block is
//   freed: a free block with a hash is an eviction candidate that a later request may still
//   hit (touch() then takes it back out of the free queue). The hash is dropped only when the
//   block is reused for new content (get_new_blocks evicts it) or on reset_prefix_cache.
// - Free queue order is eviction order: freed blocks without a hash go to the front (reused
//   first, they hold nothing reusable), freed cached blocks to the back (kept longest). The
//   manager frees a request's blocks tail first, so a chain's last block is evicted first.
// - Identical blocks are not de-duplicated: two requests that filled the same prefix each keep
//   their own block ids (block tables stay append-only); the hash index keeps both and hands
//   out the first one inserted.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/block_hash.h"
#include "engine/kv_cache_block.h"

namespace vllm::engine {

class BlockPool {
 public:
  BlockPool(int32_t num_gpu_blocks, bool enable_caching);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_gpu_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  bool enable_caching() const { return enable_caching_; }

  // Cache lookup: a cached block holding `block_hash`, or nullptr on a miss. The block may be
  // in use or free (ref_cnt 0); the caller touch()es it before relying on it.
  KVCacheBlock* get_cached_block(const BlockHash& block_hash) const;

  // Marks blocks[num_cached_blocks, num_full_blocks) as cached under block_hashes[i] (the
  // request's block hashes; at least num_full_blocks of them). Null blocks are skipped; a
  // block that already carries a hash (a prefix-cache hit) must carry this one.
  void cache_full_blocks(std::span<KVCacheBlock* const> blocks,
                         std::span<const BlockHash> block_hashes, int32_t num_cached_blocks,
                         int32_t num_full_blocks);

  // Takes n blocks from the free queue head, evicting any cached hash they still hold, each
  // with ref_cnt 1. The caller must have checked n <= get_num_free_blocks().
  std::vector<KVCacheBlock*> get_new_blocks(int32_t num_blocks);

  // A prefix-cache hit: ref_cnt++ on each block, taking it out of the free queue if it was
  // free (ref_cnt 0).
  void touch(std::span<KVCacheBlock* const> blocks);

  // ref_cnt-- on each block; those reaching 0 go back to the free queue (see the order above).
  // `ordered_blocks` is in eviction priority: the first is evicted first.
  void free_blocks(std::span<KVCacheBlock* const> ordered_blocks);

  // Drops the cached hash of a block if it holds one; true if it did.
  bool maybe_evict_cached_block(KVCacheBlock* block);

  // Called with a hash when the last cached block holding it loses it (evicted for reuse; not
  // on reset_prefix_cache). Hybrid models drop that prefix's GDN state snapshot.
  void set_hash_evicted_callback(std::function<void(const BlockHash&)> callback) {
    hash_evicted_ = std::move(callback);
  }

  // Forgets every cached hash. Only possible when no block is in use (returns false and logs a
  // warning otherwise), e.g. after a weight update or between benchmark runs.
  bool reset_prefix_cache();

  int32_t get_num_free_blocks() const { return free_block_queue_.num_free_blocks(); }
  // Fraction of the usable blocks in use, 0.0 .. 1.0 (the null block is not counted).
  double get_usage() const;

  KVCacheBlock* null_block() const { return null_block_; }
  // For tests and debugging.
  const KVCacheBlock& block(int32_t block_id) const { return blocks_.at(block_id); }
  const FreeKVCacheBlockQueue& free_block_queue() const { return free_block_queue_; }
  size_t num_cached_hashes() const { return cached_block_hash_to_block_.size(); }

 private:
  bool enable_caching_;
  std::vector<KVCacheBlock> blocks_;  // never resized: block pointers stay valid
  FreeKVCacheBlockQueue free_block_queue_;
  // vLLM's BlockHashToBlockMap: hash -> blocks holding it, in insertion order (usually one).
  std::unordered_map<BlockHash, std::vector<KVCacheBlock*>, BlockHashHasher>
      cached_block_hash_to_block_;
  KVCacheBlock* null_block_ = nullptr;
  std::function<void(const BlockHash&)> hash_evicted_;
};

}  // namespace vllm::engine
