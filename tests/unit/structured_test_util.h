// Helpers for the structured-output tests: small byte-level vocabularies, compiling grammar
// text, whole-string matching, and the brute-force mask check every mask test relies on.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/ebnf.h"
#include "structured/matcher.h"
#include "structured/regex.h"
#include "structured/vocab.h"

namespace vllm::structured::testing {

// Ids 0..255 are the single bytes, then `extra` strings in order, then one EOS token.
inline std::shared_ptr<const TokenVocabulary> byte_vocab(
    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const std::string& t : extra) tokens.push_back(t);
  const auto eos = static_cast<int32_t>(tokens.size());
  tokens.push_back("");
  return TokenVocabulary::from_bytes(std::move(tokens), {eos});
}

inline int32_t eos_of(const TokenVocabulary& v) {
  return v.stop_token_ids()[0];
}

inline std::shared_ptr<const CompiledGrammar> compile(const Grammar& g,
                                                      std::shared_ptr<const TokenVocabulary> v,
                                                      CompileOptions options = CompileOptions()) {
  auto c = CompiledGrammar::compile(g, std::move(v), options);
  EXPECT_TRUE(c.has_value()) << c.status().to_string() << "\n" << g.to_ebnf();
  return c.has_value() ? *c : nullptr;
}

inline std::shared_ptr<const CompiledGrammar> compile_ebnf(
    const std::string& text, std::shared_ptr<const TokenVocabulary> v) {
  auto g = parse_ebnf(text);
  EXPECT_TRUE(g.has_value()) << g.status().to_string();
  return g.has_value() ? compile(*g, std::move(v)) : nullptr;
}

inline std::shared_ptr<const CompiledGrammar> compile_regex(
    const std::string& pattern, std::shared_ptr<const TokenVocabulary> v) {
  auto g = regex_to_grammar(pattern);
  EXPECT_TRUE(g.has_value()) << g.status().to_string();
  return g.has_value() ? compile(*g, std::move(v)) : nullptr;
}

// Whether the grammar matches `text` as a whole.
inline bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

// The next-token mask; *count gets the number of allowed tokens.
inline std::vector<uint32_t> mask_of(GrammarMatcher& m, int32_t* count = nullptr) {
  std::vector<uint32_t> mask(static_cast<size_t>(m.grammar().vocab().bitmask_words()));
  const bool any = m.fill_next_token_bitmask(mask);
  int32_t n = 0;
  for (uint32_t w : mask) n += std::popcount(w);
  EXPECT_EQ(any, n > 0);
  if (count) *count = n;
  return mask;
}

inline bool bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
}

// The byte strings of the allowed text tokens (for readable expectations).
inline std::set<std::string> allowed_texts(GrammarMatcher& m) {
  const auto mask = mask_of(m);
  std::set<std::string> out;
  const TokenVocabulary& v = m.grammar().vocab();
  for (int32_t id = 0; id < v.vocab_size(); ++id) {
    if (bit(mask, id) && !v.is_stop_token(id)) out.insert(v.token_bytes(id));
  }
  return out;
}

// The mask must equal, token by token, whether a copy of the matcher accepts the token.
// Returns the number of mismatches (each reported once, up to a few).
inline int expect_mask_exact(GrammarMatcher& m) {
  const auto mask = mask_of(m);
  const TokenVocabulary& v = m.grammar().vocab();
  int mismatches = 0;
  for (int32_t id = 0; id < v.vocab_size(); ++id) {
    GrammarMatcher copy = m;
    const bool accepted = copy.accept_token(id);
    if (accepted != bit(mask, id)) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << "token " << id << " '" << v.token_bytes(id) << "': mask says "
                      << bit(mask, id) << ", accept_token says " << accepted;
      }
    }
  }
  return mismatches;
}

}  // namespace vllm::structured::testing
