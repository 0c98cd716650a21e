// The scheduler's view of the paged KV cache: prefix-cache lookup, slot allocation, freeing.
//
// Port of vLLM V1's KVCacheManager (vllm/v1/core/kv_cache_manager.py) for one full-attention
// KV-cache group. The scheduler sees KVCacheBlocks, never the pool's internals.
//
// How the scheduler uses it (as vLLM's Scheduler):
//   waiting request:  auto [hit, n] = get_computed_blocks(req);
//                     auto blocks = allocate_slots(req, num_new_tokens, n, hit);
//                     if (!blocks) -> stop admitting (nothing changed);
//                     else record_prefix_cache_stats(req, n); num_computed_tokens += n; ...
//   running request:  auto blocks = allocate_slots(req, num_new_tokens);
//                     if (!blocks) -> preempt someone (free(victim)) and retry.
//   finished / aborted / preempted request: free(request_id).
// Running out of blocks is a value (nullopt), not an error, and leaves every state unchanged.
//
// Prefix caching is for full blocks only, and never covers a whole prompt: the last token is
// always recomputed to get its logits (so a fully cached prompt recomputes its last block).
// Hybrid (GDN) models run with enable_caching = false (see state_slot_pool.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_block.h"
#include "engine/single_type_kv_cache_manager.h"

namespace vllm::engine {

// What the manager needs to know about a request; the engine's Request builds one on demand
// (cheap: views only). block_hashes must hold the hash of every full block of all_token_ids
// (append_request_block_hashes keeps them up to date).
struct KVCacheRequest {
  std::string_view request_id;
  std::span<const int32_t> all_token_ids;  // prompt + output so far
  int64_t num_computed_tokens = 0;
  std::span<const BlockHash> block_hashes;
  bool skip_reading_prefix_cache = false;  // vLLM: prompt logprobs were asked for
  int32_t num_preemptions = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(all_token_ids.size()); }
};

// Blocks handed to the scheduler (vLLM's KVCacheBlocks, one group).
struct KVCacheBlocks {
  std::vector<KVCacheBlock*> blocks;

  bool empty() const { return blocks.empty(); }
  size_t size() const { return blocks.size(); }
  std::vector<int32_t> get_block_ids() const;
  KVCacheBlocks operator+(const KVCacheBlocks& other) const;
};

// vLLM's PrefixCacheStats: counted per interval, in tokens; preempted requests separately.
struct PrefixCacheStats {
  bool reset = false;  // the cache was reset in this interval
  int64_t requests = 0;
  int64_t queries = 0;  // tokens looked up
  int64_t hits = 0;     // tokens found
  int64_t preempted_requests = 0;
  int64_t preempted_queries = 0;
  int64_t preempted_hits = 0;

  void record(int64_t num_tokens, int64_t num_hits, bool preempted);
};

struct ComputedBlocks {
  KVCacheBlocks blocks;             // the cached prefix blocks (not yet touched)
  int64_t num_computed_tokens = 0;  // blocks.size() * block_size
};

class KVCacheManager {
 public:
  // num_blocks counts the null block (block 0), as vLLM's num_gpu_blocks.
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_caching,
                 int64_t max_model_len);

  // --- Scheduler calls ---

  // Longest cached prefix of full blocks, at most num_tokens - 1 tokens. Empty when caching is
  // off or the request skips the prefix cache. Changes nothing (stats included).
  ComputedBlocks get_computed_blocks(const KVCacheRequest& request) const;

  // Gives the request slots for num_new_tokens more tokens (plus num_lookahead_tokens), after
  // its num_computed_tokens and the num_new_computed_tokens of new_computed_blocks (a new
  // request's prefix hits from get_computed_blocks). Returns the newly allocated blocks (the
  // hits are not among them), or nullopt when the free blocks do not suffice; then nothing
  // changed. Caches the blocks that become full, up to request.num_tokens().
  std::optional<KVCacheBlocks> allocate_slots(const KVCacheRequest& request, int64_t num_new_tokens,
                                              int64_t num_new_computed_tokens = 0,
                                              const KVCacheBlocks& new_computed_blocks = {},
                                              int64_t num_lookahead_tokens = 0);

  // Returns all the request's blocks (tail first); safe for a request that holds none.
  void free(std::string_view request_id);

  // Count a request admitted after a lookup (vLLM records at admission, not at lookup, so a
  // request that waits several steps is counted once).
  void record_prefix_cache_stats(const KVCacheRequest& request, int64_t num_hits);
  // The stats since the last call, then starts a new interval.
  PrefixCacheStats make_prefix_cache_stats();
  const PrefixCacheStats& prefix_cache_stats() const { return prefix_cache_stats_; }

  // Forgets all cached prefixes; false (and nothing done) while any block is in use.
  bool reset_prefix_cache();

  // --- Queries ---

  KVCacheBlocks get_blocks(std::string_view request_id) const;
  std::vector<int32_t> get_block_ids(std::string_view request_id) const;  // the block table
  int32_t get_num_common_prefix_blocks(std::string_view running_request_id) const;
  double usage() const { return block_pool_->get_usage(); }  // 0.0 .. 1.0
  int32_t num_free_blocks() const { return block_pool_->get_num_free_blocks(); }
  int32_t num_usable_blocks() const { return block_pool_->num_gpu_blocks() - 1; }
  int32_t block_size() const { return block_size_; }
  int64_t max_model_len() const { return max_model_len_; }
  bool enable_caching() const { return enable_caching_; }
  const BlockPool& block_pool() const { return *block_pool_; }

 private:
  int32_t block_size_;
  bool enable_caching_;
  int64_t max_model_len_;
  std::unique_ptr<BlockPool> block_pool_;  // heap: the manager stays movable
  FullAttentionManager manager_;
  PrefixCacheStats prefix_cache_stats_;
};

}  // namespace vllm::engine
