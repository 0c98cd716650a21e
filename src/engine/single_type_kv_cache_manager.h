// Per-request block tables for the full-attention layers, on top of the BlockPool.
//
// Port of vLLM V1's SingleTypeKVCacheManager + FullAttentionManager
// (vllm/v1/core/single_type_kv_cache_manager.py), full attention only: no sliding window, so
// no block is ever dropped before the request ends (remove_skipped_blocks is a no-op), and no
// null-block padding. vLLM's KVCacheCoordinator layer is folded away: we have one KV-cache
// group (hybrid models keep their GDN state in StateSlotPool and StateSnapshotPool, not in
// blocks).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"

namespace vllm::engine {

// std::string keys looked up by std::string_view without a copy.
struct RequestIdHash {
  using is_transparent = void;
  size_t operator()(std::string_view id) const { return std::hash<std::string_view>{}(id); }
};
template <typename V>
using RequestIdMap = std::unordered_map<std::string, V, RequestIdHash, std::equal_to<>>;

class FullAttentionManager {
 public:
  FullAttentionManager(BlockPool* block_pool, int32_t block_size, bool enable_caching);

  int32_t block_size() const { return block_size_; }

  // Blocks to take from the free queue so the request has slots for `num_tokens` tokens in
  // all, counting new prefix hits that are still free (touching them removes them from the
  // free queue).
  int32_t get_num_blocks_to_allocate(std::string_view request_id, int64_t num_tokens,
                                     std::span<KVCacheBlock* const> new_computed_blocks) const;

  // A new request's prefix-cache hits: touch them and start its block table with them.
  void allocate_new_computed_blocks(std::string_view request_id,
                                    std::span<KVCacheBlock* const> new_computed_blocks);

  // Grows the block table to cover `num_tokens` tokens; returns the blocks added.
  std::vector<KVCacheBlock*> allocate_new_blocks(std::string_view request_id, int64_t num_tokens);

  // Caches the request's blocks that are full within its first `num_tokens` tokens.
  void cache_blocks(std::string_view request_id, std::span<const BlockHash> block_hashes,
                    int64_t num_tokens);

  // Returns the request's blocks to the pool, tail first; a no-op for an unknown request.
  void free(std::string_view request_id);

  // The longest run of cached blocks matching block_hashes, at most max_length tokens long.
  std::vector<KVCacheBlock*> find_longest_cache_hit(std::span<const BlockHash> block_hashes,
                                                    int64_t max_length) const;

  // Leading blocks of this request shared by every request that holds blocks (for cascade
  // attention).
  int32_t get_num_common_prefix_blocks(std::string_view running_request_id) const;

  // The request's block table (empty for an unknown request).
  std::span<KVCacheBlock* const> get_blocks(std::string_view request_id) const;
  size_t num_requests() const { return req_to_blocks_.size(); }

 private:
  BlockPool* block_pool_;
  int32_t block_size_;
  bool enable_caching_;
  // request id -> its block table.
  RequestIdMap<std::vector<KVCacheBlock*>> req_to_blocks_;
  // request id -> how many of its leading blocks are cached (running requests only).
  RequestIdMap<int32_t> num_cached_block_;
};

}  // namespace vllm::engine
