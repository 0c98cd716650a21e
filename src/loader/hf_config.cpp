// Parses Hugging Face config.json / generation_config.json into ModelConfig /
// GenerationConfig (see hf_config.h).
//
// Field lookup: for multimodal checkpoints (Qwen3.5 *ForConditionalGeneration) the language
// model's fields live under "text_config"; each field is looked up there first and then at
// the top level, except architectures and model_type, which describe the checkpoint and
// always come from the top level. Defaults follow transformers' config classes where the
// file leaves a field out (e.g. Qwen3-Next / Qwen3.5 hybrids: full attention every 4th
// layer, partial_rotary_factor 0.25, gated attention output).
#include "loader/hf_config.h"

#include <algorithm>
#include <numeric>

#include "loader/json_fields.h"

namespace vllm {
namespace {

using nlohmann::json;

// Model types whose text model is a Gated DeltaNet / full-attention hybrid.
bool is_hybrid_model_type(std::string_view type) {
  return type == "qwen3_next" || type == "qwen3_5" || type == "qwen3_5_text" ||
         type == "qwen3_5_moe" || type == "qwen3_5_moe_text";
}

Status require_positive(const JsonFields& fields, std::string_view key, int64_t value) {
  if (value > 0) return Status::ok();
  return make_error(ErrorCode::kInvalidFormat, "{}: field '{}' must be positive, got {}",
                    fields.source(), fields.field_name(key), value);
}

Status parse_rope(const JsonFields& fields, bool hybrid, ModelConfig* config) {
  RopeConfig& rope = config->rope;
  if (hybrid) rope.partial_rotary_factor = 0.25;  // transformers' default for these models
  // Older files: rope_theta / partial_rotary_factor at the (text) top level.
  VLLM_RETURN_IF_ERROR(fields.read("rope_theta", &rope.rope_theta));
  VLLM_RETURN_IF_ERROR(fields.read("partial_rotary_factor", &rope.partial_rotary_factor));

  std::string key = "rope_parameters";
  const json* params = fields.find(key);
  if (params == nullptr) {
    key = "rope_scaling";
    params = fields.find(key);
  }
  if (params != nullptr) {
    if (!params->is_object()) return fields.wrong_type(key, "an object", *params);
    // transformers 5 may key parameters by layer type; the attention layers' set applies.
    auto per_type = params->find("full_attention");
    if (per_type != params->end() && per_type->is_object() && !params->contains("rope_type") &&
        !params->contains("rope_theta")) {
      params = &*per_type;
      key += ".full_attention";
    }
    JsonFields rp({params}, fields.source(), key + ".");
    VLLM_RETURN_IF_ERROR(rp.read("rope_theta", &rope.rope_theta));
    VLLM_RETURN_IF_ERROR(rp.read("partial_rotary_factor", &rope.partial_rotary_factor));
    std::string type;
    VLLM_RETURN_IF_ERROR(rp.read("type", &type));  // pre-4.45 name of the key
    VLLM_RETURN_IF_ERROR(rp.read("rope_type", &type));
    if (type.empty() || type == "mrope") type = "default";  // Qwen2-VL called M-RoPE "mrope"
    rope.rope_type = type;
    if (type == "default") {
    } else if (type == "linear") {
      VLLM_RETURN_IF_ERROR(rp.require("factor", &rope.factor));
    } else if (type == "llama3") {
      VLLM_RETURN_IF_ERROR(rp.require("factor", &rope.factor));
      VLLM_RETURN_IF_ERROR(rp.require("low_freq_factor", &rope.low_freq_factor));
      VLLM_RETURN_IF_ERROR(rp.require("high_freq_factor", &rope.high_freq_factor));
      VLLM_RETURN_IF_ERROR(
          rp.require("original_max_position_embeddings", &rope.original_max_position_embeddings));
    } else if (type == "yarn") {
      VLLM_RETURN_IF_ERROR(rp.require("factor", &rope.factor));
      VLLM_RETURN_IF_ERROR(
          rp.read("original_max_position_embeddings", &rope.original_max_position_embeddings));
      VLLM_RETURN_IF_ERROR(rp.read("beta_fast", &rope.beta_fast));
      VLLM_RETURN_IF_ERROR(rp.read("beta_slow", &rope.beta_slow));
      VLLM_RETURN_IF_ERROR(rp.read("mscale", &rope.mscale));
      VLLM_RETURN_IF_ERROR(rp.read("mscale_all_dim", &rope.mscale_all_dim));
      VLLM_RETURN_IF_ERROR(rp.read("attention_factor", &rope.attention_factor));
      VLLM_RETURN_IF_ERROR(rp.read("truncate", &rope.truncate));
    } else {
      return make_error(ErrorCode::kUnsupported,
                        "{}: {}rope_type '{}' is not supported (supported: default, linear, "
                        "llama3, yarn)",
                        fields.source(), key + ".", type);
    }
    VLLM_RETURN_IF_ERROR(rp.read("mrope_section", &rope.mrope_section));
    VLLM_RETURN_IF_ERROR(rp.read("mrope_interleaved", &rope.mrope_interleaved));
  }

  if (!(rope.rope_theta > 0)) {
    return make_error(ErrorCode::kInvalidFormat, "{}: rope_theta must be positive, got {}",
                      fields.source(), rope.rope_theta);
  }
  if (!(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1)) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: partial_rotary_factor must be in (0, 1], got {}", fields.source(),
                      rope.partial_rotary_factor);
  }
  if (!rope.mrope_section.empty()) {
    // Sections count rotary frequency pairs: they must cover the rotary half-dimension.
    int64_t pairs =
        std::accumulate(rope.mrope_section.begin(), rope.mrope_section.end(), int64_t{0});
    auto rotary_dim = static_cast<int64_t>(config->head_dim * rope.partial_rotary_factor);
    if (pairs * 2 != rotary_dim) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: {}.mrope_section sums to {} pairs, but the rotary dimension is {} "
                        "(head_dim {} x partial_rotary_factor {})",
                        fields.source(), key, pairs, rotary_dim, config->head_dim,
                        rope.partial_rotary_factor);
    }
  }
  return Status::ok();
}

