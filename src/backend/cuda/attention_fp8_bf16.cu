// The tiled paged-attention kernels for BF16 queries over an FP8 (e4m3) KV cache
// (attention_tiled.cuh, attention_mma.cuh, attention_tiled_launch.cuh), in their own file so
// the instantiations compile in parallel.
#include <cuda_bf16.h>

#include "backend/cuda/attention_tiled_launch.cuh"

namespace vllm::cuda::detail {

VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(__nv_bfloat16, 64)
VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(__nv_bfloat16, 128)
VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(__nv_bfloat16, 256)

}  // namespace vllm::cuda::detail
