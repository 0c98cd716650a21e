// CPU reference ops of a sparse mixture-of-experts MLP (Qwen3-Next / Qwen3.5-MoE): the router
// (softmax over experts, top-k, optional renormalisation) and the dispatch of each token to
// its experts' SwiGLU MLPs with a weighted sum of their outputs.
//
// Numerics follow transformers' float32 path: the softmax in f32, the top-k of the
// probabilities (ties to the lower expert id), renormalisation by the sum of the k kept
// probabilities; expert outputs are added in increasing expert id (transformers' index_add_
// loop order). Shared experts are ordinary dense MLPs and stay with the model.
#pragma once

#include <vector>

#include "base/status.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// Per-expert weights, views into the checkpoint (no copies): expert e computes
// down[e] @ (silu(gate[e] @ x) * (up[e] @ x)).
struct MoeExpertWeights {
  std::vector<Tensor> gate_proj;  // [E] of F32/BF16/F16 [I, H]
  std::vector<Tensor> up_proj;    // [E] of [I, H]
  std::vector<Tensor> down_proj;  // [E] of [H, I]

  int64_t num_experts() const { return static_cast<int64_t>(gate_proj.size()); }
};

// Views of each expert's projections in stacked tensors, the layout the models keep:
// gate_up [E, 2I, H] (expert e's gate rows [0, I), then its up rows) and down [E, H, I].
MoeExpertWeights experts_from_stacked(const Tensor& gate_up, const Tensor& down);

// router_logits F32 [T, E] -> topk_weights F32 [T, k] and topk_ids I64 [T, k], the k most
// probable experts of each token in descending probability. renormalize: the k weights are
// divided by their sum (norm_topk_prob); otherwise they are the softmax probabilities.
Status moe_route(const Tensor& router_logits, int64_t top_k, bool renormalize, Tensor& topk_weights,
                 Tensor& topk_ids);

// out[t] = sum_i topk_weights[t, i] * expert_{topk_ids[t, i]}(x[t]).
// x F32 [T, H] (strided rows allowed); topk_weights F32 [T, k]; topk_ids I64 [T, k] (each in
// [0, E)); out F32 [T, H] (must not alias x).
Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const Tensor& topk_weights,
                   const Tensor& topk_ids, Tensor& out);

// The same as moe_experts on the stacked layout the models keep (gate_up F32/BF16/F16
// [E, 2I, H], down [E, H, I], or either block-scaled FP8 with a grid per expert:
// tensor/linear_weight.h), without allocating: intermediates live in `scratch`, a contiguous
// CPU tensor of at least moe_experts_scratch_bytes() bytes (the op layer takes it from the
// step's workspace). Each expert's gate and up rows run as one projection; for float weights
// the result is bitwise moe_experts' on the same weights, for FP8 ones moe_experts' on the
// dequantized weights.
//
// Expert parallelism: the stack may hold experts [first_expert, first_expert + E) of
// num_global_experts (0: E) -- one rank's share. Ids must be below num_global_experts; pairs
// routed to experts outside the stack (other ranks') are skipped, so out is this rank's
// partial sum.
size_t moe_experts_scratch_bytes(int64_t tokens, int64_t top_k, int64_t hidden, int64_t inter,
                                 int64_t num_experts);
Status moe_experts_stacked(const Tensor& x, const LinearWeight& gate_up, const LinearWeight& down,
                           const Tensor& topk_weights, const Tensor& topk_ids, Tensor& scratch,
                           Tensor& out, int64_t first_expert = 0, int64_t num_global_experts = 0);

}  // namespace vllm::cpu
