// The pattern of a Split pre-tokenizer or a Replace normalizer / decoder: a literal string
// or a regex. `tokenizers` compiles both with Oniguruma (a literal is escaped first) and
// walks the matches with onig's find_iter; we use PCRE2 (UTF + UCP, JIT) and reproduce
// find_iter's treatment of empty matches. Matching is thread-safe (per-thread match data).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vllm::tok {

struct Match {
  uint32_t begin;
  uint32_t end;
};

class Pattern {
 public:
  static Pattern literal(std::string text);
  // `where` names the JSON field in errors ("pre_tokenizer.pretokenizers[0].pattern").
  static Expected<Pattern> regex(std::string_view expression, std::string_view where);
  // {"String": "..."} or {"Regex": "..."}, as tokenizer.json writes a pattern.
  static Expected<Pattern> from_json(const nlohmann::json& j, std::string_view where);
  // The required field `key` of `object` (Replace's and Split's "pattern").
  static Expected<Pattern> from_field(const nlohmann::json& object, std::string_view key,
                                      std::string_view where);

  // Appends the matches in `text` in order. An error only when the regex engine gives up
  // (match limit, e.g. a pathological pattern).
  Status find_matches(std::string_view text, std::vector<Match>* matches) const;

  bool is_literal() const { return code_ == nullptr; }
  const std::string& text() const { return text_; }

 private:
  struct Code;
  std::string text_;            // the literal, or the regex source
  std::shared_ptr<Code> code_;  // null for a literal
};

}  // namespace vllm::tok
