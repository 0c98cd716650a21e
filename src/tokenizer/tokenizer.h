// Hugging Face tokenizer.json, exact to the `tokenizers` library: normalizer, pre-tokenizer,
// BPE model (byte-level, or SentencePiece-style with byte fallback), added / special tokens,
// post-processor and decoder, as the file describes them.
//
// Thread-safe: one Tokenizer may encode / decode from many threads at once. Streaming
// detokenization: incremental_detokenizer.h. Where we differ from `tokenizers` on purpose:
// decode() rejects unknown ids (HF skips them silently); truncation / padding in the file
// are ignored (transformers turns them off too); only the BPE model is supported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vllm {

struct DecodeOptions {
  bool skip_special_tokens = true;  // as vLLM's default
  // Only the streaming IncrementalDetokenizer uses this (as vLLM); HF's fast decode()
  // ignores it, and so does Tokenizer::decode.
  bool spaces_between_special_tokens = true;  // as vLLM's default
  // transformers' clean_up_tokenization (" ." -> "." ...). Off by default: transformers 5
  // ignores tokenizer_config.json's clean_up_tokenization_spaces for BPE tokenizers (all
  // the ones we load), so HF decode() never cleans up there.
  bool clean_up_tokenization_spaces = false;
};

class Tokenizer {
 public:
  // Loads tokenizer.json (a file, or a model folder holding one). Errors name the file and
  // the JSON path of the problem; an unsupported component is kUnsupported naming its type.
  static Expected<Tokenizer> from_file(const std::filesystem::path& path);
  static Expected<Tokenizer> from_json(std::string_view json_text, std::string_view source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text -> ids. add_special_tokens applies the post-processor (BOS/EOS templates) like
  // HF's encode(text, add_special_tokens=...). Text must be valid UTF-8 (else kInvalidArgument).
  Expected<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
  // Ids -> text, as HF's decode(ids, skip_special_tokens=...). An id outside the vocabulary
  // is kOutOfRange.
  Expected<std::string> decode(std::span<const int32_t> ids, const DecodeOptions& options) const;

  int32_t vocab_size() const;  // including added tokens: max id + 1
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // The bytes token `id` adds to a decoded text in the middle of a sequence, exactly: a
  // byte-level or byte-fallback token may hold part of a UTF-8 character, which decode()
  // would replace. For grammar matching (structured outputs). nullopt for unknown ids.
  std::optional<std::string> token_bytes(int32_t id) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace vllm
