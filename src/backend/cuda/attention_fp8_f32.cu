// The tiled paged-attention kernels for F32 queries over an FP8 (e4m3) KV cache
// (attention_tiled.cuh, attention_tiled_launch.cuh), in their own file so the instantiations
// compile in parallel.
#include "backend/cuda/attention_tiled_launch.cuh"

namespace vllm::cuda::detail {

VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(float, 64)
VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(float, 128)
VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(float, 256)

}  // namespace vllm::cuda::detail
