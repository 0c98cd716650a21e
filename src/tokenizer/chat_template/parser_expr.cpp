// Expressions, with Jinja2's precedence (jinja2/parser.py): `a + b | trim` is
// `a + (b | trim)`, `x is not none and y` is `(not (x is none)) and y`, `a if c` without
// else is allowed, tuples need no parentheses, a test takes one bare argument.
#include "tokenizer/chat_template/parser_impl.h"

namespace vllm::jinja::parser_internal {

Expected<ExprPtr> Parser::sealed(ExprPtr e) {
  int depth = 0;
  for (const ExprPtr& op : e->operands) {
    if (op) depth = std::max(depth, op->depth);
  }
  for (const ExprPtr& op : e->args.positional) depth = std::max(depth, op->depth);
  for (const auto& kw : e->args.keyword) depth = std::max(depth, kw.second->depth);
  if (e->args.star) depth = std::max(depth, e->args.star->depth);
  if (e->args.star_star) depth = std::max(depth, e->args.star_star->depth);
  e->depth = depth + 1;
  if (e->depth > kMaxExprDepth) {
    return template_error(name_, e->line, e->column, "expression is nested too deeply");
  }
  return e;
}

Expected<ExprPtr> Parser::parse_condexpr() {
  DepthGuard guard(&expr_depth_);
  if (expr_depth_ > kMaxNesting) return fail("expression is nested too deeply");
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
  while (skip_name("if")) {
    VLLM_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
    ExprPtr other;
    if (skip_name("else")) {
      VLLM_ASSIGN_OR_RETURN(other, parse_condexpr());
    }
    ExprPtr e = expr_at(Expr::Kind::kCondExpr, start);
    e->operands.push_back(std::move(test));
    e->operands.push_back(std::move(expr1));
    e->operands.push_back(std::move(other));
    VLLM_ASSIGN_OR_RETURN(expr1, sealed(std::move(e)));
  }
  return expr1;
}

Expected<ExprPtr> Parser::parse_or() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (skip_name("or")) {
    VLLM_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    VLLM_ASSIGN_OR_RETURN(left, binary(Expr::Kind::kOr, "or", std::move(left), std::move(right), start));
  }
  return left;
}

Expected<ExprPtr> Parser::parse_and() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (skip_name("and")) {
    VLLM_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    VLLM_ASSIGN_OR_RETURN(left, binary(Expr::Kind::kAnd, "and", std::move(left), std::move(right), start));
  }
  return left;
}

Expected<ExprPtr> Parser::parse_not() {
  if (is_name("not")) {
    const Token& start = cur();
    advance();
    DepthGuard guard(&expr_depth_);
    if (expr_depth_ > kMaxNesting) return fail("expression is nested too deeply");
    VLLM_ASSIGN_OR_RETURN(ExprPtr inner, parse_not());
    ExprPtr e = expr_at(Expr::Kind::kNot, start);
    e->operands.push_back(std::move(inner));
    return sealed(std::move(e));
  }
  return parse_compare();
}

Expected<ExprPtr> Parser::parse_compare() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
  ExprPtr e;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOperator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      op = cur().text;
      advance();
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().type == TokenType::kName && look().text == "in") {
      advance();
      advance();
      op = "notin";
    } else {
      break;
    }
    if (!e) {
      e = expr_at(Expr::Kind::kCompare, start);
      e->operands.push_back(std::move(first));
    }
    VLLM_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
    e->ops.push_back(op);
    e->operands.push_back(std::move(operand));
  }
  if (!e) return first;
  return sealed(std::move(e));
}

Expected<ExprPtr> Parser::parse_math1() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (is_op("+") || is_op("-")) {
    std::string op = cur().text;
    advance();
    VLLM_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    VLLM_ASSIGN_OR_RETURN(left, binary(Expr::Kind::kBinary, op, std::move(left), std::move(right), start));
  }
  return left;
}

Expected<ExprPtr> Parser::parse_concat() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr first, parse_math2());
  if (!is_op("~")) return first;
  ExprPtr e = expr_at(Expr::Kind::kConcat, start);
  e->operands.push_back(std::move(first));
  while (skip_op("~")) {
    VLLM_ASSIGN_OR_RETURN(ExprPtr next, parse_math2());
    e->operands.push_back(std::move(next));
  }
  return sealed(std::move(e));
}

Expected<ExprPtr> Parser::parse_math2() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = cur().text;
    advance();
    VLLM_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    VLLM_ASSIGN_OR_RETURN(left, binary(Expr::Kind::kBinary, op, std::move(left), std::move(right), start));
  }
  return left;
}

