// Recursive-descent parser mirroring jinja2/parser.py, function for function, so that the
// same template text groups the same way. This file: template structure and statements
// (for, if, set, macro, call, filter, with, ...); expressions are in parser_expr.cpp.
#include "tokenizer/chat_template/parser.h"

#include "tokenizer/chat_template/parser_impl.h"

namespace vllm::jinja {
namespace parser_internal {

Status Parser::subparse(EndTags ends, Body* body) {
  while (true) {
    const Token& t = cur();
    switch (t.type) {
      case TokenType::kText: {
        auto s = node_at<Stmt>(t);
        s->kind = Stmt::Kind::kText;
        s->text = t.text;
        body->push_back(std::move(s));
        advance();
        break;
      }
      case TokenType::kVariableBegin: {
        advance();
        auto s = node_at<Stmt>(t);
        s->kind = Stmt::Kind::kOutput;
        VLLM_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false));
        VLLM_RETURN_IF_ERROR(expect_type(TokenType::kVariableEnd, "end of print statement"));
        body->push_back(std::move(s));
        break;
      }
      case TokenType::kBlockBegin: {
        advance();
        if (ends.size() != 0 && at_end_tag(ends)) return Status::ok();
        VLLM_RETURN_IF_ERROR(parse_statement(body));
        VLLM_RETURN_IF_ERROR(expect_type(TokenType::kBlockEnd, "end of statement block"));
        break;
      }
      case TokenType::kEof: {
        if (ends.size() == 0) return Status::ok();
        std::string wanted;
        for (std::string_view e : ends) {
          wanted += wanted.empty() ? "" : " or ";
          wanted += fmt::format("'{}'", e);
        }
        return fail(fmt::format(
            "unexpected end of template; the innermost block needs to be closed with {}",
            wanted));
      }
      default:
        return fail(fmt::format("unexpected '{}'", describe(t)));
    }
  }
}

Status Parser::parse_statements(EndTags ends, bool drop_needle, Body* body) {
  skip_op(":");
  VLLM_RETURN_IF_ERROR(expect_type(TokenType::kBlockEnd, "end of statement block"));
  if (++stmt_depth_ > kMaxNesting) return fail("statements are nested too deeply");
  Status status = subparse(ends, body);
  --stmt_depth_;
  VLLM_RETURN_IF_ERROR(status);
  if (drop_needle) advance();
  return Status::ok();
}

Status Parser::parse_statement(Body* body) {
  const Token& t = cur();
  if (t.type != TokenType::kName) return fail("tag name expected");
  std::string tag = t.text;
  if (tag == "for") return parse_for(body);
  if (tag == "if") return parse_if(body);
  if (tag == "set") return parse_set(body);
  if (tag == "macro") return parse_macro(body);
  if (tag == "call") return parse_call_block(body);
  if (tag == "filter") return parse_filter_block(body);
  if (tag == "with") return parse_with(body);
  if (tag == "print") return parse_print(body);
  if (tag == "generation") {
    auto s = node_at<Stmt>(t);
    s->kind = Stmt::Kind::kScope;
    advance();
    VLLM_RETURN_IF_ERROR(parse_statements({"endgeneration"}, true, &s->body));
    body->push_back(std::move(s));
    return Status::ok();
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth_ == 0) return fail(fmt::format("'{}' outside of a loop", tag));
    auto s = node_at<Stmt>(t);
    s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    advance();
    body->push_back(std::move(s));
    return Status::ok();
  }
  if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
      tag == "block" || tag == "autoescape" || tag == "do") {
    return fail(fmt::format("the '{}' tag is not supported in chat templates", tag));
  }
  return fail(fmt::format("encountered unknown tag '{}'", tag));
}

