// StructuredOutputsParams: what a request constrains its output to, as vLLM's
// StructuredOutputsParams -- exactly one of json (a JSON Schema), regex, choice, grammar or
// json_object, plus the JSON whitespace options.
//
// Requests give it as `structured_outputs: {...}` or through vLLM's older top-level names
// guided_json, guided_regex, guided_choice, guided_grammar, guided_whitespace_pattern
// (guided_decoding_backend is accepted and ignored); the server also maps response_format
// and tool_choice onto it. build_grammar() turns it into a Grammar.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "structured/grammar.h"

namespace vllm::structured {

struct StructuredOutputsParams {
  std::optional<std::string> json;  // a JSON Schema as JSON text
  std::optional<std::string> regex;
  std::optional<std::vector<std::string>> choice;
  std::optional<std::string> grammar;  // EBNF (or Lark) text
  bool json_object = false;
  bool disable_any_whitespace = false;
  bool disable_additional_properties = false;
  std::optional<std::string> whitespace_pattern;
  // Set by the server, not read from requests: a chat request to a reasoning model with
  // thinking on, whose grammar waits for the end of the model's reasoning even though the
  // prompt opens none (the model writes <think> itself). Does not change the grammar.
  bool await_reasoning_end = false;

  // How many of json / regex / choice / grammar / json_object are set.
  int num_constraints() const;
  // kInvalidArgument unless exactly one constraint is set (vLLM's messages).
  Status validate() const;
  // Identifies the grammar this compiles to (kind, text and options): the cache key.
  std::string cache_key() const;
  // A short description for logs: "json_schema", "regex", ...
  const char* kind_name() const;
};

// The structured-output fields of a request body (`structured_outputs` and the guided_*
// names); nullopt when it has none. Wrong types are kInvalidArgument naming the field. A
// schema given as an object is kept as JSON text; pass an ordered_json body to keep its key
// order (properties are generated in schema order). With require_constraint false, a
// `structured_outputs` holding only options (disable_any_whitespace, ...) is returned as is,
// for the caller to add the constraint (response_format).
Expected<std::optional<StructuredOutputsParams>> parse_structured_outputs(
    const nlohmann::json& request, bool require_constraint = true);
Expected<std::optional<StructuredOutputsParams>> parse_structured_outputs(
    const nlohmann::ordered_json& request, bool require_constraint = true);

// The grammar for the params: JSON Schema, free-form JSON, regex, choice or EBNF text.
// kInvalidArgument naming what is wrong (e.g. "json schema: unsupported JSON Schema keyword
// 'not' at /properties/a", "grammar: line 2, column 5: ...", "regex: ... at position 3").
Expected<Grammar> build_grammar(const StructuredOutputsParams& params);

}  // namespace vllm::structured
