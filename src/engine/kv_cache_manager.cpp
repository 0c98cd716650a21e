// KVCacheManager: the scheduler-facing KV cache API (see the header for how it is used).
#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "base/status.h"

namespace vllm::engine {

std::vector<int32_t> KVCacheBlocks::get_block_ids() const {
  std::vector<int32_t> ids;
  ids.reserve(blocks.size());
  for (const KVCacheBlock* block : blocks) ids.push_back(block->block_id);
  return ids;
}

KVCacheBlocks KVCacheBlocks::operator+(const KVCacheBlocks& other) const {
  KVCacheBlocks sum{blocks};
  sum.blocks.insert(sum.blocks.end(), other.blocks.begin(), other.blocks.end());
  return sum;
}

void PrefixCacheStats::record(int64_t num_tokens, int64_t num_hits, bool preempted) {
  if (preempted) {
    preempted_requests += 1;
    preempted_queries += num_tokens;
    preempted_hits += num_hits;
  } else {
    requests += 1;
    queries += num_tokens;
    hits += num_hits;
  }
}

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_caching,
                               int64_t max_model_len, StateSnapshotConfig snapshots)
    : block_size_(block_size),
      enable_caching_(enable_caching),
      max_model_len_(max_model_len),
      block_pool_(std::make_unique<BlockPool>(num_blocks, enable_caching)),
      manager_(block_pool_.get(), block_size, enable_caching) {
  VLLM_CHECK_MSG(max_model_len_ > 0, "max_model_len {} must be positive", max_model_len_);
  if (snapshots.num_snapshots > 0) {
    VLLM_CHECK_MSG(enable_caching_, "state snapshots need prefix caching on");
    state_snapshots_ =
        std::make_unique<StateSnapshotPool>(snapshots.first_slot, snapshots.num_snapshots);
    // A prefix whose last block is gone can never hit again: its snapshot goes with it.
    StateSnapshotPool* pool = state_snapshots_.get();
    block_pool_->set_hash_evicted_callback([pool](const BlockHash& hash) { pool->evict(hash); });
  }
}

ComputedBlocks KVCacheManager::get_computed_blocks(const KVCacheRequest& request) const {
  if (!enable_caching_ || request.skip_reading_prefix_cache) return {};
  // When every token hits, the last one must still be computed for its logits; and hits are
  // whole blocks, so a fully cached prompt recomputes its whole last block.
  const int64_t max_cache_hit_length = request.num_tokens() - 1;
  ComputedBlocks result;
  result.blocks.blocks =
      manager_.find_longest_cache_hit(request.block_hashes, max_cache_hit_length);
  result.num_cached_kv_tokens = static_cast<int64_t>(result.blocks.size()) * block_size_;
  if (state_snapshots_) {
    // Hybrid: shorten the hit to the last block whose prefix has a GDN state snapshot.
    std::vector<KVCacheBlock*>& blocks = result.blocks.blocks;
    while (!blocks.empty()) {
      result.state_snapshot_slot =
          state_snapshots_->lookup(request.block_hashes[blocks.size() - 1]);
      if (result.state_snapshot_slot.has_value()) break;
      blocks.pop_back();
    }
  }
  result.num_computed_tokens = static_cast<int64_t>(result.blocks.size()) * block_size_;
  return result;
}

std::optional<KVCacheBlocks> KVCacheManager::allocate_slots(
    const KVCacheRequest& request, int64_t num_new_tokens, int64_t num_new_computed_tokens,
    const KVCacheBlocks& new_computed_blocks, int64_t num_lookahead_tokens) {
  VLLM_CHECK_MSG(num_new_tokens > 0, "allocate_slots for request {} with {} new tokens",
                 request.request_id, num_new_tokens);
  VLLM_CHECK_MSG(
      num_new_computed_tokens == static_cast<int64_t>(new_computed_blocks.size()) * block_size_,
      "request {}: {} new computed tokens but {} computed blocks of {}", request.request_id,
      num_new_computed_tokens, new_computed_blocks.size(), block_size_);
  const std::span<KVCacheBlock* const> computed = new_computed_blocks.blocks;

  // Computed tokens so far, counting the new prefix hits.
  const int64_t total_computed_tokens =
      std::min(request.num_computed_tokens + num_new_computed_tokens, max_model_len_);
  const int64_t num_tokens_need_slot =
      std::min(total_computed_tokens + num_new_tokens + num_lookahead_tokens, max_model_len_);

  const int32_t num_blocks_to_allocate =
      manager_.get_num_blocks_to_allocate(request.request_id, num_tokens_need_slot, computed);
  if (num_blocks_to_allocate > block_pool_->get_num_free_blocks()) {
    return std::nullopt;  // the caller preempts or waits; nothing changed
  }

  // Take the hits first (touch: they leave the free queue), so the new blocks below cannot
  // evict them.
  if (!computed.empty()) {
    manager_.allocate_new_computed_blocks(request.request_id, computed);
    if (state_snapshots_) state_snapshots_->touch(request.block_hashes[computed.size() - 1]);
  }
  KVCacheBlocks new_blocks{manager_.allocate_new_blocks(request.request_id, num_tokens_need_slot)};
  if (!enable_caching_) return new_blocks;

  // Cache up to the tokens that exist (lookahead slots hold nothing final yet).
  const int64_t num_tokens_to_cache =
      std::min(total_computed_tokens + num_new_tokens, request.num_tokens());
  manager_.cache_blocks(request.request_id, request.block_hashes, num_tokens_to_cache);
  return new_blocks;
}

