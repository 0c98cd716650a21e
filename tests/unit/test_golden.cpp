// Every model in tests/golden/ against the outputs transformers computed for it (f32, CPU):
//   - prefill logits at every position within relative L2 1e-4;
//   - greedy decoding (our own argmax fed back) gives the reference tokens up to the first
//     reference step whose top-2 log-prob margin is below 1e-3, and each decode step's logits
//     match the reference's within 1e-4 while the tokens agree.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "model/model.h"
#include "unit/model_harness.h"

namespace vllm {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitsTolerance = 1e-4;
constexpr float kMarginFloor = 1e-3f;

int64_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesTransformers) {
  const fs::path dir = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / GetParam();
  auto model = load_model(dir, LoadOptions{});
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  ASSERT_TRUE(reference.has_value()) << reference.status().to_string();
  const int64_t vocab = (*model)->config().vocab_size;

  int prompts = 0;
  for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    ++prompts;
    const std::string key = "prompt." + std::to_string(p) + ".";
    Tensor ids = *reference->tensor(key + "token_ids");
    Tensor ref_logits = *reference->tensor(key + "logits");
    Tensor ref_greedy = *reference->tensor(key + "greedy_token_ids");
    Tensor ref_margins = *reference->tensor(key + "greedy_margins");
    Tensor ref_greedy_logits = *reference->tensor(key + "greedy_logits");
    const int64_t n = ids.size(0), steps = ref_greedy.size(0);
    ASSERT_EQ(ref_logits.size(1), vocab);

    auto cache = (*model)->create_cache(CacheConfig{(n + steps) / testing::kBlockSize + 2,
                                                    testing::kBlockSize, 2});
    ASSERT_TRUE(cache.has_value()) << cache.status().to_string();
    testing::Seq seq;
    seq.slot = 1;  // not slot 0, to not assume it
    seq.tokens.assign(ids.data<int64_t>(), ids.data<int64_t>() + n);
    seq.blocks.resize(static_cast<size_t>(cache->config.num_blocks));
    std::iota(seq.blocks.begin(), seq.blocks.end(), 0);

    // Prefill: one step over the whole prompt.
    Tensor logits = testing::step(**model, *cache, {{&seq, n}});
    ASSERT_TRUE(logits.defined());
    for (int64_t i = 0; i < n; ++i) {
      const double err = testing::rel_l2(logits.data<float>() + i * vocab,
                                         ref_logits.data<float>() + i * vocab, vocab);
      ASSERT_LE(err, kLogitsTolerance) << GetParam() << " prompt " << p << " position " << i;
    }

    // Greedy decode from our own choices.
    int64_t next = argmax(logits.data<float>() + (n - 1) * vocab, vocab);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t want = ref_greedy.data<int64_t>()[s];
      if (ref_margins.data<float>()[s] < kMarginFloor) break;  // a near-tie: stop comparing
      ASSERT_EQ(next, want) << GetParam() << " prompt " << p << " greedy step " << s;
      if (s + 1 == steps) break;
      seq.tokens.push_back(next);
      Tensor step_logits = testing::step(**model, *cache, {{&seq, 1}});
      ASSERT_TRUE(step_logits.defined());
      // The reference's step s+1 logits were computed after feeding token s.
      const double err = testing::rel_l2(step_logits.data<float>(),
                                         ref_greedy_logits.data<float>() + (s + 1) * vocab, vocab);
      ASSERT_LE(err, kLogitsTolerance) << GetParam() << " prompt " << p << " decode step " << s + 1;
      next = argmax(step_logits.data<float>(), vocab);
    }
  }
  EXPECT_GE(prompts, 3);
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next"));

}  // namespace
}  // namespace vllm
