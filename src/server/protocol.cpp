// Parsing of the completion, tokenize and detokenize request bodies, and what every request
// shares (stream options, response_format, model, sampling fields). Chat: protocol_chat.cpp.
#include "server/protocol.h"

#include <utility>

#include "server/protocol_common.h"
#include "server/protocol_fields.h"

namespace vllm::server {
namespace detail {

using nlohmann::json;

Status read_stream(const json& body, bool* stream, StreamOptions* options) {
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "stream", stream));
  const json* value = fields::find(body, "stream_options");
  if (value == nullptr) return Status::ok();
  if (!value->is_object()) return fields::wrong_type("stream_options", "an object", *value);
  if (!*stream) {
    return make_error(ErrorCode::kInvalidArgument,
                      "Stream options can only be defined when `stream=True`.");
  }
  VLLM_RETURN_IF_ERROR(fields::read_bool(*value, "include_usage", &options->include_usage));
  VLLM_RETURN_IF_ERROR(
      fields::read_bool(*value, "continuous_usage_stats", &options->continuous_usage_stats));
  return Status::ok();
}

Expected<std::optional<structured::StructuredOutputsParams>> read_response_format(
    const nlohmann::ordered_json& body) {
  using OJ = nlohmann::ordered_json;
  std::optional<structured::StructuredOutputsParams> none;
  const OJ* value = fields::find(body, "response_format");
  if (value == nullptr) return none;
  if (!value->is_object()) return fields::wrong_type("response_format", "an object", *value);
  const OJ* type = fields::find(*value, "type");
  if (type == nullptr || !type->is_string()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "'response_format' needs a string 'type' (\"text\", \"json_object\" or "
                      "\"json_schema\")");
  }
  const std::string kind = type->get<std::string>();
  if (kind == "text") return none;
  structured::StructuredOutputsParams p;
  if (kind == "json_object") {
    p.json_object = true;
    return std::optional<structured::StructuredOutputsParams>(std::move(p));
  }
  if (kind == "json_schema") {
    const OJ* spec = fields::find(*value, "json_schema");
    if (spec == nullptr || !spec->is_object()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "response_format type \"json_schema\" needs a 'json_schema' object "
                        "({{\"name\": ..., \"schema\": {{...}}}})");
    }
    if (const OJ* name = fields::find(*spec, "name"); name != nullptr && !name->is_string()) {
      return fields::wrong_type("response_format.json_schema.name", "a string", *name);
    }
    const OJ* strict = fields::find(*spec, "strict");
    if (strict != nullptr && !strict->is_boolean()) {
      return fields::wrong_type("response_format.json_schema.strict", "a boolean", *strict);
    }
    const OJ* schema = fields::find(*spec, "schema");
    if (schema == nullptr) {
      p.json_object = true;  // no schema: any JSON, as OpenAI's optional schema
    } else if (schema->is_object() || schema->is_boolean()) {
      p.json = schema->dump();
    } else {
      return fields::wrong_type("response_format.json_schema.schema", "an object", *schema);
    }
    return std::optional<structured::StructuredOutputsParams>(std::move(p));
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "response_format type '{}' is not supported (supported: \"text\", "
                    "\"json_object\", \"json_schema\")",
                    kind);
}

Status read_structured_outputs(const nlohmann::ordered_json& body, SamplingParams* params) {
  VLLM_ASSIGN_OR_RETURN(auto requested, structured::parse_structured_outputs(body, false));
  VLLM_ASSIGN_OR_RETURN(auto format, read_response_format(body));
  if (requested && format) {
    // As vLLM: response_format fills in the constraint; structured_outputs may add options.
    if (requested->num_constraints() > 0) {
      return make_error(ErrorCode::kInvalidArgument,
                        "You can only use one kind of structured outputs constraint but both "
                        "'response_format' and 'structured_outputs' (or guided_*) give one");
    }
    requested->json = std::move(format->json);
    requested->json_object = format->json_object;
    format.reset();
  }
  if (requested) VLLM_RETURN_IF_ERROR(requested->validate());
  params->structured_outputs = requested ? std::move(requested) : std::move(format);
  return Status::ok();
}

Status read_model(const json& body, std::optional<std::string>* model) {
  VLLM_RETURN_IF_ERROR(fields::read_string(body, "model", model));
  std::optional<std::string> user;
  return fields::read_string(body, "user", &user);
}

Expected<SamplingParams> read_sampling(const json& body, const SamplingParams& defaults,
                                       bool* max_tokens_given) {
  *max_tokens_given = fields::find(body, "max_tokens") != nullptr ||
                      fields::find(body, "max_completion_tokens") != nullptr;
  return SamplingParams::from_json(body, defaults);
}

}  // namespace detail

namespace {

using nlohmann::json;

Status read_prompts(const json& body, std::vector<PromptInput>* prompts) {
  const json* value = fields::find(body, "prompt");
  constexpr std::string_view kExpected =
      "a string, a list of strings, a list of token ids or a list of lists of token ids";
  if (value == nullptr) return make_error(ErrorCode::kInvalidArgument, "'prompt' is required");
  if (value->is_string()) {
    prompts->push_back({value->get<std::string>(), {}});
    return Status::ok();
  }
  if (!value->is_array()) return fields::wrong_type("prompt", kExpected, *value);
  if (value->empty()) return make_error(ErrorCode::kInvalidArgument, "'prompt' must not be empty");
  const json& first = value->front();
  if (first.is_number()) {
    PromptInput p;
    VLLM_RETURN_IF_ERROR(fields::to_token_ids("prompt", *value, &p.token_ids));
    prompts->push_back(std::move(p));
    return Status::ok();
  }
  for (const json& item : *value) {
    if (item.is_string() && first.is_string()) {
      prompts->push_back({item.get<std::string>(), {}});
    } else if (item.is_array() && first.is_array()) {
      PromptInput p;
      VLLM_RETURN_IF_ERROR(fields::to_token_ids("prompt", item, &p.token_ids));
      if (p.token_ids.empty()) {
        return make_error(ErrorCode::kInvalidArgument, "'prompt' holds an empty token list");
      }
      prompts->push_back(std::move(p));
    } else {
      return fields::wrong_type("prompt", kExpected, item);
    }
  }
  return Status::ok();
}

}  // namespace