Status parse_layer_types(const JsonFields& fields, bool hybrid, ModelConfig* config) {
  const int64_t n = config->num_hidden_layers;
  VLLM_RETURN_IF_ERROR(fields.read("full_attention_interval", &config->full_attention_interval));
  if (fields.has("layer_types")) {
    std::vector<std::string> names;
    VLLM_RETURN_IF_ERROR(fields.read("layer_types", &names));
    if (static_cast<int64_t>(names.size()) != n) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: field 'layer_types' has {} entries but num_hidden_layers is {}",
                        fields.source(), names.size(), n);
    }
    config->layer_types.clear();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "full_attention") {
        config->layer_types.push_back(LayerType::kFullAttention);
      } else if (names[i] == "linear_attention") {
        config->layer_types.push_back(LayerType::kLinearAttention);
      } else {
        return make_error(ErrorCode::kUnsupported,
                          "{}: field 'layer_types'[{}] is '{}' (supported: full_attention, "
                          "linear_attention)",
                          fields.source(), i, names[i]);
      }
    }
    return Status::ok();
  }
  if (fields.has("full_attention_interval") || hybrid) {
    // As transformers' Qwen3-Next / Qwen3.5 configs: layer i is full attention iff
    // (i + 1) % interval == 0; the interval defaults to 4.
    if (config->full_attention_interval == 0 && !fields.has("full_attention_interval")) {
      config->full_attention_interval = 4;
    }
    VLLM_RETURN_IF_ERROR(
        require_positive(fields, "full_attention_interval", config->full_attention_interval));
    config->layer_types.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      config->layer_types[static_cast<size_t>(i)] = (i + 1) % config->full_attention_interval == 0
                                                        ? LayerType::kFullAttention
                                                        : LayerType::kLinearAttention;
    }
    return Status::ok();
  }
  config->layer_types.assign(static_cast<size_t>(n), LayerType::kFullAttention);
  return Status::ok();
}

Status parse_quantization(const JsonFields& fields, ModelConfig* config) {
  const json* q = fields.find("quantization_config");
  if (q == nullptr) return Status::ok();
  if (!q->is_object()) return fields.wrong_type("quantization_config", "an object", *q);
  JsonFields qf({q}, fields.source(), "quantization_config.");
  QuantizationConfig quant;
  VLLM_RETURN_IF_ERROR(qf.require("quant_method", &quant.quant_method));
  VLLM_RETURN_IF_ERROR(qf.read("activation_scheme", &quant.activation_scheme));
  VLLM_RETURN_IF_ERROR(qf.read("fmt", &quant.fmt));
  VLLM_RETURN_IF_ERROR(qf.read("weight_block_size", &quant.weight_block_size));
  VLLM_RETURN_IF_ERROR(qf.read("modules_to_not_convert", &quant.modules_to_not_convert));
  config->quantization = std::move(quant);
  return Status::ok();
}

