// How many bytes the KV cache may take, as vLLM's worker determines it.
//
// CPU: --kv-cache-memory-bytes (default 1 GiB). CUDA: one profiling forward pass at the
// largest batch the scheduler can form (max_num_batched_tokens tokens over up to
// max_num_seqs requests, on a throwaway two-block KV cache and the real number of GDN state
// slots) brings the step workspace to its high-water mark, which stays reserved; then
//   budget = gpu_memory_utilization * total device memory - memory in use - GDN states
// (vLLM's requested_memory - non_kv_cache_memory), unless --kv-cache-memory-bytes fixes it.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "engine/engine_core.h"
#include "model/model.h"

namespace vllm::engine {

struct MemoryBudget {
  int64_t kv_cache_bytes = 0;
  int64_t state_bytes = 0;      // GDN state slots, allocated separately
  int64_t workspace_bytes = 0;  // the step workspace reserved after profiling
};

// num_state_slots: GDN state slots the engine will allocate (0 for attention-only models).
Expected<MemoryBudget> determine_memory_budget(Model& model, const EngineConfig& config,
                                               int64_t num_state_slots);

}  // namespace vllm::engine
