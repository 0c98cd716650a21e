// Qwen3.5 / Qwen3.6 (dense and MoE, text-only and ConditionalGeneration checkpoints) on the
// CPU backend: the forward pass of the hybrid decoder declared in qwen3_5.h, its caches, and
// the registration of the Qwen3.5 architectures. Qwen3-Next shares all of it (qwen3_next.cpp).
//
// The math follows transformers' modeling_qwen3_5.py / modeling_qwen3_5_moe.py /
// modeling_qwen3_next.py in float32. Text positions only: Qwen3.5's M-RoPE gives every
// section the same text position, which makes it plain (partial, NeoX) RoPE.
#include "model/models/qwen3_5.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/gdn.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "model/layers/logits.h"
#include "model/models/registry.h"

namespace vllm::hybrid {
namespace {

Expected<Tensor> zeroed(const Shape& shape) {
  VLLM_ASSIGN_OR_RETURN(Tensor t, Tensor::try_empty(shape, DType::kF32));
  if (t.numel() > 0) std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace

Expected<ModelCache> HybridModel::create_cache(const CacheConfig& cache_config) const {
  const ModelConfig& c = config_;
  if (num_linear_layers_ > 0 && cache_config.num_state_slots <= 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "CacheConfig.num_state_slots is {}; this hybrid model needs at least one "
                      "GDN state slot per running request",
                      cache_config.num_state_slots);
  }
  ModelCache cache;
  cache.config = cache_config;
  for (int64_t i = 0; i < num_attention_layers_; ++i) {
    VLLM_ASSIGN_OR_RETURN(Tensor kv, zeroed({cache_config.num_blocks, 2, cache_config.block_size,
                                             c.num_key_value_heads, c.head_dim}));
    cache.kv.push_back(std::move(kv));
  }
  const int64_t conv_dim = 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                           c.linear_num_value_heads * c.linear_value_head_dim;
  for (int64_t i = 0; i < num_linear_layers_; ++i) {
    VLLM_ASSIGN_OR_RETURN(Tensor conv, zeroed({cache_config.num_state_slots, conv_dim,
                                               c.linear_conv_kernel_dim - 1}));
    VLLM_ASSIGN_OR_RETURN(Tensor ssm,
                          zeroed({cache_config.num_state_slots, c.linear_num_value_heads,
                                  c.linear_key_head_dim, c.linear_value_head_dim}));
    cache.conv_state.push_back(std::move(conv));
    cache.ssm_state.push_back(std::move(ssm));
  }
  return cache;
}

Status HybridModel::check_cache(const ForwardBatch& batch, const ModelCache& cache) const {
  if (static_cast<int64_t>(cache.kv.size()) != num_attention_layers_ ||
      static_cast<int64_t>(cache.conv_state.size()) != num_linear_layers_ ||
      static_cast<int64_t>(cache.ssm_state.size()) != num_linear_layers_) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cache has {} KV, {} conv and {} ssm tensors; this model needs {} KV "
                      "(full-attention layers) and {} of each state (linear-attention layers)",
                      cache.kv.size(), cache.conv_state.size(), cache.ssm_state.size(),
                      num_attention_layers_, num_linear_layers_);
  }
  const int64_t requests = batch.num_requests();
  if (static_cast<int64_t>(batch.query_start_loc.size()) != requests + 1 ||
      batch.query_start_loc.front() != 0 || batch.query_start_loc.back() != batch.num_tokens()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "query_start_loc must have {} entries from 0 to the {} tokens", requests + 1,
                      batch.num_tokens());
  }
  if (num_linear_layers_ == 0) return Status::ok();
  if (static_cast<int64_t>(batch.state_indices.size()) != requests) {
    return make_error(ErrorCode::kInvalidArgument,
                      "state_indices has {} entries for {} requests; hybrid models need one GDN "
                      "state slot per request",
                      batch.state_indices.size(), requests);
  }
  const int64_t slots = cache.conv_state[0].size(0);
  for (int64_t r = 0; r < requests; ++r) {
    const int32_t slot = batch.state_indices[static_cast<size_t>(r)];
    if (slot < 0 || slot >= slots) {
      return make_error(ErrorCode::kOutOfRange, "state_indices[{}] = {} outside the {} state slots",
                        r, slot, slots);
    }
  }
  return Status::ok();
}

// A request whose first scheduled token is position 0 starts from zeroed GDN state.
void HybridModel::reset_new_requests(const ForwardBatch& batch, ModelCache& cache) const {
  for (int64_t r = 0; r < batch.num_requests(); ++r) {
    const auto q_len = batch.query_start_loc[r + 1] - batch.query_start_loc[r];
    if (batch.seq_lens[static_cast<size_t>(r)] != q_len) continue;
    const int64_t slot = batch.state_indices[static_cast<size_t>(r)];
    for (std::vector<Tensor>* states : {&cache.conv_state, &cache.ssm_state}) {
      for (Tensor& s : *states) {
        const int64_t per_slot = s.numel() / s.size(0);
        std::fill_n(s.data<float>() + slot * per_slot, per_slot, 0.0f);
      }
    }
  }
}

