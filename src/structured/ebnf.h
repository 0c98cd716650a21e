// The `grammar` of a structured-output request: EBNF text, as vLLM passes it to xgrammar.
//
// The syntax is GBNF (llama.cpp) with xgrammar's extensions:
//   root   ::= value ("," value)*          # rules; `root` is where matching starts
//   value  ::= "lit\n" | [a-z0-9_] | [^"\\] | name | ( group ) | x? | x* | x+ | x{2} | x{2,} |
//   x{2,5}
// Whitespace and newlines between elements do not matter; a rule ends where the next
// `name ::=` begins. String escapes: \" \\ \/ \' \? \n \r \t \b \f \a \v \0 \e, \xH..., \uHHHH,
// \UHHHHHHHH; in classes also \^ \$ \. \* \+ \( \) \[ \] \{ \} \| \- . `[^]` is any character.
// Direct left recursion (a ::= a "x" | "y") is rewritten into repetition; other left
// recursion is an error naming the rules.
//
// Text without any "::=" is read as a Lark grammar, as vLLM converts those for xgrammar:
// `name: a | b` rules (a leading ? or ! is ignored), `start` as the root, // comments,
// 'single' or "double" quoted strings, /regex/ terminals, [x] meaning optional x.
//
// Errors are kInvalidArgument "line L, column C: what is wrong".
#pragma once

#include <string_view>

#include "base/status.h"
#include "structured/grammar.h"

namespace vllm::structured {

// Parses the text into a grammar whose root is the rule `root_name` ("root"; "start" for
// Lark text).
Expected<Grammar> parse_ebnf(std::string_view text, std::string_view root_name = "root");

// True when the text has no "::=" and so is read as Lark.
bool looks_like_lark(std::string_view text);

}  // namespace vllm::structured
