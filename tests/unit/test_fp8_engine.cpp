// FP8 through the whole engine on the CPU: `--quantization fp8` (vLLM's flag) quantizes a
// golden float checkpoint at load to 128x128-block FP8 and the engine generates from it, with
// logits near transformers' float32 ones; a checkpoint that is FP8 already is read as it is;
// `--load-format dummy` makes FP8 weights for FP8 configs, on the CPU and on the meta device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine_args.h"
#include "loader/safetensors.h"
#include "model/layers/gdn.h"
#include "model/model.h"
#include "model/models/registry.h"
#include "model/weights.h"
#include "tensor/block_fp8.h"
#include "unit/fp8_checkpoint.h"
#include "unit/hybrid_checkpoint.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_fp8_engine {
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

fs::path golden(const std::string& name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name;
}

// Prefill logits of every reference prompt against transformers' float32 logits: the worst
// prompt's relative L2 over all its positions, and the share of positions whose argmax
// agrees with the reference where the reference's top-2 margin exceeds `margin`.
struct Agreement {
  double worst_rel_l2 = 0;
  int64_t decisive = 0, agreeing = 0;
};

Agreement against_reference(Model& model, const fs::path& dir, float margin) {
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  EXPECT_TRUE(reference.has_value());
  Agreement a;
  const int64_t vocab = model.config().vocab_size;
  for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    const std::string key = "prompt." + std::to_string(p) + ".";
    Tensor ids = *reference->tensor(key + "token_ids");
    Tensor ref = *reference->tensor(key + "logits");
    const int64_t n = ids.size(0);
    auto cache =
        model.create_cache(CacheConfig{n / testing::kBlockSize + 2, testing::kBlockSize, 2});
    EXPECT_TRUE(cache.has_value());
    testing::Seq seq;
    seq.slot = 1;
    seq.tokens.assign(ids.data<int64_t>(), ids.data<int64_t>() + n);
    seq.blocks.resize(static_cast<size_t>(cache->config.num_blocks));
    std::iota(seq.blocks.begin(), seq.blocks.end(), 0);
    Tensor logits = testing::step(model, *cache, {{&seq, n}});
    a.worst_rel_l2 = std::max(a.worst_rel_l2,
                              testing::rel_l2(logits.data<float>(), ref.data<float>(), n * vocab));
    for (int64_t i = 0; i < n; ++i) {
      const float* r = ref.data<float>() + i * vocab;
      const float* g = logits.data<float>() + i * vocab;
      std::vector<float> sorted(r, r + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] <= margin) continue;
      ++a.decisive;
      a.agreeing += std::max_element(r, r + vocab) - r == std::max_element(g, g + vocab) - g;
    }
  }
  return a;
}

// The tolerance. FP8 e4m3 keeps 4 significant bits: round to nearest leaves each weight a
// relative error of up to 2^-4, about 2.6% RMS, so every GEMM's output is some 2-3% off, and
// through four layers (chained GEMMs, softmax attention, the final norm's gain of about 5 in
// these tied-embedding goldens) that grows to about 0.1 at the logits: measured 1.18e-1
// (qwen3) and 9.9e-2 (llama) at the worst prompt. The computation is deterministic, so 0.15
// (1.27x the worst) is room enough, and it still fails the mistakes that matter: scales 25%
// off measured 0.34 / 0.60, and every block taking its tensor's first scale 0.25 / 0.15.
// Argmaxes must agree wherever the reference's top-2 logit gap exceeds 1.0 (43 and 42 of the
// prompt positions), which a perturbation of this size cannot flip.
constexpr double kFp8LogitsTolerance = 0.15;
constexpr float kDecisiveMargin = 1.0f;

