// The attention block every model shares (Llama 3, Qwen3, and the full-attention layers of
// the Qwen3.5 / Qwen3-Next hybrids):
//   qkv = x @ [q | k | v]^T (+ bias)        one fused GEMM
//   q, gate = split(q) when output_gate     Qwen3.5's gated attention (per head: q then gate)
//   q, k = rope(rms_norm_per_head(q, k))    q/k norm where the model has it (Qwen3, Qwen3.5)
//   cache[slot_mapping] = k, v              an FP8 cache: e4m3(k / k_scale), e4m3(v / v_scale)
//   a = paged_attention(q, cache)           causal over the request's cached context
//   a *= sigmoid(gate)                      gated attention only
//   out = a @ o_proj^T (+ bias)
// Under tensor parallelism (ctx.comm) each rank holds its query heads and KV heads (or a
// replica of one) and o_proj's matching columns; out is all-reduced (tensor_parallel.h).
// The FP8 KV-cache scales are per layer (per tensor), the same on every rank.
#pragma once

#include <string>

#include "base/status.h"
#include "model/step_inputs.h"
#include "model/weights.h"
#include "ops/exec_context.h"
#include "tensor/kv_cache.h"

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
  // this rank's shard of them; and the FP8 KV-cache scales where the checkpoint has them
  // (load_kv_cache_scales).
  Status load(WeightSource& w, const std::string& prefix, const AttentionSpec& spec,
              const ExecContext& ctx);

  // x [T, hidden] -> out [T, hidden]; kv_cache is this layer's cache (the activation dtype,
  // or F8_E4M3 under the layer's scales).
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
  KvCacheScales kv_scales_;  // used by an F8_E4M3 cache only
};

// The FP8 KV-cache scales of the attention layer whose weights are under `prefix`
// ("model.layers.N.self_attn."), under the names vLLM's checkpoint loaders remap
// (maybe_remap_kv_scale_name, compressed-tensors' output scales): {prefix}k_scale /
// v_scale, {prefix}k_proj.k_scale / v_proj.v_scale (ModelOpt), {prefix}k_proj.output_scale /
// v_proj.output_scale (compressed-tensors), {prefix}attn.k_scale / attn.v_scale, and the
// deprecated {prefix}kv_scale for both. Scalars ([] or [1]) of a float dtype. As vLLM does,
// a layer with only one of the two uses it for both, and a layer with neither 1.0 (vLLM's
// default without --calculate-kv-scales). A scale that is not finite and positive is
// kInvalidFormat naming the tensor.
Expected<KvCacheScales> load_kv_cache_scales(WeightSource& w, const std::string& prefix,
                                             const ExecContext& ctx);

}  // namespace vllm
