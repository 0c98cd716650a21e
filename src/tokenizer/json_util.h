// Typed reads from tokenizer.json with errors that name the JSON path
// ("tokenizer.json: model.merges[3]: expected a string"). Nothing here throws.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/json_util.h"
#include "base/status.h"

namespace vllm::tok {

using nlohmann::json;

// "where.key" (or "key" when where is empty).
std::string join_path(std::string_view where, std::string_view key);

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

// Calls visit(element, "where.key[i]") for each element of the array `key` (a component
// Sequence's list), stopping at the first error. Absent, null or not an array is an error.
template <typename Visit>
Status for_each_element(const json& object, std::string_view key, std::string_view where,
                        Visit&& visit) {
  const json* list = json_find(object, key);
  std::string list_where = join_path(where, key);
  if (list == nullptr || !list->is_array()) {
    return wrong_type(list_where, "an array", list ? *list : json());
  }
  for (size_t i = 0; i < list->size(); ++i) {
    VLLM_RETURN_IF_ERROR(visit((*list)[i], fmt::format("{}[{}]", list_where, i)));
  }
  return Status::ok();
}

}  // namespace vllm::tok
