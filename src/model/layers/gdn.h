// The Gated DeltaNet mixer of the Qwen3.5 / Qwen3.6 / Qwen3-Next hybrids (transformers'
// Qwen3_5GatedDeltaNet), over the op layer:
//   [q | k | v | z | b | a] = x @ in_proj^T         one fused GEMM (two for mixed formats
//                                                    and FP8 block grids that do not stack)
//   q, k, v = silu(causal_conv1d([q | k | v]))      continuing from the conv state
//   g = -exp(A_log) * softplus(a + dt_bias); beta = sigmoid(b)
//   o = gated_delta_rule(q, k, v, g, beta)           continuing from the recurrent state
//   out = out_proj(rms_norm(o) * w * silu(z))        per value head
// Checkpoints store the projections either as in_proj_qkv / in_proj_z / in_proj_b /
// in_proj_a (Qwen3.5) or fused per key head as in_proj_qkvz / in_proj_ba (Qwen3-Next);
// both load into the one row layout above. Under tensor parallelism each rank holds its key
// heads with their value-head groups (every part of in_proj, the conv channels, A_log,
// dt_bias, the states) and out_proj's matching columns; out is all-reduced.
#pragma once

#include <string>

#include "base/status.h"
#include "model/step_inputs.h"
#include "model/weights.h"
#include "ops/exec_context.h"

namespace vllm {

struct GdnSpec {
  int64_t hidden_size = 0;
  int64_t num_key_heads = 0;    // Hk
  int64_t num_value_heads = 0;  // Hv, a multiple of Hk
  int64_t key_head_dim = 0;     // Dk
  int64_t value_head_dim = 0;   // Dv
  int64_t conv_kernel = 0;      // K
  float eps = 1e-6f;            // of the gated RMSNorm
  bool fused_checkpoint = false;

  int64_t key_dim() const { return num_key_heads * key_head_dim; }
  int64_t value_dim() const { return num_value_heads * value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

class GdnLayer {
 public:
  // prefix ends with "linear_attn.".
  Status load(WeightSource& w, const std::string& prefix, const GdnSpec& spec,
              const ExecContext& ctx);
  // x [T, hidden] -> out [T, hidden]; conv_state / ssm_state are this layer's state tensors.
  Status forward(const ExecContext& ctx, const Tensor& x, const StepInputs& in, Tensor& conv_state,
                 Tensor& ssm_state, Tensor& out) const;
  // Whether the input projection can take in the residual add and input norm in front of it
  // (ops::add_rms_norm_linear_fits: CUDA decode batches of 1-2 rows); x is what forward_add_norm
  // would get as norm.x.
  bool fuses_norm(const ExecContext& ctx, const Tensor& x, const Tensor& norm_weight) const;
  // forward() of RMSNorm(norm.residual + norm.x), the add and the norm inside the input
  // projection (the q | k | v | z one when b | a are a second weight: it stores the normed rows
  // for the b | a product); the new residual stream goes to norm.residual_out.
  Status forward_add_norm(const ExecContext& ctx, const ops::AddRmsNorm& norm, const StepInputs& in,
                          Tensor& conv_state, Tensor& ssm_state, Tensor& out) const;

  // The input projection as loaded (see in_proj_ below); in_proj_ba() is undefined when one
  // matrix holds all six parts.
  const LinearWeight& in_proj() const { return in_proj_; }
  const LinearWeight& in_proj_ba() const { return in_proj_ba_; }

 private:
  // forward() after the input projection: proj [T, conv_dim + value_dim + 2 * Hv].
  Status mix(const ExecContext& ctx, const Tensor& proj, const StepInputs& in, Tensor& conv_state,
             Tensor& ssm_state, Tensor& out) const;

  GdnSpec spec_;  // this rank's heads
  // [conv_dim + value_dim + 2 * Hv, hidden]: q | k | v | z | b | a; or, when b and a come in
  // another weight format than the rest (an FP8 checkpoint's BF16 in_proj_b / in_proj_a) or
  // would break q | k | v | z's FP8 block grid, [conv_dim + value_dim, hidden]: q | k | v | z,
  // with in_proj_ba_ [2 * Hv, hidden]: b | a.
  LinearWeight in_proj_;
  LinearWeight in_proj_ba_;
  Tensor conv_weight_;      // [conv_dim, K]
  Tensor A_log_, dt_bias_;  // [Hv]
  Tensor norm_;             // [Dv]
  LinearWeight out_proj_;   // [hidden, value_dim]
};

}  // namespace vllm
