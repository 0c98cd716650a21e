// The BF16 instantiations of the tiled paged-attention kernels (attention_tiled.cuh,
// attention_tiled_launch.cuh), in their own file so the two dtypes compile in parallel.
#include <cuda_bf16.h>

#include "backend/cuda/attention_tiled_launch.cuh"

namespace vllm::cuda::detail {

VLLM_INSTANTIATE_ATTENTION(__nv_bfloat16, 64)
VLLM_INSTANTIATE_ATTENTION(__nv_bfloat16, 128)
VLLM_INSTANTIATE_ATTENTION(__nv_bfloat16, 256)

}  // namespace vllm::cuda::detail
