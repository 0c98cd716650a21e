// Loading block-scaled FP8 checkpoints (model/weights.h): small FP8 safetensors folders
// written here, in the published layout, against their dequantized F32 twins -- the logits
// of every model family agree to f32 rounding, with per-expert and fused experts, FP8 and
// BF16 in_proj_b / in_proj_a, F32 and BF16 scales, blocks that do and do not divide the
// fused parts' rows -- and the load errors: a missing or mis-shaped scale tensor, an FP8
// tensor without quantization_config or outside a linear layer, quantization configs this
// engine does not read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"
#include "tools/tiny_checkpoint.h"
#include "unit/fp8_checkpoint.h"
#include "unit/hybrid_checkpoint.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_fp8_checkpoint {
namespace {

namespace fs = std::filesystem;

// A hybrid checkpoint spec: family, seed and the flags these tests vary.
testing::HybridSpec hybrid_spec(testing::HybridSpec::Family family, uint64_t seed,
                                bool conditional = false, bool fused_experts = false,
                                bool moe = false) {
  testing::HybridSpec s;
  s.family = family;
  s.seed = seed;
  s.conditional = conditional;
  s.fused_experts = fused_experts;
  s.moe = moe;
  return s;
}
using testing::Fp8Conversion;

// Prefill of a 13-token prompt, then 3 greedy decode steps: every row's logits, concatenated.
std::vector<float> run(Model& model) {
  const int64_t vocab = model.config().vocab_size;
  auto cache = model.create_cache(CacheConfig{16, testing::kBlockSize, 2});
  EXPECT_TRUE(cache.has_value()) << cache.status().to_string();
  if (!cache.has_value()) return {};
  testing::Seq seq;
  seq.slot = 1;
  for (int64_t i = 0; i < 13; ++i) seq.tokens.push_back((i * 37 + 5) % (vocab - 1));
  seq.blocks.resize(16);
  std::iota(seq.blocks.begin(), seq.blocks.end(), 0);
  std::vector<float> out;
  Tensor logits = testing::step(model, *cache, {{&seq, 13}});
  for (int s = 0; s < 4 && logits.defined(); ++s) {
    out.insert(out.end(), logits.data<float>(), logits.data<float>() + logits.numel());
    if (s == 3) break;
    const float* last = logits.data<float>() + (logits.size(0) - 1) * vocab;
    seq.tokens.push_back(std::max_element(last, last + vocab) - last);
    logits = testing::step(model, *cache, {{&seq, 1}});
  }
  return out;
}

struct Flavour {
  const char* name;
  // Writes the float checkpoint into the folder.
  std::function<Status(const fs::path&)> write;
  Fp8Conversion conversion;
};

Status hybrid(const fs::path& dir, testing::HybridSpec spec) {
  return testing::HybridCheckpointWriter(spec).write(dir);
}

std::vector<Flavour> flavours() {
  using F = testing::HybridSpec::Family;
  std::vector<Flavour> out;
  {
    testing::HybridSpec s = hybrid_spec(F::kQwen3_5Moe, 3, /*conditional=*/true);
    // 16-row blocks: q / k / v and the GDN parts fuse on block boundaries; the experts'
    // 12-row gate and up do not (one scale row per weight row in the stack).
    out.push_back({"qwen3_5_moe per expert, BF16 b/a",
                   [s](const fs::path& d) { return hybrid(d, s); },
                   testing::fp8_conversion({16, 32})});
  }
  {
    testing::HybridSpec s = hybrid_spec(F::kQwen3_5Moe, 4, false, /*fused_experts=*/true);
    out.push_back({"qwen3_5_moe fused experts, FP8 b/a",
                   [s](const fs::path& d) { return hybrid(d, s); },
                   testing::fp8_conversion({16, 32}, true)});
  }
  {
    testing::HybridSpec s = hybrid_spec(F::kQwen3_5, 5);
    out.push_back({"qwen3_5 dense, BF16 scales", [s](const fs::path& d) { return hybrid(d, s); },
                   testing::fp8_conversion({128, 128}, false, true)});
  }
  {
    testing::HybridSpec s = hybrid_spec(F::kQwen3Next, 6, false, false, /*moe=*/true);
    // Qwen3-Next's fused in_proj_qkvz is cut per key head at rows that are no multiple of 16.
    out.push_back({"qwen3_next", [s](const fs::path& d) { return hybrid(d, s); },
                   testing::fp8_conversion({16, 16}, true)});
  }
  out.push_back({"qwen3 (tiny bf16)",
                 [](const fs::path& d) { return testing::write_tiny_checkpoint(d, "qwen3", 7); },
                 testing::fp8_conversion({128, 128})});
  out.push_back({"llama (tiny bf16)",
                 [](const fs::path& d) { return testing::write_tiny_checkpoint(d, "llama", 8); },
                 testing::fp8_conversion({32, 64})});
  return out;
}

TEST(Fp8Checkpoint, EveryFamilyMatchesItsDequantizedTwin) {
  for (const Flavour& f : flavours()) {
    SCOPED_TRACE(f.name);
    testing::TempDir dir("fp8_ckpt");
    ASSERT_TRUE(f.write(dir / "src").is_ok());
    auto quantized =
        testing::write_fp8_checkpoint(dir / "src", dir / "fp8", dir / "twin", f.conversion);
    ASSERT_TRUE(quantized.has_value()) << quantized.status().to_string();
    EXPECT_GE(quantized->size(), 8u);
    auto fp8 = load_model(dir / "fp8", LoadOptions{});
    ASSERT_TRUE(fp8.has_value()) << fp8.status().to_string();
    auto twin = load_model(dir / "twin", LoadOptions{});
    ASSERT_TRUE(twin.has_value()) << twin.status().to_string();
    const std::vector<float> a = run(**fp8), b = run(**twin);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    // Only the order of f32 sums differs (the FP8 path runs the portable kernels).
    const double twin_err = testing::rel_l2(a.data(), b.data(), static_cast<int64_t>(a.size()));
    EXPECT_LE(twin_err, 1e-5);
    // And FP8 did change the model: the twin is not the float original.
    auto original = load_model(dir / "src", LoadOptions{});
    ASSERT_TRUE(original.has_value());
    const std::vector<float> c = run(**original);
    const double fp8_err = testing::rel_l2(c.data(), b.data(), static_cast<int64_t>(c.size()));
    EXPECT_GT(fp8_err, 1e-4);
    std::printf("%-36s %2zu FP8 tensors: rel L2 %.1e to its twin, %.1e from the float model\n",
                f.name, quantized->size(), twin_err, fp8_err);
  }
}

// One Qwen3.5-MoE FP8 checkpoint for the error tests, with `edit` applied to its tensors.
Status load_edited(const testing::TempDir& dir, const std::function<void(NamedTensors&)>& edit,
                   const Fp8Conversion& conversion = testing::fp8_conversion({16, 32})) {
  testing::HybridSpec spec = hybrid_spec(testing::HybridSpec::Family::kQwen3_5Moe, 9);
  VLLM_RETURN_IF_ERROR(testing::HybridCheckpointWriter(spec).write(dir / "src"));
  VLLM_ASSIGN_OR_RETURN(auto names, testing::write_fp8_checkpoint(dir / "src", dir / "fp8",
                                                                  dir / "twin", conversion));
  VLLM_ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::open(dir / "fp8"));
  NamedTensors tensors;
  for (const std::string& n : ckpt.names()) tensors.emplace_back(n, ckpt.tensor(n)->clone());
  edit(tensors);
  VLLM_RETURN_IF_ERROR(write_safetensors(dir / "edited.safetensors", tensors));
  fs::rename(dir / "edited.safetensors", dir / "fp8" / "model.safetensors");
  auto model = load_model(dir / "fp8", LoadOptions{});
  return model.has_value() ? Status::ok() : model.status();
}