Status Parser::parse_for(Body* body) {
  auto s = node_at<Stmt>(cur());
  s->kind = Stmt::Kind::kFor;
  advance();
  VLLM_ASSIGN_OR_RETURN(s->target, parse_assign_target(false, {"in"}));
  if (!skip_name("in")) return fail(fmt::format("expected 'in', got '{}'", describe(cur())));
  VLLM_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, false, {"recursive"}, false));
  if (skip_name("if")) {
    VLLM_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
  }
  if (skip_name("recursive")) return fail("recursive for loops are not supported");
  ++loop_depth_;
  Status st = parse_statements({"endfor", "else"}, false, &s->body);
  --loop_depth_;
  VLLM_RETURN_IF_ERROR(st);
  bool has_else = is_name("else");
  advance();
  if (has_else) VLLM_RETURN_IF_ERROR(parse_statements({"endfor"}, true, &s->else_body));
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_if(Body* body) {
  auto s = node_at<Stmt>(cur());
  s->kind = Stmt::Kind::kIf;
  advance();
  while (true) {
    VLLM_ASSIGN_OR_RETURN(ExprPtr test, parse_tuple(false, false, {}, false));
    Body branch;
    VLLM_RETURN_IF_ERROR(parse_statements({"elif", "else", "endif"}, false, &branch));
    s->branches.emplace_back(std::move(test), std::move(branch));
    std::string which = cur().text;
    advance();
    if (which == "elif") continue;
    if (which == "else") VLLM_RETURN_IF_ERROR(parse_statements({"endif"}, true, &s->else_body));
    break;
  }
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_set(Body* body) {
  auto s = node_at<Stmt>(cur());
  advance();
  VLLM_ASSIGN_OR_RETURN(s->target, parse_assign_target(true, {}));
  if (skip_op("=")) {
    s->kind = Stmt::Kind::kSet;
    VLLM_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, true, {}, false));
  } else {
    s->kind = Stmt::Kind::kSetBlock;
    if (is_op("|")) {
      VLLM_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr, false));
    }
    VLLM_RETURN_IF_ERROR(parse_statements({"endset"}, true, &s->body));
  }
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_signature(Stmt* s) {
  VLLM_RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (!s->params.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
    VLLM_ASSIGN_OR_RETURN(std::string param, expect_ident());
    if (skip_op("=")) {
      VLLM_ASSIGN_OR_RETURN(ExprPtr def, parse_expression(true));
      s->defaults.push_back(std::move(def));
    } else if (!s->defaults.empty()) {
      return fail("non-default argument follows default argument");
    }
    s->params.push_back(std::move(param));
  }
  return expect_op(")");
}

Status Parser::parse_macro(Body* body) {
  auto s = node_at<Stmt>(cur());
  s->kind = Stmt::Kind::kMacro;
  advance();
  VLLM_ASSIGN_OR_RETURN(s->name, expect_ident());
  VLLM_RETURN_IF_ERROR(parse_signature(s.get()));
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  Status st = parse_statements({"endmacro"}, true, &s->body);
  loop_depth_ = saved_loops;
  VLLM_RETURN_IF_ERROR(st);
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_call_block(Body* body) {
  auto s = node_at<Stmt>(cur());
  s->kind = Stmt::Kind::kCallBlock;
  advance();
  if (is_op("(")) VLLM_RETURN_IF_ERROR(parse_signature(s.get()));
  const Token& at = cur();
  VLLM_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
  if (s->expr->kind != Expr::Kind::kCall) return fail_at(at, "expected call");
  int saved_loops = loop_depth_;
  loop_depth_ = 0;
  Status st = parse_statements({"endcall"}, true, &s->body);
  loop_depth_ = saved_loops;
  VLLM_RETURN_IF_ERROR(st);
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_filter_block(Body* body) {
  auto s = node_at<Stmt>(cur());
  s->kind = Stmt::Kind::kFilterBlock;
  advance();
  VLLM_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr, true));
  VLLM_RETURN_IF_ERROR(parse_statements({"endfilter"}, true, &s->body));
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_with(Body* body) {
  auto s = node_at<Stmt>(cur());
  s->kind = Stmt::Kind::kWith;
  advance();
  while (cur().type != TokenType::kBlockEnd) {
    if (!s->assignments.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
    VLLM_ASSIGN_OR_RETURN(Target target, parse_assign_target(false, {}));
    VLLM_RETURN_IF_ERROR(expect_op("="));
    VLLM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    s->assignments.emplace_back(std::move(target), std::move(value));
  }
  VLLM_RETURN_IF_ERROR(parse_statements({"endwith"}, true, &s->body));
  body->push_back(std::move(s));
  return Status::ok();
}

Status Parser::parse_print(Body* body) {
  const Token& at = cur();
  advance();
  bool first = true;
  while (cur().type != TokenType::kBlockEnd) {
    if (!first) VLLM_RETURN_IF_ERROR(expect_op(","));
    first = false;
    auto s = node_at<Stmt>(at);
    s->kind = Stmt::Kind::kOutput;
    VLLM_ASSIGN_OR_RETURN(s->expr, parse_expression(true));
    body->push_back(std::move(s));
  }
  return Status::ok();
}

Expected<Target> Parser::parse_target_primary(bool with_namespace) {
  Target t;
  t.line = cur().line;
  t.column = cur().column;
  if (cur().type == TokenType::kName) {
    t.name = cur().text;
    advance();
    if (with_namespace && is_op(".") && look().type == TokenType::kName) {
      advance();
      t.kind = Target::Kind::kNamespaceAttr;
      t.attr = cur().text;
      advance();
    }
    return t;
  }
  if (skip_op("(")) {
    VLLM_ASSIGN_OR_RETURN(Target inner, parse_assign_target(with_namespace, {}, true));
    VLLM_RETURN_IF_ERROR(expect_op(")"));
    return inner;
  }
  return fail(fmt::format("can't assign to '{}'", describe(cur())));
}

}  // namespace parser_internal

Expected<Body> parse_template(std::vector<Token> tokens, std::string_view name) {
  parser_internal::Parser parser(std::move(tokens), name);
  return parser.parse();
}

}  // namespace vllm::jinja
