// config.json / generation_config.json parsing: every real config under configs/ parses,
// with spot checks of real values, and malformed input gives the right error code and a
// message that names the file and the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "loader/hf_config.h"

namespace vllm {
namespace test_hf_config {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path configs_dir() {
  return fs::path(VLLM_SOURCE_DIR) / "configs";
}

ModelConfig load(const std::string& name) {
  auto config = load_model_config(configs_dir() / name);
  EXPECT_TRUE(config.has_value()) << name << ": " << config.status().to_string();
  if (!config.has_value()) return ModelConfig{};
  return *config;
}

int count_full(const ModelConfig& c) {
  return static_cast<int>(
      std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::kFullAttention));
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(HfConfig, EveryShippedConfigParses) {
  int parsed = 0;
  for (const auto& entry : fs::directory_iterator(configs_dir())) {
    fs::path file = entry.path() / "config.json";
    if (!fs::exists(file)) continue;
    auto config = load_model_config(entry.path());
    ASSERT_TRUE(config.has_value()) << file << ": " << config.status().to_string();
    EXPECT_FALSE(config->architectures.empty()) << file;
    EXPECT_EQ(static_cast<int64_t>(config->layer_types.size()), config->num_hidden_layers);
    EXPECT_GT(config->head_dim, 0) << file;
    EXPECT_EQ(config->num_attention_heads % config->num_key_value_heads, 0) << file;
    EXPECT_FALSE(config->eos_token_ids.empty()) << file;
    EXPECT_EQ(config->dtype, "bfloat16") << file;
    ++parsed;
  }
  EXPECT_GE(parsed, 11);  // 10 models plus the FP8 variant
}

TEST(HfConfig, Qwen35MoeLiftsTextConfig) {
  ModelConfig c = load("Qwen3.5-35B-A3B");
  ASSERT_EQ(c.architectures, std::vector<std::string>{"Qwen3_5MoeForConditionalGeneration"});
  EXPECT_EQ(c.model_type, "qwen3_5_moe");
  EXPECT_EQ(c.text_model_type, "qwen3_5_moe_text");
  EXPECT_TRUE(c.is_hybrid());
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_hidden_layers, 40);
  ASSERT_EQ(c.layer_types.size(), 40u);
  EXPECT_EQ(c.layer_types[0], LayerType::kLinearAttention);
  EXPECT_EQ(c.layer_types[2], LayerType::kLinearAttention);
  EXPECT_EQ(c.layer_types[3], LayerType::kFullAttention);
  EXPECT_EQ(c.layer_types[39], LayerType::kFullAttention);
  EXPECT_EQ(count_full(c), 10);
  EXPECT_EQ(c.full_attention_interval, 4);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 512);
  EXPECT_EQ(c.shared_expert_intermediate_size, 512);
  EXPECT_EQ(c.intermediate_size, 0);  // MoE-only: no dense MLP size in the file
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  EXPECT_EQ(c.rope.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope.rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope.mrope_section, (std::vector<int64_t>{11, 11, 10}));
  EXPECT_TRUE(c.rope.mrope_interleaved);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 32);
  EXPECT_EQ(c.linear_key_head_dim, 128);
  EXPECT_EQ(c.linear_value_head_dim, 128);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_EQ(c.mtp_num_hidden_layers, 1);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{248044});
  EXPECT_FALSE(c.tie_word_embeddings);  // top level only
  EXPECT_FALSE(c.quantization.has_value());
}

TEST(HfConfig, Qwen35DenseSizes) {
  ModelConfig small = load("Qwen3.5-0.8B");
  EXPECT_EQ(small.text_model_type, "qwen3_5_text");
  EXPECT_FALSE(small.is_moe());
  EXPECT_TRUE(small.is_hybrid());
  EXPECT_EQ(small.num_hidden_layers, 24);
  EXPECT_EQ(small.intermediate_size, 3584);
  EXPECT_TRUE(small.tie_word_embeddings);  // given in text_config
  EXPECT_EQ(count_full(small), 6);

  ModelConfig big = load("Qwen3.5-27B");
  EXPECT_EQ(big.num_hidden_layers, 64);
  EXPECT_EQ(big.intermediate_size, 17408);
  EXPECT_FALSE(big.tie_word_embeddings);
  EXPECT_EQ(big.num_attention_heads, 24);
  EXPECT_EQ(big.num_key_value_heads, 4);
}

