// LlamaForCausalLM and Qwen3ForCausalLM: pre-norm decoder layers of GQA attention with RoPE
// (NeoX halves) and a SwiGLU MLP. Qwen3 adds a per-head RMSNorm on q and k before RoPE and
// drops the attention biases; Llama 3.x brings its own rope scaling through RopeConfig.
// The math follows transformers' modeling_llama.py / modeling_qwen3.py.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "model/layers/logits.h"
#include "model/layers/rope.h"
#include "model/models/registry.h"
#include "model/weights.h"

namespace vllm {
namespace {

struct LayerWeights {
  Tensor input_norm, post_norm;
  Tensor q_proj, k_proj, v_proj, o_proj;
  Tensor q_bias, k_bias, v_bias, o_bias;  // undefined unless attention_bias
  Tensor q_norm, k_norm;                  // Qwen3 only
  Tensor gate_up_proj, down_proj;         // gate_up: [2I, H]
};

class LlamaModel final : public Model {
 public:
  LlamaModel(ModelConfig config, bool qk_norm) : config_(std::move(config)), qk_norm_(qk_norm) {}

  Status load(WeightSource& weights, const LoadOptions& options);
  const ModelConfig& config() const override { return config_; }
  Expected<ModelCache> create_cache(const CacheConfig& cache_config) const override;
  Expected<Tensor> forward(const ForwardBatch& batch, ModelCache& cache) override;

 private:
  Status attention(int layer, const Tensor& hidden, const ForwardBatch& batch, Tensor& kv_cache,
                   Tensor& out);

  ModelConfig config_;
  bool qk_norm_;
  Tensor embed_tokens_, final_norm_, lm_head_, cos_sin_cache_;
  std::vector<LayerWeights> layers_;
};

Status LlamaModel::load(WeightSource& w, const LoadOptions& options) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, head_dim = c.head_dim;
  const int64_t q_dim = c.num_attention_heads * head_dim, kv_dim = c.num_key_value_heads * head_dim;
  VLLM_ASSIGN_OR_RETURN(embed_tokens_, w.get("model.embed_tokens.weight", {c.vocab_size, hidden}));
  VLLM_ASSIGN_OR_RETURN(final_norm_, w.get("model.norm.weight", {hidden}));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    VLLM_ASSIGN_OR_RETURN(lm_head_, w.get("lm_head.weight", {c.vocab_size, hidden}));
  }
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = layers_[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    VLLM_ASSIGN_OR_RETURN(l.input_norm, w.get(p + "input_layernorm.weight", {hidden}));
    VLLM_ASSIGN_OR_RETURN(l.post_norm, w.get(p + "post_attention_layernorm.weight", {hidden}));
    VLLM_ASSIGN_OR_RETURN(l.q_proj, w.get(p + "self_attn.q_proj.weight", {q_dim, hidden}));
    VLLM_ASSIGN_OR_RETURN(l.k_proj, w.get(p + "self_attn.k_proj.weight", {kv_dim, hidden}));
    VLLM_ASSIGN_OR_RETURN(l.v_proj, w.get(p + "self_attn.v_proj.weight", {kv_dim, hidden}));
    VLLM_ASSIGN_OR_RETURN(l.o_proj, w.get(p + "self_attn.o_proj.weight", {hidden, q_dim}));
    if (c.attention_bias) {
      VLLM_ASSIGN_OR_RETURN(l.q_bias, w.get(p + "self_attn.q_proj.bias", {q_dim}));
      VLLM_ASSIGN_OR_RETURN(l.k_bias, w.get(p + "self_attn.k_proj.bias", {kv_dim}));
      VLLM_ASSIGN_OR_RETURN(l.v_bias, w.get(p + "self_attn.v_proj.bias", {kv_dim}));
      if (w.contains(p + "self_attn.o_proj.bias")) {
        VLLM_ASSIGN_OR_RETURN(l.o_bias, w.get(p + "self_attn.o_proj.bias", {hidden}));
      }
    }
    if (qk_norm_) {
      VLLM_ASSIGN_OR_RETURN(l.q_norm, w.get(p + "self_attn.q_norm.weight", {head_dim}));
      VLLM_ASSIGN_OR_RETURN(l.k_norm, w.get(p + "self_attn.k_norm.weight", {head_dim}));
    }
    const int64_t inter = c.intermediate_size;
    VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(p + "mlp.gate_proj.weight", {inter, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor up, w.get(p + "mlp.up_proj.weight", {inter, hidden}));
    VLLM_ASSIGN_OR_RETURN(l.gate_up_proj, concat_rows({gate, up}));
    VLLM_ASSIGN_OR_RETURN(l.down_proj, w.get(p + "mlp.down_proj.weight", {hidden, inter}));
  }
  const int64_t max_position =
      options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  VLLM_ASSIGN_OR_RETURN(cos_sin_cache_, compute_cos_sin_cache(c.rope, head_dim, max_position));
  return Status::ok();
}

Expected<ModelCache> LlamaModel::create_cache(const CacheConfig& cache_config) const {
  ModelCache cache;
  cache.config = cache_config;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    VLLM_ASSIGN_OR_RETURN(Tensor kv,
                          Tensor::try_empty({cache_config.num_blocks, 2, cache_config.block_size,
                                             config_.num_key_value_heads, config_.head_dim},
                                            DType::kF32));
    std::fill_n(kv.data<float>(), kv.numel(), 0.0f);
    cache.kv.push_back(std::move(kv));
  }
  return cache;
}

