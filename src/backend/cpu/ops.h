// CPU reference ops: the executable specification every other backend is tested against.
//
// Activations are f32; weights may be f32, bf16, f16 or block-scaled fp8 (e4m3) and
// accumulate in f32. Shapes and dtypes are checked at entry and reported as
// kInvalidArgument naming the argument; ops on large tensors run on the shared thread pool.
// Outputs are written into caller-allocated tensors (no allocation inside an op except
// scratch).
#pragma once

#include "base/status.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// Once per process, before the first op: BLAS to one thread and its idle workers stopped
// (parallelism comes from our thread pool). linear() also calls it.
void pin_blas_to_one_thread();

// out[t, :] = table[token_ids[t], :].  token_ids I32/I64 [T]; table F32/BF16/F16 [V, H];
// out F32 [T, H]. An id outside [0, V) is kOutOfRange naming the id and position.
Status embedding(const Tensor& token_ids, const Tensor& table, Tensor& out);
// Vocab-parallel: `table` [R, H] holds rows [vocab_start, vocab_start + R) of a vocabulary of
// `vocab_size`; out[t, :] is its row of token_ids[t], or zeros for a token outside the shard.
// An id outside [0, vocab_size) is kOutOfRange.
Status embedding_shard(const Tensor& token_ids, const Tensor& table, int64_t vocab_start,
                       int64_t vocab_size, Tensor& out);

// out = x / sqrt(mean(x^2) + eps) * w, where w = weight or (1 + weight) when unit_offset
// (Qwen3.5/Qwen3-Next/Gemma style). x F32 [T, H]; weight F32/BF16/F16 [H]; out F32 [T, H]
// (may alias x).
Status rms_norm(const Tensor& x, const Tensor& weight, float eps, bool unit_offset, Tensor& out);

// vLLM's fused_add_rms_norm, in place: residual += x; x = rms_norm(residual).
Status fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                          bool unit_offset);

// Rotary embedding in place on query [T, Hq * head_size] (or [T, Hq, head_size]) and key
// (same with Hk; key may be undefined). positions I64 [T]. cos_sin_cache F32
// [max_position, rot_dim]: cos in the first rot_dim/2 columns, sin in the rest (vLLM's
// layout). The first rot_dim of each head's dims rotate; the rest pass through.
// is_neox: rotate halves (x[i], x[i + rot_dim/2]); otherwise GPT-J pairs (x[2i], x[2i+1]).
// A position outside the cache is kOutOfRange.
Status rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_size,
                        const Tensor& cos_sin_cache, bool is_neox);

// dst += src elementwise: the residual add. dst, src F32 of the same shape.
Status add_inplace(Tensor& dst, const Tensor& src);

// out[t, i] = silu(x[t, i]) * x[t, I + i].  x F32 [T, 2I]; out F32 [T, I].
Status silu_and_mul(const Tensor& x, Tensor& out);

// out = x @ weight^T (+ bias): the layout of torch.nn.Linear. x F32 [M, K]; weight
// F32/BF16/F16 [N, K], or block-scaled FP8 (tensor/linear_weight.h), dequantized on the fly
// by its definition and accumulated in f32; bias F32/BF16/F16 [N] or undefined; out F32
// [M, N].
Status linear(const Tensor& x, const LinearWeight& weight, const Tensor& bias, Tensor& out);

// Softmax over the last dim, numerically stable. x, out F32 [M, N] (may alias).
Status softmax(const Tensor& x, Tensor& out);

// The k largest values of each row, in descending order; ties go to the lower index.
// x F32 [M, N]; values F32 [M, k]; indices I64 [M, k]; 1 <= k <= N.
Status top_k(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);

}  // namespace vllm::cpu
