// LlamaForCausalLM and Qwen3ForCausalLM: pre-norm decoder layers of GQA attention with RoPE
// (NeoX halves) and a SwiGLU MLP. Qwen3 adds a per-head RMSNorm on q and k before RoPE and
// drops the attention biases; Llama 3.x brings its own rope scaling through RopeConfig.
// The math follows transformers' modeling_llama.py / modeling_qwen3.py.
#include <memory>
#include <string>
#include <vector>

#include "model/decoder.h"
#include "model/layers/attention.h"
#include "model/layers/logits.h"
#include "model/layers/mlp.h"
#include "model/layers/rope.h"
#include "model/models/registry.h"
#include "model/step_inputs.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace vllm {
namespace {

struct LlamaLayer {
  Tensor input_norm, post_norm;
  AttentionLayer attn;
  MlpLayer mlp;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig config, bool qk_norm) : config_(std::move(config)), qk_norm_(qk_norm) {}

  Status load(WeightSource& weights, const LoadOptions& options);
  const ModelConfig& config() const override { return config_; }
  CacheShapes cache_shapes() const override;
  Expected<Tensor> compute(const StepInputs& in, ModelCache& cache) override;
  Status check_cache(const ModelCache& cache) const override;

 private:
  ModelConfig config_;
  bool qk_norm_;
  int64_t num_kv_heads_ = 0;  // this rank's
  Tensor embed_tokens_, final_norm_, lm_head_, cos_sin_cache_;
  std::vector<LlamaLayer> layers_;
};

Status LlamaModel::load(WeightSource& source, const LoadOptions& options) {
  VLLM_ASSIGN_OR_RETURN(auto runtime, runtime_for(options));
  VLLM_RETURN_IF_ERROR(set_runtime(runtime, options));
  const ExecContext& ctx = context();
  DeviceWeights w(source, ctx);
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    return make_error(ErrorCode::kInvalidFormat,
                      "config: num_attention_heads must be a multiple of num_key_value_heads");
  }
  VLLM_RETURN_IF_ERROR(check_tensor_parallel(c, ctx.tp_size()));
  VLLM_ASSIGN_OR_RETURN(ShardRange kv_heads, tp_kv_heads(ctx, c.num_key_value_heads));
  num_kv_heads_ = kv_heads.size();
  VLLM_ASSIGN_OR_RETURN(embed_tokens_,
                        load_vocab_rows(w, "model.embed_tokens.weight", c.vocab_size, hidden, ctx));
  VLLM_ASSIGN_OR_RETURN(final_norm_, w.get("model.norm.weight", {hidden}));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    VLLM_ASSIGN_OR_RETURN(lm_head_,
                          load_vocab_rows(w, "lm_head.weight", c.vocab_size, hidden, ctx));
  }
  AttentionSpec spec;
  spec.hidden_size = hidden;
  spec.num_heads = c.num_attention_heads;
  spec.num_kv_heads = c.num_key_value_heads;
  spec.head_dim = c.head_dim;
  spec.qk_norm = qk_norm_;
  spec.norm_unit_offset = false;
  spec.bias = c.attention_bias;
  spec.eps = static_cast<float>(c.rms_norm_eps);
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LlamaLayer& l = layers_[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    VLLM_ASSIGN_OR_RETURN(l.input_norm, w.get(p + "input_layernorm.weight", {hidden}));
    VLLM_ASSIGN_OR_RETURN(l.post_norm, w.get(p + "post_attention_layernorm.weight", {hidden}));
    VLLM_RETURN_IF_ERROR(l.attn.load(w, p + "self_attn.", spec, ctx));
    VLLM_RETURN_IF_ERROR(l.mlp.load(w, p + "mlp.", hidden, c.intermediate_size, ctx));
  }
  const int64_t max_position =
      options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  VLLM_ASSIGN_OR_RETURN(Tensor table, compute_cos_sin_cache(c.rope, c.head_dim, max_position));
  VLLM_ASSIGN_OR_RETURN(cos_sin_cache_, ops::upload(ctx, table));
  return runtime->synchronize();
}

CacheShapes LlamaModel::cache_shapes() const {
  CacheShapes shapes;
  shapes.num_attention_layers = config_.num_hidden_layers;
  shapes.num_kv_heads = num_kv_heads_;
  shapes.head_dim = config_.head_dim;
  return shapes;
}

Status LlamaModel::check_cache(const ModelCache& cache) const {
  if (static_cast<int64_t>(cache.kv.size()) != config_.num_hidden_layers ||
      !cache.conv_state.empty() || !cache.ssm_state.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cache has {} KV and {} GDN state tensors; this model needs {} KV and none",
                      cache.kv.size(), cache.conv_state.size() + cache.ssm_state.size(),
                      config_.num_hidden_layers);
  }
  return Status::ok();
}

Expected<Tensor> LlamaModel::compute(const StepInputs& in, ModelCache& cache) {
  const ExecContext& ctx = context();
  const int64_t tokens = in.num_tokens, hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // The residual stream stays in f32 between layers whatever the activation dtype; `h` is
  // each sub-layer's input (normalised) and the MLP's output, `m` the mixer's output.
  VLLM_ASSIGN_OR_RETURN(Tensor residual, ctx.alloc({tokens, hidden}, DType::kF32));
  VLLM_ASSIGN_OR_RETURN(Tensor h, ctx.act({tokens, hidden}));
  VLLM_ASSIGN_OR_RETURN(Tensor m, ctx.act({tokens, hidden}));
  VLLM_RETURN_IF_ERROR(ops::zero(ctx, residual));
  VLLM_RETURN_IF_ERROR(embed_tokens(ctx, in.token_ids, embed_tokens_, config_.vocab_size, h));

  for (size_t i = 0; i < layers_.size(); ++i) {
    const LlamaLayer& l = layers_[i];
    WorkspaceScope scope(ctx.workspace);  // this layer's intermediates
    // residual += h (the embedding, or the last MLP's output); h = input_layernorm(residual).
    VLLM_RETURN_IF_ERROR(ops::fused_add_rms_norm(ctx, h, residual, l.input_norm, eps, false));
    Status s = l.attn.forward(ctx, h, in, cos_sin_cache_, cache.kv[i], m);
    if (!s.is_ok()) return s.with_context(fmt::format("layer {}", i));
    // residual += mixer output; m = post_attention_layernorm(residual).
    VLLM_RETURN_IF_ERROR(ops::fused_add_rms_norm(ctx, m, residual, l.post_norm, eps, false));
    s = l.mlp.forward(ctx, m, h);
    if (!s.is_ok()) return s.with_context(fmt::format("layer {} mlp", i));
  }
  return compute_logits(
      ctx, h, residual, in.logits_indices,
      LogitsHead{final_norm_, eps, /*unit_offset=*/false, lm_head_, config_.vocab_size});
}

template <bool kQkNorm>
Expected<std::unique_ptr<Model>> create_llama(const ModelConfig& config, WeightSource& weights,
                                              const LoadOptions& options) {
  auto model = std::make_unique<LlamaModel>(config, kQkNorm);
  VLLM_RETURN_IF_ERROR(model->load(weights, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace

void register_llama_models(ModelRegistry& registry) {
  registry.add("LlamaForCausalLM", &create_llama<false>);
  registry.add("Qwen3ForCausalLM", &create_llama<true>);
}

}  // namespace vllm
