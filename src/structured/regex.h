// Regular expressions (structured_outputs.regex, JSON Schema `pattern`) compiled into the
// grammar core.
//
// The syntax is the common subset of Python's `re` and JavaScript: literals, `.` (any
// character but \n and \r), classes [a-z] [^...] with \d \w \s \D \W \S and escapes inside,
// groups ( ) (?: ) (?P<name> ) (?<name> ), alternation |, quantifiers * + ? {n} {n,} {n,m}
// (a lazy `?` after one changes nothing: the whole output must match either way), escapes
// \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and escaped metacharacters. ^ at the start and $ at
// the end are accepted and mean nothing more (the output is matched whole). What a grammar
// cannot express -- backreferences, lookaround, word boundaries, anchors inside the pattern,
// inline flags -- is an error naming the construct and its position. The pattern matches
// code points; the automaton works on their UTF-8 bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "structured/grammar.h"

namespace vllm::structured {

// Adds the expression for `pattern` to `grammar` and returns its index. Errors are
// kInvalidArgument "regex: <problem> at position N" (N: byte offset into the pattern).
Expected<int32_t> add_regex(Grammar* grammar, std::string_view pattern);

// A grammar whose root matches exactly the strings the pattern matches.
Expected<Grammar> regex_to_grammar(std::string_view pattern);

}  // namespace vllm::structured
