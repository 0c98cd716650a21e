// Statement execution and expression evaluation (see evaluator.h for the scoping rules).
#include "tokenizer/chat_template/evaluator.h"

#include <fmt/format.h>

#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {

Interpreter::Interpreter(std::string_view template_name, const RenderLimits& limits,
                         int64_t now_unix)
    : name_(template_name), limits_(limits), now_unix_(now_unix) {}

Interpreter::~Interpreter() {
  // Namespaces are the only mutable values, so every reference cycle runs through one
  // ({% set ns.self = ns %}, or a macro kept in a namespace). Emptying them frees the cycles.
  for (Value& ns : namespaces_) ns.as_namespace().attrs = DictData();
  namespaces_.clear();
  if (root_) root_->vars.clear();
}

Expected<std::string> Interpreter::render(const Body& body, const Value& context) {
  auto globals = std::make_shared<Scope>();
  add_globals(globals.get());
  auto ctx = std::make_shared<Scope>();
  ctx->parent = globals;
  if (context.is_dict()) {
    for (const auto& [key, value] : context.as_dict().entries) {
      if (key.is_string()) ctx->vars[key.as_string()] = value;
    }
  }
  root_ = std::make_shared<Scope>();
  root_->parent = ctx;
  std::string output;
  out_ = &output;
  VLLM_RETURN_IF_ERROR(exec_body(body, root_));
  return output;
}

// ---- errors and limits ----

Status Interpreter::fail(std::string_view message) const {
  return template_error(name_, site_line_, site_column_, message);
}

Status Interpreter::undefined_error(const Value& undefined) const {
  const std::string& hint = undefined.undefined_hint();
  return fail(hint.empty() ? "undefined value" : hint);
}

Status Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return fail(fmt::format("template exceeded {} evaluation steps", limits_.max_steps));
  }
  return Status::ok();
}

Status Interpreter::check_string(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return fail(fmt::format("string of {} bytes exceeds the {} byte limit", bytes,
                            limits_.max_output_bytes));
  }
  return Status::ok();
}

Status Interpreter::check_items(size_t count) const {
  if (count > limits_.max_items) {
    return fail(fmt::format("sequence of {} items exceeds the {} item limit", count,
                            limits_.max_items));
  }
  return Status::ok();
}

void Interpreter::track_namespace(const Value& ns) { namespaces_.push_back(ns); }

Status Interpreter::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    return fail(fmt::format("output exceeds {} bytes", limits_.max_output_bytes));
  }
  out_->append(text);
  return Status::ok();
}

// ---- statements ----

Status Interpreter::exec_body(const Body& body, const ScopePtr& scope) {
  for (const StmtPtr& stmt : body) {
    VLLM_RETURN_IF_ERROR(exec(*stmt, scope));
    if (flow_ != Flow::kNormal) return Status::ok();
  }
  return Status::ok();
}

Expected<std::string> Interpreter::capture(const Body& body, const ScopePtr& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  Status status = exec_body(body, scope);
  out_ = saved;
  VLLM_RETURN_IF_ERROR(status);
  return buffer;
}

