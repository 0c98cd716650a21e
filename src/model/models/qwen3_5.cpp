// Qwen3.5 / Qwen3.6 (dense and MoE, text-only and ConditionalGeneration checkpoints): the
// forward pass of the hybrid decoder declared in qwen3_5.h, its caches, and the registration
// of the Qwen3.5 architectures. Qwen3-Next shares all of it (qwen3_next.cpp).
//
// The math follows transformers' modeling_qwen3_5.py / modeling_qwen3_5_moe.py /
// modeling_qwen3_next.py. Text positions only: Qwen3.5's M-RoPE gives every section the same
// text position, which makes it plain (partial, NeoX) RoPE.
#include "model/models/qwen3_5.h"

#include <utility>

#include "model/decoder.h"
#include "model/layers/logits.h"
#include "model/models/registry.h"
#include "model/step_inputs.h"
#include "ops/ops.h"

namespace vllm::hybrid {

CacheShapes HybridModel::cache_shapes() const {
  return cache_shapes_;
}

Status HybridModel::check_cache(const ModelCache& cache) const {
  if (static_cast<int64_t>(cache.kv.size()) != num_attention_layers_ ||
      static_cast<int64_t>(cache.conv_state.size()) != num_linear_layers_ ||
      static_cast<int64_t>(cache.ssm_state.size()) != num_linear_layers_) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cache has {} KV, {} conv and {} ssm tensors; this model needs {} KV "
                      "(full-attention layers) and {} of each state (linear-attention layers)",
                      cache.kv.size(), cache.conv_state.size(), cache.ssm_state.size(),
                      num_attention_layers_, num_linear_layers_);
  }
  for (size_t i = 0; i < cache.conv_state.size(); ++i) {
    if (cache.conv_state[i].dtype() != cache_shapes_.conv_state_dtype ||
        cache.ssm_state[i].dtype() != cache_shapes_.ssm_state_dtype) {
      return make_error(
          ErrorCode::kInvalidArgument,
          "cache's GDN states of layer {} are {} / {}; this model keeps them in {} "
          "/ {} (conv / ssm)",
          i, dtype_name(cache.conv_state[i].dtype()), dtype_name(cache.ssm_state[i].dtype()),
          dtype_name(cache_shapes_.conv_state_dtype), dtype_name(cache_shapes_.ssm_state_dtype));
    }
  }
  return Status::ok();
}

