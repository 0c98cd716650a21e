// Pieces every decoder model shares beyond its layers: creating the runtime a model runs on
// and the caches it keeps between steps.
#pragma once

#include <memory>

#include "base/status.h"
#include "model/model.h"
#include "ops/exec_context.h"

namespace vllm {

// options.runtime, or a new runtime for options.device / options.dtype.
Expected<std::shared_ptr<DeviceRuntime>> runtime_for(const LoadOptions& options);

struct CacheShapes {
  int64_t num_attention_layers = 0;
  int64_t num_kv_heads = 0, head_dim = 0;
  int64_t num_linear_layers = 0;
  int64_t conv_dim = 0, conv_kernel = 0;
  int64_t num_value_heads = 0, key_head_dim = 0, value_head_dim = 0;
};

// Zeroed caches on ctx.device (see ModelCache): KV in ctx.act_dtype, GDN states in F32.
// Running out of device memory names the cache and the free memory.
Expected<ModelCache> allocate_cache(const ExecContext& ctx, const CacheConfig& config,
                                    const CacheShapes& shapes);

}  // namespace vllm
