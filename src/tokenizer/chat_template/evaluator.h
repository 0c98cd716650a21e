// Runs a parsed template over a context. Scoping follows Jinja2's compiled code: `if` shares
// the enclosing scope, every `for` iteration, macro call, `with` and block `set` gets a child
// scope (assignments there do not leak out), macros see the scope they were defined in (live,
// as Python closures do), and namespace objects are the one mutable value.
//
// Hostile templates are bounded: evaluation steps, output / string size, list sizes, macro
// call depth and value nesting all have limits, and exceeding one is an error, never a crash
// or a hang.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/value.h"

namespace vllm::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also the largest string a template may build
  size_t max_items = size_t{1} << 22;          // largest list / range a template may build
  int64_t max_steps = 50'000'000;              // statements, loop iterations, calls, ...
  int max_call_depth = 64;                     // nested macro calls
  int max_value_depth = 256;                   // nested lists / dicts
  int max_eval_depth = 500;  // nested statement + expression evaluations (native stack use)
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(std::string_view template_name, const RenderLimits& limits, int64_t now_unix);
  ~Interpreter();

  // Renders `body` with the variables of `context` (a dict).
  Expected<std::string> render(const Body& body, const Value& context);

  // ---- for filters, tests, methods and globals ----
  // An error at the expression being evaluated.
  Status fail(std::string_view message) const;
  // The error an operation on an Undefined value raises.
  Status undefined_error(const Value& undefined) const;
  Status charge(int64_t steps);
  Status check_string(size_t bytes) const;
  Status check_items(size_t count) const;

  Expected<Value> call(const Value& callee, CallArgs& args);
  Expected<Value> apply_filter(std::string_view name, const Value& value, CallArgs& args);
  Expected<bool> apply_test(std::string_view name, const Value& value, CallArgs& args);
  // Jinja's getattr (attribute first, then item) and getitem (item first, then attribute).
  Expected<Value> get_attr(const Value& obj, const std::string& name);
  Expected<Value> get_item(const Value& obj, const Value& key);
  // The elements `for` iterates: list items, dict keys, string characters; Undefined is empty.
  Expected<std::vector<Value>> iterate(const Value& v);
  // Records a namespace so that reference cycles through it are broken after rendering.
  void track_namespace(const Value& ns);
  int64_t now_unix() const { return now_unix_; }
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status exec_body(const Body& body, const ScopePtr& scope);
  Status exec(const Stmt& stmt, const ScopePtr& scope);
  Status exec_for(const Stmt& stmt, const ScopePtr& scope);
  Status exec_call_block(const Stmt& stmt, const ScopePtr& scope);
  Status assign(const Target& target, const Value& value, const ScopePtr& scope);
  Status emit(std::string_view text);
  Expected<std::string> capture(const Body& body, const ScopePtr& scope);
  Expected<Value> apply_filter_chain(const Expr& chain, Value innermost, const ScopePtr& scope);
  Value make_macro(const Stmt& stmt, const ScopePtr& scope, std::string name);
  Expected<Value> invoke_macro(const Stmt& stmt, const std::weak_ptr<Scope>& defined_in,
                               CallArgs& args);

  Expected<Value> eval(const Expr& expr, const ScopePtr& scope);
  Expected<Value> eval_inner(const Expr& expr, const ScopePtr& scope);
  Status eval_args(const CallArgNodes& nodes, const ScopePtr& scope, CallArgs* out);
  Expected<Value> eval_compare(const Expr& expr, const ScopePtr& scope);

  std::string name_;
  RenderLimits limits_;
  int64_t now_unix_;
  std::string* out_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  int site_line_ = 1;  // where the statement / expression being evaluated starts

  int site_column_ = 1;
  ScopePtr root_;
  std::vector<Value> namespaces_;
};

// Python binary operators and comparisons (ops.cpp). Errors are reported through `ip`.
Expected<Value> binary_op(Interpreter& ip, std::string_view op, const Value& a, const Value& b);
Expected<bool> compare_op(Interpreter& ip, std::string_view op, const Value& a, const Value& b);
Expected<Value> negate(Interpreter& ip, const Value& v, bool minus);
// markupsafe.escape of a plain string: & < > " ' as HTML entities.
std::string html_escape(std::string_view s);
// Python "%" formatting of a string.
Expected<std::string> percent_format(Interpreter& ip, std::string_view format, const Value& args);
// str.format().
Expected<std::string> brace_format(Interpreter& ip, std::string_view format, CallArgs& args);

// Attribute and item access on the value kinds (methods.cpp).
Expected<Value> attribute_of(Interpreter& ip, const Value& obj, const std::string& name);
Expected<Value> item_of(Interpreter& ip, const Value& obj, const Value& key);
Expected<Value> slice_of(Interpreter& ip, const Value& obj, const Value& start, const Value& stop,
                         const Value& step);

// Filters, tests and global functions (builtins.cpp, tests.cpp).
using FilterFn = Expected<Value> (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = Expected<bool> (*)(Interpreter&, const Value&, CallArgs&);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
void add_globals(Scope* scope);

// Binds call arguments to named parameters (Python's rules for positional-or-keyword
// parameters). `out[k]` is left Undefined when parameter k was not passed.
Status bind_args(Interpreter& ip, std::string_view what, CallArgs& args,
                 std::initializer_list<std::string_view> names, std::vector<Value>* out);
// Python int() of a value used as an integer argument.
Expected<int64_t> int_arg(Interpreter& ip, const Value& v, std::string_view what);

}  // namespace vllm::jinja
