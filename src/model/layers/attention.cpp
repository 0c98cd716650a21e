#include "model/layers/attention.h"

#include <cmath>
#include <optional>

#include "base/float_convert.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace vllm {
namespace {

// 1-D tensors of the parts, concatenated (biases).
Expected<Tensor> concat_vectors(const std::vector<Tensor>& parts, const ExecContext& ctx) {
  std::vector<Tensor> rows;
  for (const Tensor& p : parts) rows.push_back(p.view({p.size(0), 1}));
  VLLM_ASSIGN_OR_RETURN(Tensor out, concat_rows(rows, &ctx));
  return out.view({out.size(0)});
}

// A scalar checkpoint tensor ([] or [1], F32 / BF16 / F16) on the host, or nothing when the
// checkpoint does not have `name`.
Expected<std::optional<float>> read_scalar(WeightSource& w, const std::string& name,
                                           const ExecContext& ctx) {
  if (!w.contains(name)) return std::optional<float>();
  auto t = w.get(name, {});
  if (!t) t = w.get(name, {1});
  if (!t) return t.status().with_context("FP8 KV-cache scale");
  VLLM_ASSIGN_OR_RETURN(Tensor host, ops::to_host(ctx, *t));
  switch (host.dtype()) {
    case DType::kF32:
      return std::optional<float>(host.data<float>()[0]);
    case DType::kBF16:
      return std::optional<float>(bf16_to_f32(host.data<uint16_t>()[0]));
    case DType::kF16:
      return std::optional<float>(f16_to_f32(host.data<uint16_t>()[0]));
    default:
      return make_error(ErrorCode::kInvalidFormat, "{} is {}, not a float scale", name,
                        dtype_name(host.dtype()));
  }
}

// The first of `names` the checkpoint has.
Expected<std::optional<float>> first_scale(WeightSource& w, const std::string& prefix,
                                           std::initializer_list<const char*> names,
                                           const ExecContext& ctx) {
  for (const char* n : names) {
    VLLM_ASSIGN_OR_RETURN(std::optional<float> v, read_scalar(w, prefix + n, ctx));
    if (!v) continue;
    if (!std::isfinite(*v) || *v <= 0.0f) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}{} is {}: an FP8 KV-cache scale must be finite and positive", prefix, n,
                        *v);
    }
    return v;
  }
  return std::optional<float>();
}

}  // namespace

Expected<KvCacheScales> load_kv_cache_scales(WeightSource& w, const std::string& prefix,
                                             const ExecContext& ctx) {
  VLLM_ASSIGN_OR_RETURN(
      std::optional<float> k,
      first_scale(w, prefix, {"k_scale", "k_proj.k_scale", "k_proj.output_scale", "attn.k_scale"},
                  ctx));
  VLLM_ASSIGN_OR_RETURN(
      std::optional<float> v,
      first_scale(w, prefix, {"v_scale", "v_proj.v_scale", "v_proj.output_scale", "attn.v_scale"},
                  ctx));
  if (!k && !v) {
    VLLM_ASSIGN_OR_RETURN(k, first_scale(w, prefix, {"kv_scale"}, ctx));
  }
  KvCacheScales scales;
  if (k || v) {
    scales.k_scale = k ? *k : *v;
    scales.v_scale = v ? *v : *k;
  }
  return scales;
}

Status AttentionLayer::load(WeightSource& w, const std::string& p, const AttentionSpec& spec,
                            const ExecContext& ctx) {
  const int64_t hidden = spec.hidden_size, d = spec.head_dim;
  const int64_t q_dim = spec.num_heads * d, kv_dim = spec.num_kv_heads * d;
  // q_proj rows come per head: d query rows, then (gated attention) d gate rows.
  const int64_t q_stride = spec.output_gate ? 2 * d : d;
  // Column-parallel q/k/v over this rank's heads, row-parallel o_proj (tensor_parallel.h).
  VLLM_ASSIGN_OR_RETURN(ShardRange heads, tp_split(ctx, spec.num_heads, "num_attention_heads"));
  VLLM_ASSIGN_OR_RETURN(ShardRange kv_heads, tp_kv_heads(ctx, spec.num_kv_heads));
  const WeightSlice q_rows{0, heads.begin * q_stride, heads.end * q_stride};
  const WeightSlice kv_rows{0, kv_heads.begin * d, kv_heads.end * d};
  spec_ = spec;
  spec_.num_heads = heads.size();
  spec_.num_kv_heads = kv_heads.size();
  VLLM_ASSIGN_OR_RETURN(
      LinearWeight q,
      w.get_linear_slice(p + "q_proj.weight", {spec.num_heads * q_stride, hidden}, q_rows));
  VLLM_ASSIGN_OR_RETURN(LinearWeight k,
                        w.get_linear_slice(p + "k_proj.weight", {kv_dim, hidden}, kv_rows));
  VLLM_ASSIGN_OR_RETURN(LinearWeight v,
                        w.get_linear_slice(p + "v_proj.weight", {kv_dim, hidden}, kv_rows));
  if (!same_weight_format(q, k) || !same_weight_format(q, v)) {
    return make_error(ErrorCode::kUnsupported,
                      "{}q_proj / k_proj / v_proj are {} / {} / {}; they must match", p,
                      weight_format(q), weight_format(k), weight_format(v));
  }
  VLLM_ASSIGN_OR_RETURN(qkv_, concat_linear_rows({q, k, v}, &ctx));
  VLLM_ASSIGN_OR_RETURN(o_proj_,
                        w.get_linear_slice(p + "o_proj.weight", {hidden, q_dim},
                                           WeightSlice{1, heads.begin * d, heads.end * d}));
  if (spec.bias) {
    VLLM_ASSIGN_OR_RETURN(Tensor qb,
                          w.get_slice(p + "q_proj.bias", {spec.num_heads * q_stride}, q_rows));
    VLLM_ASSIGN_OR_RETURN(Tensor kb, w.get_slice(p + "k_proj.bias", {kv_dim}, kv_rows));
    VLLM_ASSIGN_OR_RETURN(Tensor vb, w.get_slice(p + "v_proj.bias", {kv_dim}, kv_rows));
    if (qb.dtype() != kb.dtype() || qb.dtype() != vb.dtype()) {
      return make_error(ErrorCode::kUnsupported, "{}q/k/v biases must share one dtype", p);
    }
    VLLM_ASSIGN_OR_RETURN(qkv_bias_, concat_vectors({qb, kb, vb}, ctx));
    // Row-parallel: the partial outputs are summed, so only rank 0 adds the bias.
    if (w.contains(p + "o_proj.bias") && ctx.tp_rank() == 0) {
      VLLM_ASSIGN_OR_RETURN(o_bias_, w.get(p + "o_proj.bias", {hidden}));
    }
  }
  if (spec.qk_norm) {
    VLLM_ASSIGN_OR_RETURN(q_norm_, w.get(p + "q_norm.weight", {d}));
    VLLM_ASSIGN_OR_RETURN(k_norm_, w.get(p + "k_norm.weight", {d}));
  }
  VLLM_ASSIGN_OR_RETURN(kv_scales_, load_kv_cache_scales(w, p, ctx));
  return Status::ok();
}

