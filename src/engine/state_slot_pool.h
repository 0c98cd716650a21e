// Recurrent-state slots for the Gated DeltaNet (linear attention) layers of hybrid models.
//
// A GDN layer keeps, per sequence, a fixed-size state (conv [conv_dim, K-1] and ssm
// [Hv, Dk, Dv]) instead of a growing KV cache; the model runner stores them in slot-indexed
// tensors. Each running request holds one slot for all GDN layers from its first scheduled
// step until it finishes, is aborted, or is preempted (preemption recomputes, so the state is
// rebuilt from scratch in a new slot). There are as many slots as the engine may run
// requests at once (max_num_seqs); the scheduler treats "no free slot" like "no free
// blocks": the request waits (or, for a running one, someone is preempted).
//
// vLLM keeps this state in its MambaManager as one block per request; a plain slot pool is
// the same thing without the block-table machinery.
//
// Prefix caching for hybrid models keeps snapshots of this state at block boundaries in
// further model state slots, after the running ones (state_snapshot_pool.h); a request that
// hits a cached prefix gets the snapshot copied into its slot before its first step.
//
// A slot handed out may hold an earlier request's state: the model runner zeroes a slot's
// state when its request starts from num_computed_tokens == 0.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "engine/single_type_kv_cache_manager.h"

namespace vllm::engine {

class StateSlotPool {
 public:
  explicit StateSlotPool(int32_t num_slots);

  // The request's slot: the one it holds, else a free one (the least recently freed),
  // else nullopt (nothing changed).
  std::optional<int32_t> allocate(std::string_view request_id);
  // Returns the request's slot to the pool; a no-op for a request that holds none.
  void free(std::string_view request_id);

  // The slot the request holds, if any.
  std::optional<int32_t> get_slot(std::string_view request_id) const;
  int32_t num_free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  int32_t num_slots() const { return num_slots_; }

 private:
  int32_t num_slots_;
  std::deque<int32_t> free_slots_;  // front is handed out next; freed slots go to the back
  RequestIdMap<int32_t> req_to_slot_;
};

}  // namespace vllm::engine
