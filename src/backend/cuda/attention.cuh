// Paged attention on the GPU, prefill and decode: the counterpart of
// vllm::cpu::paged_attention (src/backend/cpu/attention.h; same semantics, see there).
//
// Request r's queries are rows [query_start_loc[r], query_start_loc[r + 1]) of `query`; they
// are its last q_len context positions, so query i sits at position seq_lens[r] - q_len + i
// and attends causally to keys [0, that position], read from the paged cache through
// block_tables[r]. A prefill chunk that continues from cached KV and a single decode token
// are the same case. GQA: query head h reads kv head h / (Hq / Hk).
//
// Arithmetic is f32 (scores, softmax, accumulation) whatever the storage dtype; the result
// is rounded once on store. The op launches asynchronously on `stream` and never allocates:
// long contexts at small batch split their keys across thread blocks (flash-decoding) and
// merge the partial results through `workspace`, which the caller sizes with
// paged_attention_workspace_size. Device-side inputs (query_start_loc, seq_lens, block ids)
// that break the host-given bounds are never read past: their rows come out NaN.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "tensor/kv_cache.h"
#include "tensor/tensor.h"

namespace vllm::cuda {

struct PagedAttentionParams {
  Tensor query_start_loc;     // I32 [R + 1] on the device
  Tensor seq_lens;            // I32 [R] on the device
  int32_t max_query_len = 0;  // host-known bounds, for the grid: every q_len <= max_query_len
  int32_t max_seq_len = 0;    // and every seq_len <= max_seq_len
  float scale = 1.0f;         // usually 1 / sqrt(head_dim)
  KvCacheScales kv_scales;    // an F8_E4M3 cache's (tensor/kv_cache.h); ignored otherwise
  // BF16 prefill (requests with more than 16 query rows per kv head) on tensor cores;
  // false runs the CUDA-core kernel instead (kept to compare against). F32 always uses CUDA
  // cores.
  bool tensor_cores = true;
  // BF16 decode (requests with at most 16 query rows per kv head) on tensor cores; false runs
  // the CUDA-core small kernel instead (kept to compare against; F32 always runs it).
  bool decode_tensor_cores = true;
  // With tensor_cores, head dims 128 and 256 on a compute capability 9.0 device (H100, H200)
  // take the wgmma kernel (Hopper's warpgroup tensor cores); false keeps the mma.sync one
  // that other devices run (to compare against). FP8 caches always take the mma.sync one.
  bool wgmma = true;
};

// query [T, Hq * D] (row stride allowed) or contiguous [T, Hq, D]; kv_cache
// [num_blocks, 2, block_size, Hk, D] contiguous, in query's dtype or F8_E4M3 (read as
// e4m3 * k_scale / v_scale, the CPU op's fp8_kv_dequantize; the scales finite and positive);
// block_tables I32 [R' >= R, max_blocks] contiguous; out like query (its own row stride).
// Dtypes F32 or BF16; D in {64, 128, 256}; Hq a multiple of Hk; block_size a power of two;
// query and out rows 16-byte aligned. `workspace`: undefined (then no key splitting: correct,
// slower for long contexts at small batch) or a contiguous device tensor of at least
// paged_attention_workspace_size(R, Hk, D, max_seq_len) bytes, any dtype; its contents are
// scratch, overwritten by the call.
Status paged_attention(const Tensor& query, const Tensor& kv_cache, const Tensor& block_tables,
                       const PagedAttentionParams& params, Tensor& workspace, Tensor& out,
                       cudaStream_t stream);

// Bytes of workspace that paged_attention uses for a batch of `num_requests` requests whose
// longest context is `max_seq_len` (0 when it would not split). Depends on nothing else, so a
// batch shape always gets the same split, and never exceeds
// paged_attention_max_workspace_size(head_dim).
size_t paged_attention_workspace_size(int64_t num_requests, int64_t num_kv_heads, int64_t head_dim,
                                      int64_t max_seq_len);

// An upper bound of paged_attention_workspace_size over every batch: about 34 MB for
// head_dim 256 (8.5 MB for 64).
size_t paged_attention_max_workspace_size(int64_t head_dim);

}  // namespace vllm::cuda
