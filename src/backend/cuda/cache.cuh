// Writing this step's keys and values into the paged KV cache on the GPU: the counterpart of
// vllm::cpu::reshape_and_cache (src/backend/cpu/attention.h).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/kv_cache.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

// kv_cache [num_blocks, 2, block_size, Hk, D] (0 = key, 1 = value), contiguous, in the
// activation dtype (F32, BF16 or F16); key, value [T, Hk * D] in that dtype (row strides
// allowed: slices of a fused qkv) or contiguous [T, Hk, D]; slot_mapping I64 [T] on the
// device: block_id * block_size + offset, negative = skip. A slot past the cache is skipped
// too (the CPU op reports it; the device cannot). An F8_E4M3 cache (key and value F32, BF16
// or F16) stores e4m3(x / scale) with scales.k_scale / v_scale, bit for bit the CPU op's
// fp8_kv_quantize (tensor/kv_cache.h); other caches ignore the scales.
Status reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& kv_cache,
                         const Tensor& slot_mapping, cudaStream_t stream,
                         const KvCacheScales& scales = {});

}  // namespace vllm::cuda
