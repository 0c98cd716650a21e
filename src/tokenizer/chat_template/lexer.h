// Splits template source into text and tag tokens exactly as Jinja2's lexer does with
// transformers' settings: trim_blocks (drop the first newline after a block or comment tag),
// lstrip_blocks (drop spaces before a block or comment tag that starts a line), `-` / `+`
// whitespace control, {% raw %}, newline normalization and dropping one trailing newline.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace vllm::jinja {

enum class TokenType : uint8_t {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,  // text holds the operator: + - * / // % ** ~ [ ] ( ) { } == != > >= < <= = . : | , ;
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;  // text data, name, decoded string literal or operator
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
  int column = 1;
};

// Tokenizes `source`. Errors (an unterminated comment, a bad character in a tag, unbalanced
// brackets, a bad string escape) are kInvalidArgument naming `name`, line and column.
Expected<std::vector<Token>> tokenize(std::string_view source, std::string_view name);

// "chat template 'NAME', line L, column C: MESSAGE" as an error Status.
Status template_error(std::string_view name, int line, int column, std::string_view message);

}  // namespace vllm::jinja
