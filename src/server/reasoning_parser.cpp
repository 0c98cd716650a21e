#include "server/reasoning_parser.h"

#include <algorithm>

namespace vllm::server {
namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

// Length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReasoningSplit split_reasoning(std::string_view output) {
  // vLLM drops the first <think> wherever it is; one after </think> belongs to the content.
  const size_t start = output.find(kThinkStart);
  if (start != std::string_view::npos && start < output.find(kThinkEnd)) {
    output = output.substr(start + kThinkStart.size());
  }
  ReasoningSplit split;
  const size_t end = output.find(kThinkEnd);
  if (end == std::string_view::npos) {
    if (!output.empty()) split.content = std::string(output);
    return split;
  }
  split.reasoning = std::string(output.substr(0, end));
  const std::string_view content = output.substr(end + kThinkEnd.size());
  if (!content.empty()) split.content = std::string(content);
  return split;
}

bool prompt_opens_thinking(std::string_view prompt) {
  const size_t open = prompt.rfind(kThinkStart);
  if (open == std::string_view::npos) return false;
  return prompt.find(kThinkEnd, open) == std::string_view::npos;
}

void ReasoningStreamParser::feed(std::string_view delta, std::string* reasoning,
                                 std::string* content) {
  pending_.append(delta);
  drain(reasoning, content);
}

void ReasoningStreamParser::drain(std::string* reasoning, std::string* content) {
  while (true) {
    switch (state_) {
      case State::kStart:
        if (pending_.compare(0, kThinkStart.size(), kThinkStart) == 0) {
          pending_.erase(0, kThinkStart.size());
          state_ = State::kReasoning;
          continue;
        }
        if (kThinkStart.substr(0, pending_.size()) == pending_) return;  // may still be <think>
        state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
        continue;
      case State::kReasoning: {
        const size_t end = pending_.find(kThinkEnd);
        if (end != std::string::npos) {
          reasoning->append(pending_, 0, end);
          pending_.erase(0, end + kThinkEnd.size());
          state_ = State::kContent;
          continue;
        }
        const size_t keep = partial_tag_suffix(pending_, kThinkEnd);
        reasoning->append(pending_, 0, pending_.size() - keep);
        pending_.erase(0, pending_.size() - keep);
        return;
      }
      case State::kContent:
        content->append(pending_);
        pending_.clear();
        return;
    }
  }
}

void ReasoningStreamParser::finish(std::string* reasoning, std::string* content) {
  if (state_ == State::kStart) state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
  (state_ == State::kReasoning ? reasoning : content)->append(pending_);
  pending_.clear();
}

}  // namespace vllm::server