class QuantizationFp8 : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizationFp8, GoldenLogitsStayNearTheFloat32Reference) {
  LoadOptions options;
  options.quantization = "fp8";
  auto model = load_model(golden(GetParam()), options);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  const Agreement fp8 = against_reference(**model, golden(GetParam()), kDecisiveMargin);
  auto plain = load_model(golden(GetParam()), LoadOptions{});
  ASSERT_TRUE(plain.has_value());
  const Agreement f32 = against_reference(**plain, golden(GetParam()), kDecisiveMargin);
  std::printf(
      "%-8s --quantization fp8: worst prompt rel L2 %.3e (float32 weights: %.1e), "
      "argmax agrees at %lld of %lld decisive positions\n",
      GetParam().c_str(), fp8.worst_rel_l2, f32.worst_rel_l2, static_cast<long long>(fp8.agreeing),
      static_cast<long long>(fp8.decisive));
  EXPECT_LE(f32.worst_rel_l2, 1e-4);
  EXPECT_GT(fp8.worst_rel_l2, 1e-3) << "the weights were not quantized";
  EXPECT_LE(fp8.worst_rel_l2, kFp8LogitsTolerance);
  EXPECT_GT(fp8.decisive, 20);
  EXPECT_EQ(fp8.agreeing, fp8.decisive);
}

INSTANTIATE_TEST_SUITE_P(Golden, QuantizationFp8, ::testing::Values("qwen3", "llama"));

// The hybrids amplify weight errors through their random-weight Gated DeltaNet layers (their
// BF16 error floor is 1.1e-1 against 2.5e-2 for the attention-only models: docs/design.md),
// so for them only the engine run and finite, non-trivial logits are checked.
TEST(QuantizationFp8Engine, GeneratesFromEveryGoldenFamily) {
  for (const char* name : {"qwen3", "qwen3_5_dense", "qwen3_5_moe", "qwen3_next"}) {
    SCOPED_TRACE(name);
    engine::EngineArgs args;
    args.model = golden(name).string();
    args.device = "cpu";
    args.quantization = "fp8";
    args.engine.scheduler.max_num_seqs = 4;
    auto loaded = engine::build_engine(args);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
    engine::EngineCore& core = *loaded->core;
    SamplingParams p;
    p.temperature = 0.0;
    p.max_tokens = 12;
    p.ignore_eos = true;
    ASSERT_TRUE(core.add_request("a", {3, 1, 4, 1, 5, 9, 2, 6}, p).is_ok());
    ASSERT_TRUE(core.add_request("b", {2, 7, 1, 8, 2, 8}, p).is_ok());
    std::map<std::string, std::vector<int32_t>> tokens;
    for (int step = 0; core.has_unfinished_requests() && step < 100; ++step) {
      auto out = core.step();
      ASSERT_TRUE(out.has_value()) << out.status().to_string();
      for (const auto& o : *out) {
        tokens[o.request_id].insert(tokens[o.request_id].end(), o.new_token_ids.begin(),
                                    o.new_token_ids.end());
      }
    }
    EXPECT_EQ(tokens["a"].size(), 12u);
    EXPECT_EQ(tokens["b"].size(), 12u);
  }
}

TEST(QuantizationFp8Engine, ReadsAnFp8CheckpointAsItIs) {
  // With --quantization fp8, a checkpoint that is FP8 already keeps its own weights and
  // scales: the logits are those of loading it without the flag.
  testing::TempDir dir("fp8_q");
  testing::HybridSpec spec = hybrid_spec(testing::HybridSpec::Family::kQwen3_5Moe, 21);
  ASSERT_TRUE(testing::HybridCheckpointWriter(spec).write(dir / "src").is_ok());
  ASSERT_TRUE(testing::write_fp8_checkpoint(dir / "src", dir / "fp8", dir / "twin",
                                            testing::fp8_conversion({16, 32}))
                  .has_value());
  LoadOptions q;
  q.quantization = "fp8";
  auto a = load_model(dir / "fp8", q);
  auto b = load_model(dir / "fp8", LoadOptions{});
  ASSERT_TRUE(a.has_value() && b.has_value()) << a.status().to_string();
  auto cache_a = (*a)->create_cache(CacheConfig{8, testing::kBlockSize, 2});
  auto cache_b = (*b)->create_cache(CacheConfig{8, testing::kBlockSize, 2});
  testing::Seq sa, sb;
  sa.tokens = sb.tokens = {1, 2, 3, 4, 5, 6, 7};
  sa.blocks = sb.blocks = {0, 1, 2, 3};
  Tensor la = testing::step(**a, *cache_a, {{&sa, 7}});
  Tensor lb = testing::step(**b, *cache_b, {{&sb, 7}});
  ASSERT_EQ(la.numel(), lb.numel());
  for (int64_t i = 0; i < la.numel(); ++i) ASSERT_EQ(la.data<float>()[i], lb.data<float>()[i]);

  LoadOptions other;
  other.quantization = "int8";
  auto refused = load_model(dir / "src", other);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("'int8'"), std::string::npos);
}

