// Loading the hybrid decoder's weights (see qwen3_5.h) from the names the shipped checkpoints
// use, checking every shape against the config:
//   Qwen3.5 / 3.6 ForCausalLM            model.layers.{i}...
//   Qwen3.5 / 3.6 ForConditionalGeneration model.language_model.layers.{i}...; model.visual.*
//                                        and mtp.* are not read (text only, no MTP head)
//   Qwen3-Next                           model.layers.{i}...; mtp.* not read
// lm_head.weight sits at the top level in all of them (absent when tie_word_embeddings).
// GDN projections are stored here in one layout ([q | k | v | z | b | a] rows) whatever
// the checkpoint's; MoE experts come either per expert (mlp.experts.{e}.gate_proj.weight, ...)
// or fused (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]), as vLLM
// accepts both.
#include <algorithm>
#include <cstring>
#include <string>

#include "model/decoder.h"
#include "model/layers/logits.h"
#include "model/layers/rope.h"
#include "model/mamba_dtype.h"
#include "model/models/qwen3_5.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace vllm::hybrid {

Status HybridModel::check_config() const {
  const ModelConfig& c = config_;
  auto bad = [&](const std::string& what) {
    return make_error(ErrorCode::kInvalidFormat, "config: {} (model_type '{}')", what,
                      c.text_model_type);
  };
  if (c.hidden_act != "silu") return bad("hidden_act '" + c.hidden_act + "' is not silu");
  if (static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers) {
    return bad("layer_types does not cover num_hidden_layers");
  }
  const bool has_linear =
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kLinearAttention) > 0;
  if (has_linear) {
    if (c.linear_num_key_heads <= 0 || c.linear_num_value_heads <= 0 ||
        c.linear_key_head_dim <= 0 || c.linear_value_head_dim <= 0 ||
        c.linear_conv_kernel_dim <= 0) {
      return bad(
          "linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, "
          "linear_value_head_dim and linear_conv_kernel_dim must be positive");
    }
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0) {
      return bad(
          fmt::format("linear_num_value_heads {} is not a multiple of "
                      "linear_num_key_heads {}",
                      c.linear_num_value_heads, c.linear_num_key_heads));
    }
  }
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    return bad("num_attention_heads must be a multiple of num_key_value_heads");
  }
  bool any_sparse = false;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) any_sparse |= layer_is_sparse(i);
  if (any_sparse &&
      (c.num_experts <= 0 || c.moe_intermediate_size <= 0 || c.num_experts_per_tok <= 0)) {
    return bad("num_experts, moe_intermediate_size and num_experts_per_tok must be positive");
  }
  bool any_dense = false;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) any_dense |= !layer_is_sparse(i);
  if (any_dense && c.intermediate_size <= 0) return bad("intermediate_size must be positive");
  return Status::ok();
}

bool HybridModel::layer_is_sparse(int64_t layer) const {
  const ModelConfig& c = config_;
  if (variant_.sparse == HybridVariant::Sparse::kNone) return false;
  if (variant_.sparse == HybridVariant::Sparse::kAll) return true;
  if (c.num_experts <= 0) return false;
  if (std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), layer) !=
      c.mlp_only_layers.end()) {
    return false;
  }
  return (layer + 1) % c.decoder_sparse_step == 0;
}

