// Streaming detokenizer (see incremental_detokenizer.h).
#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_util.h"

namespace vllm {
namespace {

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && std::string_view(s).substr(s.size() - 3) == tok::kReplacementUtf8;
}

// vLLM starts its stream at the shortest prompt suffix (4..23 tokens) whose decode has no
// U+FFFD, else at the whole prompt.
std::span<const int32_t> prompt_suffix(const Tokenizer& tokenizer,
                                       std::span<const int32_t> prompt) {
  if (prompt.size() <= 4) return prompt;
  for (size_t i = 4; i < std::min(prompt.size() + 1, size_t{24}); ++i) {
    std::span<const int32_t> suffix = prompt.subspan(prompt.size() - i);
    Expected<std::string> text = tokenizer.impl().decode_window(suffix, true, false);
    if (text && text->find(tok::kReplacementUtf8) == std::string::npos) return suffix;
  }
  return prompt;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               const DecodeOptions& options,
                                               std::span<const int32_t> prompt_ids)
    : tokenizer_(&tokenizer), options_(options) {
  hold_all_ = !tokenizer.impl().decoder_appends_only;
  space_quirk_ =
      !hold_all_ && !options.skip_special_tokens && !options.spaces_between_special_tokens;
  std::span<const int32_t> suffix = prompt_suffix(tokenizer, prompt_ids);
  at_start_ = suffix.size() == prompt_ids.size();
  for (int32_t id : suffix) {
    (void)advance(id, false);  // priming: the prompt's own text is not returned
  }
  if (hold_all_ && !ids_.empty()) {  // the primed ids are all context
    Expected<std::string> context =
        tokenizer.impl().decode_window(ids_, options.skip_special_tokens, at_start_);
    if (context) prefix_ = *context;
    prefix_index_ = ids_.size();
  }
}

bool IncrementalDetokenizer::skipped(int32_t id) const {
  return options_.skip_special_tokens && tokenizer_->impl().is_special_id(id);
}

Expected<std::string> IncrementalDetokenizer::step(int32_t id) {
  VLLM_ASSIGN_OR_RETURN(std::string text, advance(id, false));
  if (space_quirk_) {
    const tok::AddedToken* added = tokenizer_->impl().added.token(id);
    if (added != nullptr && last_added_) text = added->content;
    last_added_ = added != nullptr;
  }
  return text;
}

Expected<std::string> IncrementalDetokenizer::flush() {
  if (ids_.size() == prefix_index_) return std::string();
  return advance(-1, true);
}

Expected<std::string> IncrementalDetokenizer::advance(int32_t id, bool force) {
  const Tokenizer::Impl& impl = tokenizer_->impl();
  const bool skip = options_.skip_special_tokens;
  if (!force) {
    if (!impl.token_string(id)) {
      return make_error(ErrorCode::kOutOfRange, "token id {} is not in the vocabulary", id);
    }
    ids_.push_back(id);
    if (hold_all_) return std::string();  // decoded once, by flush()
  }
  VLLM_ASSIGN_OR_RETURN(std::string text, impl.decode_window(ids_, skip, at_start_));
  if (!force) {
    bool hold = text.size() <= prefix_.size() || ends_with_replacement(text) ||
                impl.is_pending_byte_token(id);
    if (hold) return std::string();
  }
  if (text.size() < prefix_.size() || text.compare(0, prefix_.size(), prefix_) != 0) {
    // The decoder rewrote text already returned (a hold_all_ chain, whose prompt context and
    // output decode differently together than apart). Only the held ids remain to return.
    if (force) {
      return impl.decode_window(std::span<const int32_t>(ids_).subspan(prefix_index_), skip, false);
    }
    ids_.assign(1, id);
    at_start_ = false;
    VLLM_ASSIGN_OR_RETURN(std::string fresh, impl.decode_window(ids_, skip, at_start_));
    prefix_ = fresh;
    prefix_index_ = ids_.size();
    return fresh;
  }
  std::string out = text.substr(prefix_.size());
  // The window now starts at the previous emission's first pending id.
  for (size_t k = 0; k < prefix_index_; ++k) {
    if (!skipped(ids_[k])) at_start_ = false;
  }
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  VLLM_ASSIGN_OR_RETURN(prefix_, impl.decode_window(ids_, skip, at_start_));
  prefix_index_ = ids_.size();
  return out;
}

}  // namespace vllm
