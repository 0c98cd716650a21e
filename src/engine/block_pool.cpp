// BlockPool: see block_pool.h for the invariants this code keeps.
#include "engine/block_pool.h"

#include <algorithm>

#include "base/logging.h"
#include "base/status.h"

namespace vllm::engine {
namespace {

std::vector<KVCacheBlock> make_blocks(int32_t num_gpu_blocks) {
  VLLM_CHECK_MSG(num_gpu_blocks > 0, "a block pool needs at least one block, got {}",
                 num_gpu_blocks);
  std::vector<KVCacheBlock> blocks;
  blocks.reserve(static_cast<size_t>(num_gpu_blocks));
  for (int32_t id = 0; id < num_gpu_blocks; ++id) blocks.emplace_back(id);
  return blocks;
}

}  // namespace

BlockPool::BlockPool(int32_t num_gpu_blocks, bool enable_caching)
    : enable_caching_(enable_caching),
      blocks_(make_blocks(num_gpu_blocks)),
      free_block_queue_(blocks_) {
  // Block 0 becomes the placeholder; its ref_cnt is not maintained.
  null_block_ = free_block_queue_.popleft();
  null_block_->is_null = true;
}

KVCacheBlock* BlockPool::get_cached_block(const BlockHash& block_hash) const {
  auto it = cached_block_hash_to_block_.find(block_hash);
  if (it == cached_block_hash_to_block_.end() || it->second.empty()) return nullptr;
  return it->second.front();
}

void BlockPool::cache_full_blocks(std::span<KVCacheBlock* const> blocks,
                                  std::span<const BlockHash> block_hashes,
                                  int32_t num_cached_blocks, int32_t num_full_blocks) {
  if (num_cached_blocks >= num_full_blocks) return;
  VLLM_CHECK_MSG(static_cast<size_t>(num_full_blocks) <= blocks.size(),
                 "caching {} full blocks of a request that holds {}", num_full_blocks,
                 blocks.size());
  VLLM_CHECK_MSG(static_cast<size_t>(num_full_blocks) <= block_hashes.size(),
                 "caching {} full blocks with only {} block hashes", num_full_blocks,
                 block_hashes.size());
  for (int32_t i = num_cached_blocks; i < num_full_blocks; ++i) {
    KVCacheBlock* block = blocks[i];
    if (block->is_null) continue;
    const BlockHash& block_hash = block_hashes[i];
    if (block->block_hash.has_value()) {
      // Already cached (it came from a prefix-cache hit): it must be the same content.
      VLLM_CHECK_MSG(*block->block_hash == block_hash,
                     "cached block {} has the wrong hash for position {}", block->block_id, i);
      continue;
    }
    block->block_hash = block_hash;
    cached_block_hash_to_block_[block_hash].push_back(block);
  }
}

std::vector<KVCacheBlock*> BlockPool::get_new_blocks(int32_t num_blocks) {
  VLLM_CHECK_MSG(num_blocks <= get_num_free_blocks(),
                 "cannot get {} free blocks from the pool ({})", num_blocks, get_num_free_blocks());
  std::vector<KVCacheBlock*> blocks = free_block_queue_.popleft_n(num_blocks);
  for (KVCacheBlock* block : blocks) {
    if (enable_caching_) maybe_evict_cached_block(block);
    VLLM_CHECK_MSG(block->ref_cnt == 0, "free block {} has ref_cnt {}", block->block_id,
                   block->ref_cnt);
    block->ref_cnt += 1;
  }
  return blocks;
}

bool BlockPool::maybe_evict_cached_block(KVCacheBlock* block) {
  if (!block->block_hash.has_value()) return false;
  auto it = cached_block_hash_to_block_.find(*block->block_hash);
  if (it == cached_block_hash_to_block_.end()) return false;
  std::vector<KVCacheBlock*>& holders = it->second;
  auto pos = std::find(holders.begin(), holders.end(), block);
  if (pos == holders.end()) return false;
  holders.erase(pos);
  const BlockHash block_hash = *block->block_hash;
  block->reset_hash();
  if (holders.empty()) {
    cached_block_hash_to_block_.erase(it);
    if (hash_evicted_) hash_evicted_(block_hash);
  }
  return true;
}

void BlockPool::touch(std::span<KVCacheBlock* const> blocks) {
  for (KVCacheBlock* block : blocks) {
    // ref_cnt 0: the block sits in the free queue as an eviction candidate; take it out.
    if (block->ref_cnt == 0 && !block->is_null) free_block_queue_.remove(block);
    block->ref_cnt += 1;
  }
}

void BlockPool::free_blocks(std::span<KVCacheBlock* const> ordered_blocks) {
  for (KVCacheBlock* block : ordered_blocks) {
    if (block->is_null) continue;  // its ref_cnt is not maintained
    VLLM_CHECK_MSG(block->ref_cnt > 0, "freeing block {} whose ref_cnt is already 0",
                   block->block_id);
    block->ref_cnt -= 1;
  }
  // Blocks without a hash hold nothing reusable: front of the queue, reused first. Cached
  // blocks go to the back so they survive longest for prefix hits.
  std::vector<KVCacheBlock*> fresh_blocks;
  std::vector<KVCacheBlock*> cached_blocks;
  for (KVCacheBlock* block : ordered_blocks) {
    if (block->is_null || block->ref_cnt != 0) continue;
    (block->block_hash.has_value() ? cached_blocks : fresh_blocks).push_back(block);
  }
  free_block_queue_.prepend_n(fresh_blocks);
  free_block_queue_.append_n(cached_blocks);
}

bool BlockPool::reset_prefix_cache() {
  const int32_t num_used_blocks = num_gpu_blocks() - get_num_free_blocks();
  if (num_used_blocks != 1) {  // the null block always counts as used
    VLLM_LOG_WARNING("Failed to reset prefix cache because some blocks ({}) are not freed yet",
                     num_used_blocks - 1);
    return false;
  }
  cached_block_hash_to_block_.clear();
  for (KVCacheBlock& block : blocks_) block.reset_hash();
  VLLM_LOG_INFO("Successfully reset prefix cache");
  return true;
}

double BlockPool::get_usage() const {
  const int32_t total_gpu_blocks = num_gpu_blocks() - 1;  // minus the null block
  if (total_gpu_blocks == 0) return 0.0;
  return 1.0 - static_cast<double>(get_num_free_blocks()) / total_gpu_blocks;
}

}  // namespace vllm::engine
