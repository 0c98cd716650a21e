// Launchers of the paged-attention kernels (attention_tiled.cuh, attention_mma.cuh,
// attention_combine.cuh; the wgmma prefill kernel has its own, sm90a/attention_wgmma.cu) and
// the macro that instantiates them for one storage type and head dim (attention_f32.cu,
// attention_bf16.cu).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "backend/cuda/attention_combine.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_tiled.cuh"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {

template <typename T, int D, bool kSmall>
Status launch_tiled(const AttentionArgs& args, dim3 grid, cudaStream_t stream, const char* name) {
  using Tile = AttnTile<T, D, kSmall>;
  auto* kernel = &tiled_attention_kernel<T, D, kSmall>;
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  launch_pdl(kernel, grid, kAttnThreads, Tile::kSmemBytes, stream, args);
  return check_launch(name);
}

template <typename T, int D>
Status launch_attention_small(const AttentionArgs& args, int num_requests, cudaStream_t stream) {
  return launch_tiled<T, D, true>(args, small_grid(args, num_requests), stream,
                                  "paged_attention small-query kernel");
}

template <typename T, int D>
Status launch_attention_large(const AttentionArgs& args, int num_requests, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (wgmma_prefill_head_dim(D)) {
      if (args.wgmma) return launch_attention_prefill_wgmma<D>(args, num_requests, stream);
    }
    if (args.tensor_cores) {
      auto* kernel = &mma_prefill_kernel<D>;
      VLLM_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, MmaTile<D>::kSmemBytes));
      launch_pdl(kernel, mma_grid<D>(args, num_requests), kAttnThreads, MmaTile<D>::kSmemBytes,
                 stream, args);
      return check_launch("paged_attention tensor-core prefill kernel");
    }
  }
  return launch_tiled<T, D, false>(args, large_grid<T, D>(args, num_requests), stream,
                                   "paged_attention prefill kernel");
}

template <typename T, int D>
Status launch_attention_combine(const AttentionArgs& args, int num_requests, cudaStream_t stream) {
  launch_pdl(combine_splits_kernel<T, D>, combine_grid(args, num_requests), kCombineThreads,
             kCombineSmemBytes, stream, args);
  return check_launch("paged_attention split-combine kernel");
}

#define VLLM_INSTANTIATE_ATTENTION(T, D)                                                 \
  template Status launch_attention_small<T, D>(const AttentionArgs&, int, cudaStream_t); \
  template Status launch_attention_large<T, D>(const AttentionArgs&, int, cudaStream_t); \
  template Status launch_attention_combine<T, D>(const AttentionArgs&, int, cudaStream_t);

}  // namespace vllm::cuda::detail
