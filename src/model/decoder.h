// Pieces every decoder model shares beyond its layers: creating the runtime a model runs on
// and the caches it keeps between steps.
#pragma once

#include <memory>

#include "base/status.h"
#include "model/model.h"
#include "ops/exec_context.h"

namespace vllm {

// options.runtime, or a new runtime for options.device / options.dtype; given options.comm,
// the runtime becomes that tensor-parallel rank.
Expected<std::shared_ptr<DeviceRuntime>> runtime_for(const LoadOptions& options);

// Zeroed caches on ctx.device (see ModelCache): KV in kv_dtype (Model::kv_cache_dtype()),
// GDN states in the shapes' state dtypes. Running out of device memory names the cache and
// the free memory.
Expected<ModelCache> allocate_cache(const ExecContext& ctx, const CacheConfig& config,
                                    const CacheShapes& shapes, DType kv_dtype);

}  // namespace vllm
