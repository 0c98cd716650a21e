// Typed reads of fields from JSON config files, with errors a user can act on.
//
// Hugging Face config files are loosely typed: a field may be absent, null, or of the wrong
// type. JsonFields reads a field into a C++ value and reports a wrong type as
// "config.json: field 'rope_parameters.factor' must be a number, got string". Absent and
// null fields leave the output untouched, so the caller's default stands. A JsonFields can
// look in several objects in turn (Qwen3.5's text_config first, then the top level).
// Nothing here throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_util.h"
#include "base/status.h"

namespace vllm {

// Parses text as a JSON object; `source` names the file in errors.
Expected<nlohmann::json> parse_json_object(std::string_view text, std::string_view source);

// Reads a whole file; kNotFound when it does not exist, kIoError when it cannot be read.
Expected<std::string> read_text_file(const std::string& path);

class JsonFields {
 public:
  // `scopes` are searched in order; `prefix` ("rope_parameters.") is prepended to field
  // names in messages. The objects must outlive this view.
  JsonFields(std::vector<const nlohmann::json*> scopes, std::string_view source,
             std::string prefix = "");

  // The first non-null value of `key`, or nullptr.
  const nlohmann::json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Optional fields: absent or null leave *out unchanged.
  Status read(std::string_view key, int64_t* out) const;
  Status read(std::string_view key, double* out) const;
  Status read(std::string_view key, bool* out) const;
  Status read(std::string_view key, std::string* out) const;
  Status read(std::string_view key, std::optional<int64_t>* out) const;
  Status read(std::string_view key, std::optional<double>* out) const;
  Status read(std::string_view key, std::optional<bool>* out) const;
  Status read(std::string_view key, std::vector<int64_t>* out) const;
  Status read(std::string_view key, std::vector<std::string>* out) const;
  // An integer or a list of integers (eos_token_id).
  Status read_int_or_list(std::string_view key, std::vector<int64_t>* out) const;

  // Required fields: absent or null is an error naming the file and the field.
  template <typename T>
  Status require(std::string_view key, T* out) const {
    if (!has(key)) return missing(key);
    return read(key, out);
  }

  Status missing(std::string_view key) const;
  Status wrong_type(std::string_view key, std::string_view expected,
                    const nlohmann::json& got) const;
  std::string field_name(std::string_view key) const { return prefix_ + std::string(key); }
  std::string_view source() const { return source_; }

 private:
  std::vector<const nlohmann::json*> scopes_;
  std::string source_;
  std::string prefix_;
};

}  // namespace vllm
