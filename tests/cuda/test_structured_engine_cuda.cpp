// Structured outputs through the engine on CUDA (BF16): the logits stay on the GPU, so the
// grammar bitmasks are applied there (cuda::TokenBitmaskApplier) before the GPU sampler.
// Every completed output of the demo model must conform to its JSON Schema, regex, choice or
// grammar, checked without the grammar engine; a grammar that allows no token ends its
// request with finish_reason "error". Skipped without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "backend/cuda/runtime.h"
#include "engine/engine_args.h"
#include "unit/structured_schema_gen.h"

namespace vllm::engine {
namespace {

namespace fs = std::filesystem;
using structured::StructuredOutputsParams;

struct Outcome {
  std::vector<int32_t> tokens;
  RequestStatus status = RequestStatus::kRunning;
};

std::map<std::string, Outcome> run_all(EngineCore& core) {
  std::map<std::string, Outcome> results;
  for (int step = 0; core.has_unfinished_requests() && step < 10000; ++step) {
    auto outputs = core.step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs) break;
    for (const EngineCoreOutput& o : *outputs) {
      Outcome& r = results[o.request_id];
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) r.status = o.status;
    }
  }
  return results;
}

std::string text_of(const Tokenizer& t, const std::vector<int32_t>& ids) {
  auto text = t.decode(ids, DecodeOptions{});
  EXPECT_TRUE(text.has_value());
  return text.has_value() ? *text : std::string();
}

class StructuredEngineCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: structured engine skipped";
    EngineArgs args;
    args.model = (fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo").string();
    args.device = "cuda";
    args.max_model_len = 512;
    args.engine.kv_cache_memory_bytes = 16 << 20;
    args.engine.scheduler.max_num_seqs = 16;
    args.seed = 1;
    auto loaded = build_engine(args);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
    engine_ = std::move(loaded).value();
  }

  static SamplingParams sampling(uint64_t seed, int32_t max_tokens) {
    SamplingParams p;
    p.temperature = 1.0;
    p.seed = static_cast<int64_t>(seed);
    p.max_tokens = max_tokens;
    return p;
  }

  LoadedEngine engine_;
};

TEST_F(StructuredEngineCuda, DemoModelOutputsConform) {
  EngineCore& core = *engine_.core;
  const Tokenizer& tokenizer = *engine_.tokenizer;
  const std::vector<int32_t> prompt = tokenizer.encode("def parse(text):\n", false).value();
  const std::string schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 10}, "count": {"type": "integer", "minimum": 0, "maximum": 99},
      "ok": {"type": "boolean"}, "kind": {"enum": ["int", "str", "list"]}}, "required": ["name", "count", "ok", "kind"]})";
  const std::string email = "[a-z]{1,8}@[a-z]{1,8}\\.com";
  const std::string sum = R"(root ::= num ((" + " | " - ") num){0,3}
                             num ::= [1-9] [0-9]{0,2})";
  for (int i = 0; i < 6; ++i) {
    StructuredOutputsParams json, regex, choice, grammar;
    json.json = schema;
    json.disable_any_whitespace = i % 2 == 0;
    regex.regex = email;
    choice.choice = std::vector<std::string>{"yes", "no", "it depends"};
    grammar.grammar = sum;
    int k = 0;
    for (const StructuredOutputsParams& so : {json, regex, choice, grammar}) {
      SamplingParams p = sampling(100 + i, 120);
      p.structured_outputs = so;
      if (i == 5) p.temperature = 0.0;  // greedy rows take the same masked path
      const std::string id = std::to_string(k++) + "_" + std::to_string(i);
      ASSERT_TRUE(core.add_request(id, prompt, p).is_ok()) << id;
    }
  }
  auto results = run_all(core);
  ASSERT_EQ(results.size(), 24u);
  int completed = 0;
  for (const auto& [id, r] : results) {
    SCOPED_TRACE(id);
    if (r.status != RequestStatus::kFinishedStopped) {
      EXPECT_EQ(r.status, RequestStatus::kFinishedLengthCapped);
      continue;
    }
    ++completed;
    const std::string text = text_of(tokenizer, r.tokens);
    switch (id[0]) {
      case '0': {
        auto v = nlohmann::json::parse(text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << text;
        std::string why;
        EXPECT_TRUE(structured::testing::valid(v, structured::testing::J::parse(schema), &why))
            << why;
        break;
      }
      case '1':
        EXPECT_TRUE(std::regex_match(text, std::regex(email))) << text;
        break;
      case '2':
        EXPECT_TRUE(text == "yes" || text == "no" || text == "it depends") << text;
        break;
      default:
        EXPECT_TRUE(
            std::regex_match(text, std::regex("[1-9][0-9]{0,2}(( \\+ | - )[1-9][0-9]{0,2}){0,3}")))
            << text;
    }
  }
  EXPECT_GE(completed, 12);
}

TEST_F(StructuredEngineCuda, NoAllowedTokenFinishesWithError) {
  EngineCore& core = *engine_.core;
  // After "yes" only EOS is allowed, and min_tokens masks EOS: nothing is left.
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"yes"};
  for (const double temperature : {1.0, 0.0}) {
    SamplingParams p = sampling(3, 20);
    p.temperature = temperature;
    p.min_tokens = 10;
    p.structured_outputs = so;
    const std::string id = temperature > 0.0 ? "random" : "greedy";
    ASSERT_TRUE(core.add_request(id, {100, 200, 300}, p).is_ok());
  }
  auto results = run_all(core);
  for (const std::string id : {"random", "greedy"}) {
    EXPECT_EQ(results[id].status, RequestStatus::kFinishedError) << id;
    EXPECT_EQ(text_of(*engine_.tokenizer, results[id].tokens), "yes") << id;
  }
  EXPECT_FALSE(core.has_unfinished_requests());
}

}  // namespace
}  // namespace vllm::engine
