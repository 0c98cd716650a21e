// Prefix-cache snapshots of the GDN (linear attention) state, for hybrid models.
//
// A cached KV block is enough to skip an attention layer's work for a prefix, but a Gated
// DeltaNet layer's state after a prefix cannot be rebuilt from KV: it must have been saved when
// some request's computation stood exactly at the end of that prefix. This pool holds such
// snapshots (every GDN layer's conv and ssm state, one model state slot each), keyed by the
// block hash of the prefix's last full block -- the chained hash covers the whole prefix. A
// prefix-cache hit for a hybrid model is then the longest run of cached KV blocks that ends in
// a block with a snapshot (KVCacheManager::get_computed_blocks).
//
// Life of a snapshot: the scheduler reserve()s a slot when it schedules a chunk that ends at a
// snapshot position; the model runner copies the request's running slot into it after that
// step's forward pass; update_from_output commit()s it, and lookups see it from then on. A
// reserved snapshot is invisible to lookups and never evicted by reserve().
//
// Eviction: committed snapshots form one LRU list. reserve() takes a free slot, else evicts the
// least recently used committed snapshot; a hit touch()es its snapshot; demote() puts a
// superseded one first in line. The KV cache drives eviction too: when the last cached block
// holding a hash is evicted from the block pool, that hash's snapshot is useless (a lookup
// needs every block of the prefix) and evict() frees it at once. A snapshot can go while its
// blocks stay cached; lookups then fall back to a shorter prefix with a snapshot.
//
// The slots are model state slots [first_slot, first_slot + capacity): the slots below
// first_slot belong to running requests (StateSlotPool).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"

namespace vllm::engine {

class StateSnapshotPool {
 public:
  StateSnapshotPool(int32_t first_slot, int32_t capacity);
  StateSnapshotPool(const StateSnapshotPool&) = delete;
  StateSnapshotPool& operator=(const StateSnapshotPool&) = delete;

  // The slot of the committed snapshot of the prefix ending in block `hash`, if any.
  std::optional<int32_t> lookup(const BlockHash& hash) const;
  // A hit was taken: the snapshot becomes the most recently used. No-op without one.
  void touch(const BlockHash& hash);

  // A slot to save the prefix ending in `hash` into: a free slot, else the least recently used
  // committed snapshot's (evicted). nullopt, and nothing changed, when `hash` already has a
  // snapshot (committed or reserved) or no slot is free or evictable.
  std::optional<int32_t> reserve(const BlockHash& hash);
  // The reserved snapshot was written: lookups find it from now on (most recently used). A
  // reservation evicted meanwhile is released instead. No-op for an unknown hash.
  void commit(const BlockHash& hash);

  // The snapshot is evicted before any other (a request's superseded output snapshot).
  void demote(const BlockHash& hash);
  // Frees the snapshot of `hash` (its KV blocks are gone); a reserved one is released at its
  // commit, since the step that writes it may still be under way. No-op without one.
  void evict(const BlockHash& hash);
  // Forgets every snapshot; false (nothing done) while any is reserved.
  bool reset();

  int32_t capacity() const { return capacity_; }
  int32_t first_slot() const { return first_slot_; }
  int32_t num_snapshots() const { return static_cast<int32_t>(lru_.size()); }
  int32_t num_reserved() const { return num_reserved_; }
  int32_t num_free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  // Committed snapshots' hashes, first to be evicted first (tests, debugging).
  std::vector<BlockHash> eviction_order() const;

 private:
  struct Entry {
    int32_t slot = 0;
    bool committed = false;
    bool cancelled = false;              // evicted while reserved: released at commit
    std::list<BlockHash>::iterator lru;  // committed entries only
  };
  void release(std::unordered_map<BlockHash, Entry, BlockHashHasher>::iterator it);

  int32_t first_slot_;
  int32_t capacity_;
  int32_t num_reserved_ = 0;
  std::deque<int32_t> free_slots_;
  std::list<BlockHash> lru_;  // committed snapshots, front evicted first
  std::unordered_map<BlockHash, Entry, BlockHashHasher> entries_;
};

}  // namespace vllm::engine