namespace {

// Counts nested exec / eval calls: templates are small, but recursion through macros times
// nesting inside each could otherwise exhaust the native stack.
class DepthGuard {
 public:
  explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
  ~DepthGuard() { --*depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int* depth_;
};

}  // namespace

static ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

Status Interpreter::exec(const Stmt& stmt, const ScopePtr& scope) {
  site_line_ = stmt.line;
  site_column_ = stmt.column;
  VLLM_RETURN_IF_ERROR(charge(1));
  DepthGuard guard(&eval_depth_);
  if (eval_depth_ > limits_.max_eval_depth) return fail("template evaluation nested too deeply");
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      return emit(stmt.text);
    case Stmt::Kind::kOutput: {
      VLLM_ASSIGN_OR_RETURN(Value v, eval(*stmt.expr, scope));
      if (v.is_string()) return emit(v.as_string());
      return emit(py_str(v));
    }
    case Stmt::Kind::kIf:
      for (const auto& [test, body] : stmt.branches) {
        VLLM_ASSIGN_OR_RETURN(Value cond, eval(*test, scope));
        if (cond.truthy()) return exec_body(body, scope);
      }
      return exec_body(stmt.else_body, scope);
    case Stmt::Kind::kFor:
      return exec_for(stmt, scope);
    case Stmt::Kind::kSet: {
      VLLM_ASSIGN_OR_RETURN(Value v, eval(*stmt.expr, scope));
      return assign(stmt.target, v, scope);
    }
    case Stmt::Kind::kSetBlock: {
      VLLM_ASSIGN_OR_RETURN(std::string text, capture(stmt.body, child_of(scope)));
      Value v = Value::string(std::move(text));
      if (stmt.expr) {
        VLLM_ASSIGN_OR_RETURN(v, apply_filter_chain(*stmt.expr, v, scope));
      }
      return assign(stmt.target, v, scope);
    }
    case Stmt::Kind::kMacro:
      scope->vars[stmt.name] = make_macro(stmt, scope, stmt.name);
      return Status::ok();
    case Stmt::Kind::kCallBlock:
      return exec_call_block(stmt, scope);
    case Stmt::Kind::kFilterBlock: {
      VLLM_ASSIGN_OR_RETURN(std::string text, capture(stmt.body, child_of(scope)));
      VLLM_ASSIGN_OR_RETURN(Value v, apply_filter_chain(*stmt.expr, Value::string(text), scope));
      return emit(py_str(v));
    }
    case Stmt::Kind::kWith: {
      ScopePtr inner = child_of(scope);
      for (const auto& [target, expr] : stmt.assignments) {
        VLLM_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
        VLLM_RETURN_IF_ERROR(assign(target, v, inner));
      }
      return exec_body(stmt.body, inner);
    }
    case Stmt::Kind::kBreak:
      flow_ = Flow::kBreak;
      return Status::ok();
    case Stmt::Kind::kContinue:
      flow_ = Flow::kContinue;
      return Status::ok();
    case Stmt::Kind::kScope:
      return exec_body(stmt.body, scope);
  }
  return Status::ok();
}

Status Interpreter::exec_for(const Stmt& stmt, const ScopePtr& scope) {
  VLLM_ASSIGN_OR_RETURN(Value iterable, eval(*stmt.expr, scope));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> all, iterate(iterable));
  auto items = std::make_shared<std::vector<Value>>();
  if (stmt.filter) {
    for (Value& item : all) {
      VLLM_RETURN_IF_ERROR(charge(1));
      ScopePtr test_scope = child_of(scope);
      VLLM_RETURN_IF_ERROR(assign(stmt.target, item, test_scope));
      VLLM_ASSIGN_OR_RETURN(Value keep, eval(*stmt.filter, test_scope));
      if (keep.truthy()) items->push_back(std::move(item));
    }
  } else {
    *items = std::move(all);
  }
  if (items->empty()) return exec_body(stmt.else_body, child_of(scope));
  std::shared_ptr<const std::vector<Value>> shared = items;
  auto changed_state = std::make_shared<std::vector<Value>>();
  for (size_t k = 0; k < shared->size(); ++k) {
    VLLM_RETURN_IF_ERROR(charge(1));
    ScopePtr iteration = child_of(scope);
    auto loop = std::make_shared<LoopData>();
    loop->items = shared;
    loop->index0 = static_cast<int64_t>(k);
    loop->last_changed = changed_state;
    iteration->vars["loop"] = Value::loop(std::move(loop));
    VLLM_RETURN_IF_ERROR(assign(stmt.target, (*shared)[k], iteration));
    VLLM_RETURN_IF_ERROR(exec_body(stmt.body, iteration));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return Status::ok();
}

Status Interpreter::exec_call_block(const Stmt& stmt, const ScopePtr& scope) {
  const Expr& call = *stmt.expr;
  VLLM_ASSIGN_OR_RETURN(Value callee, eval(*call.operands[0], scope));
  CallArgs args;
  VLLM_RETURN_IF_ERROR(eval_args(call.args, scope, &args));
  args.keyword.emplace_back("caller", make_macro(stmt, scope, "caller"));
  site_line_ = call.line;
  site_column_ = call.column;
  VLLM_ASSIGN_OR_RETURN(Value result, this->call(callee, args));
  return emit(py_str(result));
}

Status Interpreter::assign(const Target& target, const Value& value, const ScopePtr& scope) {
  switch (target.kind) {
    case Target::Kind::kName:
      scope->vars[target.name] = value;
      return Status::ok();
    case Target::Kind::kNamespaceAttr: {
      const Value* ns = scope->find(target.name);
      if (ns == nullptr || !ns->is_namespace()) {
        site_line_ = target.line;
        site_column_ = target.column;
        return fail("cannot assign attribute on non-namespace object");
      }
      ns->as_namespace().attrs.set(Value::string(target.attr), value);
      return Status::ok();
    }
    case Target::Kind::kTuple: {
      site_line_ = target.line;
      site_column_ = target.column;
      if (value.is_undefined()) return undefined_error(value);
      VLLM_ASSIGN_OR_RETURN(std::vector<Value> parts, iterate(value));
      if (parts.size() != target.items.size()) {
        return fail(parts.size() > target.items.size()
                        ? fmt::format("too many values to unpack (expected {})",
                                      target.items.size())
                        : fmt::format("not enough values to unpack (expected {}, got {})",
                                      target.items.size(), parts.size()));
      }
      for (size_t k = 0; k < parts.size(); ++k) {
        VLLM_RETURN_IF_ERROR(assign(target.items[k], parts[k], scope));
      }
      return Status::ok();
    }
  }
  return Status::ok();
}