TEST(Fp8Dummy, DummyLinearWeightsAreFp8WithPlausibleScales) {
  DummyWeights dummy(DType::kBF16, Device::cpu(), 3, WeightBlock{128, 128});
  auto w = dummy.get_linear("layers.0.mlp.down_proj.weight", {300, 260});
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  ASSERT_TRUE(w->is_fp8());
  EXPECT_EQ(w->scale_inv.shape(), (Shape{3, 3}));
  EXPECT_TRUE(check_linear_weight("dummy", *w).is_ok());
  auto values = dequantize_fp8_blocks(*w);
  ASSERT_TRUE(values.has_value());
  float amax = 0;
  for (int64_t i = 0; i < values->numel(); ++i) {
    const float v = values->data<float>()[i];
    ASSERT_TRUE(std::isfinite(v));
    amax = std::max(amax, std::fabs(v));
  }
  EXPECT_LE(amax, 1e-3f);  // vLLM's dummy range
  EXPECT_GT(amax, 5e-4f);
  for (int64_t i = 0; i < w->scale_inv.numel(); ++i) {
    EXPECT_NEAR(w->scale_inv.data<float>()[i], 1e-3f / 448.0f, 2e-7f);  // amax / 448
  }
  // Weights that are not linear ones stay float.
  auto norm = dummy.get("layers.0.input_layernorm.weight", {260});
  ASSERT_TRUE(norm.has_value());
  EXPECT_EQ(norm->dtype(), DType::kBF16);
}

TEST(Fp8Dummy, ModulesToNotConvertStayFloat) {
  // The config's modules_to_not_convert: a module, or a parent of it; a longer name that only
  // starts the same way is quantized.
  DummyWeights dummy(DType::kBF16, Device::cpu(), 3, WeightBlock{128, 128},
                     {"m.layers.0.linear_attn.in_proj_a", "m.visual"});
  for (const char* name :
       {"m.layers.0.linear_attn.in_proj_a.weight", "m.visual.blocks.0.qkv.weight"}) {
    auto w = dummy.get_linear(name, {128, 256});
    ASSERT_TRUE(w.has_value()) << w.status().to_string();
    EXPECT_FALSE(w->is_fp8()) << name;
    EXPECT_EQ(w->dtype(), DType::kBF16) << name;
  }
  for (const char* name : {"m.layers.0.linear_attn.in_proj_ab.weight", "m.visualizer.weight",
                           "m.layers.0.linear_attn.in_proj_b.weight"}) {
    auto w = dummy.get_linear(name, {128, 256});
    ASSERT_TRUE(w.has_value()) << w.status().to_string();
    EXPECT_TRUE(w->is_fp8()) << name;
  }
}

TEST(Fp8Dummy, GdnInputProjectionKeepsItsBlockGrid) {
  // b and a (Hv rows each) are no whole 128-row block: fused behind q | k | v | z they would
  // leave the big product one scale row per weight row, which the block-scaled W8A8 GEMM
  // cannot take. With the checkpoint's BF16 b / a, and with b / a quantized at load, q | k |
  // v | z stays one 128 x 128 grid and b | a is a second product.
  GdnSpec spec;
  spec.hidden_size = 256;
  spec.num_key_heads = 2;
  spec.num_value_heads = 4;
  spec.key_head_dim = 128;
  spec.value_head_dim = 128;
  spec.conv_kernel = 4;
  const ExecContext ctx;
  const std::string a = "model.language_model.layers.0.linear_attn.";
  for (bool checkpoint_bf16_ba : {true, false}) {
    std::vector<std::string> unquantized;
    if (checkpoint_bf16_ba) unquantized = {a + "in_proj_a", a + "in_proj_b", a + "conv1d"};
    DummyWeights dummy(DType::kBF16, Device::cpu(), 5, WeightBlock{128, 128}, unquantized);
    GdnLayer layer;
    ASSERT_TRUE(layer.load(dummy, a, spec, ctx).is_ok());
    const LinearWeight& qkvz = layer.in_proj();
    ASSERT_TRUE(qkvz.is_fp8());
    EXPECT_EQ(qkvz.shape(), (Shape{spec.conv_dim() + spec.value_dim(), 256}));
    EXPECT_EQ(qkvz.block, (WeightBlock{128, 128}));
    EXPECT_EQ(qkvz.scale_inv.shape(), (Shape{(spec.conv_dim() + spec.value_dim()) / 128, 2}));
    const LinearWeight& ba = layer.in_proj_ba();
    ASSERT_TRUE(ba.weight.defined());
    EXPECT_EQ(ba.shape(), (Shape{2 * spec.num_value_heads, 256}));
    EXPECT_EQ(ba.is_fp8(), !checkpoint_bf16_ba);
  }
}

