// How many KV-cache blocks fit: from a memory budget, or forced by --num-gpu-blocks-override.
//
// Port of the sizing half of vLLM V1's kv_cache_utils.py (get_num_blocks,
// may_override_num_blocks, check_enough_kv_cache_memory) for one full-attention group. The
// cache layout is [num_blocks, 2, block_size, kv_heads, head_dim] per attention layer, so one
// block (all layers) costs 2 * block_size * kv_heads * head_dim * dtype_size * layers bytes.
//
// The block count includes block 0, the pool's null block (vLLM's num_gpu_blocks does too),
// so at least 2 blocks are needed. With a budget, the budget must hold one max_model_len
// request (vLLM refuses to start otherwise). An override is taken as given (vLLM checks
// the budget even then; we skip it, so small caches can be forced on any machine), apart
// from the 2-block minimum.
//
// Hybrid models: the engine subtracts the prefix cache's GDN state snapshots from the budget
// before calling this (the running requests' state slots are not counted yet).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "loader/hf_config.h"
#include "tensor/dtype.h"

namespace vllm::engine {

struct KVCacheSpec {
  int32_t block_size = 16;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t dtype_size = 0;  // bytes per element of the cache dtype
  int32_t num_attention_layers = 0;
  DType dtype = DType::kF32;  // the cache dtype (named in the log)
};

struct KVCacheSizingConfig {
  int64_t available_memory_bytes = 0;              // budget for the KV cache tensors
  std::optional<int32_t> num_gpu_blocks_override;  // --num-gpu-blocks-override
  int64_t max_model_len = 0;
};

// Bytes of one block in one layer (vLLM's page_size_bytes): K and V.
int64_t kv_cache_page_size_bytes(const KVCacheSpec& spec);
// Bytes of one block across all attention layers.
int64_t kv_cache_bytes_per_block(const KVCacheSpec& spec);
// Bytes one request of max_model_len tokens needs (vLLM's max_memory_usage_bytes).
int64_t max_memory_usage_bytes(const KVCacheSpec& spec, int64_t max_model_len);

// num_gpu_blocks for KVCacheManager / BlockPool (null block included), or an error a user
// can act on (budget too small, bad override, bad spec). Logs the result as vLLM does.
Expected<int32_t> determine_num_gpu_blocks(const KVCacheSpec& spec,
                                           const KVCacheSizingConfig& config);

// Hybrid models: bytes of one GDN state slot across all linear-attention layers (conv
// [conv_dim, K - 1] in conv_dtype + ssm [Hv, Dk, Dv] in ssm_dtype; one rank), i.e. of one
// running request's state or of one prefix-cache state snapshot. 0 for models without GDN
// layers. Model::state_bytes_per_slot gives the same for a loaded model (its shard, its dtypes).
int64_t gdn_state_bytes_per_slot(const ModelConfig& config, DType conv_dtype = DType::kF32,
                                 DType ssm_dtype = DType::kF32);

// "GPU KV cache size: 12,336 tokens"-style figures, for the startup log and tests.
int64_t kv_cache_size_tokens(int32_t num_gpu_blocks, int32_t block_size);
double max_concurrency(int32_t num_gpu_blocks, int32_t block_size, int64_t max_model_len);

}  // namespace vllm::engine
