// Paged attention on the GPU, prefill and decode: the counterpart of
// vllm::cpu::paged_attention (src/backend/cpu/attention.h; same semantics, see there).
//
// Request r's queries are rows [query_start_loc[r], query_start_loc[r + 1]) of `query`; they
// are its last q_len context positions, so query i sits at position seq_lens[r] - q_len + i
// and attends causally to keys [0, that position], read from the paged cache through
// block_tables[r]. A prefill chunk that continues from cached KV and a single decode token
// are the same case. GQA: query head h reads kv head h / (Hq / Hk).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

struct PagedAttentionParams {
  Tensor query_start_loc;     // I32 [R + 1] on the device
  Tensor seq_lens;            // I32 [R] on the device
  int32_t max_query_len = 0;  // host-known bounds, for the grid
  int32_t max_seq_len = 0;
  float scale = 1.0f;         // usually 1 / sqrt(head_dim)
};

// query [T, Hq * D] (row stride allowed); kv_cache [num_blocks, 2, block_size, Hk, D] in
// query's dtype; block_tables I32 [R, max_blocks]; out [T, Hq * D] in query's dtype.
// D in {64, 128, 256}; Hq a multiple of Hk.
Status paged_attention(const Tensor& query, const Tensor& kv_cache, const Tensor& block_tables,
                       const PagedAttentionParams& params, Tensor& out, cudaStream_t stream);

}  // namespace vllm::cuda
