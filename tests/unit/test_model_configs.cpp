// Every real config.json under configs/ builds its model's full structure (on the meta
// device: shapes, no memory), and the parameter count matches the size the model is
// advertised with: total parameters, and for MoE models the active parameters per token.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "model/models/registry.h"
#include "model/weights.h"

namespace vllm {
namespace test_model_configs {
namespace {

namespace fs = std::filesystem;

struct Advertised {
  const char* dir;
  double total_billions;   // the size in the model's name
  double active_billions;  // "A3B" and the like; 0 for dense models
  double tolerance;        // relative; the names round, and count the vision tower we skip
};

// Text-model parameters (embeddings, layers, lm_head; not the vision tower or MTP head).
constexpr Advertised kModels[] = {
    {"Qwen3-0.6B", 0.6, 0, 0.05},     // 0.6B (0.44B non-embedding) on its card
    {"Qwen3-Next-80B-A3B-Instruct", 80, 3, 0.05},
    {"Qwen3.5-0.8B", 0.8, 0, 0.20},  // a 0.1B vision tower is part of the name
    {"Qwen3.5-2B", 2, 0, 0.15},
    {"Qwen3.5-4B", 4, 0, 0.12},
    {"Qwen3.5-9B", 9, 0, 0.10},
    {"Qwen3.5-27B", 27, 0, 0.05},
    {"Qwen3.5-35B-A3B", 35, 3, 0.05},
    {"Qwen3.5-122B-A10B", 122, 10, 0.05},
    {"Qwen3.5-397B-A17B", 397, 17, 0.05},
    {"Qwen3.5-397B-A17B-FP8", 397, 17, 0.05},
};

class ModelConfigTest : public ::testing::TestWithParam<Advertised> {};

TEST_P(ModelConfigTest, BuildsWithAdvertisedParameterCount) {
  const Advertised& want = GetParam();
  const fs::path path = fs::path(VLLM_SOURCE_DIR) / "configs" / want.dir / "config.json";
  auto config = load_model_config(path);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  DummyWeights weights(DType::kBF16, Device::meta());
  LoadOptions options;
  options.max_model_len = 4096;  // the rope table is real memory; keep it small
  auto model = create_model(*config, weights, options);
  ASSERT_TRUE(model.has_value()) << want.dir << ": " << model.status().to_string();

  // Routed experts are "experts" tensors; a token uses num_experts_per_tok of num_experts.
  double total = 0, routed = 0;
  for (const auto& [name, numel] : weights.numel_by_name()) {
    total += static_cast<double>(numel);
    if (name.find(".experts.") != std::string::npos) routed += static_cast<double>(numel);
  }
  const double active = config->is_moe()
                            ? total - routed * (1.0 - double(config->num_experts_per_tok) /
                                                          double(config->num_experts))
                            : total;
  std::printf("%-28s %8.3fB parameters, %7.3fB active\n", want.dir, total / 1e9, active / 1e9);
  EXPECT_NEAR(total / 1e9, want.total_billions, want.total_billions * want.tolerance) << want.dir;
  if (want.active_billions > 0) {
    // "A3B" rounds hard: Qwen3-Next-80B-A3B activates 3.9B per token counting embeddings
    // and lm_head (3.3B without), Qwen3.5-35B-A3B 3.5B; the larger ones land within 3%.
    EXPECT_NEAR(active / 1e9, want.active_billions, want.active_billions * 0.3) << want.dir;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, ModelConfigTest, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<Advertised>& info) {
                           std::string name = info.param.dir;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace test_model_configs
}  // namespace vllm
