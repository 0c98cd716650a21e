// Parsing of chat completion request bodies: messages (text content only), tools and
// tool_choice, chat template options, and the sampling fields chat names differently
// (logprobs as a boolean with top_logprobs, max_completion_tokens).
#include <set>
#include <utility>

#include "server/protocol.h"
#include "server/protocol_common.h"
#include "server/protocol_fields.h"

namespace vllm::server {
namespace {

using nlohmann::ordered_json;

// Text parts joined by newlines, as vLLM's "string" content format; other parts refused.
Status normalize_content(ordered_json& message, size_t index) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null() || it->is_string()) return Status::ok();
  const std::string key = fmt::format("messages[{}].content", index);
  if (!it->is_array()) return fields::wrong_type(key, "a string or a list of content parts", *it);
  std::string text;
  bool first = true;
  for (const ordered_json& part : *it) {
    if (!part.is_object()) return fields::wrong_type(key, "a list of content part objects", part);
    const ordered_json* type = fields::find(part, "type");
    if (type == nullptr || !type->is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: each part needs a string 'type'", key);
    }
    const std::string kind = type->get<std::string>();
    if (kind != "text" && kind != "input_text") {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: content part type '{}' is not supported (this server takes text only)",
                        key, kind);
    }
    const ordered_json* part_text = fields::find(part, "text");
    if (part_text == nullptr || !part_text->is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: a text part needs a string 'text'", key);
    }
    if (!first) text += "\n";
    text += part_text->get<std::string>();
    first = false;
  }
  *it = text;
  return Status::ok();
}

// Assistant tool calls carry their arguments as JSON text; templates iterate them as
// mappings, so (as vLLM) text that parses as a JSON object becomes that object.
void parse_tool_call_arguments(ordered_json& message) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || !calls->is_array()) return;
  for (ordered_json& call : *calls) {
    if (!call.is_object()) continue;
    auto function = call.find("function");
    if (function == call.end() || !function->is_object()) continue;
    auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) continue;
    ordered_json parsed = ordered_json::parse(arguments->get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) *arguments = std::move(parsed);
  }
}

Status read_messages(const ordered_json& body, ordered_json* out) {
  const ordered_json* messages = fields::find(body, "messages");
  if (messages == nullptr) return make_error(ErrorCode::kInvalidArgument, "'messages' is required");
  if (!messages->is_array()) return fields::wrong_type("messages", "a list of messages", *messages);
  if (messages->empty()) {
    return make_error(ErrorCode::kInvalidArgument, "'messages' must hold at least one message");
  }
  *out = ordered_json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    ordered_json message = (*messages)[i];
    if (!message.is_object()) {
      return fields::wrong_type(fmt::format("messages[{}]", i), "an object", message);
    }
    const ordered_json* role = fields::find(message, "role");
    if (role == nullptr || !role->is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "messages[{}] needs a string 'role'", i);
    }
    VLLM_RETURN_IF_ERROR(normalize_content(message, i));
    parse_tool_call_arguments(message);
    out->push_back(std::move(message));
  }
  return Status::ok();
}