Status AttentionLayer::forward(const ExecContext& ctx, const Tensor& x, const StepInputs& in,
                               const Tensor& cos_sin_cache, Tensor& kv_cache, Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Tensor qkv, ctx.act({x.size(0), qkv_.size(0)}));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, x, qkv_, qkv_bias_, qkv));
  return attend(ctx, qkv, in, cos_sin_cache, kv_cache, out);
}

bool AttentionLayer::fuses_norm(const ExecContext& ctx, const Tensor& x,
                                const Tensor& norm_weight) const {
  return !qkv_bias_.defined() && ops::add_rms_norm_linear_fits(ctx, x, norm_weight, qkv_);
}

Status AttentionLayer::forward_add_norm(const ExecContext& ctx, const ops::AddRmsNorm& norm,
                                        const StepInputs& in, const Tensor& cos_sin_cache,
                                        Tensor& kv_cache, Tensor& out) const {
  VLLM_ASSIGN_OR_RETURN(Tensor qkv, ctx.act({norm.x.size(0), qkv_.size(0)}));
  VLLM_RETURN_IF_ERROR(ops::add_rms_norm_linear(ctx, norm, qkv_, qkv));
  return attend(ctx, qkv, in, cos_sin_cache, kv_cache, out);
}

Status AttentionLayer::attend(const ExecContext& ctx, const Tensor& qkv, const StepInputs& in,
                              const Tensor& cos_sin_cache, Tensor& kv_cache, Tensor& out) const {
  const AttentionSpec& s = spec_;
  const int64_t tokens = qkv.size(0), d = s.head_dim;
  const int64_t q_dim = s.num_heads * d, kv_dim = s.num_kv_heads * d;
  const int64_t q_rows = s.output_gate ? 2 * q_dim : q_dim;
  Tensor k = qkv.slice(1, q_rows, q_rows + kv_dim);
  Tensor v = qkv.slice(1, q_rows + kv_dim, q_rows + 2 * kv_dim);
  Tensor q = qkv.slice(1, 0, q_dim), gate;
  if (s.output_gate) {
    VLLM_ASSIGN_OR_RETURN(q, ctx.act({tokens, q_dim}));
    VLLM_ASSIGN_OR_RETURN(gate, ctx.act({tokens, q_dim}));
    VLLM_RETURN_IF_ERROR(ops::split_q_gate(ctx, qkv.slice(1, 0, q_rows), d, q, gate));
  }
  ops::RopeArgs rope;
  rope.head_size = d;
  rope.is_neox = true;
  rope.q_norm = q_norm_;
  rope.k_norm = k_norm_;
  rope.norm_eps = s.eps;
  rope.norm_unit_offset = s.norm_unit_offset;
  VLLM_RETURN_IF_ERROR(ops::rope(ctx, in.positions, q, k, cos_sin_cache, rope));
  VLLM_RETURN_IF_ERROR(ops::reshape_and_cache(ctx, k, v, kv_cache, in.slot_mapping, kv_scales_));
  VLLM_ASSIGN_OR_RETURN(Tensor attn, ctx.act({tokens, q_dim}));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  VLLM_RETURN_IF_ERROR(ops::paged_attention(ctx, q, kv_cache, in.layout, scale, attn, kv_scales_));
  if (gate.defined()) VLLM_RETURN_IF_ERROR(ops::sigmoid_gate_mul(ctx, attn, gate));
  VLLM_RETURN_IF_ERROR(ops::linear(ctx, attn, o_proj_, o_bias_, out));
  return ops::all_reduce(ctx, out);
}

}  // namespace vllm