// Everything that the (lifted) text model's fields determine.
Status parse_text_fields(const JsonFields& f, bool hybrid, ModelConfig* c) {
  VLLM_RETURN_IF_ERROR(f.require("vocab_size", &c->vocab_size));
  VLLM_RETURN_IF_ERROR(f.require("hidden_size", &c->hidden_size));
  VLLM_RETURN_IF_ERROR(f.require("num_hidden_layers", &c->num_hidden_layers));
  VLLM_RETURN_IF_ERROR(f.require("num_attention_heads", &c->num_attention_heads));
  VLLM_RETURN_IF_ERROR(require_positive(f, "vocab_size", c->vocab_size));
  VLLM_RETURN_IF_ERROR(require_positive(f, "hidden_size", c->hidden_size));
  VLLM_RETURN_IF_ERROR(require_positive(f, "num_hidden_layers", c->num_hidden_layers));
  VLLM_RETURN_IF_ERROR(require_positive(f, "num_attention_heads", c->num_attention_heads));

  c->num_key_value_heads = c->num_attention_heads;
  VLLM_RETURN_IF_ERROR(f.read("num_key_value_heads", &c->num_key_value_heads));
  VLLM_RETURN_IF_ERROR(require_positive(f, "num_key_value_heads", c->num_key_value_heads));
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                      f.source(), c->num_attention_heads, c->num_key_value_heads);
  }
  if (f.has("head_dim")) {
    VLLM_RETURN_IF_ERROR(f.read("head_dim", &c->head_dim));
    VLLM_RETURN_IF_ERROR(require_positive(f, "head_dim", c->head_dim));
  } else if (c->hidden_size % c->num_attention_heads == 0) {
    c->head_dim = c->hidden_size / c->num_attention_heads;
  } else {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: no 'head_dim', and hidden_size {} is not divisible by "
                      "num_attention_heads {}",
                      f.source(), c->hidden_size, c->num_attention_heads);
  }

  VLLM_RETURN_IF_ERROR(f.read("rms_norm_eps", &c->rms_norm_eps));
  VLLM_RETURN_IF_ERROR(f.read("max_position_embeddings", &c->max_position_embeddings));
  VLLM_RETURN_IF_ERROR(f.read("tie_word_embeddings", &c->tie_word_embeddings));
  VLLM_RETURN_IF_ERROR(f.read("hidden_act", &c->hidden_act));
  VLLM_RETURN_IF_ERROR(f.read("attention_bias", &c->attention_bias));
  VLLM_RETURN_IF_ERROR(f.read("mlp_bias", &c->mlp_bias));
  VLLM_RETURN_IF_ERROR(f.read("torch_dtype", &c->dtype));
  VLLM_RETURN_IF_ERROR(f.read("dtype", &c->dtype));  // transformers 5 name wins
  VLLM_RETURN_IF_ERROR(f.read("bos_token_id", &c->bos_token_id));
  VLLM_RETURN_IF_ERROR(f.read_int_or_list("eos_token_id", &c->eos_token_ids));
  VLLM_RETURN_IF_ERROR(f.read("pad_token_id", &c->pad_token_id));

  c->attn_output_gate = hybrid;  // Qwen3-Next / Qwen3.5 attention is gated unless stated
  VLLM_RETURN_IF_ERROR(f.read("attn_output_gate", &c->attn_output_gate));
  VLLM_RETURN_IF_ERROR(f.read("linear_num_key_heads", &c->linear_num_key_heads));
  VLLM_RETURN_IF_ERROR(f.read("linear_num_value_heads", &c->linear_num_value_heads));
  VLLM_RETURN_IF_ERROR(f.read("linear_key_head_dim", &c->linear_key_head_dim));
  VLLM_RETURN_IF_ERROR(f.read("linear_value_head_dim", &c->linear_value_head_dim));
  VLLM_RETURN_IF_ERROR(f.read("linear_conv_kernel_dim", &c->linear_conv_kernel_dim));
  VLLM_RETURN_IF_ERROR(f.read("mamba_ssm_dtype", &c->mamba_ssm_dtype));

  VLLM_RETURN_IF_ERROR(f.read("num_experts", &c->num_experts));
  VLLM_RETURN_IF_ERROR(f.read("num_experts_per_tok", &c->num_experts_per_tok));
  VLLM_RETURN_IF_ERROR(f.read("moe_intermediate_size", &c->moe_intermediate_size));
  VLLM_RETURN_IF_ERROR(
      f.read("shared_expert_intermediate_size", &c->shared_expert_intermediate_size));
  VLLM_RETURN_IF_ERROR(f.read("decoder_sparse_step", &c->decoder_sparse_step));
  VLLM_RETURN_IF_ERROR(f.read("norm_topk_prob", &c->norm_topk_prob));
  VLLM_RETURN_IF_ERROR(f.read("mlp_only_layers", &c->mlp_only_layers));
  VLLM_RETURN_IF_ERROR(f.read("mtp_num_hidden_layers", &c->mtp_num_hidden_layers));
  if (c->num_experts > 0) {
    VLLM_RETURN_IF_ERROR(require_positive(f, "num_experts_per_tok", c->num_experts_per_tok));
    VLLM_RETURN_IF_ERROR(require_positive(f, "decoder_sparse_step", c->decoder_sparse_step));
    if (c->num_experts_per_tok > c->num_experts) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: num_experts_per_tok ({}) exceeds num_experts ({})", f.source(),
                        c->num_experts_per_tok, c->num_experts);
    }
  }

  // A dense MLP size is needed unless every layer is a MoE layer.
  bool moe_only = c->num_experts > 0 && f.has("moe_intermediate_size") &&
                  c->mlp_only_layers.empty() && c->decoder_sparse_step == 1;
  if (moe_only) {
    VLLM_RETURN_IF_ERROR(f.read("intermediate_size", &c->intermediate_size));
  } else {
    VLLM_RETURN_IF_ERROR(f.require("intermediate_size", &c->intermediate_size));
    VLLM_RETURN_IF_ERROR(require_positive(f, "intermediate_size", c->intermediate_size));
  }

  VLLM_RETURN_IF_ERROR(parse_layer_types(f, hybrid, c));
  VLLM_RETURN_IF_ERROR(parse_rope(f, hybrid, c));
  // transformers' yarn falls back to max_position_embeddings when the original length is absent.
  if (c->rope.rope_type == "yarn" && c->rope.original_max_position_embeddings == 0) {
    c->rope.original_max_position_embeddings = c->max_position_embeddings;
  }
  return parse_quantization(f, c);
}

}  // namespace

