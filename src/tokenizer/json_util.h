// Typed reads from tokenizer.json with errors that name the JSON path
// ("tokenizer.json: model.merges[3]: expected a string"). Nothing here throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace vllm::tok {

using nlohmann::json;

// "where.key" (or "key" when where is empty).
std::string join_path(std::string_view where, std::string_view key);
std::string_view json_kind(const json& j);

// The field's value, or nullptr when absent or null.
const json* find_field(const json& object, std::string_view key);

Status wrong_type(std::string_view where, std::string_view expected, const json& got);

// Absent / null -> fallback; wrong type -> kInvalidFormat.
Expected<bool> read_bool(const json& object, std::string_view key, std::string_view where,
                         bool fallback);
Expected<int64_t> read_int(const json& object, std::string_view key, std::string_view where,
                           int64_t fallback);
Expected<std::optional<std::string>> read_optional_string(const json& object, std::string_view key,
                                                          std::string_view where);
// Absent / null -> kInvalidFormat naming the field.
Expected<std::string> read_required_string(const json& object, std::string_view key,
                                           std::string_view where);

// A single Unicode character given as a JSON string (Metaspace's replacement, Strip's content).
Expected<char32_t> read_char(const json& object, std::string_view key, std::string_view where,
                             char32_t fallback);

}  // namespace vllm::tok
