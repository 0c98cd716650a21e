// Builds the statement tree from tokens with Jinja2's grammar (jinja2/parser.py): operator
// precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < filters and
// tests < postfix), tuples without parentheses, `is` tests with one bare argument, slices,
// keyword arguments. Tags it does not implement (extends, include, import, block, ...) are
// errors naming line and column.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/lexer.h"

namespace vllm::jinja {

Expected<Body> parse_template(std::vector<Token> tokens, std::string_view name);

}  // namespace vllm::jinja
