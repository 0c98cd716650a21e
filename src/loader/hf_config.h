// Typed view of a Hugging Face config.json and generation_config.json.
//
// Qwen3.5 / 3.6 `*ForConditionalGeneration` checkpoints keep the language model's fields
// under "text_config"; they are lifted to the top level here so model code sees one shape.
// RoPE parameters come from "rope_parameters" (transformers 5) or "rope_scaling" plus
// top-level "rope_theta" / "partial_rotary_factor" (older files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vllm {

struct RopeConfig {
  std::string rope_type = "default";  // default | linear | llama3 | yarn
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;                           // linear, llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn; 0 when absent
  double beta_fast = 32.0;                       // yarn
  double beta_slow = 1.0;                        // yarn
  std::optional<double> mscale;                  // yarn
  std::optional<double> mscale_all_dim;          // yarn
  std::optional<double> attention_factor;        // yarn
  bool truncate = true;                          // yarn
  std::vector<int64_t> mrope_section;            // Qwen3.5 M-RoPE sections (text: all equal)
  bool mrope_interleaved = false;
};

enum class LayerType { kFullAttention, kLinearAttention };

// "quantization_config" of pre-quantized checkpoints (e.g. Qwen3.5-397B-A17B-FP8).
struct QuantizationConfig {
  std::string quant_method;                         // "fp8", ...
  std::string activation_scheme;                    // "dynamic" | "static"; empty when absent
  std::string fmt;                                  // "e4m3" where given; empty when absent
  std::vector<int64_t> weight_block_size;           // [128, 128]; empty: per-tensor scales
  std::vector<std::string> modules_to_not_convert;  // checkpoint names kept unquantized
};

struct ModelConfig {
  std::vector<std::string> architectures;
  std::string model_type;       // top level, e.g. "qwen3_5_moe"
  std::string text_model_type;  // text_config.model_type, or model_type when there is none

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  bool attention_bias = false;
  bool mlp_bias = false;
  std::string dtype;  // "bfloat16", ...: "dtype" or "torch_dtype"
  RopeConfig rope;

  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // int or list in the file
  std::optional<int64_t> pad_token_id;

  // Hybrid (Qwen3.5 / Qwen3-Next). layer_types is filled for every model: all full
  // attention for non-hybrid ones, derived from full_attention_interval when absent.
  std::vector<LayerType> layer_types;
  int64_t full_attention_interval = 0;
  bool attn_output_gate = false;
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  // The recurrent state's dtype the checkpoint asks for (Qwen3.5: "float32"); empty when
  // absent. model/mamba_dtype.h says how it and vLLM's flags choose the state dtypes.
  std::string mamba_ssm_dtype;

  // Mixture of experts (0 experts: dense MLP).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  int64_t decoder_sparse_step = 1;
  bool norm_topk_prob = true;
  std::vector<int64_t> mlp_only_layers;

  int64_t mtp_num_hidden_layers = 0;

  std::optional<QuantizationConfig> quantization;  // absent: weights in `dtype`

  bool is_moe() const { return num_experts > 0; }
  bool is_hybrid() const;
};

// `source` names the file in error messages.
Expected<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source);
// Reads DIR/config.json (or the file itself if a file is given).
Expected<ModelConfig> load_model_config(const std::filesystem::path& path);

struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

Expected<GenerationConfig> parse_generation_config(std::string_view json_text,
                                                   std::string_view source);
// DIR/generation_config.json; a missing file gives an empty config (not an error).
Expected<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir);

}  // namespace vllm