Expected<Tensor> HybridModel::compute(const StepInputs& in, ModelCache& cache) {
  const ExecContext& ctx = context();
  const int64_t tokens = in.num_tokens, hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // The residual stream stays in f32 between layers whatever the activation dtype; `h` is
  // each sub-layer's input (normalised) and the MLP's output, `m` the mixer's output.
  VLLM_ASSIGN_OR_RETURN(Tensor residual, ctx.alloc({tokens, hidden}, DType::kF32));
  // Where a mixer's input projection, an MoE block's router or an MLP's gate/up product takes
  // the norm in front of it (fuses_norm: CUDA decode batches), the residual stream moves to
  // the other buffer: every block of that launch reads it whole.
  Tensor spare_residual;
  if (ctx.is_cuda() && tokens <= 8) {
    VLLM_ASSIGN_OR_RETURN(spare_residual, ctx.alloc({tokens, hidden}, DType::kF32));
  }
  VLLM_ASSIGN_OR_RETURN(Tensor h, ctx.act({tokens, hidden}));
  VLLM_ASSIGN_OR_RETURN(Tensor m, ctx.act({tokens, hidden}));
  VLLM_RETURN_IF_ERROR(ops::zero(ctx, residual));
  VLLM_RETURN_IF_ERROR(embed_tokens(ctx, in.token_ids, embed_tokens_, config_.vocab_size, h));

  for (size_t i = 0; i < layers_.size(); ++i) {
    const HybridLayer& l = layers_[i];
    WorkspaceScope scope(ctx.workspace);  // this layer's intermediates
    // residual += h (the embedding, or the last MLP's output); h = input_layernorm(residual).
    // At decode the mixer's input projection may take both in (fuses_norm), the residual
    // stream then moving to the other buffer.
    const auto ci = static_cast<size_t>(l.cache_index);
    const bool linear = l.type == LayerType::kLinearAttention;
    Status s;
    if (spare_residual.defined() && (linear ? l.gdn.fuses_norm(ctx, h, l.input_norm)
                                            : l.attn.fuses_norm(ctx, h, l.input_norm))) {
      const ops::AddRmsNorm norm{h, residual, spare_residual, l.input_norm, eps, true};
      s = linear
              ? l.gdn.forward_add_norm(ctx, norm, in, cache.conv_state[ci], cache.ssm_state[ci], m)
              : l.attn.forward_add_norm(ctx, norm, in, cos_sin_cache_, cache.kv[ci], m);
      std::swap(residual, spare_residual);
    } else {
      VLLM_RETURN_IF_ERROR(ops::fused_add_rms_norm(ctx, h, residual, l.input_norm, eps, true));
      s = linear ? l.gdn.forward(ctx, h, in, cache.conv_state[ci], cache.ssm_state[ci], m)
                 : l.attn.forward(ctx, h, in, cos_sin_cache_, cache.kv[ci], m);
    }
    if (!s.is_ok()) return s.with_context(fmt::format("layer {}", i));
    // residual += mixer output; m = post_attention_layernorm(residual).
    if (spare_residual.defined() && (l.sparse ? l.moe.fuses_norm(ctx, m, l.post_norm)
                                              : l.mlp.fuses_norm(ctx, m, l.post_norm))) {
      s = l.sparse
              ? l.moe.forward_add_norm(ctx, m, residual, l.post_norm, eps, true, spare_residual, h)
              : l.mlp.forward_add_norm(
                    ctx, ops::AddRmsNorm{m, residual, spare_residual, l.post_norm, eps, true}, h);
      std::swap(residual, spare_residual);
    } else {
      VLLM_RETURN_IF_ERROR(ops::fused_add_rms_norm(ctx, m, residual, l.post_norm, eps, true));
      s = l.sparse ? l.moe.forward(ctx, m, h) : l.mlp.forward(ctx, m, h);
    }
    if (!s.is_ok()) return s.with_context(fmt::format("layer {} mlp", i));
  }
  return compute_logits(
      ctx, h, residual, in.logits_indices,
      LogitsHead{final_norm_, eps, /*unit_offset=*/true, lm_head_, config_.vocab_size});
}

namespace {

template <bool kMoe, bool kConditional>
Expected<std::unique_ptr<Model>> create_qwen3_5(const ModelConfig& config, WeightSource& weights,
                                                const LoadOptions& options) {
  HybridVariant variant;
  // Text-only checkpoints use model.*, multimodal ones model.language_model.*; either is
  // accepted so a text model cut from a multimodal checkpoint loads too.
  variant.prefixes = kConditional ? std::vector<std::string>{"model.language_model.", "model."}
                                  : std::vector<std::string>{"model.", "model.language_model."};
  variant.fused_gdn_projections = false;
  variant.sparse = kMoe ? HybridVariant::Sparse::kAll : HybridVariant::Sparse::kNone;
  return create_hybrid_model(config, weights, options, variant);
}

}  // namespace
}  // namespace vllm::hybrid

namespace vllm {

void register_qwen3_5_models(ModelRegistry& registry) {
  registry.add("Qwen3_5ForCausalLM", &hybrid::create_qwen3_5<false, false>);
  registry.add("Qwen3_5ForConditionalGeneration", &hybrid::create_qwen3_5<false, true>);
  registry.add("Qwen3_5MoeForCausalLM", &hybrid::create_qwen3_5<true, false>);
  registry.add("Qwen3_5MoeForConditionalGeneration", &hybrid::create_qwen3_5<true, true>);
}

}  // namespace vllm
