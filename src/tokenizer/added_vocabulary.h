// Added tokens (tokenizer.json "added_tokens"), as `tokenizers`' AddedVocabulary:
//
// - Ids: assigned in file order as add_tokens does: a content already in the vocabulary
//   keeps that id, others take the next id after the model's vocabulary.
// - Matching happens before the model, leftmost-longest, in two passes: tokens with
//   normalized=false on the raw text, then tokens with normalized=true on each remaining
//   piece after the normalizer (their pattern is the normalized content).
// - single_word: only when not glued to word characters on either side; lstrip / rstrip:
//   the match swallows whitespace on that side.
// - special: skipped by decode(skip_special_tokens=true) (by content, as HF does).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/components.h"
#include "tokenizer/flat_map.h"

namespace vllm::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  static Expected<AddedVocabulary> from_json(const nlohmann::json& list, std::string_view where,
                                             const BpeModel& model, const Normalizer* normalizer);

  // Splits every piece without an id of pieces->list on the raw (normalized=false) or the
  // normalized (normalized=true) tokens.
  void split(Pieces* pieces, bool normalized_pass) const;
  bool has_normalized_tokens() const { return !normalized_trie_.empty(); }

  std::optional<int32_t> token_to_id(std::string_view content) const {
    return by_content_.find(content);
  }
  // The string decode uses for an added id (normalized content when it differs), or nullopt.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  const AddedToken* token(int32_t id) const;
  bool is_special_content(std::string_view token) const {
    return special_.count(std::string(token)) != 0;
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  int32_t max_id() const { return max_id_; }

 private:
  // A byte trie over token patterns with leftmost-longest search.
  class Trie {
   public:
    void add(std::string_view pattern, int32_t token_index);
    bool empty() const { return nodes_.size() <= 1; }
    // Longest pattern starting at text[pos]: its end and token index, or false.
    bool longest_at(std::string_view text, size_t pos, size_t* end, int32_t* token_index) const;
    bool may_start(unsigned char b) const { return first_[b]; }

   private:
    std::vector<int32_t> nodes_{-1};  // token index ending at each node, -1 if none
    U64Map<int32_t> edges_;           // (node << 8 | byte) -> child node
    bool first_[256] = {};
  };

  void split_piece(Pieces* pieces, const Piece& piece, const Trie& trie) const;

  std::vector<AddedToken> tokens_;  // one per id, in id order of first appearance
  U64Map<int32_t> by_id_;           // id -> index in tokens_
  StringIdMap by_content_;          // content -> id
  std::vector<std::optional<std::string>> normalized_content_;  // per tokens_ index
  std::unordered_set<std::string> special_;
  Trie raw_trie_;
  Trie normalized_trie_;
  int32_t max_id_ = -1;
};

}  // namespace vllm::tok
