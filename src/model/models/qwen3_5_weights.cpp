// Loading the hybrid decoder's weights (see qwen3_5.h) from the names the shipped checkpoints
// use, checking every shape against the config:
//   Qwen3.5 / 3.6 ForCausalLM            model.layers.{i}...
//   Qwen3.5 / 3.6 ForConditionalGeneration model.language_model.layers.{i}...; model.visual.*
//                                        and mtp.* are not read (text only, no MTP head)
//   Qwen3-Next                           model.layers.{i}...; mtp.* not read
// lm_head.weight sits at the top level in all of them (absent when tie_word_embeddings).
// GDN projections are stored here in one layout ([q | k | v | z] and [b | a] rows) whatever
// the checkpoint's; MoE experts come either per expert (mlp.experts.{e}.gate_proj.weight, ...)
// or fused (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]), as vLLM
// accepts both.
#include <algorithm>
#include <cstring>
#include <string>

#include "model/layers/rope.h"
#include "model/models/qwen3_5.h"

namespace vllm::hybrid {
namespace {

// concat_rows, but a dtype mismatch between the parts is a load error naming them.
Expected<Tensor> concat_parts(const std::vector<std::pair<std::string, Tensor>>& parts) {
  std::vector<Tensor> tensors;
  for (const auto& [name, t] : parts) {
    if (t.dtype() != parts[0].second.dtype()) {
      return make_error(ErrorCode::kUnsupported,
                        "tensor '{}' has dtype {} but '{}' has {}; they must match", name,
                        dtype_name(t.dtype()), parts[0].first, dtype_name(parts[0].second.dtype()));
    }
    tensors.push_back(t);
  }
  return concat_rows(tensors);
}

}  // namespace

Expected<Tensor> gather_row_ranges(const Tensor& src,
                                   const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  VLLM_CHECK_MSG(src.ndim() == 2 && src.is_contiguous(), "gather_row_ranges of {}",
                 src.to_string());
  int64_t rows = 0;
  for (auto [begin, end] : ranges) {
    VLLM_CHECK(0 <= begin && begin <= end && end <= src.size(0));
    rows += end - begin;
  }
  if (src.device().is_meta())
    return Tensor::empty({rows, src.size(1)}, src.dtype(), Device::meta());
  VLLM_ASSIGN_OR_RETURN(Tensor out, Tensor::try_empty({rows, src.size(1)}, src.dtype()));
  const size_t row_bytes = static_cast<size_t>(src.size(1)) * src.element_size();
  const char* from = static_cast<const char*>(src.data_ptr());
  char* to = static_cast<char*>(out.data_ptr());
  for (auto [begin, end] : ranges) {
    std::memcpy(to, from + static_cast<size_t>(begin) * row_bytes,
                static_cast<size_t>(end - begin) * row_bytes);
    to += static_cast<size_t>(end - begin) * row_bytes;
  }
  return out;
}

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

Status HybridModel::load_gdn(WeightSource& w, const std::string& p, GdnWeights& l) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, hk = c.linear_num_key_heads, hv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t key_dim = hk * dk, value_dim = hv * dv, conv_dim = 2 * key_dim + value_dim;
  const int64_t group = hv / hk;
  const std::string a = p + "linear_attn.";
  if (variant_.fused_gdn_projections) {
    // Per key head h: [q_h (Dk) | k_h (Dk) | v of its group (G * Dv) | z of its group], and
    // [b of its group (G) | a of its group (G)]. Regroup into q | k | v | z and b | a.
    VLLM_ASSIGN_OR_RETURN(Tensor qkvz,
                          w.get(a + "in_proj_qkvz.weight", {conv_dim + value_dim, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor ba, w.get(a + "in_proj_ba.weight", {2 * hv, hidden}));
    const int64_t block = 2 * dk + 2 * group * dv;
    std::vector<std::pair<int64_t, int64_t>> rows;
    for (int part = 0; part < 4; ++part) {
      const int64_t offset = part == 0   ? 0
                             : part == 1 ? dk
                             : part == 2 ? 2 * dk
                                         : 2 * dk + group * dv;
      const int64_t size = part < 2 ? dk : group * dv;
      for (int64_t h = 0; h < hk; ++h)
        rows.push_back({h * block + offset, h * block + offset + size});
    }
    VLLM_ASSIGN_OR_RETURN(l.in_proj, gather_row_ranges(qkvz, rows));
    rows.clear();
    for (int part = 0; part < 2; ++part) {
      for (int64_t h = 0; h < hk; ++h) {
        rows.push_back({h * 2 * group + part * group, h * 2 * group + (part + 1) * group});
      }
    }
    VLLM_ASSIGN_OR_RETURN(l.in_proj_ba, gather_row_ranges(ba, rows));
  } else {
    VLLM_ASSIGN_OR_RETURN(Tensor qkv, w.get(a + "in_proj_qkv.weight", {conv_dim, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor z, w.get(a + "in_proj_z.weight", {value_dim, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor b, w.get(a + "in_proj_b.weight", {hv, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor av, w.get(a + "in_proj_a.weight", {hv, hidden}));
    VLLM_ASSIGN_OR_RETURN(
        l.in_proj, concat_parts({{a + "in_proj_qkv.weight", qkv}, {a + "in_proj_z.weight", z}}));
    VLLM_ASSIGN_OR_RETURN(
        l.in_proj_ba, concat_parts({{a + "in_proj_b.weight", b}, {a + "in_proj_a.weight", av}}));
  }
  const int64_t kernel = c.linear_conv_kernel_dim;
  VLLM_ASSIGN_OR_RETURN(Tensor conv, w.get(a + "conv1d.weight", {conv_dim, 1, kernel}));
  l.conv_weight = conv.view({conv_dim, kernel});
  VLLM_ASSIGN_OR_RETURN(l.A_log, w.get(a + "A_log", {hv}));
  VLLM_ASSIGN_OR_RETURN(l.dt_bias, w.get(a + "dt_bias", {hv}));
  VLLM_ASSIGN_OR_RETURN(l.norm, w.get(a + "norm.weight", {dv}));
  VLLM_ASSIGN_OR_RETURN(l.out_proj, w.get(a + "out_proj.weight", {hidden, value_dim}));
  return Status::ok();
}

Status HybridModel::load_attention(WeightSource& w, const std::string& p, AttentionWeights& l) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, head_dim = c.head_dim;
  const int64_t q_dim = c.num_attention_heads * head_dim, kv_dim = c.num_key_value_heads * head_dim;
  const int64_t q_rows = c.attn_output_gate ? 2 * q_dim : q_dim;
  const std::string a = p + "self_attn.";
  VLLM_ASSIGN_OR_RETURN(l.q_proj, w.get(a + "q_proj.weight", {q_rows, hidden}));
  VLLM_ASSIGN_OR_RETURN(l.k_proj, w.get(a + "k_proj.weight", {kv_dim, hidden}));
  VLLM_ASSIGN_OR_RETURN(l.v_proj, w.get(a + "v_proj.weight", {kv_dim, hidden}));
  VLLM_ASSIGN_OR_RETURN(l.o_proj, w.get(a + "o_proj.weight", {hidden, q_dim}));
  if (c.attention_bias) {
    VLLM_ASSIGN_OR_RETURN(l.q_bias, w.get(a + "q_proj.bias", {q_rows}));
    VLLM_ASSIGN_OR_RETURN(l.k_bias, w.get(a + "k_proj.bias", {kv_dim}));
    VLLM_ASSIGN_OR_RETURN(l.v_bias, w.get(a + "v_proj.bias", {kv_dim}));
    VLLM_ASSIGN_OR_RETURN(l.o_bias, w.get(a + "o_proj.bias", {hidden}));
  }
  VLLM_ASSIGN_OR_RETURN(l.q_norm, w.get(a + "q_norm.weight", {head_dim}));
  VLLM_ASSIGN_OR_RETURN(l.k_norm, w.get(a + "k_norm.weight", {head_dim}));
  return Status::ok();
}

namespace {

Status load_dense_mlp(WeightSource& w, const std::string& p, int64_t hidden, int64_t inter,
                      MlpWeights& l) {
  VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(p + "gate_proj.weight", {inter, hidden}));
  VLLM_ASSIGN_OR_RETURN(Tensor up, w.get(p + "up_proj.weight", {inter, hidden}));
  VLLM_ASSIGN_OR_RETURN(l.gate_up,
                        concat_parts({{p + "gate_proj.weight", gate}, {p + "up_proj.weight", up}}));
  VLLM_ASSIGN_OR_RETURN(l.down, w.get(p + "down_proj.weight", {hidden, inter}));
  return Status::ok();
}

}  // namespace

Status HybridModel::load_moe(WeightSource& w, const std::string& p, MoeWeights& l) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, experts = c.num_experts, inter = c.moe_intermediate_size;
  const std::string m = p + "mlp.";
  VLLM_ASSIGN_OR_RETURN(l.router, w.get(m + "gate.weight", {experts, hidden}));
  cpu::MoeExpertWeights& e = l.experts;
  if (w.contains(m + "experts.gate_up_proj")) {
    VLLM_ASSIGN_OR_RETURN(Tensor gate_up,
                          w.get(m + "experts.gate_up_proj", {experts, 2 * inter, hidden}));
    VLLM_ASSIGN_OR_RETURN(Tensor down, w.get(m + "experts.down_proj", {experts, hidden, inter}));
    for (int64_t i = 0; i < experts; ++i) {
      Tensor one = gate_up.slice(0, i, i + 1).view({2 * inter, hidden});
      e.gate_proj.push_back(one.slice(0, 0, inter));
      e.up_proj.push_back(one.slice(0, inter, 2 * inter));
      e.down_proj.push_back(down.slice(0, i, i + 1).view({hidden, inter}));
    }
  } else {
    for (int64_t i = 0; i < experts; ++i) {
      const std::string x = m + "experts." + std::to_string(i) + ".";
      VLLM_ASSIGN_OR_RETURN(Tensor gate, w.get(x + "gate_proj.weight", {inter, hidden}));
      VLLM_ASSIGN_OR_RETURN(Tensor up, w.get(x + "up_proj.weight", {inter, hidden}));
      VLLM_ASSIGN_OR_RETURN(Tensor down, w.get(x + "down_proj.weight", {hidden, inter}));
      e.gate_proj.push_back(gate);
      e.up_proj.push_back(up);
      e.down_proj.push_back(down);
    }
  }
  l.has_shared = c.shared_expert_intermediate_size > 0;
  if (l.has_shared) {
    VLLM_RETURN_IF_ERROR(load_dense_mlp(w, m + "shared_expert.", hidden,
                                        c.shared_expert_intermediate_size, l.shared));
    VLLM_ASSIGN_OR_RETURN(l.shared_gate, w.get(m + "shared_expert_gate.weight", {1, hidden}));
  }
  return Status::ok();
}

Status HybridModel::load(WeightSource& w, const LoadOptions& options) {
  VLLM_RETURN_IF_ERROR(check_config());
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  VLLM_CHECK(!variant_.prefixes.empty());
  std::string prefix = variant_.prefixes[0];
  for (const std::string& p : variant_.prefixes) {
    if (w.contains(p + "embed_tokens.weight")) {
      prefix = p;
      break;
    }
  }
  VLLM_ASSIGN_OR_RETURN(embed_tokens_,
                        w.get(prefix + "embed_tokens.weight", {c.vocab_size, hidden}));
  VLLM_ASSIGN_OR_RETURN(final_norm_, w.get(prefix + "norm.weight", {hidden}));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    VLLM_ASSIGN_OR_RETURN(lm_head_, w.get("lm_head.weight", {c.vocab_size, hidden}));
  }
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  num_attention_layers_ = num_linear_layers_ = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = layers_[static_cast<size_t>(i)];
    const std::string p = prefix + "layers." + std::to_string(i) + ".";
    l.type = c.layer_types[static_cast<size_t>(i)];
    VLLM_ASSIGN_OR_RETURN(l.input_norm, w.get(p + "input_layernorm.weight", {hidden}));
    VLLM_ASSIGN_OR_RETURN(l.post_norm, w.get(p + "post_attention_layernorm.weight", {hidden}));
    if (l.type == LayerType::kLinearAttention) {
      l.cache_index = static_cast<int>(num_linear_layers_++);
      VLLM_RETURN_IF_ERROR(load_gdn(w, p, l.gdn));
    } else {
      l.cache_index = static_cast<int>(num_attention_layers_++);
      VLLM_RETURN_IF_ERROR(load_attention(w, p, l.attn));
    }
    l.sparse = layer_is_sparse(i);
    if (l.sparse) {
      VLLM_RETURN_IF_ERROR(load_moe(w, p, l.moe));
    } else {
      VLLM_RETURN_IF_ERROR(load_dense_mlp(w, p + "mlp.", hidden, c.intermediate_size, l.mlp));
    }
  }
  const int64_t max_position =
      options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  VLLM_ASSIGN_OR_RETURN(cos_sin_cache_, compute_cos_sin_cache(c.rope, c.head_dim, max_position));
  return Status::ok();
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