Expected<CompletionRequest> parse_completion_request(const json& body,
                                                     const SamplingParams& defaults) {
  if (!body.is_object()) return fields::wrong_type("request", "a JSON object", body);
  CompletionRequest r;
  VLLM_RETURN_IF_ERROR(detail::read_model(body, &r.model));
  VLLM_RETURN_IF_ERROR(read_prompts(body, &r.prompts));
  VLLM_RETURN_IF_ERROR(detail::read_stream(body, &r.stream, &r.stream_options));
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "echo", &r.echo));
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "add_special_tokens", &r.add_special_tokens));
  if (fields::find(body, "suffix") != nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "suffix is not currently supported");
  }
  SamplingParams completion_defaults = defaults;
  completion_defaults.max_tokens = 16;  // the OpenAI completions default
  VLLM_ASSIGN_OR_RETURN(r.params,
                        detail::read_sampling(body, completion_defaults, &r.max_tokens_given));
  if (const json* best_of = fields::find(body, "best_of")) {
    if (!best_of->is_number_integer() || best_of->get<int64_t>() != r.params.n) {
      return make_error(ErrorCode::kInvalidArgument,
                        "best_of is not supported (only best_of equal to n)");
    }
  }
  if (const json* logprobs = fields::find(body, "logprobs"); logprobs && logprobs->is_boolean()) {
    return fields::wrong_type("logprobs", "an integer", *logprobs);
  }
  // Echo with logprobs also reports the prompt tokens' logprobs (vLLM asks the engine for
  // prompt logprobs of the same width).
  if (r.echo && r.params.logprobs && !r.params.prompt_logprobs) {
    r.params.prompt_logprobs = r.params.logprobs;
  }
  VLLM_RETURN_IF_ERROR(detail::read_structured_outputs(nlohmann::ordered_json(body), &r.params));
  return r;
}

Expected<CompletionRequest> parse_completion_request(const nlohmann::ordered_json& body,
                                                     const SamplingParams& defaults) {
  VLLM_ASSIGN_OR_RETURN(CompletionRequest r, parse_completion_request(json(body), defaults));
  // Again from the ordered body: a schema's properties keep their order.
  VLLM_RETURN_IF_ERROR(detail::read_structured_outputs(body, &r.params));
  return r;
}

Expected<TokenizeRequest> parse_tokenize_request(const nlohmann::ordered_json& body) {
  if (!body.is_object()) return fields::wrong_type("request", "a JSON object", body);
  TokenizeRequest r;
  VLLM_RETURN_IF_ERROR(fields::read_string(body, "model", &r.model));
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "return_token_strs", &r.return_token_strs));
  if (fields::find(body, "messages") != nullptr) {
    auto chat = parse_chat_request(body, SamplingParams());
    if (!chat) return chat.status();
    r.add_special_tokens = false;  // vLLM's chat default
    VLLM_RETURN_IF_ERROR(fields::read_bool(body, "add_special_tokens", &r.add_special_tokens));
    r.chat = std::move(*chat);
    return r;
  }
  VLLM_RETURN_IF_ERROR(fields::read_string(body, "prompt", &r.prompt));
  if (!r.prompt) {
    return make_error(ErrorCode::kInvalidArgument, "'prompt' (a string) or 'messages' is required");
  }
  VLLM_RETURN_IF_ERROR(fields::read_bool(body, "add_special_tokens", &r.add_special_tokens));
  return r;
}

Expected<DetokenizeRequest> parse_detokenize_request(const json& body) {
  if (!body.is_object()) return fields::wrong_type("request", "a JSON object", body);
  DetokenizeRequest r;
  VLLM_RETURN_IF_ERROR(fields::read_string(body, "model", &r.model));
  const json* tokens = fields::find(body, "tokens");
  if (tokens == nullptr) return make_error(ErrorCode::kInvalidArgument, "'tokens' is required");
  VLLM_RETURN_IF_ERROR(fields::to_token_ids("tokens", *tokens, &r.tokens));
  return r;
}

namespace {

template <class J>
Expected<J> parse_object(std::string_view text) {
  J value = J::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    // Parse again with exceptions only to get the parser's message (position and reason).
    try {
      J again = J::parse(text.begin(), text.end());
      (void)again;
    } catch (const std::exception& e) {
      return make_error(ErrorCode::kInvalidArgument, "the request body is not valid JSON: {}",
                        e.what());
    }
    return make_error(ErrorCode::kInvalidArgument, "the request body is not valid JSON");
  }
  if (!value.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "the request body must be a JSON object, got {}",
                      fields::type_name(value));
  }
  return value;
}

}  // namespace

Expected<json> parse_json_object(std::string_view text) {
  return parse_object<json>(text);
}

Expected<nlohmann::ordered_json> parse_ordered_json_object(std::string_view text) {
  return parse_object<nlohmann::ordered_json>(text);
}

}  // namespace vllm::server
