// `--tool-call-parser hermes`: each <tool_call> block holds one JSON object
// {"name": "...", "arguments": {...}} (Hermes 2 Pro, Qwen2.5, Qwen3).
#include <utility>

#include "server/tool_parser.h"

namespace vllm::server {
namespace {

class HermesToolParser final : public ToolParser {
 protected:
  std::optional<std::vector<ToolCall>> parse_block(std::string_view block) const override {
    auto call = nlohmann::ordered_json::parse(block, nullptr, /*allow_exceptions=*/false);
    if (call.is_discarded() || !call.is_object()) return std::nullopt;
    auto name = call.find("name");
    auto arguments = call.find("arguments");
    if (name == call.end() || !name->is_string() || arguments == call.end()) return std::nullopt;
    std::vector<ToolCall> calls;
    calls.push_back({make_tool_call_id(), name->get<std::string>(), python_json_dumps(*arguments)});
    return calls;
  }
};

}  // namespace

std::unique_ptr<ToolParser> make_hermes_tool_parser() {
  return std::make_unique<HermesToolParser>();
}

}  // namespace vllm::server
