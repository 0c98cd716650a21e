// tool_choice "required" and named functions, as vLLM serves them: the output is forced
// into tool calls by structured outputs, and parsed back into calls.
//
//   named "f"   the output is f's arguments: a JSON value of its parameters schema; the
//               reply has one call to f with that text as arguments (finish_reason "stop")
//   "required"  the output is a JSON array of {"name": <one of the tools>, "parameters":
//               {...}}, at least one; each element becomes a call, its parameters dumped
//               as Python's json.dumps does (finish_reason "tool_calls")
// Tools without parameters take {"type": "object", "properties": {}}; $defs of the tools'
// parameter schemas are gathered at the top of the "required" schema, so their $refs resolve.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/protocol.h"
#include "server/tool_parser.h"

namespace vllm::server {

// The JSON Schema (as text) that forces `choice` (kRequired or kNamed) over `tools`.
Expected<std::string> forced_tool_schema(const ToolChoice& choice,
                                         const nlohmann::ordered_json& tools);

// A whole "required" output -> its calls; nullopt when it is not such an array (e.g. cut
// off by max_tokens).
std::optional<std::vector<ToolCall>> parse_required_tool_calls(std::string_view output);

// Streaming "required": each call is emitted whole as soon as its array element closes.
class RequiredToolCallStream {
 public:
  void feed(std::string_view delta, std::vector<ToolCall>* calls);

 private:
  std::string text_;
  size_t scanned_ = 0;
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  size_t element_start_ = 0;
};

}  // namespace vllm::server