bool ModelConfig::is_hybrid() const {
  return std::any_of(layer_types.begin(), layer_types.end(),
                     [](LayerType t) { return t == LayerType::kLinearAttention; });
}

Expected<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source) {
  VLLM_ASSIGN_OR_RETURN(json root, parse_json_object(json_text, source));
  const json* text_config = nullptr;
  auto it = root.find("text_config");
  if (it != root.end() && !it->is_null()) {
    if (!it->is_object()) {
      return make_error(ErrorCode::kInvalidFormat,
                        "{}: field 'text_config' must be an object, "
                        "got {}",
                        source, json_type_name(*it));
    }
    text_config = &*it;
  }
  JsonFields top({&root}, source);
  JsonFields fields({text_config, &root}, source);

  ModelConfig config;
  VLLM_RETURN_IF_ERROR(top.require("architectures", &config.architectures));
  if (config.architectures.empty()) {
    return make_error(ErrorCode::kInvalidFormat,
                      "{}: field 'architectures' is empty; it must name the model class", source);
  }
  VLLM_RETURN_IF_ERROR(top.read("model_type", &config.model_type));
  config.text_model_type = config.model_type;
  if (text_config != nullptr) {
    JsonFields text({text_config}, source, "text_config.");
    VLLM_RETURN_IF_ERROR(text.read("model_type", &config.text_model_type));
  }
  bool hybrid =
      is_hybrid_model_type(config.text_model_type) || is_hybrid_model_type(config.model_type);
  VLLM_RETURN_IF_ERROR(parse_text_fields(fields, hybrid, &config));
  return config;
}

Expected<ModelConfig> load_model_config(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return make_error(ErrorCode::kNotFound, "{}: no such model directory or config file",
                      path.string());
  }
  std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "config.json" : path;
  VLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(file.string()));
  return parse_model_config(text, file.string());
}

Expected<GenerationConfig> parse_generation_config(std::string_view json_text,
                                                   std::string_view source) {
  VLLM_ASSIGN_OR_RETURN(json root, parse_json_object(json_text, source));
  JsonFields f({&root}, source);
  GenerationConfig config;
  VLLM_RETURN_IF_ERROR(f.read("bos_token_id", &config.bos_token_id));
  VLLM_RETURN_IF_ERROR(f.read_int_or_list("eos_token_id", &config.eos_token_ids));
  VLLM_RETURN_IF_ERROR(f.read("pad_token_id", &config.pad_token_id));
  VLLM_RETURN_IF_ERROR(f.read("do_sample", &config.do_sample));
  VLLM_RETURN_IF_ERROR(f.read("temperature", &config.temperature));
  VLLM_RETURN_IF_ERROR(f.read("top_p", &config.top_p));
  VLLM_RETURN_IF_ERROR(f.read("top_k", &config.top_k));
  VLLM_RETURN_IF_ERROR(f.read("min_p", &config.min_p));
  VLLM_RETURN_IF_ERROR(f.read("repetition_penalty", &config.repetition_penalty));
  VLLM_RETURN_IF_ERROR(f.read("max_new_tokens", &config.max_new_tokens));
  return config;
}

Expected<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir) {
  std::error_code ec;
  std::filesystem::path file = std::filesystem::is_directory(model_dir, ec)
                                   ? model_dir / "generation_config.json"
                                   : model_dir;
  if (!std::filesystem::exists(file, ec)) return GenerationConfig{};
  VLLM_ASSIGN_OR_RETURN(std::string text, read_text_file(file.string()));
  return parse_generation_config(text, file.string());
}

}  // namespace vllm
