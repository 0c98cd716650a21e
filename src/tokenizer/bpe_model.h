// The BPE model of tokenizer.json, as `tokenizers`' models::bpe: the word's characters are
// looked up in the vocabulary (with continuing_subword_prefix / end_of_word_suffix, byte
// fallback to <0xNN> tokens, unk fusing), then merged lowest rank first, leftmost first
// among equal ranks. ignore_merges returns a word found whole in the vocabulary as is.
//
// Speed: merge ranks live in a flat table keyed by the id pair; merging works in reusable
// per-thread buffers; a bounded WordCache remembers the ids of recent words.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/flat_map.h"
#include "tokenizer/json_loader.h"

namespace vllm::tok {

// Word -> ids of recently seen words. Not thread-safe: one per thread or behind a lock.
// When full it starts over (a few hundred KB at most).
class WordCache {
 public:
  static constexpr size_t kMaxWords = 1 << 15;
  static constexpr size_t kMaxWordBytes = 256;  // longer words are not cached (as HF)

  bool lookup(std::string_view word, std::vector<int32_t>* ids) const;
  void insert(std::string_view word, const int32_t* ids, size_t count);

 private:
  StringIdMap index_;  // word -> offset in ids_, where [count, ids...] is stored
  std::vector<int32_t> ids_;
};

class BpeModel {
 public:
  // `vocab` / `merges`, when given, replace model.vocab / model.merges (the loader captures
  // them outside the JSON tree); they are consumed.
  static Expected<BpeModel> from_json(const nlohmann::json& model, std::string_view where,
                                      std::vector<std::pair<std::string, int64_t>>* vocab = nullptr,
                                      std::vector<MergeEntry>* merges = nullptr);

  // Appends the ids of one pre-tokenized word. `cache` may be null. Fails only when the
  // word needs the unk token and the vocabulary lacks it (as `tokenizers` does).
  Status tokenize(std::string_view word, std::vector<int32_t>* ids, WordCache* cache) const;

  std::optional<int32_t> token_to_id(std::string_view token) const { return vocab_.find(token); }
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // Number of vocabulary entries (what `tokenizers` calls the model's vocab size).
  size_t vocab_len() const { return vocab_.size(); }
  int32_t max_id() const { return max_id_; }

 private:
  struct MergeValue {
    uint32_t rank = 0;
    int32_t new_id = -1;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  Status merge_word(std::string_view word, std::vector<int32_t>* ids) const;

  StringIdMap vocab_;
  // id -> token: dense when ids are compact (every real vocabulary), else a hash map.
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::unordered_map<int32_t, std::string> sparse_id_to_token_;
  int32_t max_id_ = -1;
  U64Map<MergeValue> merges_;
  int32_t byte_ids_[256] = {};  // <0xNN> token ids for byte fallback, -1 if absent
  std::optional<int32_t> unk_id_;
  std::optional<std::string> unk_token_;
  std::optional<std::string> continuing_subword_prefix_;
  std::optional<std::string> end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace vllm::tok