Status LlamaModel::attention(int layer, const Tensor& hidden, const ForwardBatch& batch,
                             Tensor& kv_cache, Tensor& out) {
  const LayerWeights& l = layers_[static_cast<size_t>(layer)];
  const int64_t tokens = hidden.size(0), head_dim = config_.head_dim;
  const int64_t q_heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads;
  Tensor q = Tensor::empty({tokens, q_heads * head_dim}, DType::kF32);
  Tensor k = Tensor::empty({tokens, kv_heads * head_dim}, DType::kF32);
  Tensor v = Tensor::empty({tokens, kv_heads * head_dim}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::linear(hidden, l.q_proj, l.q_bias, q));
  VLLM_RETURN_IF_ERROR(cpu::linear(hidden, l.k_proj, l.k_bias, k));
  VLLM_RETURN_IF_ERROR(cpu::linear(hidden, l.v_proj, l.v_bias, v));
  if (qk_norm_) {
    Tensor q_rows = q.view({tokens * q_heads, head_dim});
    Tensor k_rows = k.view({tokens * kv_heads, head_dim});
    VLLM_RETURN_IF_ERROR(cpu::rms_norm(q_rows, l.q_norm, static_cast<float>(config_.rms_norm_eps),
                                       /*unit_offset=*/false, q_rows));
    VLLM_RETURN_IF_ERROR(cpu::rms_norm(k_rows, l.k_norm, static_cast<float>(config_.rms_norm_eps),
                                       /*unit_offset=*/false, k_rows));
  }
  VLLM_RETURN_IF_ERROR(
      cpu::rotary_embedding(batch.positions, q, k, head_dim, cos_sin_cache_, /*is_neox=*/true));
  VLLM_RETURN_IF_ERROR(cpu::reshape_and_cache(k, v, kv_cache, batch.slot_mapping));
  Tensor attn = Tensor::empty({tokens, q_heads * head_dim}, DType::kF32);
  cpu::PagedAttentionParams params;
  params.query_start_loc = batch.query_start_loc;
  params.seq_lens = batch.seq_lens;
  params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  VLLM_RETURN_IF_ERROR(cpu::paged_attention(q, kv_cache, batch.block_tables, params, attn));
  return cpu::linear(attn, l.o_proj, l.o_bias, out);
}

Expected<Tensor> LlamaModel::forward(const ForwardBatch& batch, ModelCache& cache) {
  const int64_t tokens = batch.num_tokens(), hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (static_cast<int64_t>(cache.kv.size()) != config_.num_hidden_layers) {
    return make_error(ErrorCode::kInvalidArgument, "cache has {} layers, model {}", cache.kv.size(),
                      config_.num_hidden_layers);
  }
  Tensor h = Tensor::empty({tokens, hidden}, DType::kF32);
  Tensor residual = Tensor::empty({tokens, hidden}, DType::kF32);
  Tensor mlp_in = Tensor::empty({tokens, 2 * config_.intermediate_size}, DType::kF32);
  Tensor act = Tensor::empty({tokens, config_.intermediate_size}, DType::kF32);
  Tensor normed = Tensor::empty({tokens, hidden}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::embedding(batch.token_ids, embed_tokens_, residual));

  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& l = layers_[i];
    // residual holds the stream; `normed` the input of the sub-layer.
    VLLM_RETURN_IF_ERROR(cpu::rms_norm(residual, l.input_norm, eps, false, normed));
    VLLM_RETURN_IF_ERROR(attention(static_cast<int>(i), normed, batch, cache.kv[i], h));
    VLLM_RETURN_IF_ERROR(cpu::fused_add_rms_norm(h, residual, l.post_norm, eps, false));
    VLLM_RETURN_IF_ERROR(cpu::linear(h, l.gate_up_proj, Tensor(), mlp_in));
    VLLM_RETURN_IF_ERROR(cpu::silu_and_mul(mlp_in, act));
    VLLM_RETURN_IF_ERROR(cpu::linear(act, l.down_proj, Tensor(), h));
    VLLM_RETURN_IF_ERROR(cpu::add_inplace(residual, h));
  }

  return compute_logits(residual, batch.logits_indices,
                        LogitsHead{final_norm_, eps, /*unit_offset=*/false, lm_head_});
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