TEST(Fp8Dummy, FloatGdnInputProjectionIsOneMatrix) {
  GdnSpec spec;
  spec.hidden_size = 256;
  spec.num_key_heads = 2;
  spec.num_value_heads = 4;
  spec.key_head_dim = 128;
  spec.value_head_dim = 128;
  spec.conv_kernel = 4;
  const ExecContext ctx;
  DummyWeights dummy(DType::kBF16, Device::cpu(), 5);
  GdnLayer layer;
  ASSERT_TRUE(layer.load(dummy, "layers.0.linear_attn.", spec, ctx).is_ok());
  EXPECT_EQ(layer.in_proj().shape(),
            (Shape{spec.conv_dim() + spec.value_dim() + 2 * spec.num_value_heads, 256}));
  EXPECT_FALSE(layer.in_proj_ba().weight.defined());
}

TEST(Fp8Dummy, LoadFormatDummyRunsAnFp8Config) {
  testing::TempDir dir("fp8_dummy");
  testing::HybridSpec spec =
      hybrid_spec(testing::HybridSpec::Family::kQwen3_5Moe, 22, /*conditional=*/true);
  ASSERT_TRUE(testing::HybridCheckpointWriter(spec).write(dir / "m").is_ok());
  nlohmann::json config;
  std::ifstream(dir / "m" / "config.json") >> config;
  config["quantization_config"] = {
      {"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  std::ofstream(dir / "m" / "config.json") << config.dump(2);
  fs::remove(dir / "m" / "model.safetensors");  // dummy needs config.json only
  LoadOptions options;
  options.load_format = "dummy";
  auto model = load_model(dir / "m", options);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  auto cache = (*model)->create_cache(CacheConfig{8, testing::kBlockSize, 2});
  testing::Seq seq;
  seq.tokens = {5, 6, 7, 8, 9};
  seq.blocks = {0, 1};
  Tensor logits = testing::step(**model, *cache, {{&seq, 5}});
  ASSERT_TRUE(logits.defined());
  double norm = 0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(logits.data<float>()[i]));
    norm += std::fabs(logits.data<float>()[i]);
  }
  EXPECT_GT(norm, 0.0);
}

TEST(Fp8Dummy, RealFp8ConfigBuildsOnTheMetaDeviceWithTheSameParameters) {
  // Qwen3.5-397B-A17B-FP8's structure with FP8 linear weights (shapes only): as many
  // parameters as with 16-bit ones.
  const fs::path path =
      fs::path(VLLM_SOURCE_DIR) / "configs" / "Qwen3.5-397B-A17B-FP8" / "config.json";
  auto config = load_model_config(path);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  ASSERT_TRUE(config->quantization.has_value());
  auto block = fp8_weight_block(*config->quantization);
  ASSERT_TRUE(block.has_value()) << block.status().to_string();
  EXPECT_EQ(*block, (WeightBlock{128, 128}));
  LoadOptions options;
  options.max_model_len = 4096;
  DummyWeights fp8(DType::kBF16, Device::meta(), 0, *block);
  ASSERT_TRUE(create_model(*config, fp8, options).has_value());
  DummyWeights bf16(DType::kBF16, Device::meta());
  ASSERT_TRUE(create_model(*config, bf16, options).has_value());
  EXPECT_EQ(fp8.num_parameters(), bf16.num_parameters());
  EXPECT_GT(fp8.num_parameters(), int64_t{390'000'000'000});
}

}  // namespace
}  // namespace test_fp8_engine
}  // namespace vllm
