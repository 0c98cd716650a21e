// The paged-attention prefill kernel on Hopper's warpgroup tensor cores
// (sm90a/attention_wgmma.cu, machine code for sm_90a only): its launcher, for the large-block
// launcher (attention_tiled_launch.cuh) to call in place of mma_prefill_kernel when the host
// chose it (AttentionArgs::wgmma: BF16 queries, a BF16 or FP8 cache, tensor cores, a compute
// capability 9.0 device).
// Internal to the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/attention_plan.h"
#include "base/status.h"
#include "tensor/dtype.h"

namespace vllm::cuda::detail {

// Head dims the wgmma prefill kernel is built for.
constexpr bool wgmma_prefill_head_dim(int64_t head_dim) {
  return head_dim == 128 || head_dim == 256;
}

// Whether a paged-attention call on a compute capability 9.0 device runs its prefill blocks
// on the wgmma kernel: BF16 queries over a BF16 or F8_E4M3 cache at its head dims, with tensor
// cores and wgmma asked for (PagedAttentionParams). The FP8 cache's tiles are widened to BF16
// in shared memory before the products read them (see the kernel).
constexpr bool use_wgmma_prefill(DType query, DType cache, int64_t head_dim, bool tensor_cores,
                                 bool wgmma) {
  return tensor_cores && wgmma && query == DType::kBF16 &&
         (cache == DType::kBF16 || cache == DType::kF8E4M3) && wgmma_prefill_head_dim(head_dim);
}

// Same grid, work split and outputs as mma_prefill_kernel (grid (q_tiles, Hk, R) over the
// requests with more than kSmallRows query rows; the others return at once). D: 128 or 256;
// C: the cache element, __nv_bfloat16 or KvFp8 (kv_fp8.cuh).
template <int D, typename C>
Status launch_attention_prefill_wgmma(const AttentionArgs& args, int num_requests,
                                      cudaStream_t stream);

}  // namespace vllm::cuda::detail