TEST(HfConfig, Qwen35Fp8QuantizationConfig) {
  ModelConfig c = load("Qwen3.5-397B-A17B-FP8");
  EXPECT_EQ(c.num_experts, 512);
  EXPECT_EQ(c.num_experts_per_tok, 10);
  EXPECT_EQ(c.num_hidden_layers, 60);
  ASSERT_TRUE(c.quantization.has_value());
  EXPECT_EQ(c.quantization->quant_method, "fp8");
  EXPECT_EQ(c.quantization->activation_scheme, "dynamic");
  EXPECT_EQ(c.quantization->weight_block_size, (std::vector<int64_t>{128, 128}));
  const auto& skip = c.quantization->modules_to_not_convert;
  EXPECT_NE(std::find(skip.begin(), skip.end(), "lm_head"), skip.end());
  EXPECT_NE(std::find(skip.begin(), skip.end(), "model.language_model.layers.0.mlp.gate"),
            skip.end());
  EXPECT_FALSE(load("Qwen3.5-397B-A17B").quantization.has_value());
}

TEST(HfConfig, Qwen3NextDerivesLayerTypes) {
  ModelConfig c = load("Qwen3-Next-80B-A3B-Instruct");
  EXPECT_EQ(c.num_hidden_layers, 48);
  ASSERT_EQ(c.layer_types.size(), 48u);  // the file has no layer_types
  for (int i = 0; i < 48; ++i) {
    EXPECT_EQ(c.layer_types[i],
              (i % 4 == 3) ? LayerType::kFullAttention : LayerType::kLinearAttention)
        << "layer " << i;
  }
  EXPECT_TRUE(c.is_hybrid());
  EXPECT_TRUE(c.attn_output_gate);  // Qwen3-Next attention is always gated
  EXPECT_EQ(c.num_experts, 512);
  EXPECT_EQ(c.num_experts_per_tok, 10);
  EXPECT_EQ(c.intermediate_size, 5120);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.rope.rope_theta, 1e7);
  EXPECT_EQ(c.rope.rope_type, "default");  // rope_scaling: null
  EXPECT_TRUE(c.rope.mrope_section.empty());
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
}

TEST(HfConfig, Qwen3Dense) {
  ModelConfig c = load("Qwen3-0.6B");
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.head_dim, 128);  // explicit, not hidden_size / heads (64)
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_DOUBLE_EQ(c.rope.rope_theta, 1e6);
  EXPECT_EQ(c.rope.rope_type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.is_hybrid());
  EXPECT_EQ(count_full(c), 28);
  EXPECT_EQ(c.vocab_size, 151936);
}

TEST(HfConfig, Qwen35GenerationConfig) {
  auto g = load_generation_config(configs_dir() / "Qwen3.5-family-tokenizer-config");
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{248046, 248044}));
  EXPECT_EQ(g->bos_token_id, 248044);
  EXPECT_EQ(g->pad_token_id, 248044);
  EXPECT_EQ(g->do_sample, true);
  ASSERT_TRUE(g->temperature.has_value());
  EXPECT_DOUBLE_EQ(*g->temperature, 0.6);
  EXPECT_EQ(g->top_k, 20);
  ASSERT_TRUE(g->top_p.has_value());
  EXPECT_DOUBLE_EQ(*g->top_p, 0.95);
  EXPECT_FALSE(g->min_p.has_value());
  EXPECT_FALSE(g->repetition_penalty.has_value());
  EXPECT_FALSE(g->max_new_tokens.has_value());
}

TEST(HfConfig, MissingGenerationConfigIsEmpty) {
  auto g = load_generation_config(configs_dir() / "Qwen3-0.6B");
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  EXPECT_TRUE(g->eos_token_ids.empty());
  EXPECT_FALSE(g->top_k.has_value());
  EXPECT_FALSE(g->temperature.has_value());
}

// ---- synthetic configs -------------------------------------------------------------------

json minimal_config() {
  return json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", 1000},
              {"hidden_size", 64},
              {"intermediate_size", 128},
              {"num_hidden_layers", 3},
              {"num_attention_heads", 4}};
}

Expected<ModelConfig> parse(const json& j) {
  return parse_model_config(j.dump(), "test.json");
}

// Asserts the error code and that the message names the file and each of `words`.
void expect_error(const Expected<ModelConfig>& result, ErrorCode code,
                  std::initializer_list<std::string> words) {
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.status().code(), code) << result.status().to_string();
  const std::string& message = result.status().message();
  EXPECT_TRUE(contains(message, "test.json")) << message;
  for (const std::string& word : words) EXPECT_TRUE(contains(message, word)) << message;
}

