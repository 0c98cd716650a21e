// Grammar pieces for JSON scalar values, shared by the JSON Schema compiler and the
// built-in JSON grammar: strings (any, length-bounded, matching a pattern or a format),
// integers and numbers (any, or within bounds).
//
// Strings are emitted in JSON form: the text between the quotes uses escapes where JSON
// needs them (\" \\ and control characters), so a pattern or format is matched against the
// decoded string while the output stays valid JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/status.h"
#include "structured/grammar.h"

namespace vllm::structured {

// One character inside a JSON string: any character but " \ and controls, or an escape.
int32_t json_string_char(Grammar* g);
// A whole JSON string with `min`..`max` characters (max -1: unbounded).
int32_t json_string(Grammar* g, int32_t min_length = 0, int32_t max_length = -1);
// A JSON string whose decoded text matches the regex `pattern` as a whole.
Expected<int32_t> json_string_matching(Grammar* g, std::string_view pattern);
// A JSON string in a JSON Schema `format`: date, time, date-time, duration, email, hostname,
// ipv4, ipv6, uuid, uri, uri-reference. kInvalidArgument naming other formats.
Expected<int32_t> json_string_format(Grammar* g, std::string_view format);

// -?(0|[1-9][0-9]*)
int32_t json_integer(Grammar* g);
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]{1,2})? -- exponents of at most two digits, so
// every number parses as a finite double.
int32_t json_number(Grammar* g);

// Integers in [lo, hi] (either side open when absent), in canonical decimal form.
// kInvalidArgument when the range is empty.
Expected<int32_t> integer_in_range(Grammar* g, std::optional<int64_t> lo,
                                   std::optional<int64_t> hi);

// Numbers (decimal, no exponent) within integer bounds; each bound may be exclusive.
struct NumberBound {
  int64_t value = 0;
  bool exclusive = false;
};
Expected<int32_t> number_in_range(Grammar* g, std::optional<NumberBound> lo,
                                  std::optional<NumberBound> hi);

// Rewrites the expression `e` (built from text, e.g. a regex) so that each character it
// matches is written as it must appear inside a JSON string. Returns the new expression.
int32_t escape_for_json_string(Grammar* g, int32_t e);

}  // namespace vllm::structured