Status HybridModel::gdn(const LayerWeights& l, const Tensor& x, const ForwardBatch& batch,
                        Tensor& conv_state, Tensor& ssm_state, Tensor& out) const {
  const ModelConfig& c = config_;
  const int64_t tokens = x.size(0), hv = c.linear_num_value_heads;
  const int64_t key_dim = c.linear_num_key_heads * c.linear_key_head_dim;
  const int64_t value_dim = hv * c.linear_value_head_dim, conv_dim = 2 * key_dim + value_dim;
  const GdnWeights& w = l.gdn;
  Tensor mixed = Tensor::empty({tokens, conv_dim + value_dim}, DType::kF32);
  Tensor ba = Tensor::empty({tokens, 2 * hv}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.in_proj, Tensor(), mixed));
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.in_proj_ba, Tensor(), ba));
  const cpu::GdnBatch gb{batch.query_start_loc, batch.state_indices};
  Tensor conv_out = Tensor::empty({tokens, conv_dim}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::causal_conv1d(mixed.slice(1, 0, conv_dim), w.conv_weight, Tensor(), gb,
                                          conv_state, conv_out));
  Tensor g = Tensor::empty({tokens, hv}, DType::kF32);
  Tensor beta = Tensor::empty({tokens, hv}, DType::kF32);
  VLLM_RETURN_IF_ERROR(
      cpu::gdn_gating(ba.slice(1, hv, 2 * hv), ba.slice(1, 0, hv), w.A_log, w.dt_bias, g, beta));
  Tensor core = Tensor::empty({tokens, value_dim}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::gated_delta_rule(conv_out.slice(1, 0, key_dim),
                                             conv_out.slice(1, key_dim, 2 * key_dim),
                                             conv_out.slice(1, 2 * key_dim, conv_dim), g, beta, gb,
                                             cpu::GatedDeltaRuleParams{}, ssm_state, core));
  VLLM_RETURN_IF_ERROR(cpu::gated_rms_norm(core, mixed.slice(1, conv_dim, conv_dim + value_dim),
                                           w.norm, static_cast<float>(c.rms_norm_eps), core));
  return cpu::linear(core, w.out_proj, Tensor(), out);
}

Status HybridModel::attention(const LayerWeights& l, const Tensor& x, const ForwardBatch& batch,
                              Tensor& kv_cache, Tensor& out) const {
  const ModelConfig& c = config_;
  const AttentionWeights& w = l.attn;
  const int64_t tokens = x.size(0), head_dim = c.head_dim;
  const int64_t q_heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const int64_t q_dim = q_heads * head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor q = Tensor::empty({tokens, q_dim}, DType::kF32);
  Tensor gate;
  if (c.attn_output_gate) {
    // q_proj rows per head: head_dim query rows, then head_dim gate rows.
    Tensor q_gate = Tensor::empty({tokens, 2 * q_dim}, DType::kF32);
    VLLM_RETURN_IF_ERROR(cpu::linear(x, w.q_proj, w.q_bias, q_gate));
    gate = Tensor::empty({tokens, q_dim}, DType::kF32);
    const float* src = q_gate.data<float>();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < q_heads; ++h) {
        const float* head = src + (t * q_heads + h) * 2 * head_dim;
        std::copy_n(head, head_dim, q.data<float>() + (t * q_heads + h) * head_dim);
        std::copy_n(head + head_dim, head_dim, gate.data<float>() + (t * q_heads + h) * head_dim);
      }
    }
  } else {
    VLLM_RETURN_IF_ERROR(cpu::linear(x, w.q_proj, w.q_bias, q));
  }
  Tensor k = Tensor::empty({tokens, kv_heads * head_dim}, DType::kF32);
  Tensor v = Tensor::empty({tokens, kv_heads * head_dim}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.k_proj, w.k_bias, k));
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.v_proj, w.v_bias, v));
  Tensor q_rows = q.view({tokens * q_heads, head_dim});
  Tensor k_rows = k.view({tokens * kv_heads, head_dim});
  VLLM_RETURN_IF_ERROR(cpu::rms_norm(q_rows, w.q_norm, eps, /*unit_offset=*/true, q_rows));
  VLLM_RETURN_IF_ERROR(cpu::rms_norm(k_rows, w.k_norm, eps, /*unit_offset=*/true, k_rows));
  VLLM_RETURN_IF_ERROR(
      cpu::rotary_embedding(batch.positions, q, k, head_dim, cos_sin_cache_, /*is_neox=*/true));
  VLLM_RETURN_IF_ERROR(cpu::reshape_and_cache(k, v, kv_cache, batch.slot_mapping));
  Tensor attn = Tensor::empty({tokens, q_dim}, DType::kF32);
  cpu::PagedAttentionParams params;
  params.query_start_loc = batch.query_start_loc;
  params.seq_lens = batch.seq_lens;
  params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  VLLM_RETURN_IF_ERROR(cpu::paged_attention(q, kv_cache, batch.block_tables, params, attn));
  if (gate.defined()) {
    float* a = attn.data<float>();
    const float* gt = gate.data<float>();
    for (int64_t i = 0; i < tokens * q_dim; ++i) a[i] *= sigmoid(gt[i]);
  }
  return cpu::linear(attn, w.o_proj, w.o_bias, out);
}

