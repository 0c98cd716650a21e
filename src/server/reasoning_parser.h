// Splits a thinking model's output into reasoning and answer: vLLM's `--reasoning-parser
// qwen3` (Qwen3, Qwen3.5, Qwen3.6), where the model thinks inside <think> ... </think>.
//
// Whole outputs (non-streaming) follow vLLM's Qwen3ReasoningParser.extract_reasoning: a
// <think> in the output is dropped (unless it comes after </think>, where vLLM would cut the
// content at it); text before </think> is the reasoning, text after it the content; without
// </think> everything is content.
//
// Streamed outputs arrive in pieces cut anywhere, even inside a tag, so the streaming parser
// holds back a tail that could still become <think> or </think> and emits everything else
// at once. It is in the reasoning part from the start when the output opens with <think>, or
// when the prompt already opened one (thinking templates end the generation prompt with
// "<think>\n"); otherwise the output is plain content. For every output that closes its
// thinking, the concatenated deltas equal the whole-output split; an output cut off while
// thinking streams as reasoning (the client has seen it as such), where the whole-output
// split calls it content, as vLLM does.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vllm::server {

struct ReasoningSplit {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;  // none when empty
};

ReasoningSplit split_reasoning(std::string_view output);

// Whether a rendered prompt leaves a <think> open for the model to continue.
bool prompt_opens_thinking(std::string_view prompt);

class ReasoningStreamParser {
 public:
  explicit ReasoningStreamParser(bool starts_in_reasoning = false)
      : starts_in_reasoning_(starts_in_reasoning) {}

  // Appends to *reasoning / *content what `delta` decides.
  void feed(std::string_view delta, std::string* reasoning, std::string* content);
  // End of output: releases what was held back.
  void finish(std::string* reasoning, std::string* content);

 private:
  enum class State { kStart, kReasoning, kContent };
  void drain(std::string* reasoning, std::string* content);

  bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string pending_;
};

}  // namespace vllm::server