Status HybridModel::load(WeightSource& source, const LoadOptions& options) {
  VLLM_RETURN_IF_ERROR(check_config());
  VLLM_ASSIGN_OR_RETURN(auto runtime, runtime_for(options));
  VLLM_RETURN_IF_ERROR(set_runtime(runtime, options));
  const ExecContext& ctx = context();
  const ModelConfig& c = config_;
  // The GDN states' dtypes (vLLM's --mamba-cache-dtype / --mamba-ssm-cache-dtype), before any
  // weight is read: a bad flag fails at once.
  VLLM_ASSIGN_OR_RETURN(MambaStateDTypes state_dtypes,
                        resolve_mamba_state_dtypes(c, ctx.act_dtype, options.mamba_cache_dtype,
                                                   options.mamba_ssm_cache_dtype));
  cache_shapes_.conv_state_dtype = state_dtypes.conv;
  cache_shapes_.ssm_state_dtype = state_dtypes.ssm;
  DeviceWeights w(source, ctx);
  const int64_t hidden = c.hidden_size;
  VLLM_CHECK(!variant_.prefixes.empty());
  std::string prefix = variant_.prefixes[0];
  for (const std::string& p : variant_.prefixes) {
    if (w.contains(p + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  VLLM_RETURN_IF_ERROR(check_tensor_parallel(c, ctx.tp_size()));
  VLLM_ASSIGN_OR_RETURN(
      embed_tokens_, load_vocab_rows(w, prefix + "embed_tokens.weight", c.vocab_size, hidden, ctx));
  VLLM_ASSIGN_OR_RETURN(final_norm_, w.get(prefix + "norm.weight", {hidden}));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    VLLM_ASSIGN_OR_RETURN(lm_head_,
                          load_vocab_rows(w, "lm_head.weight", c.vocab_size, hidden, ctx));
  }
  // This rank's cache shapes (tensor_parallel.h): its KV heads and GDN heads.
  VLLM_ASSIGN_OR_RETURN(ShardRange kv_heads, tp_kv_heads(ctx, c.num_key_value_heads));
  cache_shapes_.num_kv_heads = kv_heads.size();
  cache_shapes_.head_dim = c.head_dim;
  if (c.linear_num_key_heads > 0) {
    VLLM_ASSIGN_OR_RETURN(ShardRange keys,
                          tp_split(ctx, c.linear_num_key_heads, "linear_num_key_heads"));
    const int64_t group = c.linear_num_value_heads / c.linear_num_key_heads;
    cache_shapes_.num_value_heads = keys.size() * group;
    cache_shapes_.key_head_dim = c.linear_key_head_dim;
    cache_shapes_.value_head_dim = c.linear_value_head_dim;
    cache_shapes_.conv_dim = 2 * keys.size() * c.linear_key_head_dim +
                             cache_shapes_.num_value_heads * c.linear_value_head_dim;
    cache_shapes_.conv_kernel = c.linear_conv_kernel_dim;
  }
  AttentionSpec attn;
  attn.hidden_size = hidden;
  attn.num_heads = c.num_attention_heads;
  attn.num_kv_heads = c.num_key_value_heads;
  attn.head_dim = c.head_dim;
  attn.output_gate = c.attn_output_gate;
  attn.qk_norm = true;
  attn.norm_unit_offset = true;
  attn.bias = c.attention_bias;
  attn.eps = static_cast<float>(c.rms_norm_eps);
  GdnSpec gdn;
  gdn.hidden_size = hidden;
  gdn.num_key_heads = c.linear_num_key_heads;
  gdn.num_value_heads = c.linear_num_value_heads;
  gdn.key_head_dim = c.linear_key_head_dim;
  gdn.value_head_dim = c.linear_value_head_dim;
  gdn.conv_kernel = c.linear_conv_kernel_dim;
  gdn.eps = static_cast<float>(c.rms_norm_eps);
  gdn.fused_checkpoint = variant_.fused_gdn_projections;
  MoeSpec moe;
  moe.hidden_size = hidden;
  moe.num_experts = c.num_experts;
  moe.top_k = c.num_experts_per_tok;
  moe.intermediate_size = c.moe_intermediate_size;
  moe.shared_intermediate_size = c.shared_expert_intermediate_size;
  moe.renormalize = variant_.sparse == HybridVariant::Sparse::kAll || c.norm_topk_prob;
  moe.expert_parallel = options.enable_expert_parallel && ctx.tp_size() > 1;
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  num_attention_layers_ = num_linear_layers_ = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    HybridLayer& l = layers_[static_cast<size_t>(i)];
    const std::string p = prefix + "layers." + std::to_string(i) + ".";
    l.type = c.layer_types[static_cast<size_t>(i)];
    VLLM_ASSIGN_OR_RETURN(l.input_norm, w.get(p + "input_layernorm.weight", {hidden}));
    VLLM_ASSIGN_OR_RETURN(l.post_norm, w.get(p + "post_attention_layernorm.weight", {hidden}));
    if (l.type == LayerType::kLinearAttention) {
      l.cache_index = static_cast<int>(num_linear_layers_++);
      VLLM_RETURN_IF_ERROR(l.gdn.load(w, p + "linear_attn.", gdn, ctx));
    } else {
      l.cache_index = static_cast<int>(num_attention_layers_++);
      VLLM_RETURN_IF_ERROR(l.attn.load(w, p + "self_attn.", attn, ctx));
    }
    l.sparse = layer_is_sparse(i);
    if (l.sparse) {
      VLLM_RETURN_IF_ERROR(l.moe.load(w, p + "mlp.", moe, ctx));
    } else {
      VLLM_RETURN_IF_ERROR(l.mlp.load(w, p + "mlp.", hidden, c.intermediate_size, ctx));
    }
  }
  const int64_t max_position =
      options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  cache_shapes_.num_attention_layers = num_attention_layers_;
  cache_shapes_.num_linear_layers = num_linear_layers_;
  VLLM_ASSIGN_OR_RETURN(Tensor table, compute_cos_sin_cache(c.rope, c.head_dim, max_position));
  VLLM_ASSIGN_OR_RETURN(cos_sin_cache_, ops::upload(ctx, table));
  return runtime->synchronize();
}

Expected<std::unique_ptr<Model>> create_hybrid_model(const ModelConfig& config,
                                                     WeightSource& weights,
                                                     const LoadOptions& options,
                                                     const HybridVariant& variant) {
  auto model = std::make_unique<HybridModel>(config, variant);
  VLLM_RETURN_IF_ERROR(model->load(weights, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace vllm::hybrid
