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
//
// Hybrid (GDN) models: a hit must also restore the GDN state at its end, so the manager keeps
// a StateSnapshotPool (state_snapshot_pool.h) and a hit is the longest run of cached blocks
// whose last block has a state snapshot. The scheduler reserves snapshots for chunks that end
// at snapshot positions (state_snapshot_policy.h) and commits them after the step ran.
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
#include "engine/state_snapshot_pool.h"

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
  // Hybrid models: the snapshot slot holding the GDN state after the hit (set iff the hit is
  // not empty), and the length of the cached KV prefix, which may run past the last snapshot.
  std::optional<int32_t> state_snapshot_slot;
  int64_t num_cached_kv_tokens = 0;
};

// Hybrid models: the model state slots that hold GDN state snapshots (none: no snapshots).
struct StateSnapshotConfig {
  int32_t first_slot = 0;
  int32_t num_snapshots = 0;
};

// A snapshot slot reserved for the prefix ending in the block with this hash.
struct StateSnapshotReservation {
  BlockHash block_hash;
  int32_t slot = 0;
};

class KVCacheManager {
 public:
  // num_blocks counts the null block (block 0), as vLLM's num_gpu_blocks.
  // `snapshots` (hybrid models, caching on) makes hits require a GDN state snapshot.
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_caching, int64_t max_model_len,
                 StateSnapshotConfig snapshots = {});

  // --- Scheduler calls ---

  // Longest cached prefix of full blocks, at most num_tokens - 1 tokens (with state snapshots:
  // the longest one ending in a block with a snapshot). Empty when caching is off or the
  // request skips the prefix cache. Changes nothing (stats included).
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

  // Forgets all cached prefixes (and state snapshots); false (and nothing done) while any block
  // is in use.
  bool reset_prefix_cache();

  // --- Hybrid models: GDN state snapshots (no-ops / nullopt without them) ---

  // A snapshot slot for the request's state once its first `num_tokens` tokens (a multiple of
  // the block size, all of them in the request's cached blocks) are computed. nullopt when
  // that prefix already has a snapshot or no slot can be had.
  std::optional<StateSnapshotReservation> reserve_state_snapshot(const KVCacheRequest& request,
                                                                 int64_t num_tokens);
  // Where the run of cached blocks of the request's prefix that starts with the block holding
  // token `num_tokens` ends (a block boundary, at most num_tokens() - 1; at or below
  // num_tokens when that block is not cached). The request's own cached blocks lie before its
  // num_computed_tokens, so past that this is other requests' work.
  int64_t cached_prefix_end(const KVCacheRequest& request, int64_t num_tokens) const;
  // The reserved snapshot was written (after the step's forward pass).
  void commit_state_snapshot(const BlockHash& block_hash);
  // A superseded snapshot goes first when a slot is needed.
  void demote_state_snapshot(const BlockHash& block_hash);
  const StateSnapshotPool* state_snapshots() const { return state_snapshots_.get(); }

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
  std::unique_ptr<StateSnapshotPool> state_snapshots_;  // hybrid models with caching on
  PrefixCacheStats prefix_cache_stats_;
};

}  // namespace vllm::engine
