// Reads tokenizer.json in one streaming (SAX) pass. Everything becomes an ordinary JSON
// value except the two big tables, model.vocab and model.merges (hundreds of thousands of
// entries), which go straight into flat vectors: building a JSON tree for them took most of
// the loading time (seconds for Gemma 3's 33 MB file).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace vllm::tok {

struct MergeEntry {
  std::string first;  // or the whole "a b" line when `line` is set
  std::string second;
  bool line = false;
};

struct TokenizerJson {
  nlohmann::json dom;  // model.vocab / model.merges are null here when captured below
  std::optional<std::vector<std::pair<std::string, int64_t>>> vocab;
  std::optional<std::vector<MergeEntry>> merges;
};

// kInvalidFormat naming `source` when the text is not JSON or a captured table has
// entries of the wrong type.
Expected<TokenizerJson> parse_tokenizer_json(std::string_view text, std::string_view source);

}  // namespace vllm::tok
