// Every model in tests/golden/ against the outputs transformers computed for it (f32, CPU):
//   - prefill logits at every position within relative L2 1e-4;
//   - greedy decoding (our own argmax fed back) gives the reference tokens up to the first
//     reference step whose top-2 log-prob margin is below 1e-3, and each decode step's logits
//     match the reference's within 1e-4 while the tokens agree;
//   - that comparison covers at least kMinComparedSteps greedy steps per model, so a change
//     that shortens it (fewer prompts or steps, a higher margin floor) fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "loader/safetensors.h"
#include "model/model.h"
#include "unit/model_harness.h"

namespace vllm {
namespace test_golden {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitsTolerance = 1e-4;
constexpr float kMarginFloor = 1e-3f;
// Greedy steps compared per model: every step of the references written by
// scripts/make_golden.py (4 prompts x 32 steps; the FP8 checkpoints 3 x 16; none of them a
// near-tie).
const std::map<std::string, int64_t> kMinComparedSteps = {
    {"llama", 128},       {"qwen3", 128},          {"qwen3_5_dense", 128},
    {"qwen3_5_moe", 128}, {"qwen3_next", 128},     {"qwen3_5_dense_fp8", 48},
    {"qwen3_5_moe_fp8", 48}};

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
  double worst_prefill = 0, worst_decode = 0;
  int64_t compared_steps = 0;
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
      worst_prefill = std::max(worst_prefill, err);
    }

    // Greedy decode from our own choices.
    int64_t next = argmax(logits.data<float>() + (n - 1) * vocab, vocab);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t want = ref_greedy.data<int64_t>()[s];
      if (ref_margins.data<float>()[s] < kMarginFloor) break;  // a near-tie: stop comparing
      ASSERT_EQ(next, want) << GetParam() << " prompt " << p << " greedy step " << s;
      ++compared_steps;
      if (s + 1 == steps) break;
      seq.tokens.push_back(next);
      Tensor step_logits = testing::step(**model, *cache, {{&seq, 1}});
      ASSERT_TRUE(step_logits.defined());
      // The reference's step s+1 logits were computed after feeding token s.
      const double err = testing::rel_l2(step_logits.data<float>(),
                                         ref_greedy_logits.data<float>() + (s + 1) * vocab, vocab);
      ASSERT_LE(err, kLogitsTolerance) << GetParam() << " prompt " << p << " decode step " << s + 1;
      worst_decode = std::max(worst_decode, err);
      next = argmax(step_logits.data<float>(), vocab);
    }
  }
  EXPECT_GE(prompts, 3);
  ASSERT_EQ(kMinComparedSteps.count(GetParam()), 1u) << "no minimum for " << GetParam();
  EXPECT_GE(compared_steps, kMinComparedSteps.at(GetParam()))
      << GetParam() << ": fewer greedy steps compared than the reference holds";
  std::printf("%-14s %d prompts: worst prefill rel L2 %.2e, worst decode rel L2 %.2e, %lld greedy "
              "tokens equal\n",
              GetParam().c_str(), prompts, worst_prefill, worst_decode,
              static_cast<long long>(compared_steps));
}

// The reference prompts plus one more, so there are five requests of different lengths.
std::vector<std::vector<int64_t>> golden_prompts(const SafetensorsFile& reference) {
  std::vector<std::vector<int64_t>> prompts;
  for (int p = 0; reference.contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    Tensor ids = *reference.tensor("prompt." + std::to_string(p) + ".token_ids");
    prompts.emplace_back(ids.data<int64_t>(), ids.data<int64_t>() + ids.size(0));
  }
  std::vector<int64_t> extra(prompts[0].rbegin(), prompts[0].rend());
  extra.insert(extra.end(), prompts[1].begin(), prompts[1].end());
  prompts.push_back(extra);
  return prompts;
}

struct Loaded {
  std::unique_ptr<Model> model;
  std::vector<std::vector<int64_t>> prompts;
};

Loaded load_golden(const std::string& name) {
  const fs::path dir = fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name;
  auto model = load_model(dir, LoadOptions{});
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  EXPECT_TRUE(reference.has_value()) << reference.status().to_string();
  if (!model.has_value() || !reference.has_value()) return {};
  return {std::move(*model), golden_prompts(*reference)};
}

constexpr int64_t kDecodeSteps = 4;
constexpr int64_t kBlocksPerRequest = 32;

