// StateSnapshotPool: GDN state snapshots keyed by block hash, LRU (see the header).
#include "engine/state_snapshot_pool.h"

#include "base/status.h"

namespace vllm::engine {

StateSnapshotPool::StateSnapshotPool(int32_t first_slot, int32_t capacity)
    : first_slot_(first_slot), capacity_(capacity) {
  VLLM_CHECK_MSG(first_slot >= 0 && capacity > 0,
                 "a state snapshot pool needs a first slot >= 0 and a capacity > 0, got {} and {}",
                 first_slot, capacity);
  for (int32_t i = 0; i < capacity; ++i) free_slots_.push_back(first_slot + i);
}

std::optional<int32_t> StateSnapshotPool::lookup(const BlockHash& hash) const {
  auto it = entries_.find(hash);
  if (it == entries_.end() || !it->second.committed) return std::nullopt;
  return it->second.slot;
}

void StateSnapshotPool::touch(const BlockHash& hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end() || !it->second.committed) return;
  lru_.splice(lru_.end(), lru_, it->second.lru);
}

std::optional<int32_t> StateSnapshotPool::reserve(const BlockHash& hash) {
  if (entries_.count(hash) != 0) return std::nullopt;
  if (free_slots_.empty()) {
    if (lru_.empty()) return std::nullopt;  // every slot is reserved
    release(entries_.find(lru_.front()));
  }
  Entry entry;
  entry.slot = free_slots_.front();
  free_slots_.pop_front();
  entries_.emplace(hash, entry);
  ++num_reserved_;
  return entry.slot;
}

void StateSnapshotPool::commit(const BlockHash& hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.committed) return;
  --num_reserved_;
  if (it->second.cancelled) {
    free_slots_.push_back(it->second.slot);
    entries_.erase(it);
    return;
  }
  it->second.committed = true;
  it->second.lru = lru_.insert(lru_.end(), hash);
}

void StateSnapshotPool::demote(const BlockHash& hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end() || !it->second.committed) return;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
}

void StateSnapshotPool::evict(const BlockHash& hash) {
  auto it = entries_.find(hash);
  if (it == entries_.end()) return;
  if (!it->second.committed) {
    it->second.cancelled = true;
    return;
  }
  release(it);
}

void StateSnapshotPool::release(
    std::unordered_map<BlockHash, Entry, BlockHashHasher>::iterator it) {
  VLLM_CHECK(it != entries_.end() && it->second.committed);
  lru_.erase(it->second.lru);
  free_slots_.push_back(it->second.slot);
  entries_.erase(it);
}

bool StateSnapshotPool::reset() {
  if (num_reserved_ != 0) return false;
  entries_.clear();
  lru_.clear();
  free_slots_.clear();
  for (int32_t i = 0; i < capacity_; ++i) free_slots_.push_back(first_slot_ + i);
  return true;
}

std::vector<BlockHash> StateSnapshotPool::eviction_order() const {
  return std::vector<BlockHash>(lru_.begin(), lru_.end());
}

}  // namespace vllm::engine