Expected<Value> Interpreter::apply_filter_chain(const Expr& chain, Value innermost,
                                                const ScopePtr& scope) {
  // The chain is Filter(Filter(null, f1), f2): apply from the innermost out.
  std::vector<const Expr*> filters;
  for (const Expr* e = &chain; e != nullptr && e->kind == Expr::Kind::kFilter;
       e = e->operands[0].get()) {
    filters.push_back(e);
  }
  Value v = std::move(innermost);
  for (auto it = filters.rbegin(); it != filters.rend(); ++it) {
    CallArgs args;
    VLLM_RETURN_IF_ERROR(eval_args((*it)->args, scope, &args));
    site_line_ = (*it)->line;
    site_column_ = (*it)->column;
    VLLM_ASSIGN_OR_RETURN(v, apply_filter((*it)->name, v, args));
  }
  return v;
}

// ---- macros ----

Value Interpreter::make_macro(const Stmt& stmt, const ScopePtr& scope, std::string name) {
  auto fn = std::make_shared<Callable>();
  fn->name = std::move(name);
  fn->is_macro = true;
  std::weak_ptr<Scope> defined_in = scope;
  const Stmt* def = &stmt;
  fn->fn = [def, defined_in](Interpreter& ip, CallArgs& args) {
    return ip.invoke_macro(*def, defined_in, args);
  };
  return Value::callable(std::move(fn));
}

Expected<Value> Interpreter::invoke_macro(const Stmt& stmt, const std::weak_ptr<Scope>& defined_in,
                                          CallArgs& args) {
  std::string macro_name = stmt.kind == Stmt::Kind::kMacro ? stmt.name : "caller";
  if (call_depth_ >= limits_.max_call_depth) {
    return fail(fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
  }
  if (args.positional.size() > stmt.params.size()) {
    return fail(fmt::format("macro '{}' takes not more than {} argument(s)", macro_name,
                            stmt.params.size()));
  }
  ScopePtr parent = defined_in.lock();
  ScopePtr scope = child_of(parent ? parent : root_);
  std::vector<bool> bound(stmt.params.size(), false);
  for (size_t k = 0; k < args.positional.size(); ++k) {
    scope->vars[stmt.params[k]] = args.positional[k];
    bound[k] = true;
  }
  for (auto& [key, value] : args.keyword) {
    size_t k = 0;
    while (k < stmt.params.size() && stmt.params[k] != key) ++k;
    if (k == stmt.params.size()) {
      if (key == "caller") {
        scope->vars["caller"] = value;
        continue;
      }
      return fail(fmt::format("macro '{}' takes no keyword argument '{}'", macro_name, key));
    }
    if (bound[k]) {
      return fail(fmt::format("macro '{}' got multiple values for argument '{}'", macro_name,
                              key));
    }
    scope->vars[key] = value;
    bound[k] = true;
  }
  size_t first_default = stmt.params.size() - stmt.defaults.size();
  int saved_line = site_line_, saved_column = site_column_;
  for (size_t k = 0; k < stmt.params.size(); ++k) {
    if (bound[k]) continue;
    if (k >= first_default) {
      VLLM_ASSIGN_OR_RETURN(Value def, eval(*stmt.defaults[k - first_default], scope));
      scope->vars[stmt.params[k]] = def;
    } else {
      scope->vars[stmt.params[k]] =
          Value::undefined(fmt::format("parameter '{}' was not provided", stmt.params[k]));
    }
  }
  ++call_depth_;
  Expected<std::string> text = capture(stmt.body, scope);
  --call_depth_;
  flow_ = Flow::kNormal;
  site_line_ = saved_line;
  site_column_ = saved_column;
  if (!text.has_value()) return text.status();
  return Value::string(std::move(text).value());
}

Expected<Value> Interpreter::call(const Value& callee, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(charge(1));
  if (callee.is_callable()) return callee.as_callable().fn(*this, args);
  if (callee.is_undefined()) return undefined_error(callee);
  return fail(fmt::format("'{}' object is not callable", callee.type_name()));
}

// ---- expressions ----

Expected<Value> Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
  DepthGuard guard(&eval_depth_);
  if (eval_depth_ > limits_.max_eval_depth) {
    site_line_ = expr.line;
    site_column_ = expr.column;
    return fail("template evaluation nested too deeply");
  }
  VLLM_ASSIGN_OR_RETURN(Value v, eval_inner(expr, scope));
  if (v.depth() > limits_.max_value_depth) {
    site_line_ = expr.line;
    site_column_ = expr.column;
    return fail(fmt::format("value nested deeper than {}", limits_.max_value_depth));
  }
  return v;
}