namespace {

Status dense_mlp(const MlpWeights& w, const Tensor& x, Tensor& out) {
  const int64_t inter = w.down.size(1);
  Tensor gate_up = Tensor::empty({x.size(0), 2 * inter}, DType::kF32);
  Tensor act = Tensor::empty({x.size(0), inter}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.gate_up, Tensor(), gate_up));
  VLLM_RETURN_IF_ERROR(cpu::silu_and_mul(gate_up, act));
  return cpu::linear(act, w.down, Tensor(), out);
}

}  // namespace

Status HybridModel::mlp(const LayerWeights& l, const Tensor& x, Tensor& out) const {
  if (!l.sparse) return dense_mlp(l.mlp, x, out);
  const ModelConfig& c = config_;
  const MoeWeights& w = l.moe;
  const int64_t tokens = x.size(0), k = c.num_experts_per_tok;
  Tensor logits = Tensor::empty({tokens, c.num_experts}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.router, Tensor(), logits));
  Tensor weights = Tensor::empty({tokens, k}, DType::kF32);
  Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
  const bool renormalize = variant_.sparse == HybridVariant::Sparse::kAll || c.norm_topk_prob;
  VLLM_RETURN_IF_ERROR(cpu::moe_route(logits, k, renormalize, weights, ids));
  VLLM_RETURN_IF_ERROR(cpu::moe_experts(x, w.experts, weights, ids, out));
  if (!w.has_shared) return Status::ok();
  Tensor shared = Tensor::empty({tokens, c.hidden_size}, DType::kF32);
  Tensor shared_gate = Tensor::empty({tokens, 1}, DType::kF32);
  VLLM_RETURN_IF_ERROR(dense_mlp(w.shared, x, shared));
  VLLM_RETURN_IF_ERROR(cpu::linear(x, w.shared_gate, Tensor(), shared_gate));
  float* o = out.data<float>();
  const float* s = shared.data<float>();
  for (int64_t t = 0; t < tokens; ++t) {
    const float gt = sigmoid(shared_gate.data<float>()[t]);
    for (int64_t i = 0; i < c.hidden_size; ++i) {
      o[t * c.hidden_size + i] += gt * s[t * c.hidden_size + i];
    }
  }
  return Status::ok();
}

Expected<Tensor> HybridModel::forward(const ForwardBatch& batch, ModelCache& cache) {
  VLLM_RETURN_IF_ERROR(check_cache(batch, cache));
  if (num_linear_layers_ > 0) reset_new_requests(batch, cache);
  const int64_t tokens = batch.num_tokens(), hidden = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor residual = Tensor::empty({tokens, hidden}, DType::kF32);
  Tensor normed = Tensor::empty({tokens, hidden}, DType::kF32);
  Tensor h = Tensor::empty({tokens, hidden}, DType::kF32);
  VLLM_RETURN_IF_ERROR(cpu::embedding(batch.token_ids, embed_tokens_, residual));

  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& l = layers_[i];
    const auto ci = static_cast<size_t>(l.cache_index);
    VLLM_RETURN_IF_ERROR(cpu::rms_norm(residual, l.input_norm, eps, true, normed));
    Status s = l.type == LayerType::kLinearAttention
                   ? gdn(l, normed, batch, cache.conv_state[ci], cache.ssm_state[ci], h)
                   : attention(l, normed, batch, cache.kv[ci], h);
    if (!s.is_ok()) return s.with_context(fmt::format("layer {}", i));
    // residual += mixer output; h = post_attention_layernorm(residual).
    VLLM_RETURN_IF_ERROR(cpu::fused_add_rms_norm(h, residual, l.post_norm, eps, true));
    s = mlp(l, h, normed);
    if (!s.is_ok()) return s.with_context(fmt::format("layer {} mlp", i));
    VLLM_RETURN_IF_ERROR(cpu::add_inplace(residual, normed));
  }

  return compute_logits(residual, batch.logits_indices,
                        LogitsHead{final_norm_, eps, /*unit_offset=*/true, lm_head_});
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
