// The attention block every model shares (Llama 3, Qwen3, and the full-attention layers of
// the Qwen3.5 / Qwen3-Next hybrids):
//   qkv = x @ [q | k | v]^T (+ bias)        one fused GEMM
//   q, gate = split(q) when output_gate     Qwen3.5's gated attention (per head: q then gate)
//   q, k = rope(rms_norm_per_head(q, k))    q/k norm where the model has it (Qwen3, Qwen3.5)
//   cache[slot_mapping] = k, v
//   a = paged_attention(q, cache)           causal over the request's cached context
//   a *= sigmoid(gate)                      gated attention only
//   out = a @ o_proj^T (+ bias)
// Under tensor parallelism (ctx.comm) each rank holds its query heads and KV heads (or a
// replica of one) and o_proj's matching columns; out is all-reduced (tensor_parallel.h).
#pragma once

#include <string>

#include "base/status.h"
#include "model/step_inputs.h"
#include "model/weights.h"
#include "ops/exec_context.h"

namespace vllm {

struct AttentionSpec {
  int64_t hidden_size = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool output_gate = false;       // q_proj also yields a per-head output gate
  bool qk_norm = false;           // per-head RMSNorm of q and k
  bool norm_unit_offset = false;  // (1 + w) norms
  bool bias = false;              // q/k/v biases (and an o_proj bias if present)
  float eps = 1e-6f;
};

class AttentionLayer {
 public:
  // Reads {prefix}q_proj / k_proj / v_proj / o_proj (.weight, .bias) and q_norm / k_norm:
  // this rank's shard of them.
  Status load(WeightSource& w, const std::string& prefix, const AttentionSpec& spec,
              const ExecContext& ctx);

  // x [T, hidden] -> out [T, hidden]; kv_cache is this layer's cache.
  Status forward(const ExecContext& ctx, const Tensor& x, const StepInputs& in,
                 const Tensor& cos_sin_cache, Tensor& kv_cache, Tensor& out) const;
  // As GdnLayer's: the residual add and input norm inside the q/k/v projection (no biases).
  bool fuses_norm(const ExecContext& ctx, const Tensor& x, const Tensor& norm_weight) const;
  Status forward_add_norm(const ExecContext& ctx, const ops::AddRmsNorm& norm, const StepInputs& in,
                          const Tensor& cos_sin_cache, Tensor& kv_cache, Tensor& out) const;

 private:
  // forward() after the q/k/v projection: qkv [T, q_rows + 2 * kv_dim].
  Status attend(const ExecContext& ctx, const Tensor& qkv, const StepInputs& in,
                const Tensor& cos_sin_cache, Tensor& kv_cache, Tensor& out) const;

  AttentionSpec spec_;  // this rank's heads
  LinearWeight qkv_;    // [q_rows + 2 * kv_dim, hidden]
  Tensor qkv_bias_;     // [q_rows + 2 * kv_dim]
  LinearWeight o_proj_;
  Tensor o_bias_;
  Tensor q_norm_, k_norm_;
};

}  // namespace vllm