Status Interpreter::eval_args(const CallArgNodes& nodes, const ScopePtr& scope, CallArgs* out) {
  for (const ExprPtr& e : nodes.positional) {
    VLLM_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    out->positional.push_back(std::move(v));
  }
  if (nodes.star) {
    VLLM_ASSIGN_OR_RETURN(Value v, eval(*nodes.star, scope));
    VLLM_ASSIGN_OR_RETURN(std::vector<Value> more, iterate(v));
    for (Value& m : more) out->positional.push_back(std::move(m));
  }
  for (const auto& [key, e] : nodes.keyword) {
    VLLM_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    out->keyword.emplace_back(key, std::move(v));
  }
  if (nodes.star_star) {
    VLLM_ASSIGN_OR_RETURN(Value v, eval(*nodes.star_star, scope));
    if (!v.is_dict()) return fail("argument after ** must be a mapping");
    for (const auto& [key, value] : v.as_dict().entries) {
      if (!key.is_string()) return fail("keywords must be strings");
      out->keyword.emplace_back(key.as_string(), value);
    }
  }
  return Status::ok();
}

Expected<Value> Interpreter::eval_inner(const Expr& expr, const ScopePtr& scope) {
  auto at = [&] {
    site_line_ = expr.line;
    site_column_ = expr.column;
  };
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.literal;
    case Expr::Kind::kName: {
      const Value* v = scope->find(expr.name);
      if (v == nullptr) return Value::undefined(fmt::format("'{}' is undefined", expr.name));
      return *v;
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.operands.size());
      for (const ExprPtr& e : expr.operands) {
        VLLM_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
        items.push_back(std::move(v));
      }
      return expr.kind == Expr::Kind::kList ? Value::list(std::move(items))
                                            : Value::tuple(std::move(items));
    }
    case Expr::Kind::kDict: {
      DictData d;
      for (size_t k = 0; k + 1 < expr.operands.size(); k += 2) {
        VLLM_ASSIGN_OR_RETURN(Value key, eval(*expr.operands[k], scope));
        VLLM_ASSIGN_OR_RETURN(Value value, eval(*expr.operands[k + 1], scope));
        if (key.is_list() && !key.is_tuple()) {
          at();
          return fail("unhashable type: 'list'");
        }
        if (key.is_dict() || key.is_undefined()) {
          at();
          return fail(fmt::format("unhashable type: '{}'", key.type_name()));
        }
        d.set(std::move(key), std::move(value));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::kGetAttr: {
      VLLM_ASSIGN_OR_RETURN(Value obj, eval(*expr.operands[0], scope));
      at();
      return get_attr(obj, expr.name);
    }
    case Expr::Kind::kGetItem: {
      VLLM_ASSIGN_OR_RETURN(Value obj, eval(*expr.operands[0], scope));
      VLLM_ASSIGN_OR_RETURN(Value key, eval(*expr.operands[1], scope));
      at();
      return get_item(obj, key);
    }
    case Expr::Kind::kSlice: {
      VLLM_ASSIGN_OR_RETURN(Value obj, eval(*expr.operands[0], scope));
      Value bounds[3] = {Value::none(), Value::none(), Value::none()};
      for (int k = 0; k < 3; ++k) {
        if (expr.operands[k + 1]) {
          VLLM_ASSIGN_OR_RETURN(bounds[k], eval(*expr.operands[k + 1], scope));
        }
      }
      at();
      return slice_of(*this, obj, bounds[0], bounds[1], bounds[2]);
    }
    case Expr::Kind::kCall: {
      VLLM_ASSIGN_OR_RETURN(Value callee, eval(*expr.operands[0], scope));
      CallArgs args;
      VLLM_RETURN_IF_ERROR(eval_args(expr.args, scope, &args));
      at();
      return call(callee, args);
    }
    case Expr::Kind::kFilter: {
      Value v;
      if (expr.operands[0]) {
        VLLM_ASSIGN_OR_RETURN(v, eval(*expr.operands[0], scope));
      }
      CallArgs args;
      VLLM_RETURN_IF_ERROR(eval_args(expr.args, scope, &args));
      at();
      return apply_filter(expr.name, v, args);
    }
    case Expr::Kind::kTest: {
      VLLM_ASSIGN_OR_RETURN(Value v, eval(*expr.operands[0], scope));
      CallArgs args;
      VLLM_RETURN_IF_ERROR(eval_args(expr.args, scope, &args));
      at();
      VLLM_ASSIGN_OR_RETURN(bool ok, apply_test(expr.name, v, args));
      return Value::boolean(ok);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      VLLM_ASSIGN_OR_RETURN(Value v, eval(*expr.operands[0], scope));
      at();
      return negate(*this, v, expr.kind == Expr::Kind::kNeg);
    }
    case Expr::Kind::kNot: {
      VLLM_ASSIGN_OR_RETURN(Value v, eval(*expr.operands[0], scope));
      return Value::boolean(!v.truthy());
    }
    case Expr::Kind::kBinary: {
      VLLM_ASSIGN_OR_RETURN(Value a, eval(*expr.operands[0], scope));
      VLLM_ASSIGN_OR_RETURN(Value b, eval(*expr.operands[1], scope));
      at();
      return binary_op(*this, expr.name, a, b);
    }
    case Expr::Kind::kConcat: {
      std::string s;
      for (const ExprPtr& e : expr.operands) {
        VLLM_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
        append_py_str(v, &s);
        if (s.size() > limits_.max_output_bytes) {
          at();
          return check_string(s.size());
        }
      }
      return Value::string(std::move(s));
    }
    case Expr::Kind::kAnd: {
      VLLM_ASSIGN_OR_RETURN(Value a, eval(*expr.operands[0], scope));
      if (!a.truthy()) return a;
      return eval(*expr.operands[1], scope);
    }
    case Expr::Kind::kOr: {
      VLLM_ASSIGN_OR_RETURN(Value a, eval(*expr.operands[0], scope));
      if (a.truthy()) return a;
      return eval(*expr.operands[1], scope);
    }
    case Expr::Kind::kCompare:
      return eval_compare(expr, scope);
    case Expr::Kind::kCondExpr: {
      VLLM_ASSIGN_OR_RETURN(Value test, eval(*expr.operands[0], scope));
      if (test.truthy()) return eval(*expr.operands[1], scope);
      if (expr.operands[2]) return eval(*expr.operands[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section "
                              "was defined");
    }
  }
  return Value();
}

Expected<Value> Interpreter::eval_compare(const Expr& expr, const ScopePtr& scope) {
  VLLM_ASSIGN_OR_RETURN(Value left, eval(*expr.operands[0], scope));
  for (size_t k = 0; k < expr.ops.size(); ++k) {
    VLLM_ASSIGN_OR_RETURN(Value right, eval(*expr.operands[k + 1], scope));
    site_line_ = expr.line;
    site_column_ = expr.column;
    VLLM_ASSIGN_OR_RETURN(bool ok, compare_op(*this, expr.ops[k], left, right));
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

// ---- access ----

Expected<Value> Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return undefined_error(obj);
  return attribute_of(*this, obj, name);
}

Expected<Value> Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return undefined_error(obj);
  return item_of(*this, obj, key);
}

Expected<std::vector<Value>> Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
    case Value::Kind::kGenerator:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& entry : v.as_dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      std::vector<size_t> offsets = code_point_offsets(s);
      chars.reserve(offsets.size());
      for (size_t k = 0; k + 1 < offsets.size(); ++k) {
        chars.push_back(Value::string(s.substr(offsets[k], offsets[k + 1] - offsets[k])));
      }
      return chars;
    }
    case Value::Kind::kLoop:
      return *v.as_loop().items;
    default:
      return fail(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Expected<Value> Interpreter::apply_filter(std::string_view name, const Value& value,
                                          CallArgs& args) {
  VLLM_RETURN_IF_ERROR(charge(1));
  FilterFn fn = find_filter(name);
  if (fn == nullptr) return fail(fmt::format("no filter named '{}'", name));
  return fn(*this, value, args);
}

Expected<bool> Interpreter::apply_test(std::string_view name, const Value& value,
                                       CallArgs& args) {
  VLLM_RETURN_IF_ERROR(charge(1));
  TestFn fn = find_test(name);
  if (fn == nullptr) return fail(fmt::format("no test named '{}'", name));
  return fn(*this, value, args);
}

}  // namespace vllm::jinja