void KVCacheManager::free(std::string_view request_id) {
  manager_.free(request_id);
}

void KVCacheManager::record_prefix_cache_stats(const KVCacheRequest& request, int64_t num_hits) {
  if (!enable_caching_ || request.skip_reading_prefix_cache) return;
  prefix_cache_stats_.record(request.num_tokens(), num_hits, request.num_preemptions > 0);
}

PrefixCacheStats KVCacheManager::make_prefix_cache_stats() {
  PrefixCacheStats stats = prefix_cache_stats_;
  prefix_cache_stats_ = PrefixCacheStats{};
  return stats;
}

bool KVCacheManager::reset_prefix_cache() {
  if (state_snapshots_ && state_snapshots_->num_reserved() != 0) return false;
  if (!block_pool_->reset_prefix_cache()) return false;
  if (state_snapshots_) state_snapshots_->reset();
  prefix_cache_stats_.reset = true;
  return true;
}

std::optional<StateSnapshotReservation> KVCacheManager::reserve_state_snapshot(
    const KVCacheRequest& request, int64_t num_tokens) {
  if (!state_snapshots_) return std::nullopt;
  VLLM_CHECK_MSG(num_tokens > 0 && num_tokens % block_size_ == 0 &&
                     num_tokens / block_size_ <= static_cast<int64_t>(request.block_hashes.size()),
                 "request {}: no full block ends at token {}", request.request_id, num_tokens);
  const BlockHash& hash = request.block_hashes[static_cast<size_t>(num_tokens / block_size_ - 1)];
  // The snapshot is only worth keeping while the prefix's last block is cached.
  if (block_pool_->get_cached_block(hash) == nullptr) return std::nullopt;
  std::optional<int32_t> slot = state_snapshots_->reserve(hash);
  if (!slot.has_value()) return std::nullopt;
  return StateSnapshotReservation{hash, *slot};
}

int64_t KVCacheManager::cached_prefix_end(const KVCacheRequest& request, int64_t num_tokens) const {
  const int64_t max_blocks = std::min<int64_t>((request.num_tokens() - 1) / block_size_,
                                               static_cast<int64_t>(request.block_hashes.size()));
  int64_t block = num_tokens / block_size_;
  while (block < max_blocks && block_pool_->get_cached_block(
                                   request.block_hashes[static_cast<size_t>(block)]) != nullptr) {
    ++block;
  }
  return block * block_size_;
}

void KVCacheManager::commit_state_snapshot(const BlockHash& block_hash) {
  if (state_snapshots_) state_snapshots_->commit(block_hash);
}

void KVCacheManager::demote_state_snapshot(const BlockHash& block_hash) {
  if (state_snapshots_) state_snapshots_->demote(block_hash);
}

KVCacheBlocks KVCacheManager::get_blocks(std::string_view request_id) const {
  std::span<KVCacheBlock* const> blocks = manager_.get_blocks(request_id);
  return KVCacheBlocks{std::vector<KVCacheBlock*>(blocks.begin(), blocks.end())};
}

std::vector<int32_t> KVCacheManager::get_block_ids(std::string_view request_id) const {
  return get_blocks(request_id).get_block_ids();
}

int32_t KVCacheManager::get_num_common_prefix_blocks(std::string_view running_request_id) const {
  return manager_.get_num_common_prefix_blocks(running_request_id);
}

}  // namespace vllm::engine
