// JSON Schema (structured_outputs.json, response_format json_schema, tool parameters) and
// free-form JSON (json_object) compiled into the grammar core.
//
// Supported, as vLLM users get them from xgrammar:
//   type (one or a list), enum, const, anyOf, oneOf (as anyOf: branches are alternatives),
//   allOf (merged when the parts do not conflict), $ref to "#", "#/$defs/..." or any local
//   JSON pointer (recursion allowed), nullable (OpenAPI);
//   string: minLength, maxLength, pattern (the whole string matches), format (date, time,
//   date-time, duration, email, hostname, ipv4, ipv6, uuid, uri, uri-reference);
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum;
//   number: the same with integer bounds;
//   array: items, prefixItems (and draft-7 tuple items / additionalItems), minItems, maxItems;
//   object: properties (emitted in schema order), required, additionalProperties (boolean or
//   a schema; absent means false, xgrammar's strict mode), minProperties / maxProperties
//   when the required and allowed properties already satisfy them.
// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly, discriminator, x-*) are ignored. Any other keyword is an error naming
// it and where it is ("unsupported JSON Schema keyword 'patternProperties' at
// /properties/tags"), never silently dropped.
//
// Whitespace between tokens: any of [ \n\t]* by default; none with disable_any_whitespace
// (then ", " and ": " separate, as Python's json.dumps); or a custom regex.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "structured/grammar.h"

namespace vllm::structured {

struct JsonGrammarOptions {
  bool any_whitespace = true;
  std::optional<std::string> whitespace_pattern;  // a regex; overrides any_whitespace
  bool allow_additional_properties = false;       // when a schema does not say
};

// kInvalidArgument naming the problem and its path in the schema.
Expected<Grammar> json_schema_to_grammar(const nlohmann::ordered_json& schema,
                                         const JsonGrammarOptions& options = JsonGrammarOptions());

// Any JSON object or array (vLLM's json_object, xgrammar's built-in JSON grammar).
Expected<Grammar> json_object_grammar(const JsonGrammarOptions& options = JsonGrammarOptions());

}  // namespace vllm::structured
