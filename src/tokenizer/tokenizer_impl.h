// Tokenizer::Impl: the loaded pipeline and the encode / decode drivers. Internal to
// src/tokenizer (the incremental detokenizer decodes windows through it).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/components.h"
#include "tokenizer/tokenizer.h"

namespace vllm {

struct Tokenizer::Impl {
  std::string source;  // file name for messages
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  tok::BpeModel model;
  tok::AddedVocabulary added;
  std::optional<tok::PostProcessor> post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  bool decoder_has_byte_fallback = false;
  // The decoder only appends text as tokens are added (Decoder::appends_only); no decoder
  // joins tokens with spaces, which appends too.
  bool decoder_appends_only = true;

  // Word caches, one per concurrent encoder (an encode call holds one for its duration).
  struct CacheShard {
    std::mutex mutex;
    tok::WordCache cache;
  };
  mutable std::array<CacheShard, 8> cache_shards;

  Status encode_into(std::string_view text, bool add_special_tokens,
                     std::vector<int32_t>* ids) const;

  // The string decode starts from for `id` (added token, else model token), or nullopt.
  std::optional<std::string_view> token_string(int32_t id) const;
  // Whether decode(skip_special_tokens=true) drops `id` (unknown ids: false).
  bool is_special_id(int32_t id) const;
  // A byte-fallback token <0xNN> whose text a ByteFallback decoder may still change.
  bool is_pending_byte_token(int32_t id) const;

  // Decodes `ids` as a window of a longer sequence: at_start says whether it begins the
  // sequence (see DecodeState). No clean-up of tokenization spaces.
  Expected<std::string> decode_window(std::span<const int32_t> ids, bool skip_special_tokens,
                                      bool at_start) const;
};

namespace tok {
// transformers' clean_up_tokenization: " ." -> "." etc.
std::string clean_up_tokenization(std::string text);
}  // namespace tok

}  // namespace vllm