TEST(HfConfig, DefaultsForOptionalFields) {
  auto c = parse(minimal_config());
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 16);            // hidden_size / num_attention_heads
  EXPECT_EQ(c->num_key_value_heads, 4);  // num_attention_heads
  EXPECT_EQ(c->layer_types, std::vector<LayerType>(3, LayerType::kFullAttention));
  EXPECT_FALSE(c->is_hybrid());
  EXPECT_EQ(c->rope.rope_type, "default");
  EXPECT_DOUBLE_EQ(c->rope.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c->rope.partial_rotary_factor, 1.0);
  EXPECT_TRUE(c->eos_token_ids.empty());
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_EQ(c->text_model_type, "llama");
}

// A Llama 3 style file: llama3 rope scaling under "rope_scaling", torch_dtype, tied
// embeddings, integer eos_token_id. (No Llama config is shipped: Meta's files carry the
// Llama Community License.)
TEST(HfConfig, Llama3StyleRopeScaling) {
  json j = minimal_config();
  j["head_dim"] = 32;
  j["num_key_value_heads"] = 2;
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["tie_word_embeddings"] = true;
  j["torch_dtype"] = "bfloat16";
  j["bos_token_id"] = 7;
  j["eos_token_id"] = 9;
  j["rms_norm_eps"] = 1e-5;
  auto c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c->text_model_type, "llama");
  EXPECT_FALSE(c->is_hybrid());
  EXPECT_FALSE(c->is_moe());
  EXPECT_EQ(count_full(*c), 3);
  EXPECT_EQ(c->rope.rope_type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c->rope.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.partial_rotary_factor, 1.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 32);  // given, not hidden_size / heads (16)
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->dtype, "bfloat16");  // from torch_dtype
  EXPECT_EQ(c->bos_token_id, 7);
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{9});
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_FALSE(c->attn_output_gate);
}

TEST(HfConfig, EosListDtypeAndRopeKeys) {
  json j = minimal_config();
  j["eos_token_id"] = {7, 9};
  j["torch_dtype"] = "float16";
  j["dtype"] = "bfloat16";
  j["rope_theta"] = 1234.0;
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};  // old key name "type"
  auto c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(c->dtype, "bfloat16");
  EXPECT_EQ(c->rope.rope_type, "linear");
  EXPECT_DOUBLE_EQ(c->rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(c->rope.rope_theta, 1234.0);

  // rope_parameters (transformers 5) carries theta itself and wins over rope_scaling.
  j["rope_parameters"] = {{"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"rope_theta", 5e5},
                          {"beta_fast", 16},
                          {"mscale", 0.707},
                          {"truncate", false},
                          {"original_max_position_embeddings", 4096}};
  c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->rope.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c->rope.factor, 4.0);
  EXPECT_DOUBLE_EQ(c->rope.rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(c->rope.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c->rope.beta_slow, 1.0);
  EXPECT_EQ(c->rope.mscale, 0.707);
  EXPECT_FALSE(c->rope.mscale_all_dim.has_value());
  EXPECT_FALSE(c->rope.truncate);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 4096);
}

TEST(HfConfig, LayerTypesFromInterval) {
  json j = minimal_config();
  j["num_hidden_layers"] = 6;
  j["full_attention_interval"] = 3;
  auto c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  using L = LayerType;
  EXPECT_EQ(c->layer_types,
            (std::vector<L>{L::kLinearAttention, L::kLinearAttention, L::kFullAttention,
                            L::kLinearAttention, L::kLinearAttention, L::kFullAttention}));
  EXPECT_TRUE(c->is_hybrid());

  // A hybrid model type with neither field: transformers' default interval of 4.
  j = minimal_config();
  j["model_type"] = "qwen3_next";
  j["num_hidden_layers"] = 8;
  c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_EQ(c->full_attention_interval, 4);
  EXPECT_EQ(count_full(*c), 2);
  EXPECT_EQ(c->layer_types[3], L::kFullAttention);
  EXPECT_DOUBLE_EQ(c->rope.partial_rotary_factor, 0.25);

  // Explicit layer_types win over the interval.
  j["layer_types"] = std::vector<std::string>(8, "full_attention");
  c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_FALSE(c->is_hybrid());
}

TEST(HfConfig, MoeOnlyNeedsNoIntermediateSize) {
  json j = minimal_config();
  j.erase("intermediate_size");
  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  auto c = parse(j);
  ASSERT_TRUE(c.has_value()) << c.status().to_string();
  EXPECT_TRUE(c->is_moe());
  EXPECT_EQ(c->intermediate_size, 0);

  j["mlp_only_layers"] = {1};  // layer 1 is dense: it needs intermediate_size
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"intermediate_size", "missing"});
}

