// Launchers of the paged-attention kernels (attention_tiled.cuh, attention_decode_mma.cuh,
// attention_mma.cuh, attention_combine.cuh; the wgmma prefill kernel has its own,
// sm90a/attention_wgmma.cu) and
// the macros that instantiate them for one storage type and head dim, over a cache of that
// type (attention_f32.cu, attention_bf16.cu) or an FP8 one (attention_fp8_f32.cu,
// attention_fp8_bf16.cu).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "backend/cuda/attention_combine.cuh"
#include "backend/cuda/attention_decode_mma.cuh"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_tiled.cuh"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/runtime.h"

namespace vllm::cuda::detail {

template <typename T, int D, bool kSmall, typename C>
Status launch_tiled(const AttentionArgs& args, dim3 grid, cudaStream_t stream, const char* name) {
  using Tile = AttnTile<T, D, kSmall, C>;
  auto* kernel = &tiled_attention_kernel<T, D, kSmall, C>;
  VLLM_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  launch_pdl(kernel, grid, kAttnThreads, Tile::kSmemBytes, stream, args);
  return check_launch(name);
}

template <typename T, int D, typename C>
Status launch_attention_small(const AttentionArgs& args, int num_requests, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (args.decode_tensor_cores) {
      using Tile = DecodeMmaTile<D, C>;
      auto* kernel = &mma_decode_kernel<D, C>;
      VLLM_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
      launch_pdl(kernel, small_grid(args, num_requests), kAttnThreads, Tile::kSmemBytes, stream,
                 args);
      return check_launch("paged_attention tensor-core decode kernel");
    }
  }
  return launch_tiled<T, D, true, C>(args, small_grid(args, num_requests), stream,
                                     "paged_attention small-query kernel");
}

template <typename T, int D, typename C>
Status launch_attention_large(const AttentionArgs& args, int num_requests, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (wgmma_prefill_head_dim(D) && (std::is_same_v<C, T> || std::is_same_v<C, KvFp8>)) {
      if (args.wgmma) return launch_attention_prefill_wgmma<D, C>(args, num_requests, stream);
    }
    if (args.tensor_cores) {
      using Tile = MmaTile<D, C>;
      auto* kernel = &mma_prefill_kernel<D, C>;
      VLLM_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
      launch_pdl(kernel, mma_grid<D>(args, num_requests), kAttnThreads, Tile::kSmemBytes, stream,
                 args);
      return check_launch("paged_attention tensor-core prefill kernel");
    }
  }
  return launch_tiled<T, D, false, C>(args, large_grid<T, D>(args, num_requests), stream,
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

// Queries and outputs of type T over an FP8 cache (the combine is the T cache's).
#define VLLM_INSTANTIATE_ATTENTION_FP8_CACHE(T, D)                                              \
  template Status launch_attention_small<T, D, KvFp8>(const AttentionArgs&, int, cudaStream_t); \
  template Status launch_attention_large<T, D, KvFp8>(const AttentionArgs&, int, cudaStream_t);

}  // namespace vllm::cuda::detail
