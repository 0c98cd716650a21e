// Token bytes, stop tokens and the preorder byte trie (see vocab.h).
#include "structured/vocab.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace vllm::structured {
namespace {

constexpr size_t kMaxTokenBytes = 65535;  // TrieNode::depth is 16 bits

}  // namespace

Expected<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::from_tokenizer(
    const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> stop_token_ids) {
  if (vocab_size <= 0) vocab_size = tokenizer.vocab_size();
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  const int32_t defined = std::min(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < defined; ++id) {
    if (tokenizer.is_special(id)) continue;
    auto bytes = tokenizer.token_bytes(id);
    if (bytes) tokens[static_cast<size_t>(id)] = std::move(*bytes);
  }
  return from_bytes(std::move(tokens), std::move(stop_token_ids), vocab_size);
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_bytes(
    std::vector<std::string> tokens, std::vector<int32_t> stop_token_ids, int32_t vocab_size) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  v->vocab_size_ = std::max<int32_t>(vocab_size, static_cast<int32_t>(tokens.size()));
  tokens.resize(static_cast<size_t>(v->vocab_size_));
  v->bytes_ = std::move(tokens);
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= v->vocab_size_) continue;
    if (std::find(v->stop_ids_.begin(), v->stop_ids_.end(), id) == v->stop_ids_.end()) {
      v->stop_ids_.push_back(id);
    }
  }
  // Stop tokens end the grammar; they never count as text.
  for (int32_t id : v->stop_ids_) v->bytes_[static_cast<size_t>(id)].clear();
  v->build();
  return v;
}

bool TokenVocabulary::is_stop_token(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

void TokenVocabulary::build() {
  usable_mask_.assign(static_cast<size_t>(bitmask_words()), 0);
  for (int32_t id = 0; id < vocab_size_; ++id) {
    const std::string& b = bytes_[static_cast<size_t>(id)];
    if (b.empty() || b.size() > kMaxTokenBytes) continue;
    sorted_ids_.push_back(id);
    usable_mask_[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    max_token_length_ = std::max(max_token_length_, b.size());
  }
  std::stable_sort(sorted_ids_.begin(), sorted_ids_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  // Preorder nodes: each token adds the nodes for the bytes past its common prefix with the
  // previous token; a node's subtree ends when the walk pops back above it.
  trie_.push_back({0, 0, 0, 0});
  std::vector<int32_t> path = {0};  // node index per depth
  const std::string* previous = nullptr;
  for (size_t p = 0; p < sorted_ids_.size(); ++p) {
    const std::string& b = bytes_[static_cast<size_t>(sorted_ids_[p])];
    size_t lcp = 0;
    if (previous != nullptr) {
      const size_t n = std::min(previous->size(), b.size());
      while (lcp < n && (*previous)[lcp] == b[lcp]) ++lcp;
    }
    while (path.size() > lcp + 1) {
      trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < b.size(); ++d) {
      TrieNode node;
      node.depth = static_cast<uint16_t>(d + 1);
      node.byte = static_cast<uint8_t>(b[d]);
      node.token_lo = static_cast<int32_t>(p);
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(node);
    }
    previous = &b;
  }
  while (!path.empty()) {
    trie_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(trie_.size());
    path.pop_back();
  }
}

}  // namespace vllm::structured
