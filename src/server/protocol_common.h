// Pieces shared by the request parsers of protocol.cpp and protocol_chat.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/protocol.h"

namespace vllm::server::detail {

// "stream" and "stream_options" (only allowed with stream=true, as vLLM).
Status read_stream(const nlohmann::json& body, bool* stream, StreamOptions* options);
// "response_format": text (nullopt), json_object or json_schema; others are refused.
Expected<std::optional<structured::StructuredOutputsParams>> read_response_format(
    const nlohmann::ordered_json& body);
// Sets params->structured_outputs from "structured_outputs" / guided_* and
// "response_format" (at most one of them), reading schemas in the body's key order.
Status read_structured_outputs(const nlohmann::ordered_json& body, SamplingParams* params);
// "model" (a string) and "user" (a string, unused).
Status read_model(const nlohmann::json& body, std::optional<std::string>* model);
// The sampling fields over `defaults`; records whether max_tokens was given.
Expected<SamplingParams> read_sampling(const nlohmann::json& body, const SamplingParams& defaults,
                                       bool* max_tokens_given);

}  // namespace vllm::server::detail
