// The OpenAI request bodies the server accepts, parsed and checked field by field.
//
// Requests are untrusted: every field is type-checked, and a wrong type or value is a
// kInvalidArgument Status whose message names the field (the HTTP layer answers 400). What
// needs the model (prompt length against max_model_len, token ids in the vocabulary) is
// checked later, when the prompt is known. Field names and defaults are vLLM's
// (vllm/entrypoints/openai/protocol.py): CompletionRequest and ChatCompletionRequest with
// vLLM's extra sampling fields (top_k, min_p, repetition_penalty, ignore_eos, ...). Unknown
// fields are ignored, as vLLM ignores them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"

namespace vllm::server {

struct StreamOptions {
  bool include_usage = false;
  bool continuous_usage_stats = false;
};

// A prompt as the request gave it: text to tokenize, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

// POST /v1/completions.
struct CompletionRequest {
  std::optional<std::string> model;
  std::vector<PromptInput> prompts;  // "prompt": string, [string], [int] or [[int]]
  bool stream = false;
  StreamOptions stream_options;
  bool echo = false;
  bool add_special_tokens = true;
  bool max_tokens_given = false;
  // Request fields over `defaults`; max_tokens default 16. params.structured_outputs comes
  // from structured_outputs / guided_* / response_format.
  SamplingParams params;
};

// `defaults`: vLLM's defaults overridden by generation_config.json ones; their max_tokens is
// ignored (16 for completions).
Expected<CompletionRequest> parse_completion_request(const nlohmann::json& body,
                                                     const SamplingParams& defaults);
// The same, keeping a JSON Schema's property order from the body.
Expected<CompletionRequest> parse_completion_request(const nlohmann::ordered_json& body,
                                                     const SamplingParams& defaults);

// tool_choice as given: "none", "auto", "required" or a named function.
struct ToolChoice {
  enum class Kind { kNone, kAuto, kRequired, kNamed } kind = Kind::kNone;
  std::string name;  // kNamed
};

// POST /v1/chat/completions.
struct ChatRequest {
  std::optional<std::string> model;
  // Messages as the chat template sees them: string content (text parts joined), assistant
  // tool-call arguments parsed from JSON text into objects (as vLLM does before rendering).
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // null, or the list of {"type": "function", "function": {...}}
  ToolChoice tool_choice;        // default: "auto" when tools are given, else "none"
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool stream = false;
  StreamOptions stream_options;
  bool logprobs = false;  // params.logprobs holds top_logprobs when true
  bool max_tokens_given = false;
  // max_tokens none unless given: up to max_model_len. params.structured_outputs comes from
  // structured_outputs / guided_* / response_format; tool_choice "required" or a named
  // function sets it in the chat endpoint (serving_chat.cpp).
  SamplingParams params;
};

Expected<ChatRequest> parse_chat_request(const nlohmann::ordered_json& body,
                                         const SamplingParams& defaults);

// POST /tokenize: {"prompt": ...} or {"messages": [...]} (then chat fields as above).
struct TokenizeRequest {
  std::optional<std::string> model;
  std::optional<std::string> prompt;
  std::optional<ChatRequest> chat;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};
Expected<TokenizeRequest> parse_tokenize_request(const nlohmann::ordered_json& body);

// POST /detokenize: {"tokens": [int]}.
struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};
Expected<DetokenizeRequest> parse_detokenize_request(const nlohmann::json& body);

// JSON text -> JSON value; kInvalidArgument with the parser's message for malformed JSON
// (invalid UTF-8 included) and for anything but an object at the top.
Expected<nlohmann::json> parse_json_object(std::string_view text);
Expected<nlohmann::ordered_json> parse_ordered_json_object(std::string_view text);

}  // namespace vllm::server