TEST(HfConfig, MissingRequiredFields) {
  for (const char* field : {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                            "intermediate_size", "architectures"}) {
    json j = minimal_config();
    j.erase(field);
    expect_error(parse(j), ErrorCode::kInvalidFormat, {field, "missing"});
  }
  json j = minimal_config();
  j["hidden_size"] = nullptr;  // null counts as missing
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"hidden_size", "missing"});
}

TEST(HfConfig, WrongTypes) {
  json j = minimal_config();
  j["hidden_size"] = "64";
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"'hidden_size'", "integer", "string"});

  j = minimal_config();
  j["num_hidden_layers"] = 2.5;
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"num_hidden_layers", "integer"});

  j = minimal_config();
  j["tie_word_embeddings"] = 1;
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"tie_word_embeddings", "boolean"});

  j = minimal_config();
  j["architectures"] = "LlamaForCausalLM";
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"architectures", "list of strings"});

  j = minimal_config();
  j["eos_token_id"] = "2";
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"eos_token_id", "integer"});

  j = minimal_config();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", "32"},
                       {"low_freq_factor", 1},
                       {"high_freq_factor", 4},
                       {"original_max_position_embeddings", 8192}};
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"rope_scaling.factor", "number"});

  j = minimal_config();
  j["text_config"] = {{"hidden_size", true}};
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"hidden_size", "integer", "boolean"});
}

TEST(HfConfig, NotJson) {
  auto r = parse_model_config("{\"hidden_size\": 64,", "test.json");
  expect_error(r, ErrorCode::kInvalidFormat, {"JSON"});
  r = parse_model_config("[1, 2]", "test.json");
  expect_error(r, ErrorCode::kInvalidFormat, {"object"});
  r = parse_model_config("", "test.json");
  expect_error(r, ErrorCode::kInvalidFormat, {"JSON"});
}

TEST(HfConfig, BadLayerTypes) {
  json j = minimal_config();
  j["layer_types"] = {"full_attention", "linear_attention"};  // 2 != 3
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"layer_types", "2", "3"});

  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  expect_error(parse(j), ErrorCode::kUnsupported, {"layer_types", "sliding_attention"});
}

TEST(HfConfig, UnknownRopeType) {
  json j = minimal_config();
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error(parse(j), ErrorCode::kUnsupported, {"rope_type", "'dynamic'"});

  j["rope_scaling"] = {{"type", "longrope"}};
  expect_error(parse(j), ErrorCode::kUnsupported, {"rope_type", "'longrope'"});

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"rope_scaling.low_freq_factor", "missing"});
}

TEST(HfConfig, InconsistentShapes) {
  json j = minimal_config();
  j["num_key_value_heads"] = 3;  // 4 heads not divisible into 3 groups
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"num_key_value_heads"});

  j = minimal_config();
  j["hidden_size"] = 0;
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"hidden_size", "positive"});

  j = minimal_config();
  j["rope_parameters"] = {{"rope_type", "default"}, {"mrope_section", {4, 6}}};
  expect_error(parse(j), ErrorCode::kInvalidFormat, {"mrope_section"});  // 2 x 10 pairs != 16
}

TEST(HfConfig, FileErrors) {
  auto missing = load_model_config(configs_dir() / "no-such-model");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), "no-such-model"));

  // A config.json path works as well as its directory.
  auto direct = load_model_config(configs_dir() / "Qwen3-0.6B" / "config.json");
  ASSERT_TRUE(direct.has_value()) << direct.status().to_string();
  EXPECT_EQ(direct->num_hidden_layers, 28);
}

TEST(HfConfig, GenerationConfigErrors) {
  auto bad = parse_generation_config(R"({"top_k": "20"})", "generation_config.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidFormat);
  EXPECT_TRUE(contains(bad.status().message(), "top_k"));
  EXPECT_TRUE(contains(bad.status().message(), "generation_config.json"));

  bad = parse_generation_config("not json", "generation_config.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidFormat);

  auto single = parse_generation_config(R"({"eos_token_id": 5, "pad_token_id": null})", "g");
  ASSERT_TRUE(single.has_value()) << single.status().to_string();
  EXPECT_EQ(single->eos_token_ids, std::vector<int64_t>{5});
  EXPECT_FALSE(single->pad_token_id.has_value());
}

}  // namespace
}  // namespace test_hf_config
}  // namespace vllm
