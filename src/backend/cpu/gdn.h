// CPU reference ops of Gated DeltaNet (the linear-attention layers of Qwen3.5 / Qwen3.6 and
// Qwen3-Next), over a varlen flat batch of R requests that continue from per-request state.
//
// Request r owns rows [query_start_loc[r], query_start_loc[r + 1]) of every [T, ...] input
// and state slot state_indices[r] of every state tensor. The ops read the slot as the state
// left by the request's previous tokens and write the new state back in place, so a prefill
// split into chunks gives the same result as one call. A request that starts a sequence must
// find its slot zeroed (the model zeroes it; see forward_batch.h). Slots of one batch must be
// distinct.
//
// State dtype. The conv and recurrent states may be kept in F32, BF16 or F16 (vLLM's
// --mamba-cache-dtype / --mamba-ssm-cache-dtype); the arithmetic is f32 whatever they are. An
// op reads a request's slot into f32 once, runs all of the request's rows of the call in
// f32, and rounds the new state (to nearest, ties to even) once when it stores it: a 16-bit
// state is rounded once per call and request, never per token.
//
// Numerics follow transformers' float32 torch fallbacks (modeling_qwen3_5.py): the
// gated delta rule here is the token-by-token recurrence (torch_recurrent_gated_delta_rule);
// transformers runs the chunked form (torch_chunk_gated_delta_rule) on prefill, which is the
// same function of its inputs computed in a different order -- the unit tests check both
// against double-precision references of each form.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cpu {

// Which rows belong to which request, and each request's state slot.
struct GdnBatch {
  std::span<const int32_t> query_start_loc;  // [R + 1], non-decreasing, last = T
  std::span<const int32_t> state_indices;    // [R]: slot of request r (distinct)
};

// Causal depthwise conv1d with SiLU, continuing from per-request conv state:
//   out[t, c] = silu(bias[c] + sum_j weight[c, j] * in[t - (K - 1) + j, c])
// where in[] is the request's past K-1 inputs (conv_state, oldest first) followed by its rows
// of x. Afterwards the slot holds the last K-1 inputs of [state, x].
// x F32 [T, C] (rows may be strided, e.g. a column slice); weight F32/BF16/F16 [C, K];
// bias [C] or undefined; conv_state F32/BF16/F16 [num_slots, C, K - 1]; out F32 [T, C] (may
// alias x).
Status causal_conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const GdnBatch& batch, Tensor& conv_state, Tensor& out);

// The decay and write strength of the delta rule, per token and value head:
//   g = -exp(A_log) * softplus(a + dt_bias)   (torch's softplus: identity above 20)
//   beta = sigmoid(b)
// a, b F32 [T, Hv] (strided rows allowed); A_log, dt_bias F32/BF16/F16 [Hv];
// g, beta F32 [T, Hv].
Status gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                  Tensor& g, Tensor& beta);

struct GatedDeltaRuleParams {
  bool use_qk_l2norm = true;  // q, k <- x / sqrt(sum(x^2) + l2norm_eps) first
  float l2norm_eps = 1e-6f;   // transformers' l2norm eps (fixed there, not rms_norm_eps)
  float scale = 0.0f;         // q multiplier after the norm; 0: 1 / sqrt(Dk)
};

// The gated delta rule. For request r, value head h (key head h / (Hv / Hk): each key head
// serves Hv / Hk consecutive value heads) and each of its tokens t in order, with state
// S [Dk, Dv]:
//   S <- exp(g[t, h]) * S
//   S <- S + k_t (beta[t, h] * (v_t - S^T k_t))^T
//   out[t, h] = S^T (scale * q_t)
// q, k F32 [T, Hk * Dk]; v F32 [T, Hv * Dv] (rows may be strided: column slices of the conv
// output); g, beta F32 [T, Hv]; state F32/BF16/F16 [num_slots, Hv, Dk, Dv] (updated in place);
// out F32 [T, Hv * Dv]. Hk, Dk, Dv come from the shapes of state and q.
Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, const GdnBatch& batch,
                        const GatedDeltaRuleParams& params, Tensor& state, Tensor& out);

// Gated RMSNorm of the GDN output, per head of D = weight.size(0) values:
//   out[t, h, :] = x / sqrt(mean(x^2) + eps) * weight * silu(z[t, h, :])
// (the weight is used as is, no unit offset). x, z F32 [T, H * D] (strided rows allowed);
// weight F32/BF16/F16 [D]; out F32 [T, H * D] (may alias x).
Status gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                      Tensor& out);

}  // namespace vllm::cpu