const std::string kQ = "model.layers.2.self_attn.q_proj.weight";

void expect_error(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.is_ok());
  for (const char* p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.to_string();
  }
}

TEST(Fp8Checkpoint, MissingScaleFailsNamingIt) {
  testing::TempDir dir("fp8_err");
  Status s = load_edited(dir, [](NamedTensors& t) {
    std::erase_if(t, [](const auto& p) { return p.first == kQ + "_scale_inv"; });
  });
  expect_error(s, {"model.layers.2.self_attn.q_proj.weight_scale_inv", "not in the checkpoint"});
}

TEST(Fp8Checkpoint, WrongScaleShapeFailsNamingIt) {
  testing::TempDir dir("fp8_err");
  // q_proj [192, 32] in 16x32 blocks has a [12, 1] grid.
  Status s = load_edited(dir, [](NamedTensors& t) {
    for (auto& [name, tensor] : t) {
      if (name == kQ + "_scale_inv") tensor = Tensor::zeros({11, 1}, DType::kF32);
    }
  });
  expect_error(s, {"q_proj.weight_scale_inv", "[11, 1]", "[12, 1]"});
}

TEST(Fp8Checkpoint, WrongExpertStackScaleShapeFailsNamingIt) {
  testing::TempDir dir("fp8_err");
  testing::HybridSpec spec =
      hybrid_spec(testing::HybridSpec::Family::kQwen3_5Moe, 10, false, /*fused_experts=*/true);
  ASSERT_TRUE(testing::HybridCheckpointWriter(spec).write(dir / "src").is_ok());
  ASSERT_TRUE(testing::write_fp8_checkpoint(dir / "src", dir / "fp8", dir / "twin",
                                            testing::fp8_conversion({16, 32}))
                  .has_value());
  auto ckpt = Checkpoint::open(dir / "fp8");
  ASSERT_TRUE(ckpt.has_value());
  NamedTensors tensors;
  const std::string bad = "model.layers.0.mlp.experts.gate_up_proj_scale_inv";
  for (const std::string& n : ckpt->names()) {
    // [6, 2, 1] for [6, 24, 32]: drop one expert.
    tensors.emplace_back(
        n, n == bad ? Tensor::zeros({5, 2, 1}, DType::kF32) : ckpt->tensor(n)->clone());
  }
  ASSERT_TRUE(write_safetensors(dir / "x.safetensors", tensors).is_ok());
  fs::rename(dir / "x.safetensors", dir / "fp8" / "model.safetensors");
  auto model = load_model(dir / "fp8", LoadOptions{});
  ASSERT_FALSE(model.has_value());
  expect_error(model.status(), {bad.c_str(), "[5, 2, 1]", "[6, 2, 1]"});
}