// Requests run together (mixed prefill, then batched greedy decode steps) give each one the
// logits and tokens it gets alone, for batches of two and of five requests (request r runs
// prompt r modulo the reference's prompt count: the FP8 references have three).
TEST_P(GoldenTest, BatchesOfTwoAndFiveMatchAlone) {
  Loaded g = load_golden(GetParam());
  ASSERT_TRUE(g.model);
  ASSERT_GE(g.prompts.size(), 3u);
  auto prompt = [&](size_t r) -> const std::vector<int64_t>& {
    return g.prompts[r % g.prompts.size()];
  };
  const int64_t vocab = g.model->config().vocab_size;
  const int64_t num_blocks = 5 * kBlocksPerRequest;

  // What request r produces alone: the last prefill row, then each decode step's logits.
  auto run = [&](const std::vector<size_t>& requests) {
    auto cache = g.model->create_cache(CacheConfig{num_blocks, testing::kBlockSize, 8});
    EXPECT_TRUE(cache.has_value());
    std::vector<testing::Seq> seqs(requests.size());
    std::vector<std::pair<testing::Seq*, int64_t>> prefill;
    for (size_t i = 0; i < requests.size(); ++i) {
      const size_t r = requests[i];
      seqs[i].tokens = prompt(r);
      seqs[i].slot = static_cast<int32_t>(7 - r);  // slots not in row order
      for (int64_t b = 0; b < kBlocksPerRequest; ++b) {
        seqs[i].blocks.push_back(static_cast<int32_t>(b * 5 + static_cast<int64_t>(r)));
      }
      prefill.push_back({&seqs[i], static_cast<int64_t>(prompt(r).size())});
    }
    std::vector<std::vector<float>> out(requests.size());
    Tensor logits = testing::step(*g.model, *cache, prefill);
    int64_t row = 0;
    std::vector<std::pair<testing::Seq*, int64_t>> decode;
    for (size_t i = 0; i < requests.size(); ++i) {
      row += static_cast<int64_t>(prompt(requests[i]).size());
      const float* last = logits.data<float>() + (row - 1) * vocab;
      out[i].assign(last, last + vocab);
      seqs[i].tokens.push_back(argmax(last, vocab));
      decode.push_back({&seqs[i], 1});
    }
    for (int64_t s = 0; s < kDecodeSteps; ++s) {
      Tensor step_logits = testing::step(*g.model, *cache, decode);
      for (size_t i = 0; i < requests.size(); ++i) {
        const float* l = step_logits.data<float>() + static_cast<int64_t>(i) * vocab;
        out[i].insert(out[i].end(), l, l + vocab);
        seqs[i].tokens.push_back(argmax(l, vocab));
      }
    }
    for (auto& seq : seqs) out.push_back(std::vector<float>(seq.tokens.begin(), seq.tokens.end()));
    return out;  // [logits of each request..., tokens of each request...]
  };

  std::vector<std::vector<float>> alone_logits, alone_tokens;
  for (size_t r = 0; r < 5; ++r) {
    auto out = run({r});
    alone_logits.push_back(out[0]);
    alone_tokens.push_back(out[1]);
  }
  for (const std::vector<size_t>& batch : {std::vector<size_t>{3, 1}, std::vector<size_t>{0, 1, 2, 3, 4}}) {
    auto out = run(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      const size_t r = batch[i];
      ASSERT_EQ(out[i].size(), alone_logits[r].size());
      EXPECT_LT(testing::rel_l2(out[i].data(), alone_logits[r].data(),
                                static_cast<int64_t>(out[i].size())),
                1e-5)
          << GetParam() << " batch of " << batch.size() << ", request " << r;
      EXPECT_EQ(out[batch.size() + i], alone_tokens[r])
          << GetParam() << " batch of " << batch.size() << ", request " << r;
    }
  }
}

// Prefill in chunks of 1, 3 and 7 tokens gives the logits of one whole-prompt step: the KV
// cache and the GDN state carry across chunks.
TEST_P(GoldenTest, ChunkedPrefillMatchesWhole) {
  Loaded g = load_golden(GetParam());
  ASSERT_TRUE(g.model);
  const std::vector<int64_t>& prompt = g.prompts[3];  // the longest reference prompt
  const auto n = static_cast<int64_t>(prompt.size());
  const int64_t vocab = g.model->config().vocab_size;
  auto run = [&](int64_t chunk) {
    auto cache = g.model->create_cache(CacheConfig{kBlocksPerRequest, testing::kBlockSize, 2});
    EXPECT_TRUE(cache.has_value());
    testing::Seq seq;
    seq.tokens = prompt;
    seq.slot = 1;
    for (int32_t b = 0; b < kBlocksPerRequest; ++b) seq.blocks.push_back(kBlocksPerRequest - 1 - b);
    std::vector<float> logits;
    while (seq.computed < n) {
      Tensor part = testing::step(*g.model, *cache, {{&seq, std::min(chunk, n - seq.computed)}});
      logits.insert(logits.end(), part.data<float>(), part.data<float>() + part.numel());
    }
    return logits;
  };
  const std::vector<float> whole = run(n);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), n * vocab);
  for (int64_t chunk : {1, 3, 7}) {
    const std::vector<float> chunked = run(chunk);
    ASSERT_EQ(chunked.size(), whole.size());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(testing::rel_l2(chunked.data() + i * vocab, whole.data() + i * vocab, vocab), 1e-5)
          << GetParam() << " chunk " << chunk << " position " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next", "qwen3_5_dense_fp8",
                                           "qwen3_5_moe_fp8"));

}  // namespace
}  // namespace test_golden
}  // namespace vllm
