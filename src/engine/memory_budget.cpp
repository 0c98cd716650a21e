#include "engine/memory_budget.h"

#include <algorithm>
#include <numeric>

#include "base/logging.h"
#include "ops/exec_context.h"

namespace vllm::engine {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A batch of `tokens` tokens over `requests` prefill requests (sizes as equal as possible),
// writing no KV (slot -1) and reading block 0 of a two-block cache.
ForwardBatch profile_batch(int64_t tokens, int64_t requests) {
  ForwardBatch b;
  b.token_ids = Tensor::zeros({tokens}, DType::kI64);
  b.positions = Tensor::empty({tokens}, DType::kI64);
  b.slot_mapping = Tensor::empty({tokens}, DType::kI64);
  std::fill_n(b.slot_mapping.data<int64_t>(), tokens, -1);
  b.query_start_loc.push_back(0);
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t len = tokens / requests + (r < tokens % requests ? 1 : 0);
    const int32_t start = b.query_start_loc.back();
    for (int64_t i = 0; i < len; ++i) b.positions.data<int64_t>()[start + i] = i;
    b.query_start_loc.push_back(static_cast<int32_t>(start + len));
    b.seq_lens.push_back(static_cast<int32_t>(len));
    b.state_indices.push_back(static_cast<int32_t>(r));
    b.logits_indices.push_back(start + len - 1);
  }
  int64_t max_len = 0;
  for (int32_t len : b.seq_lens) max_len = std::max<int64_t>(max_len, len);
  const int64_t blocks_per_request = std::max<int64_t>(1, max_len);  // block_size >= 1
  b.block_tables = Tensor::zeros({requests, blocks_per_request}, DType::kI32);
  return b;
}

}  // namespace

Expected<MemoryBudget> determine_memory_budget(Model& model, const EngineConfig& config,
                                               int64_t num_state_slots) {
  MemoryBudget budget;
  budget.state_bytes = num_state_slots * model.state_bytes_per_slot();
  const ExecContext& ctx = model.context();
  if (!ctx.device.is_cuda()) {
    budget.kv_cache_bytes =
        config.kv_cache_memory_bytes > 0 ? config.kv_cache_memory_bytes : int64_t{1} << 30;
    return budget;
  }
  const SchedulerConfig& sc = config.scheduler;
  const int64_t tokens = std::min<int64_t>(sc.max_num_batched_tokens, sc.max_model_len);
  const int64_t requests = std::max<int64_t>(1, std::min<int64_t>(sc.max_num_seqs, tokens));
  {
    CacheConfig cc;
    cc.num_blocks = 2;
    cc.block_size = config.block_size;
    cc.num_state_slots = num_state_slots > 0 ? std::max(num_state_slots, requests) : 0;
    VLLM_ASSIGN_OR_RETURN(ModelCache cache, model.create_cache(cc));
    ForwardBatch batch = profile_batch(tokens, requests);
    // The block table spans max_len / block_size + 1 blocks, all block 0.
    auto logits = model.forward(batch, cache);
    if (!logits) return logits.status().with_context("profiling run");
    VLLM_RETURN_IF_ERROR(model.runtime().synchronize());
  }
  Workspace& ws = model.runtime().workspace();
  VLLM_RETURN_IF_ERROR(ws.reset());  // reserves the high-water mark
  budget.workspace_bytes = static_cast<int64_t>(ws.capacity());
  const DeviceMemory mem = device_memory(ctx.device);
  const auto total = static_cast<int64_t>(mem.total_bytes);
  const int64_t used = total - static_cast<int64_t>(mem.free_bytes);
  if (config.kv_cache_memory_bytes > 0) {
    budget.kv_cache_bytes = config.kv_cache_memory_bytes;
  } else {
    const auto requested = static_cast<int64_t>(config.gpu_memory_utilization * total);
    budget.kv_cache_bytes = requested - used - budget.state_bytes;
    VLLM_LOG_INFO(
        "Memory profiling: {:.2f} GiB of {:.2f} GiB in use after loading and one {}-token "
        "step (workspace {:.2f} GiB); GDN state {:.2f} GiB; available KV cache memory: "
        "{:.2f} GiB (gpu_memory_utilization {:.2f})",
        used / kGiB, total / kGiB, tokens, budget.workspace_bytes / kGiB,
        budget.state_bytes / kGiB, budget.kv_cache_bytes / kGiB, config.gpu_memory_utilization);
    if (budget.kv_cache_bytes <= 0) {
      return make_error(ErrorCode::kResourceExhausted,
                        "no device memory is left for the KV cache: {:.2f} GiB of {:.2f} GiB are "
                        "in use (weights, workspace) and {:.2f} GiB of GDN state are needed "
                        "within gpu_memory_utilization {:.2f}. Raise --gpu-memory-utilization "
                        "or lower --max-num-seqs / --max-num-batched-tokens.",
                        used / kGiB, total / kGiB, budget.state_bytes / kGiB,
                        config.gpu_memory_utilization);
    }
  }
  return budget;
}

}  // namespace vllm::engine
