// Typed, error-reporting reads of JSON config fields (see json_fields.h).
#include "loader/json_fields.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

namespace vllm {

using nlohmann::json;

Expected<json> parse_json_object(std::string_view text, std::string_view source) {
  json value;
  try {
    value = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return make_error(ErrorCode::kInvalidFormat, "{}: not valid JSON (at byte {}): {}", source,
                      e.byte, e.what());
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidFormat, "{}: not valid JSON: {}", source, e.what());
  }
  if (!value.is_object()) {
    return make_error(ErrorCode::kInvalidFormat, "{}: expected a JSON object at the top, got {}",
                      source, json_type_name(value));
  }
  return value;
}

Expected<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return make_error(ErrorCode::kNotFound, "{}: no such file", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIoError, "{}: cannot open for reading", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return make_error(ErrorCode::kIoError, "{}: read failed", path);
  return buffer.str();
}

JsonFields::JsonFields(std::vector<const json*> scopes, std::string_view source, std::string prefix)
    : scopes_(std::move(scopes)), source_(source), prefix_(std::move(prefix)) {}

const json* JsonFields::find(std::string_view key) const {
  for (const json* scope : scopes_) {
    if (scope == nullptr || !scope->is_object()) continue;
    auto it = scope->find(key);
    if (it != scope->end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

Status JsonFields::missing(std::string_view key) const {
  return make_error(ErrorCode::kInvalidFormat, "{}: missing required field '{}'", source_,
                    field_name(key));
}

Status JsonFields::wrong_type(std::string_view key, std::string_view expected,
                              const json& got) const {
  return make_error(ErrorCode::kInvalidFormat, "{}: field '{}' must be {}, got {}", source_,
                    field_name(key), expected, json_type_name(got));
}

namespace {

// An integer, or a float with an integral value (8192.0), that fits in int64.
bool as_int64(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

}  // namespace

Status JsonFields::read(std::string_view key, int64_t* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (!as_int64(*v, out)) return wrong_type(key, "an integer", *v);
  return Status::ok();
}

Status JsonFields::read(std::string_view key, double* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (!v->is_number()) return wrong_type(key, "a number", *v);
  *out = v->get<double>();
  return Status::ok();
}

Status JsonFields::read(std::string_view key, bool* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (!v->is_boolean()) return wrong_type(key, "a boolean", *v);
  *out = v->get<bool>();
  return Status::ok();
}

Status JsonFields::read(std::string_view key, std::string* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (!v->is_string()) return wrong_type(key, "a string", *v);
  *out = v->get<std::string>();
  return Status::ok();
}

Status JsonFields::read(std::string_view key, std::optional<int64_t>* out) const {
  if (!has(key)) return Status::ok();
  int64_t value = 0;
  VLLM_RETURN_IF_ERROR(read(key, &value));
  *out = value;
  return Status::ok();
}

Status JsonFields::read(std::string_view key, std::optional<double>* out) const {
  if (!has(key)) return Status::ok();
  double value = 0;
  VLLM_RETURN_IF_ERROR(read(key, &value));
  *out = value;
  return Status::ok();
}

Status JsonFields::read(std::string_view key, std::optional<bool>* out) const {
  if (!has(key)) return Status::ok();
  bool value = false;
  VLLM_RETURN_IF_ERROR(read(key, &value));
  *out = value;
  return Status::ok();
}

Status JsonFields::read(std::string_view key, std::vector<int64_t>* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (!v->is_array()) return wrong_type(key, "a list of integers", *v);
  std::vector<int64_t> values;
  for (const json& item : *v) {
    int64_t x = 0;
    if (!as_int64(item, &x)) return wrong_type(key, "a list of integers", item);
    values.push_back(x);
  }
  *out = std::move(values);
  return Status::ok();
}

Status JsonFields::read(std::string_view key, std::vector<std::string>* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (!v->is_array()) return wrong_type(key, "a list of strings", *v);
  std::vector<std::string> values;
  for (const json& item : *v) {
    if (!item.is_string()) return wrong_type(key, "a list of strings", item);
    values.push_back(item.get<std::string>());
  }
  *out = std::move(values);
  return Status::ok();
}

Status JsonFields::read_int_or_list(std::string_view key, std::vector<int64_t>* out) const {
  const json* v = find(key);
  if (v == nullptr) return Status::ok();
  if (v->is_array()) return read(key, out);
  int64_t x = 0;
  if (!as_int64(*v, &x)) return wrong_type(key, "an integer or a list of integers", *v);
  *out = {x};
  return Status::ok();
}

}  // namespace vllm
