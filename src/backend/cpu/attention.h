// CPU attention over the paged KV cache: the reference for the CUDA prefill/decode kernels.
//
// KV cache of one attention layer: [num_blocks, 2, block_size, num_kv_heads, head_dim]
// (index 0 = key, 1 = value), the layout docs/design.md fixes for every backend, in F32 or in
// F8_E4M3 (vLLM's FP8 cache: e4m3(x / scale) per element, with the layer's k_scale for keys
// and v_scale for values; tensor/kv_cache.h). A token's slot is block_id * block_size +
// offset; request r's i-th context token lives in block block_tables[r][i / block_size] at
// offset i % block_size.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "tensor/kv_cache.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// Writes key/value rows into their slots. key, value F32 [T, Hk, D] (or [T, Hk * D]);
// slot_mapping I64 [T]; a negative slot skips the token (vLLM's padding convention). An
// F8_E4M3 cache stores fp8_kv_quantize(k, scales.k_scale) and (v, scales.v_scale); an F32
// cache ignores the scales.
Status reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& kv_cache,
                         const Tensor& slot_mapping, const KvCacheScales& scales = {});

struct PagedAttentionParams {
  std::span<const int32_t> query_start_loc;  // [R + 1]: request r's queries are rows [s_r, s_{r+1})
  std::span<const int32_t> seq_lens;         // [R]: context length after this step's tokens
  float scale = 1.0f;                        // usually 1 / sqrt(head_dim)
  KvCacheScales kv_scales;                   // an F8_E4M3 cache's (ignored for F32)
};

// Causal attention of each query over its request's cached context. Request r's q rows are
// its last (s_{r+1} - s_r) context positions, so query i of r sits at position
// seq_lens[r] - q_len + i and sees keys [0, that position]. GQA: query head h reads kv head
// h / (Hq / Hk). query, out F32 [T, Hq, D] (or [T, Hq * D]); block_tables I32 [R, max_blocks].
// An F8_E4M3 cache is read as fp8_kv_dequantize(byte, scale): the result is, bit for bit,
// this op over an F32 cache holding those values.
Status paged_attention(const Tensor& query, const Tensor& kv_cache, const Tensor& block_tables,
                       const PagedAttentionParams& params, Tensor& out);

}  // namespace vllm::cpu
