// The parser's class, shared by parser.cpp (statements) and parser_expr.cpp (expressions).
// Private to the chat-template implementation.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/lexer.h"

namespace vllm::jinja::parser_internal {

// Deepest expression / statement nesting accepted; keeps recursion (here and in the
// evaluator) far from the stack limit on hostile input.
constexpr int kMaxNesting = 100;
constexpr int kMaxExprDepth = 200;

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view name)
      : tokens_(std::move(tokens)), name_(name) {}

  Expected<Body> parse() {
    Body body;
    VLLM_RETURN_IF_ERROR(subparse({}, &body));
    return body;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool is_op(std::string_view op) const {
    return cur().type == TokenType::kOperator && cur().text == op;
  }
  bool is_name(std::string_view n) const {
    return cur().type == TokenType::kName && cur().text == n;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText: return "template data / text";
      case TokenType::kVariableBegin: return "begin of print statement";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kEof: return "end of template";
      case TokenType::kString: return "string";
      case TokenType::kInteger: return "integer";
      case TokenType::kFloat: return "float";
      default: return t.text;
    }
  }

  Status fail(std::string_view message) const { return fail_at(cur(), message); }
  Status fail_at(const Token& t, std::string_view message) const {
    return template_error(name_, t.line, t.column, message);
  }
  Status expect_op(std::string_view op) {
    if (skip_op(op)) return Status::ok();
    return fail(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
  }
  Status expect_type(TokenType type, std::string_view what) {
    if (cur().type == type) {
      advance();
      return Status::ok();
    }
    return fail(fmt::format("expected token '{}', got '{}'", what, describe(cur())));
  }
  Expected<std::string> expect_ident() {
    if (cur().type != TokenType::kName) {
      return fail(fmt::format("expected token 'name', got '{}'", describe(cur())));
    }
    std::string n = cur().text;
    advance();
    return n;
  }

  template <typename T>
  static std::unique_ptr<T> node_at(const Token& t) {
    auto n = std::make_unique<T>();
    n->line = t.line;
    n->column = t.column;
    return n;
  }
  static ExprPtr expr_at(Expr::Kind kind, const Token& t) {
    auto e = node_at<Expr>(t);
    e->kind = kind;
    return e;
  }

  struct DepthGuard {
    explicit DepthGuard(int* d) : depth(d) { ++*depth; }
    ~DepthGuard() { --*depth; }
    int* depth;
  };

  // Records the subtree height and refuses trees too deep to evaluate or destroy
  // recursively (left-leaning chains such as a + b + c + ... are flat to the grammar).
  Expected<ExprPtr> sealed(ExprPtr e);

  // ---- statements ----
  using EndTags = std::initializer_list<std::string_view>;

  bool at_end_tag(EndTags ends) const {
    for (std::string_view e : ends) {
      if (is_name(e)) return true;
    }
    return false;
  }
  Status subparse(EndTags ends, Body* body);

  // Parses a statement body up to one of `ends`; the end tag name is left current unless
  // `drop_needle`.
  Status parse_statements(EndTags ends, bool drop_needle, Body* body);
  Status parse_statement(Body* body);

  Status parse_for(Body* body);
  Status parse_if(Body* body);

  Status parse_set(Body* body);
  Status parse_signature(Stmt* s);

  Status parse_macro(Body* body);
  Status parse_call_block(Body* body);

  Status parse_filter_block(Body* body);
  Status parse_with(Body* body);

  Status parse_print(Body* body);

  // Names, tuples of names ("a, b" or "(a, b)"), and with `with_namespace` "ns.attr".
  Expected<Target> parse_target_primary(bool with_namespace);

  Expected<Target> parse_assign_target(bool with_namespace, EndTags extra_end,
                                       bool parenthesized = false) {
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.line = cur().line;
    tuple.column = cur().column;
    bool is_tuple = false;
    while (true) {
      if (!tuple.items.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
      if (is_tuple_end(extra_end)) break;
      VLLM_ASSIGN_OR_RETURN(Target item, parse_target_primary(with_namespace));
      tuple.items.push_back(std::move(item));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (tuple.items.empty()) {
        if (parenthesized) return tuple;
        return fail(fmt::format("expected an assignment target, got '{}'", describe(cur())));
      }
      return std::move(tuple.items[0]);
    }
    for (const Target& item : tuple.items) {
      if (item.kind == Target::Kind::kNamespaceAttr) {
        return fail("can't assign to a namespace attribute inside a tuple");
      }
    }
    return tuple;
  }

  // ---- expressions ----
  bool is_tuple_end(EndTags extra_end) const {
    if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd ||
        is_op(")")) {
      return true;
    }
    return at_end_tag(extra_end);
  }

  Expected<ExprPtr> parse_tuple(bool simplified, bool with_condexpr, EndTags extra_end,
                                bool explicit_parentheses) {
    const Token& start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
      if (is_tuple_end(extra_end)) break;
      ExprPtr item;
      if (simplified) {
        VLLM_ASSIGN_OR_RETURN(item, parse_primary());
      } else {
        VLLM_ASSIGN_OR_RETURN(item, parse_expression(with_condexpr));
      }
      items.push_back(std::move(item));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) {
        return fail(fmt::format("expected an expression, got '{}'", describe(cur())));
      }
    }
    ExprPtr e = expr_at(Expr::Kind::kTuple, start);
    e->operands = std::move(items);
    return sealed(std::move(e));
  }

  Expected<ExprPtr> parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }
  Expected<ExprPtr> parse_condexpr();

  Expected<ExprPtr> parse_or();
  Expected<ExprPtr> parse_and();

  Expected<ExprPtr> parse_not();
  Expected<ExprPtr> parse_compare();

  Expected<ExprPtr> parse_math1();
  Expected<ExprPtr> parse_concat();

  Expected<ExprPtr> parse_math2();
  Expected<ExprPtr> parse_pow();

  Expected<ExprPtr> parse_unary(bool with_filter);
  Expected<ExprPtr> parse_primary();

  Expected<ExprPtr> parse_list();
  Expected<ExprPtr> parse_dict();

  Expected<ExprPtr> parse_postfix(ExprPtr node);
  Expected<ExprPtr> parse_filter_expr(ExprPtr node);

  Expected<ExprPtr> parse_subscript(ExprPtr node);

  // One subscript: an expression, or a slice a:b:c (returned as kSlice with operands
  // [null, a, b, c]).
  Expected<ExprPtr> parse_subscribed();
  Status parse_call_args(CallArgNodes* args);

  Expected<ExprPtr> parse_call(ExprPtr node);
  Expected<std::string> parse_dotted_name();

  Expected<ExprPtr> parse_filter(ExprPtr node, bool start_inline);
  Expected<ExprPtr> parse_test(ExprPtr node);

  Expected<ExprPtr> binary(Expr::Kind kind, std::string op, ExprPtr left, ExprPtr right,
                           const Token& at) {
    ExprPtr e = expr_at(kind, at);
    e->name = std::move(op);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return sealed(std::move(e));
  }
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string_view name_;
  int expr_depth_ = 0;
  int stmt_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace vllm::jinja::parser_internal
