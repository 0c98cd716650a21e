// Tool calls in generated text -> the OpenAI `tool_calls` a client executes: vLLM's
// `--tool-call-parser hermes` (Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>)
// and `--tool-call-parser qwen3_coder` (Qwen3-Coder, Qwen3.5, Qwen3.6:
// <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>).
//
// Both forms are blocks between <tool_call> and </tool_call>; the parsers differ only in how
// a block becomes calls, so one scanner serves both, whole or streamed. Text before the first
// block is the message content; text after it is dropped (vLLM does the same). Streamed text
// may be cut anywhere: a tail that could still become <tool_call> is held back, and a call
// is emitted whole (name and complete arguments in one delta) when its block closes -- an
// OpenAI client accumulates argument text, so whole arguments are a valid stream. Arguments
// are JSON text as Python's json.dumps(..., ensure_ascii=False) writes it, as vLLM returns.
//
// Whole outputs follow vLLM: no <tool_call> means no calls; a block that does not parse makes
// the whole output plain content. When streaming, an unparsable block is passed on as content.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vllm::server {

struct ToolCall {
  std::string id;  // "chatcmpl-tool-<32 hex>"
  std::string name;
  std::string arguments;  // JSON text
};

struct ToolParseResult {
  std::vector<ToolCall> tool_calls;
  std::optional<std::string> content;  // none when empty
};

class ToolParser {
 public:
  virtual ~ToolParser() = default;

  // A whole output.
  ToolParseResult parse(std::string_view output);

  // Streaming: appends the content `delta` releases and the calls it completes.
  void feed(std::string_view delta, std::string* content, std::vector<ToolCall>* calls);
  // End of output: a block left open is parsed as if closed; held-back text is content.
  void finish(std::string* content, std::vector<ToolCall>* calls);

 protected:
  ToolParser() = default;
  // The calls in the text between <tool_call> and </tool_call>; nullopt if malformed.
  virtual std::optional<std::vector<ToolCall>> parse_block(std::string_view block) const = 0;

 private:
  enum class State { kContent, kInCall, kAfterCall };
  void drain(bool at_end, std::string* content, std::vector<ToolCall>* calls);
  bool close_block(std::string_view block, std::string* content, std::vector<ToolCall>* calls);

  State state_ = State::kContent;
  std::string pending_;
  bool failed_ = false;  // a block did not parse
};

// `tools`: the request's tool list (qwen3_coder reads parameter types from it).
std::unique_ptr<ToolParser> make_hermes_tool_parser();
std::unique_ptr<ToolParser> make_qwen3_coder_tool_parser(const nlohmann::ordered_json& tools);
// By vLLM's --tool-call-parser name; kInvalidArgument for names we do not have.
Expected<std::unique_ptr<ToolParser>> make_tool_parser(std::string_view name,
                                                       const nlohmann::ordered_json& tools);
bool is_known_tool_parser(std::string_view name);

// Python's json.dumps(value, ensure_ascii=False): ", " and ": " separators, key order kept.
std::string python_json_dumps(const nlohmann::ordered_json& value);
std::string make_tool_call_id();

}  // namespace vllm::server
