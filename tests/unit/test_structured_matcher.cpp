// GrammarMatcher: masks against hand-checked expectations, and against a brute-force
// per-token check on random walks (the precomputed accepted / uncertain split must never
// change which tokens are allowed).
#include <gtest/gtest.h>

#include <random>

#include "structured/json_schema.h"
#include "structured_test_util.h"

namespace vllm::structured {
namespace test_structured_matcher {
namespace {

using testing::allowed_texts;
using testing::bit;
using testing::byte_vocab;
using testing::compile_ebnf;
using testing::eos_of;
using testing::expect_mask_exact;
using testing::mask_of;
using Texts = std::set<std::string>;

TEST(StructuredMatcher, HandCheckedMasks) {
  auto vocab = TokenVocabulary::from_bytes({"a", "b", "c", "ab", "abc", "bc", "cab", "x", ""}, {8});
  auto g = compile_ebnf(R"(root ::= "a" "b"* "c")", vocab);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  EXPECT_EQ(allowed_texts(m), (Texts{"a", "ab", "abc"}));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_token(3));  // "ab"
  EXPECT_EQ(allowed_texts(m), (Texts{"b", "c", "bc"}));
  EXPECT_FALSE(m.accept_token(0));  // "a" is not allowed here, and changes nothing
  EXPECT_EQ(allowed_texts(m), (Texts{"b", "c", "bc"}));
  ASSERT_TRUE(m.accept_token(5));  // "bc"
  EXPECT_TRUE(m.can_end());
  int32_t count = 0;
  auto mask = mask_of(m, &count);
  EXPECT_EQ(count, 1);  // only EOS
  EXPECT_TRUE(bit(mask, 8));
  EXPECT_TRUE(m.accept_token(8));
  EXPECT_TRUE(m.is_terminated());
  mask_of(m, &count);
  EXPECT_EQ(count, 0);
  EXPECT_FALSE(m.accept_token(0));
}

TEST(StructuredMatcher, RecursionUsesTheRealStack) {
  // Tokens that close more than one level are "uncertain" in the precomputed masks and are
  // checked against the actual nesting.
  auto vocab =
      TokenVocabulary::from_bytes({"(", ")", "x", "((", "))", ")))", "x)", "x))", "x)))", ""}, {9});
  auto g = compile_ebnf(R"g(root ::= "(" root ")" | "x")g", vocab);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_token(3));  // "(("
  EXPECT_EQ(allowed_texts(m), (Texts{"(", "((", "x", "x)", "x))"}));
  ASSERT_TRUE(m.accept_token(2));  // "x"
  EXPECT_EQ(allowed_texts(m), (Texts{")", "))"}));
  EXPECT_EQ(expect_mask_exact(m), 0);
  ASSERT_TRUE(m.accept_token(4));  // "))"
  EXPECT_TRUE(m.can_end());
  int32_t count = 0;
  mask_of(m, &count);
  EXPECT_EQ(count, 1);
}

TEST(StructuredMatcher, NoAllowedTokenGivesAnEmptyMask) {
  // The grammar needs a "z" after "a", and no token can write one.
  auto vocab = TokenVocabulary::from_bytes({"a", "b", ""}, {2});
  auto g = compile_ebnf(R"(root ::= "a" "z")", vocab);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_token(0));
  int32_t count = -1;
  mask_of(m, &count);
  EXPECT_EQ(count, 0);
  EXPECT_FALSE(m.accept_token(1));
  EXPECT_FALSE(m.accept_token(2));  // EOS: the grammar is not complete
}

TEST(StructuredMatcher, PartialUtf8TokensAdvanceByBytes) {
  // "é" is C3 A9; byte-level tokenizers may split it across two tokens.
  auto vocab = TokenVocabulary::from_bytes({"\xC3", "\xA9", "a", "\xC3\xA9", ""}, {4});
  auto g = compile_ebnf(R"(root ::= [^a]+)", vocab);
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  EXPECT_EQ(allowed_texts(m), (Texts{"\xC3", "\xC3\xA9"}));
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_EQ(allowed_texts(m), (Texts{"\xA9"}));  // only the continuation byte
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.can_end());
}