Expected<ExprPtr> Parser::parse_pow() {
  const Token& start = cur();
  VLLM_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (skip_op("**")) {
    VLLM_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    VLLM_ASSIGN_OR_RETURN(left, binary(Expr::Kind::kBinary, "**", std::move(left), std::move(right), start));
  }
  return left;
}

Expected<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(&expr_depth_);
  if (expr_depth_ > kMaxNesting) return fail("expression is nested too deeply");
  const Token& start = cur();
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    bool neg = is_op("-");
    advance();
    VLLM_ASSIGN_OR_RETURN(ExprPtr inner, parse_unary(false));
    node = expr_at(neg ? Expr::Kind::kNeg : Expr::Kind::kPos, start);
    node->operands.push_back(std::move(inner));
    VLLM_ASSIGN_OR_RETURN(node, sealed(std::move(node)));
  } else {
    VLLM_ASSIGN_OR_RETURN(node, parse_primary());
  }
  VLLM_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    VLLM_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

Expected<ExprPtr> Parser::parse_primary() {
  DepthGuard guard(&expr_depth_);
  if (expr_depth_ > kMaxNesting) return fail("expression is nested too deeply");
  const Token& t = cur();
  switch (t.type) {
    case TokenType::kName: {
      advance();
      ExprPtr e = expr_at(Expr::Kind::kLiteral, t);
      if (t.text == "true" || t.text == "True") {
        e->literal = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::none();
      } else {
        e->kind = Expr::Kind::kName;
        e->name = t.text;
      }
      return e;
    }
    case TokenType::kString: {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().text;
        advance();
      }
      ExprPtr e = expr_at(Expr::Kind::kLiteral, t);
      e->literal = Value::string(std::move(s));
      return e;
    }
    case TokenType::kInteger:
    case TokenType::kFloat: {
      advance();
      ExprPtr e = expr_at(Expr::Kind::kLiteral, t);
      e->literal = t.type == TokenType::kInteger ? Value::integer(t.int_value)
                                                 : Value::floating(t.float_value);
      return e;
    }
    case TokenType::kOperator:
      if (t.text == "(") {
        advance();
        VLLM_ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple(false, true, {}, true));
        VLLM_RETURN_IF_ERROR(expect_op(")"));
        return inner;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default:
      break;
  }
  return fail(fmt::format("unexpected '{}'", describe(t)));
}

