// Typed JSON reads for the tokenizer loader (see json_util.h).
#include "tokenizer/json_util.h"

#include "tokenizer/unicode_util.h"

namespace vllm::tok {

std::string join_path(std::string_view where, std::string_view key) {
  if (where.empty()) return std::string(key);
  std::string out(where);
  out += '.';
  out += key;
  return out;
}

Status wrong_type(std::string_view where, std::string_view expected, const json& got) {
  return make_error(ErrorCode::kInvalidFormat, "{}: expected {}, got {}", where, expected,
                    json_type_name(got));
}

Expected<bool> read_bool(const json& object, std::string_view key, std::string_view where,
                         bool fallback) {
  const json* v = json_find(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return wrong_type(join_path(where, key), "a boolean", *v);
  return v->get<bool>();
}

Expected<int64_t> read_int(const json& object, std::string_view key, std::string_view where,
                           int64_t fallback) {
  const json* v = json_find(object, key);
  if (v == nullptr) return fallback;
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      return make_error(ErrorCode::kInvalidFormat, "{}: {} is too large", join_path(where, key), u);
    }
    return static_cast<int64_t>(u);
  }
  if (!v->is_number_integer()) return wrong_type(join_path(where, key), "an integer", *v);
  return v->get<int64_t>();
}

Expected<std::optional<std::string>> read_optional_string(const json& object, std::string_view key,
                                                          std::string_view where) {
  const json* v = json_find(object, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return wrong_type(join_path(where, key), "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

Expected<std::string> read_required_string(const json& object, std::string_view key,
                                           std::string_view where) {
  const json* v = json_find(object, key);
  if (v == nullptr) {
    return make_error(ErrorCode::kInvalidFormat, "{}: missing field", join_path(where, key));
  }
  if (!v->is_string()) return wrong_type(join_path(where, key), "a string", *v);
  return v->get<std::string>();
}

Expected<char32_t> read_char(const json& object, std::string_view key, std::string_view where,
                             char32_t fallback) {
  VLLM_ASSIGN_OR_RETURN(std::optional<std::string> s, read_optional_string(object, key, where));
  if (!s) return fallback;
  size_t pos = 0;
  if (s->empty() || find_invalid_utf8(*s) != std::string_view::npos) {
    return make_error(ErrorCode::kInvalidFormat, "{}: expected one character, got \"{}\"",
                      join_path(where, key), *s);
  }
  char32_t c = next_code_point(*s, &pos);
  if (pos != s->size()) {
    return make_error(ErrorCode::kInvalidFormat, "{}: expected one character, got \"{}\"",
                      join_path(where, key), *s);
  }
  return c;
}

}  // namespace vllm::tok
