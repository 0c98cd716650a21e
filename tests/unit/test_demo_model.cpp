// The shipped demo model (models/qwen35-moe-demo, bf16 weights run in f32 on the CPU) against
// what transformers computed for it (tests/golden/demo_model, written by
// scripts/train_demo_model.py in the same run that trained the model):
//   - our tokenizer gives transformers' ids for the 10 prompts (and decodes them back);
//   - prefill logits at the last prompt position, and the first decode step's, within
//     relative L2 1e-4;
//   - the engine (all 10 prompts batched together, greedy) produces transformers' 32 tokens,
//     compared up to the first reference step whose top-2 log-prob margin is below 1e-3,
//     and that covers at least kMinComparedSteps of them (so the comparison cannot shrink).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "loader/safetensors.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "unit/model_harness.h"

namespace vllm {
namespace test_demo_model {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitsTolerance = 1e-4;
constexpr float kMarginFloor = 1e-3f;
// Greedy steps compared over the 10 prompts: all 320 (no reference step is a near-tie).
constexpr size_t kMinComparedSteps = 320;

const fs::path kModelDir = fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo";
const fs::path kReferenceDir = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "demo_model";

struct ReferencePrompt {
  std::string text;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;
  std::vector<float> margins;
};

std::vector<ReferencePrompt> load_reference() {
  std::ifstream in(kReferenceDir / "reference.json");
  EXPECT_TRUE(in.good()) << "cannot open " << (kReferenceDir / "reference.json");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  EXPECT_FALSE(j.is_discarded());
  std::vector<ReferencePrompt> out;
  if (j.is_discarded()) return out;
  for (const auto& p : j["prompts"]) {
    out.push_back({p["prompt"].get<std::string>(),
                   p["prompt_token_ids"].get<std::vector<int32_t>>(),
                   p["greedy_token_ids"].get<std::vector<int32_t>>(),
                   p["greedy_margins"].get<std::vector<float>>()});
  }
  return out;
}

// Steps compared: up to (excluding) the first step whose margin is below the floor; a near
// tie there may go either way in another f32 implementation.
size_t comparable_steps(const ReferencePrompt& p) {
  size_t n = 0;
  while (n < p.margins.size() && p.margins[n] >= kMarginFloor) ++n;
  return n;
}

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

TEST(DemoModelTest, TokenizerMatchesTransformers) {
  auto tokenizer = Tokenizer::from_file(kModelDir);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().to_string();
  const auto prompts = load_reference();
  ASSERT_EQ(prompts.size(), 10u);
  for (const ReferencePrompt& p : prompts) {
    auto ids = tokenizer->encode(p.text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
    EXPECT_EQ(*ids, p.prompt_ids) << p.text;
    DecodeOptions keep;
    keep.skip_special_tokens = false;
    auto text = tokenizer->decode(p.prompt_ids, keep);
    ASSERT_TRUE(text.has_value()) << text.status().to_string();
    EXPECT_EQ(*text, p.text);
  }
}

TEST(DemoModelTest, LogitsMatchTransformers) {
  auto model = load_model(kModelDir, LoadOptions{});
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  auto reference = SafetensorsFile::open(kReferenceDir / "reference.safetensors");
  ASSERT_TRUE(reference.has_value()) << reference.status().to_string();
  const int64_t vocab = (*model)->config().vocab_size;
  const auto prompts = load_reference();
  ASSERT_EQ(prompts.size(), 10u);
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const ReferencePrompt& p = prompts[i];
    const std::string key = "prompt." + std::to_string(i) + ".";
    Tensor ref_last = *reference->tensor(key + "last_logits");
    Tensor ref_decode = *reference->tensor(key + "decode_logits");
    ASSERT_EQ(ref_last.size(0), vocab);
    const auto n = static_cast<int64_t>(p.prompt_ids.size());
    auto cache = (*model)->create_cache(
        CacheConfig{(n + 2) / testing::kBlockSize + 2, testing::kBlockSize, 1});
    ASSERT_TRUE(cache.has_value()) << cache.status().to_string();
    testing::Seq seq;
    seq.tokens.assign(p.prompt_ids.begin(), p.prompt_ids.end());
    seq.blocks.resize(static_cast<size_t>(cache->config.num_blocks));
    std::iota(seq.blocks.begin(), seq.blocks.end(), 0);

    Tensor logits = testing::step(**model, *cache, {{&seq, n}});
    ASSERT_TRUE(logits.defined());
    const float* last = logits.data<float>() + (n - 1) * vocab;
    double err = testing::rel_l2(last, ref_last.data<float>(), vocab);
    EXPECT_LE(err, kLogitsTolerance) << "prompt " << i << " prefill";
    worst = std::max(worst, err);

    // One decode step on the reference's first greedy token.
    if (p.margins[0] < kMarginFloor) continue;
    ASSERT_EQ(argmax(last, vocab), p.greedy_ids[0]) << "prompt " << i;
    seq.tokens.push_back(p.greedy_ids[0]);
    Tensor next = testing::step(**model, *cache, {{&seq, 1}});
    ASSERT_TRUE(next.defined());
    err = testing::rel_l2(next.data<float>(), ref_decode.data<float>(), vocab);
    EXPECT_LE(err, kLogitsTolerance) << "prompt " << i << " first decode step";
    worst = std::max(worst, err);
  }
  std::printf("demo model: worst logits rel L2 %.2e over 10 prompts (prefill + first decode)\n",
              worst);
}

TEST(DemoModelTest, EngineGreedyMatchesTransformers) {
  auto model = load_model(kModelDir, LoadOptions{});
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  engine::EngineConfig config;
  config.scheduler.max_model_len = 256;
  config.kv_cache_memory_bytes = 16 << 20;
  auto core = engine::EngineCore::create(std::move(*model), config, {});
  ASSERT_TRUE(core.has_value()) << core.status().to_string();
  const auto prompts = load_reference();
  ASSERT_EQ(prompts.size(), 10u);

  SamplingParams greedy;
  greedy.temperature = 0.0;
  greedy.ignore_eos = true;
  greedy.max_tokens = static_cast<int32_t>(prompts[0].greedy_ids.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Status s = (*core)->add_request(std::to_string(i), prompts[i].prompt_ids, greedy);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, std::vector<int32_t>> tokens;
  for (int step = 0; (*core)->has_unfinished_requests() && step < 1000; ++step) {
    auto outputs = (*core)->step();
    ASSERT_TRUE(outputs.has_value()) << outputs.status().to_string();
    for (const engine::EngineCoreOutput& o : *outputs) {
      auto& t = tokens[o.request_id];
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  ASSERT_FALSE((*core)->has_unfinished_requests());

  auto tokenizer = Tokenizer::from_file(kModelDir);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().to_string();
  size_t compared = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const ReferencePrompt& p = prompts[i];
    const std::vector<int32_t>& ours = tokens[std::to_string(i)];
    ASSERT_EQ(ours.size(), p.greedy_ids.size()) << "prompt " << i;
    const size_t n = comparable_steps(p);
    compared += n;
    for (size_t j = 0; j < n; ++j) {
      ASSERT_EQ(ours[j], p.greedy_ids[j]) << "prompt " << i << " step " << j;
    }
    if (i == 0) {
      auto text = tokenizer->decode(ours, DecodeOptions{});
      ASSERT_TRUE(text.has_value());
      std::printf("demo model, greedy: %s%s\n", p.text.c_str(), text->c_str());
    }
  }
  std::printf("demo model: %zu of %zu greedy tokens compared, all equal\n", compared,
              prompts.size() * prompts[0].greedy_ids.size());
  EXPECT_GE(compared, kMinComparedSteps) << "fewer greedy steps compared than the reference holds";
}

}  // namespace
}  // namespace test_demo_model
}  // namespace vllm
