// Schemas for tool_choice "required" / named, and parsing their outputs (forced_tool_calls.h).
#include "server/forced_tool_calls.h"

#include <utility>

namespace vllm::server {
namespace {

using nlohmann::ordered_json;

ordered_json parameters_of(const ordered_json& tool) {
  const ordered_json& function = tool.at("function");
  auto it = function.find("parameters");
  if (it == function.end() || it->is_null()) {
    return ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
  }
  return *it;
}

std::optional<ToolCall> call_from_element(const ordered_json& element) {
  if (!element.is_object()) return std::nullopt;
  auto name = element.find("name");
  auto parameters = element.find("parameters");
  if (name == element.end() || !name->is_string() || parameters == element.end()) {
    return std::nullopt;
  }
  return ToolCall{make_tool_call_id(), name->get<std::string>(), python_json_dumps(*parameters)};
}

}  // namespace

Expected<std::string> forced_tool_schema(const ToolChoice& choice, const ordered_json& tools) {
  if (choice.kind == ToolChoice::Kind::kNamed) {
    for (const ordered_json& tool : tools) {
      if (tool.at("function").at("name") == choice.name) return parameters_of(tool).dump();
    }
    return make_error(ErrorCode::kInvalidArgument, "Tool '{}' has not been passed in `tools`.",
                      choice.name);
  }
  ordered_json branches = ordered_json::array();
  ordered_json defs = ordered_json::object();
  for (const ordered_json& tool : tools) {
    ordered_json parameters = parameters_of(tool);
    if (parameters.is_object()) {
      if (auto d = parameters.find("$defs"); d != parameters.end() && d->is_object()) {
        for (auto it = d->begin(); it != d->end(); ++it) {
          auto existing = defs.find(it.key());
          if (existing != defs.end() && *existing != it.value()) {
            return make_error(ErrorCode::kInvalidArgument,
                              "Tool definition '{}' has multiple schemas, which is not supported.",
                              it.key());
          }
          defs[it.key()] = it.value();
        }
        parameters.erase("$defs");
      }
    }
    const std::string name = tool.at("function").at("name").get<std::string>();
    branches.push_back({{"properties",
                         {{"name", {{"type", "string"}, {"enum", ordered_json::array({name})}}},
                          {"parameters", std::move(parameters)}}},
                        {"required", ordered_json::array({"name", "parameters"})}});
  }
  ordered_json schema = {{"type", "array"},
                         {"minItems", 1},
                         {"items", {{"type", "object"}, {"anyOf", std::move(branches)}}}};
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  return schema.dump();
}

std::optional<std::vector<ToolCall>> parse_required_tool_calls(std::string_view output) {
  auto value = ordered_json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_array()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const ordered_json& element : value) {
    auto call = call_from_element(element);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

void RequiredToolCallStream::feed(std::string_view delta, std::vector<ToolCall>* calls) {
  text_.append(delta);
  for (; scanned_ < text_.size(); ++scanned_) {
    const char c = text_[scanned_];
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      if (depth_ == 1 && c == '{') element_start_ = scanned_;
      ++depth_;
    } else if (c == '}' || c == ']') {
      --depth_;
      if (depth_ == 1 && c == '}') {
        auto element = ordered_json::parse(
            std::string_view(text_).substr(element_start_, scanned_ + 1 - element_start_), nullptr,
            /*allow_exceptions=*/false);
        if (auto call = call_from_element(element)) calls->push_back(std::move(*call));
      }
    }
  }
}

}  // namespace vllm::server