Expected<ExprPtr> Parser::parse_list() {
  ExprPtr e = expr_at(Expr::Kind::kList, cur());
  advance();
  while (!is_op("]")) {
    if (!e->operands.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
    if (is_op("]")) break;
    VLLM_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
    e->operands.push_back(std::move(item));
  }
  VLLM_RETURN_IF_ERROR(expect_op("]"));
  return sealed(std::move(e));
}

Expected<ExprPtr> Parser::parse_dict() {
  ExprPtr e = expr_at(Expr::Kind::kDict, cur());
  advance();
  while (!is_op("}")) {
    if (!e->operands.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
    if (is_op("}")) break;
    VLLM_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
    VLLM_RETURN_IF_ERROR(expect_op(":"));
    VLLM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    e->operands.push_back(std::move(key));
    e->operands.push_back(std::move(value));
  }
  VLLM_RETURN_IF_ERROR(expect_op("}"));
  return sealed(std::move(e));
}

Expected<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      VLLM_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (is_op("(")) {
      VLLM_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Expected<ExprPtr> Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      VLLM_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
    } else if (is_name("is")) {
      VLLM_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (is_op("(")) {
      VLLM_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Expected<ExprPtr> Parser::parse_subscript(ExprPtr node) {
  const Token& t = cur();
  if (skip_op(".")) {
    const Token& attr = cur();
    if (attr.type == TokenType::kName) {
      advance();
      ExprPtr e = expr_at(Expr::Kind::kGetAttr, t);
      e->name = attr.text;
      e->operands.push_back(std::move(node));
      return sealed(std::move(e));
    }
    if (attr.type != TokenType::kInteger) return fail("expected name or number");
    advance();
    ExprPtr e = expr_at(Expr::Kind::kGetItem, t);
    ExprPtr key = expr_at(Expr::Kind::kLiteral, attr);
    key->literal = Value::integer(attr.int_value);
    e->operands.push_back(std::move(node));
    e->operands.push_back(std::move(key));
    return sealed(std::move(e));
  }
  advance();  // [
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) VLLM_RETURN_IF_ERROR(expect_op(","));
    VLLM_ASSIGN_OR_RETURN(ExprPtr arg, parse_subscribed());
    args.push_back(std::move(arg));
  }
  VLLM_RETURN_IF_ERROR(expect_op("]"));
  if (args.size() == 1 && args[0]->kind == Expr::Kind::kSlice) {
    args[0]->operands[0] = std::move(node);
    args[0]->line = t.line;
    args[0]->column = t.column;
    return sealed(std::move(args[0]));
  }
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    for (const auto& a : args) {
      if (a->kind == Expr::Kind::kSlice) return fail_at(t, "multi-dimensional slices are not supported");
    }
    key = expr_at(Expr::Kind::kTuple, t);
    key->operands = std::move(args);
  }
  ExprPtr e = expr_at(Expr::Kind::kGetItem, t);
  e->operands.push_back(std::move(node));
  e->operands.push_back(std::move(key));
  return sealed(std::move(e));
}

Expected<ExprPtr> Parser::parse_subscribed() {
  const Token& start = cur();
  ExprPtr first;
  if (!is_op(":")) {
    VLLM_ASSIGN_OR_RETURN(first, parse_expression(true));
    if (!is_op(":")) return first;
  }
  advance();  // :
  ExprPtr slice = expr_at(Expr::Kind::kSlice, start);
  slice->operands.push_back(nullptr);
  slice->operands.push_back(std::move(first));
  ExprPtr stop, step;
  if (!is_op(":") && !is_op("]") && !is_op(",")) {
    VLLM_ASSIGN_OR_RETURN(stop, parse_expression(true));
  }
  if (skip_op(":")) {
    if (!is_op("]") && !is_op(",")) {
      VLLM_ASSIGN_OR_RETURN(step, parse_expression(true));
    }
  }
  slice->operands.push_back(std::move(stop));
  slice->operands.push_back(std::move(step));
  return slice;
}

Status Parser::parse_call_args(CallArgNodes* args) {
  const Token& open = cur();
  VLLM_RETURN_IF_ERROR(expect_op("("));
  bool require_comma = false;
  auto invalid = [&] { return fail_at(open, "invalid syntax for function call expression"); };
  while (!is_op(")")) {
    if (require_comma) {
      VLLM_RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
    }
    if (is_op("*")) {
      if (args->star || args->star_star) return invalid();
      advance();
      VLLM_ASSIGN_OR_RETURN(args->star, parse_expression(true));
    } else if (is_op("**")) {
      if (args->star_star) return invalid();
      advance();
      VLLM_ASSIGN_OR_RETURN(args->star_star, parse_expression(true));
    } else if (cur().type == TokenType::kName && look().type == TokenType::kOperator &&
               look().text == "=") {
      if (args->star_star) return invalid();
      std::string key = cur().text;
      advance();
      advance();
      VLLM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      args->keyword.emplace_back(std::move(key), std::move(value));
    } else {
      if (args->star || args->star_star || !args->keyword.empty()) return invalid();
      VLLM_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      args->positional.push_back(std::move(value));
    }
    require_comma = true;
  }
  return expect_op(")");
}

Expected<ExprPtr> Parser::parse_call(ExprPtr node) {
  ExprPtr e = expr_at(Expr::Kind::kCall, cur());
  VLLM_RETURN_IF_ERROR(parse_call_args(&e->args));
  e->operands.push_back(std::move(node));
  return sealed(std::move(e));
}

Expected<std::string> Parser::parse_dotted_name() {
  VLLM_ASSIGN_OR_RETURN(std::string name, expect_ident());
  while (skip_op(".")) {
    VLLM_ASSIGN_OR_RETURN(std::string part, expect_ident());
    name += "." + part;
  }
  return name;
}

Expected<ExprPtr> Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const Token& t = cur();
    ExprPtr e = expr_at(Expr::Kind::kFilter, t);
    VLLM_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
    if (is_op("(")) VLLM_RETURN_IF_ERROR(parse_call_args(&e->args));
    e->operands.push_back(std::move(node));
    VLLM_ASSIGN_OR_RETURN(node, sealed(std::move(e)));
  }
  return node;
}

Expected<ExprPtr> Parser::parse_test(ExprPtr node) {
  const Token& is_token = cur();
  advance();  // is
  bool negated = skip_name("not");
  ExprPtr e = expr_at(Expr::Kind::kTest, is_token);
  VLLM_ASSIGN_OR_RETURN(e->name, parse_dotted_name());
  const Token& t = cur();
  if (is_op("(")) {
    VLLM_RETURN_IF_ERROR(parse_call_args(&e->args));
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || is_op("[") ||
              is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) return fail("you cannot chain multiple tests with is");
    VLLM_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    VLLM_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    e->args.positional.push_back(std::move(arg));
  }
  e->operands.push_back(std::move(node));
  VLLM_ASSIGN_OR_RETURN(e, sealed(std::move(e)));
  if (!negated) return e;
  ExprPtr n = expr_at(Expr::Kind::kNot, is_token);
  n->operands.push_back(std::move(e));
  return sealed(std::move(n));
}

}  // namespace vllm::jinja::parser_internal
