// Typed reads of request-body fields for protocol*.cpp, for both nlohmann::json and
// nlohmann::ordered_json. A field that is absent or null keeps its default; a wrong type is
// kInvalidArgument naming the field and the type it got. Nothing here throws.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vllm::server::fields {

template <class J>
std::string_view type_name(const J& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();  // null, object, array, string, boolean, ...
}

template <class J>
Status wrong_type(std::string_view key, std::string_view expected, const J& got) {
  return make_error(ErrorCode::kInvalidArgument, "'{}' must be {}, got {}", key, expected,
                    type_name(got));
}

// The value of `key` when present and not null, else nullptr.
template <class J>
const J* find(const J& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

template <class J>
Status read_bool(const J& object, std::string_view key, bool* out) {
  const J* value = find(object, key);
  if (value == nullptr) return Status::ok();
  if (!value->is_boolean()) return wrong_type(key, "a boolean", *value);
  *out = value->template get<bool>();
  return Status::ok();
}

template <class J>
Status read_string(const J& object, std::string_view key, std::optional<std::string>* out) {
  const J* value = find(object, key);
  if (value == nullptr) return Status::ok();
  if (!value->is_string()) return wrong_type(key, "a string", *value);
  *out = value->template get<std::string>();
  return Status::ok();
}

// A token id: an integer in [0, 2^31).
template <class J>
Status to_token_id(std::string_view key, const J& value, int32_t* out) {
  if (value.is_number_unsigned()) {
    const auto v = value.template get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return make_error(ErrorCode::kInvalidArgument, "'{}' holds token id {}, out of range", key,
                        v);
    }
    *out = static_cast<int32_t>(v);
    return Status::ok();
  }
  if (value.is_number_integer()) {
    const auto v = value.template get<int64_t>();
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      return make_error(ErrorCode::kInvalidArgument, "'{}' holds token id {}, out of range", key,
                        v);
    }
    *out = static_cast<int32_t>(v);
    return Status::ok();
  }
  return wrong_type(key, "a list of integer token ids", value);
}

template <class J>
Status to_token_ids(std::string_view key, const J& value, std::vector<int32_t>* out) {
  if (!value.is_array()) return wrong_type(key, "a list of integer token ids", value);
  out->clear();
  out->reserve(value.size());
  for (const J& item : value) {
    int32_t id = 0;
    VLLM_RETURN_IF_ERROR(to_token_id(key, item, &id));
    out->push_back(id);
  }
  return Status::ok();
}

}  // namespace vllm::server::fields
