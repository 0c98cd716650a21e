// FullAttentionManager: block tables for full-attention layers (see the header).
#include "engine/single_type_kv_cache_manager.h"

#include <algorithm>

#include "base/status.h"

namespace vllm::engine {
namespace {

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

FullAttentionManager::FullAttentionManager(BlockPool* block_pool, int32_t block_size,
                                           bool enable_caching)
    : block_pool_(block_pool), block_size_(block_size), enable_caching_(enable_caching) {
  VLLM_CHECK(block_pool_ != nullptr);
  VLLM_CHECK_MSG(block_size_ > 0, "block_size {} must be positive", block_size_);
}

int32_t FullAttentionManager::get_num_blocks_to_allocate(
    std::string_view request_id, int64_t num_tokens,
    std::span<KVCacheBlock* const> new_computed_blocks) const {
  const int64_t num_required_blocks = cdiv(num_tokens, block_size_);
  auto it = req_to_blocks_.find(request_id);
  const int64_t num_req_blocks = it == req_to_blocks_.end() ? 0 : it->second.size();

  if (num_cached_block_.find(request_id) != num_cached_block_.end()) {
    // A running request never has new prefix-cache hits.
    VLLM_CHECK_MSG(new_computed_blocks.empty(), "running request {} got new computed blocks",
                   request_id);
    return static_cast<int32_t>(std::max<int64_t>(num_required_blocks - num_req_blocks, 0));
  }
  const int64_t num_local_computed_blocks =
      static_cast<int64_t>(new_computed_blocks.size()) + num_req_blocks;
  const int64_t num_new_blocks =
      std::max<int64_t>(num_required_blocks - num_local_computed_blocks, 0);
  // A hit on a free block (ref_cnt 0) takes that block out of the free queue too.
  int64_t num_evictable_blocks = 0;
  for (const KVCacheBlock* block : new_computed_blocks) {
    if (block->ref_cnt == 0 && !block->is_null) ++num_evictable_blocks;
  }
  return static_cast<int32_t>(num_new_blocks + num_evictable_blocks);
}

void FullAttentionManager::allocate_new_computed_blocks(
    std::string_view request_id, std::span<KVCacheBlock* const> new_computed_blocks) {
  if (num_cached_block_.find(request_id) != num_cached_block_.end()) {
    VLLM_CHECK_MSG(new_computed_blocks.empty(), "running request {} got new computed blocks",
                   request_id);
    return;
  }
  auto [it, inserted] = req_to_blocks_.try_emplace(std::string(request_id));
  std::vector<KVCacheBlock*>& req_blocks = it->second;
  VLLM_CHECK_MSG(req_blocks.empty(), "new request {} already holds {} blocks", request_id,
                 req_blocks.size());
  if (enable_caching_) {
    block_pool_->touch(new_computed_blocks);
  } else {
    VLLM_CHECK_MSG(new_computed_blocks.empty(),
                   "computed blocks must be empty when prefix caching is disabled");
  }
  req_blocks.assign(new_computed_blocks.begin(), new_computed_blocks.end());
  num_cached_block_.insert_or_assign(std::string(request_id),
                                     static_cast<int32_t>(req_blocks.size()));
}

std::vector<KVCacheBlock*> FullAttentionManager::allocate_new_blocks(std::string_view request_id,
                                                                     int64_t num_tokens) {
  auto it = req_to_blocks_.find(request_id);
  if (it == req_to_blocks_.end()) it = req_to_blocks_.try_emplace(std::string(request_id)).first;
  std::vector<KVCacheBlock*>& req_blocks = it->second;
  const int64_t num_new_blocks =
      cdiv(num_tokens, block_size_) - static_cast<int64_t>(req_blocks.size());
  if (num_new_blocks <= 0) return {};
  std::vector<KVCacheBlock*> new_blocks =
      block_pool_->get_new_blocks(static_cast<int32_t>(num_new_blocks));
  req_blocks.insert(req_blocks.end(), new_blocks.begin(), new_blocks.end());
  return new_blocks;
}

void FullAttentionManager::cache_blocks(std::string_view request_id,
                                        std::span<const BlockHash> block_hashes,
                                        int64_t num_tokens) {
  auto cached_it = num_cached_block_.find(request_id);
  const int32_t num_cached_blocks = cached_it == num_cached_block_.end() ? 0 : cached_it->second;
  const int32_t num_full_blocks = static_cast<int32_t>(num_tokens / block_size_);
  if (num_cached_blocks >= num_full_blocks) return;
  auto it = req_to_blocks_.find(request_id);
  VLLM_CHECK_MSG(it != req_to_blocks_.end(), "caching blocks of unknown request {}", request_id);
  block_pool_->cache_full_blocks(it->second, block_hashes, num_cached_blocks, num_full_blocks);
  num_cached_block_.insert_or_assign(std::string(request_id), num_full_blocks);
}

void FullAttentionManager::free(std::string_view request_id) {
  auto it = req_to_blocks_.find(request_id);
  if (it != req_to_blocks_.end()) {
    // Tail first, so that the tail of a cached chain is evicted before its head.
    std::vector<KVCacheBlock*> ordered_blocks(it->second.rbegin(), it->second.rend());
    req_to_blocks_.erase(it);
    block_pool_->free_blocks(ordered_blocks);
  }
  auto cached_it = num_cached_block_.find(request_id);
  if (cached_it != num_cached_block_.end()) num_cached_block_.erase(cached_it);
}

std::vector<KVCacheBlock*> FullAttentionManager::find_longest_cache_hit(
    std::span<const BlockHash> block_hashes, int64_t max_length) const {
  std::vector<KVCacheBlock*> computed_blocks;
  const int64_t max_num_blocks =
      std::min<int64_t>(max_length / block_size_, static_cast<int64_t>(block_hashes.size()));
  for (int64_t i = 0; i < max_num_blocks; ++i) {
    KVCacheBlock* cached_block = block_pool_->get_cached_block(block_hashes[i]);
    if (cached_block == nullptr) break;
    computed_blocks.push_back(cached_block);
  }
  return computed_blocks;
}

int32_t FullAttentionManager::get_num_common_prefix_blocks(
    std::string_view running_request_id) const {
  auto it = req_to_blocks_.find(running_request_id);
  if (it == req_to_blocks_.end()) return 0;
  const auto num_requests = static_cast<int32_t>(req_to_blocks_.size());
  int32_t num_common_blocks = 0;
  for (const KVCacheBlock* block : it->second) {
    if (block->ref_cnt != num_requests) break;
    ++num_common_blocks;
  }
  return num_common_blocks;
}

std::span<KVCacheBlock* const> FullAttentionManager::get_blocks(std::string_view request_id) const {
  auto it = req_to_blocks_.find(request_id);
  if (it == req_to_blocks_.end()) return {};
  return it->second;
}

}  // namespace vllm::engine
