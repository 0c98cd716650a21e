// Small helpers shared by every reader of untrusted JSON (config files, tokenizer.json,
// request bodies): the type of a value as a user reads it, and field lookup that treats an
// explicit null like an absent field (as Hugging Face and OpenAI clients both do).
// Nothing here throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace vllm {

// "null", "object", "array", "string", "boolean", "integer", "number", "binary".
std::string_view json_type_name(const nlohmann::json& value);

// The value of `key` when `object` is an object holding it with a non-null value, else nullptr.
const nlohmann::json* json_find(const nlohmann::json& object, std::string_view key);

}  // namespace vllm
