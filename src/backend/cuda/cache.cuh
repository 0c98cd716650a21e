// Writing this step's keys and values into the paged KV cache on the GPU: the counterpart of
// vllm::cpu::reshape_and_cache (src/backend/cpu/attention.h).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// kv_cache [num_blocks, 2, block_size, Hk, D] (0 = key, 1 = value), contiguous, in the
// activation dtype; key, value [T, Hk * D] (row strides allowed: slices of a fused qkv);
// slot_mapping I64 [T] on the device: block_id * block_size + offset, negative = skip.
Status reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& kv_cache,
                         const Tensor& slot_mapping, cudaStream_t stream);

}  // namespace vllm::cuda