TEST(StructuredMatcher, SpecialTokensNeverMatchText) {
  // A token with empty bytes (a special token) is never allowed, even where text may go.
  auto vocab = TokenVocabulary::from_bytes({"a", "", "b", ""}, {3});
  auto g = compile_ebnf(R"(root ::= [a-z]*)", vocab);
  GrammarMatcher m(g);
  auto mask = mask_of(m);
  EXPECT_TRUE(bit(mask, 0));
  EXPECT_FALSE(bit(mask, 1));
  EXPECT_TRUE(bit(mask, 2));
  EXPECT_TRUE(bit(mask, 3));  // EOS: "" matches
}

// Multi-byte tokens typical of JSON in real vocabularies.
std::vector<std::string> json_tokens() {
  return {"{\"",   "\"}",  "\":",  "\": ",     "\",",  "\", \"",      "},",   "}]",
          "}}",    "]}",   "],",   "[{",       "[[",   "]]",          "null", "true",
          "false", "tr",   "ue",   "12",       "3.",   ".5",          "e+",   "-1",
          "  ",    "\n",   "\n  ", "\\\"",     "\\n",  "\\u00",       "ab",   "\"a",
          "a\"",   "\"}]", "\"}}", "}},",      "\"],", "\":{\"",      "\":[", "\":\"",
          "1,",    "1}",   "2]",   "\xE4\xB8", "\xAD", "\xE4\xB8\xAD"};
}

void random_walk(const std::shared_ptr<const CompiledGrammar>& g, uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  GrammarMatcher m(g);
  for (int step = 0; step < steps; ++step) {
    ASSERT_EQ(expect_mask_exact(m), 0) << "seed " << seed << " step " << step;
    const auto mask = mask_of(m);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < g->vocab().vocab_size(); ++id) {
      if (bit(mask, id)) allowed.push_back(id);
    }
    if (allowed.empty()) return;
    // Prefer longer tokens to get deep quickly; EOS only sometimes.
    int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (g->vocab().is_stop_token(pick) && rng() % 4 != 0) {
      if (allowed.size() == 1) return;
      continue;
    }
    ASSERT_TRUE(m.accept_token(pick));
    if (m.is_terminated()) return;
  }
}

TEST(StructuredMatcher, JsonGrammarMasksMatchBruteForce) {
  auto g = json_object_grammar();
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  auto compiled = testing::compile(*g, byte_vocab(json_tokens()));
  ASSERT_NE(compiled, nullptr);
  EXPECT_GT(compiled->automaton().num_automaton_rules(), 1);  // objects and arrays recurse
  for (uint32_t seed = 1; seed <= 12; ++seed) random_walk(compiled, seed, 60);
}

TEST(StructuredMatcher, RecursiveGrammarMasksMatchBruteForce) {
  auto vocab = byte_vocab({"((", "))", ")(", "()", "[(", ")]", "]]", "x)", "(x", "x)]", ")))"});
  auto g = compile_ebnf(R"g(
    root ::= item+
    item ::= "(" inner ")" | "[" inner "]" | "x"
    inner ::= item* ("," item)?
  )g",
                        vocab);
  ASSERT_NE(g, nullptr);
  for (uint32_t seed = 1; seed <= 12; ++seed) random_walk(g, seed, 50);
}

TEST(StructuredMatcher, LazyMasksEqualPrecomputedOnes) {
  auto g = json_object_grammar();
  ASSERT_TRUE(g.has_value());
  auto vocab = byte_vocab(json_tokens());
  CompileOptions lazy;
  lazy.precompute_masks = false;
  auto eager = testing::compile(*g, vocab);
  auto later = testing::compile(*g, vocab, lazy);
  ASSERT_EQ(eager->automaton().num_states(), later->automaton().num_states());
  EXPECT_EQ(later->num_precomputed(), 0);
  for (int32_t s = 0; s < eager->automaton().num_states(); ++s) {
    const StateMask& a = eager->state_mask(s);
    const StateMask& b = later->state_mask(s);
    EXPECT_EQ(a.num_accepted, b.num_accepted) << s;
    EXPECT_EQ(a.uncertain, b.uncertain) << s;
  }
}

TEST(StructuredMatcher, InlinedGrammarsHaveNoUncertainTokens) {
  auto g = compile_ebnf(R"g(root ::= "{\"a\": " ("1" | "22") ", \"b\": \"" [a-z]* "\"}")g",
                        byte_vocab(json_tokens()));
  ASSERT_NE(g, nullptr);
  for (int32_t s = 0; s < g->automaton().num_states(); ++s) {
    EXPECT_TRUE(g->state_mask(s).uncertain.empty()) << "state " << s;
  }
}

}  // namespace
}  // namespace test_structured_matcher
}  // namespace vllm::structured