TEST(Fp8Checkpoint, Fp8WithoutQuantizationConfigFailsNamingTheTensor) {
  testing::TempDir dir("fp8_err");
  Fp8Conversion c = testing::fp8_conversion({16, 32});
  c.quantization_config = false;
  Status s = load_edited(
      dir, [](NamedTensors&) {}, c);
  expect_error(s, {"F8_E4M3", "quantization_config", ".weight'"});
}

TEST(Fp8Checkpoint, Fp8OutsideALinearLayerFailsNamingIt) {
  testing::TempDir dir("fp8_err");
  Fp8Conversion c = testing::fp8_conversion({16, 32});
  c.also = {"model.layers.1.mlp.gate.weight"};  // the router
  Status s = load_edited(
      dir, [](NamedTensors&) {}, c);
  expect_error(s, {"model.layers.1.mlp.gate.weight", "not the weight of a linear layer"});
}

TEST(Fp8Checkpoint, UnreadableQuantizationConfigsAreRefused) {
  auto with_config = [](const testing::TempDir& dir, const nlohmann::json& q) {
    testing::HybridSpec spec = hybrid_spec(testing::HybridSpec::Family::kQwen3_5, 11);
    EXPECT_TRUE(testing::HybridCheckpointWriter(spec).write(dir / "m").is_ok());
    nlohmann::json config;
    std::ifstream(dir / "m" / "config.json") >> config;
    config["quantization_config"] = q;
    std::ofstream(dir / "m" / "config.json") << config.dump(2);
    auto model = load_model(dir / "m", LoadOptions{});
    return model.has_value() ? Status::ok() : model.status();
  };
  {
    testing::TempDir dir("fp8_cfg");
    Status s = with_config(dir, {{"quant_method", "awq"}, {"bits", 4}});
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
    expect_error(s, {"'awq'"});
  }
  {
    testing::TempDir dir("fp8_cfg");
    Status s = with_config(dir, {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}});
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
    expect_error(s, {"weight_block_size", "per-tensor"});
  }
  {
    testing::TempDir dir("fp8_cfg");
    Status s = with_config(dir, {{"quant_method", "fp8"}, {"weight_block_size", {128}}});
    expect_error(s, {"weight_block_size"});
  }
  {
    testing::TempDir dir("fp8_cfg");
    Status s = with_config(dir, {{"quant_method", "fp8"},
                                 {"activation_scheme", "static"},
                                 {"weight_block_size", {128, 128}}});
    expect_error(s, {"static"});
  }
  {
    // A float checkpoint whose config declares FP8 loads as it is (nothing is FP8 in it).
    testing::TempDir dir("fp8_cfg");
    EXPECT_TRUE(with_config(dir, {{"quant_method", "fp8"},
                                  {"weight_block_size", {128, 128}},
                                  {"modules_to_not_convert", nullptr}})
                    .is_ok());
  }
}

}  // namespace
}  // namespace test_fp8_checkpoint
}  // namespace vllm
