// One paged KV-cache block's metadata, and the free queue that threads through the blocks.
//
// Port of vLLM V1's KVCacheBlock and FreeKVCacheBlockQueue (vllm/v1/core/kv_cache_utils.py).
// The queue is an intrusive doubly linked list: the links live in the blocks themselves, so
// taking a block out of the middle (a prefix-cache hit on a free block) is O(1) and nothing
// is allocated while the engine runs. Two sentinel blocks (block_id -1) bound the list, so
// every real block in it has a prev and a next.
//
// Order of the queue = eviction order. At start it holds the blocks by id. The pool pops from
// the front (least recently used, or never-hashed blocks put there on purpose) and puts freed
// blocks that hold a cached prefix at the back; see BlockPool::free_blocks.
//
// Blocks are owned by the BlockPool (a vector that never reallocates), so raw pointers to
// them stay valid for the pool's lifetime. The queue must not move once built (its sentinels
// are linked by address).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_hash.h"

namespace vllm::engine {

struct KVCacheBlock {
  explicit KVCacheBlock(int32_t id) : block_id(id) {}

  // 0 .. num_blocks - 1; -1 for the queue's sentinels.
  int32_t block_id;
  // Number of requests whose block table holds this block. 0 means the block is in the free
  // queue (possibly still cached, i.e. an eviction candidate), except for the null block.
  int32_t ref_cnt = 0;
  // Set once the block is full and cached for prefix reuse; cleared on eviction.
  std::optional<BlockHash> block_hash;
  // The placeholder block 0 (vLLM's null_block): never cached, never freed, never handed out.
  bool is_null = false;

  // Links of the free queue; only FreeKVCacheBlockQueue touches them.
  KVCacheBlock* prev_free_block = nullptr;
  KVCacheBlock* next_free_block = nullptr;

  void reset_hash() { block_hash.reset(); }
};

class FreeKVCacheBlockQueue {
 public:
  // Links `blocks` in the given order (vLLM passes all blocks, by id).
  explicit FreeKVCacheBlockQueue(std::span<KVCacheBlock> blocks);
  FreeKVCacheBlockQueue(const FreeKVCacheBlockQueue&) = delete;
  FreeKVCacheBlockQueue& operator=(const FreeKVCacheBlockQueue&) = delete;

  int32_t num_free_blocks() const { return num_free_blocks_; }

  // Takes the first block. The queue must not be empty.
  KVCacheBlock* popleft();
  // Takes the first n blocks, in queue order. The queue must hold at least n.
  std::vector<KVCacheBlock*> popleft_n(int32_t n);
  // Takes `block` out from anywhere in the queue; it must be in the queue.
  void remove(KVCacheBlock* block);
  // Puts one block at the back.
  void append(KVCacheBlock* block);
  // Puts blocks at the back, keeping their order (the last one ends up at the very back).
  void append_n(std::span<KVCacheBlock* const> blocks);
  // Puts blocks at the front, keeping their order (the first one becomes the new head).
  void prepend_n(std::span<KVCacheBlock* const> blocks);

  // The queue front to back; O(n), for tests and debugging.
  std::vector<KVCacheBlock*> get_all_free_blocks() const;
  std::vector<int32_t> get_all_free_block_ids() const;

 private:
  int32_t num_free_blocks_ = 0;
  KVCacheBlock fake_free_list_head_{-1};
  KVCacheBlock fake_free_list_tail_{-1};
};

}  // namespace vllm::engine
