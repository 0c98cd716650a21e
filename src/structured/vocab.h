// TokenVocabulary: what the grammar engine knows about a model's tokens -- the bytes each
// token adds to the output, which tokens end a sequence, and a byte trie over the rest.
//
// A token's bytes are those it contributes in the middle of a decoded text (byte-level BPE
// tokens may hold part of a UTF-8 character; the grammar works on bytes, so that is fine).
// Special tokens (and ids the tokenizer does not define, e.g. the padding up to the model's
// vocabulary size) never match grammar text; the stop tokens (the model's EOS ids) are
// allowed exactly when the grammar may end.
//
// The trie lists every distinct prefix of the usable tokens' byte strings in preorder, so a
// depth-first walk is a linear scan that can skip a dead subtree in one jump, and the tokens
// under a node are one contiguous range of the byte-sorted token list.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace vllm {
class Tokenizer;
}

namespace vllm::structured {

class TokenVocabulary {
 public:
  struct TrieNode {
    int32_t subtree_end = 0;  // index of the first node after this node's subtree
    int32_t token_lo = 0;     // first position in sorted_ids() under this node
    uint16_t depth = 0;       // bytes from the root (the root is node 0, depth 0)
    uint8_t byte = 0;         // the byte leading here from the parent
  };

  // `vocab_size`: the model's logits width (may exceed the tokenizer's ids). Tokens whose
  // bytes cannot be determined are left out. `stop_token_ids` outside the vocabulary are
  // dropped.
  static Expected<std::shared_ptr<const TokenVocabulary>> from_tokenizer(
      const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> stop_token_ids);
  // From explicit byte strings: tokens[id] ("" = never usable). For tests and benchmarks.
  static std::shared_ptr<const TokenVocabulary> from_bytes(std::vector<std::string> tokens,
                                                           std::vector<int32_t> stop_token_ids,
                                                           int32_t vocab_size = -1);

  int32_t vocab_size() const { return vocab_size_; }
  // 32-bit words of an allowed-token bitmask: bit (id % 32) of word (id / 32).
  int32_t bitmask_words() const { return (vocab_size_ + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_stop_token(int32_t id) const;
  std::span<const int32_t> stop_token_ids() const { return stop_ids_; }
  bool usable(int32_t id) const {
    return (usable_mask_[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u;
  }
  // Bitmask of the tokens that have bytes (the ones a grammar can allow as text).
  std::span<const uint32_t> usable_mask() const { return usable_mask_; }
  int32_t num_usable() const { return static_cast<int32_t>(sorted_ids_.size()); }

  std::span<const TrieNode> trie() const { return trie_; }
  // Usable token ids in byte order; position p of the trie's token ranges is sorted_ids()[p].
  std::span<const int32_t> sorted_ids() const { return sorted_ids_; }
  // The end of node i's token range (its subtree), and the end of the tokens exactly at it.
  int32_t subtree_token_end(int32_t node) const {
    const int32_t end = trie_[static_cast<size_t>(node)].subtree_end;
    return end < static_cast<int32_t>(trie_.size()) ? trie_[static_cast<size_t>(end)].token_lo
                                                    : static_cast<int32_t>(sorted_ids_.size());
  }
  int32_t exact_token_end(int32_t node) const {
    const auto next = static_cast<size_t>(node) + 1;
    return next < trie_.size() ? trie_[next].token_lo : static_cast<int32_t>(sorted_ids_.size());
  }
  size_t max_token_length() const { return max_token_length_; }

 private:
  void build();

  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int32_t> stop_ids_;
  std::vector<uint32_t> usable_mask_;
  std::vector<int32_t> sorted_ids_;
  std::vector<TrieNode> trie_;
  size_t max_token_length_ = 0;
};

}  // namespace vllm::structured