Status read_tools(const ordered_json& body, ordered_json* tools, std::set<std::string>* names) {
  const ordered_json* value = fields::find(body, "tools");
  if (value == nullptr) return Status::ok();
  if (!value->is_array()) return fields::wrong_type("tools", "a list of tools", *value);
  for (size_t i = 0; i < value->size(); ++i) {
    const ordered_json& tool = (*value)[i];
    const ordered_json* function = tool.is_object() ? fields::find(tool, "function") : nullptr;
    const ordered_json* name =
        function != nullptr && function->is_object() ? fields::find(*function, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return make_error(
          ErrorCode::kInvalidArgument,
          "tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
    }
    const ordered_json* type = fields::find(tool, "type");
    if (type != nullptr && (!type->is_string() || type->get<std::string>() != "function")) {
      return make_error(ErrorCode::kInvalidArgument,
                        "tools[{}]: only type \"function\" is supported", i);
    }
    names->insert(name->get<std::string>());
  }
  *tools = *value;
  return Status::ok();
}

Status read_tool_choice(const ordered_json& body, bool has_tools,
                        const std::set<std::string>& names, ToolChoice* out) {
  const ordered_json* value = fields::find(body, "tool_choice");
  if (value == nullptr) {
    out->kind = has_tools ? ToolChoice::Kind::kAuto : ToolChoice::Kind::kNone;
    return Status::ok();
  }
  if (value->is_string()) {
    const std::string s = value->get<std::string>();
    if (s == "none") {
      out->kind = ToolChoice::Kind::kNone;
      return Status::ok();  // tools, if any, still reach the template
    }
    if (s == "auto") {
      out->kind = ToolChoice::Kind::kAuto;
    } else if (s == "required") {
      out->kind = ToolChoice::Kind::kRequired;
    } else {
      return make_error(ErrorCode::kInvalidArgument,
                        "'tool_choice' must be \"none\", \"auto\", \"required\" or a named "
                        "function, got \"{}\"",
                        s);
    }
  } else if (value->is_object()) {
    const ordered_json* function = fields::find(*value, "function");
    const ordered_json* name =
        function != nullptr && function->is_object() ? fields::find(*function, "name") : nullptr;
    if (name == nullptr || !name->is_string()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "a named 'tool_choice' must be {{\"type\": \"function\", \"function\": "
                        "{{\"name\": ...}}}}");
    }
    out->kind = ToolChoice::Kind::kNamed;
    out->name = name->get<std::string>();
  } else {
    return fields::wrong_type("tool_choice", "a string or an object", *value);
  }
  if (!has_tools) {
    return make_error(ErrorCode::kInvalidArgument,
                      "When using `tool_choice`, `tools` must be set.");
  }
  if (out->kind == ToolChoice::Kind::kNamed && names.count(out->name) == 0) {
    return make_error(ErrorCode::kInvalidArgument, "Tool '{}' has not been passed in `tools`.",
                      out->name);
  }
  return Status::ok();
}

}  // namespace

Expected<ChatRequest> parse_chat_request(const ordered_json& body, const SamplingParams& defaults) {
  if (!body.is_object()) return fields::wrong_type("request", "a JSON object", body);
  const nlohmann::json plain(body);  // the sampling readers take the unordered type
  ChatRequest r;
  VLLM_RETURN_IF_ERROR(detail::read_model(plain, &r.model));
  VLLM_RETURN_IF_ERROR(read_messages(body, &r.messages));
  std::set<std::string> tool_names;
  VLLM_RETURN_IF_ERROR(read_tools(body, &r.tools, &tool_names));
  VLLM_RETURN_IF_ERROR(read_tool_choice(body, !r.tools.is_null(), tool_names, &r.tool_choice));
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "add_generation_prompt", &r.add_generation_prompt));
  VLLM_RETURN_IF_ERROR(
      fields::read_bool(body, "continue_final_message", &r.continue_final_message));
  if (r.add_generation_prompt && r.continue_final_message) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "add_special_tokens", &r.add_special_tokens));
  if (const ordered_json* kwargs = fields::find(body, "chat_template_kwargs")) {
    if (!kwargs->is_object())
      return fields::wrong_type("chat_template_kwargs", "an object", *kwargs);
    r.chat_template_kwargs = *kwargs;
  }
  if (fields::find(body, "chat_template") != nullptr) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'chat_template' in a request is not supported; start the server with "
                      "--chat-template instead");
  }
  VLLM_RETURN_IF_ERROR(detail::read_stream(plain, &r.stream, &r.stream_options));
  if (const ordered_json* logprobs = fields::find(body, "logprobs")) {
    if (!logprobs->is_boolean()) return fields::wrong_type("logprobs", "a boolean", *logprobs);
    r.logprobs = logprobs->get<bool>();
  }
  SamplingParams chat_defaults = defaults;
  chat_defaults.max_tokens.reset();  // chat: up to the context length
  VLLM_ASSIGN_OR_RETURN(r.params, detail::read_sampling(plain, chat_defaults, &r.max_tokens_given));
  VLLM_RETURN_IF_ERROR(detail::read_structured_outputs(body, &r.params));
  return r;
}

}  // namespace vllm::server
