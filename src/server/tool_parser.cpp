#include "server/tool_parser.h"

#include <algorithm>
#include <random>

#include "tokenizer/chat_template/value.h"

namespace vllm::server {
namespace {

constexpr std::string_view kCallStart = "<tool_call>";
constexpr std::string_view kCallEnd = "</tool_call>";

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  std::string error;
  if (!jinja::json_dump(jinja::from_json(value), jinja::JsonDumpOptions{}, &out, &error)) {
    return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  return out;
}

std::string make_tool_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "chatcmpl-tool-";
  for (int i = 0; i < 2; ++i) {
    uint64_t bits = rng();
    for (int k = 0; k < 16; ++k, bits >>= 4) id.push_back(kHex[bits & 15]);
  }
  return id;
}

ToolParseResult ToolParser::parse(std::string_view output) {
  ToolParseResult result;
  std::string content;
  feed(output, &content, &result.tool_calls);
  finish(&content, &result.tool_calls);
  if (failed_) {
    result.tool_calls.clear();
    result.content = std::string(output);
    return result;
  }
  if (!content.empty()) result.content = std::move(content);
  return result;
}

void ToolParser::feed(std::string_view delta, std::string* content, std::vector<ToolCall>* calls) {
  pending_.append(delta);
  drain(/*at_end=*/false, content, calls);
}

void ToolParser::finish(std::string* content, std::vector<ToolCall>* calls) {
  drain(/*at_end=*/true, content, calls);
}

bool ToolParser::close_block(std::string_view block, std::string* content,
                             std::vector<ToolCall>* calls) {
  auto parsed = parse_block(block);
  if (!parsed) {
    failed_ = true;
    content->append(kCallStart).append(block);
    return false;
  }
  for (ToolCall& call : *parsed) calls->push_back(std::move(call));
  return true;
}

void ToolParser::drain(bool at_end, std::string* content, std::vector<ToolCall>* calls) {
  while (true) {
    if (state_ == State::kInCall) {
      const size_t end = pending_.find(kCallEnd);
      if (end == std::string::npos) {
        if (at_end) {
          close_block(pending_, content, calls);
          pending_.clear();
          state_ = State::kAfterCall;
        }
        return;
      }
      if (!close_block(std::string_view(pending_).substr(0, end), content, calls)) {
        content->append(kCallEnd);
      }
      pending_.erase(0, end + kCallEnd.size());
      state_ = State::kAfterCall;
      continue;
    }
    const size_t start = pending_.find(kCallStart);
    const bool in_content = state_ == State::kContent;
    if (start != std::string::npos) {
      if (in_content) content->append(pending_, 0, start);
      pending_.erase(0, start + kCallStart.size());
      state_ = State::kInCall;
      continue;
    }
    const size_t keep = at_end ? 0 : partial_tag_suffix(pending_, kCallStart);
    if (in_content) content->append(pending_, 0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return;
  }
}

bool is_known_tool_parser(std::string_view name) {
  return name == "hermes" || name == "qwen3_coder";
}

Expected<std::unique_ptr<ToolParser>> make_tool_parser(std::string_view name,
                                                       const nlohmann::ordered_json& tools) {
  if (name == "hermes") return make_hermes_tool_parser();
  if (name == "qwen3_coder") return make_qwen3_coder_tool_parser(tools);
  return make_error(ErrorCode::kInvalidArgument,
                    "unknown tool call parser '{}' (available: hermes, qwen3_coder)", name);
}

}  // namespace vllm::server
