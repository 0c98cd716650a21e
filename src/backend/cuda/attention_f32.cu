// The F32 instantiations of the tiled paged-attention kernels (attention_tiled.cuh,
// attention_tiled_launch.cuh), in their own file so the two dtypes compile in parallel.
#include "backend/cuda/attention_tiled_launch.cuh"

namespace vllm::cuda::detail {

VLLM_INSTANTIATE_ATTENTION(float, 64)
VLLM_INSTANTIATE_ATTENTION(float, 128)
VLLM_INSTANTIATE_ATTENTION(float, 256)

}  // namespace vllm::cuda::detail
