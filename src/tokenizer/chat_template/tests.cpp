// Jinja2's built-in tests (jinja2/tests.py: `x is defined`, `x is string`, ...) and the
// template globals transformers provides: range, dict, namespace, joiner, raise_exception and
// strftime_now.
#include <fmt/format.h>

#include <ctime>

#include "tokenizer/chat_template/evaluator.h"
#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

Expected<Value> one_arg(Interpreter& ip, std::string_view test, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, test, args, {"other"}, &a));
  if (args.positional.empty() && args.keyword.empty()) {
    return ip.fail(fmt::format("test '{}' takes one argument", test));
  }
  return a[0];
}

template <bool (*Pred)(const Value&)>
Expected<bool> unary_test(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "test", args, {}, nullptr));
  return Pred(v);
}

bool is_defined(const Value& v) { return !v.is_undefined(); }
bool is_undefined(const Value& v) { return v.is_undefined(); }
bool is_none(const Value& v) { return v.is_none(); }
bool is_boolean(const Value& v) { return v.is_bool(); }
bool is_false(const Value& v) { return v.is_bool() && !v.as_bool(); }
bool is_true(const Value& v) { return v.is_bool() && v.as_bool(); }
bool is_integer(const Value& v) { return v.is_int(); }
bool is_float(const Value& v) { return v.is_float(); }
bool is_number(const Value& v) { return v.is_number(); }
bool is_string(const Value& v) { return v.is_string(); }
bool is_mapping(const Value& v) { return v.is_dict(); }
bool is_escaped(const Value& v) { return v.is_markup(); }
bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.is_loop() ||
         v.is_generator();
}
bool is_sequence(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool is_callable(const Value& v) { return v.is_callable() || v.is_undefined(); }
bool is_lower(const Value& v) { return py_islower(py_str(v)); }
bool is_upper(const Value& v) { return py_isupper(py_str(v)); }

Expected<bool> parity(Interpreter& ip, const Value& v, CallArgs& args, int64_t want) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "test", args, {}, nullptr));
  VLLM_ASSIGN_OR_RETURN(Value r, binary_op(ip, "%", v, Value::integer(2)));
  return py_equal(r, Value::integer(want));
}

Expected<bool> t_divisibleby(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_ASSIGN_OR_RETURN(Value n, one_arg(ip, "divisibleby", args));
  VLLM_ASSIGN_OR_RETURN(Value r, binary_op(ip, "%", v, n));
  return py_equal(r, Value::integer(0));
}

template <const char* Op>
Expected<bool> t_compare(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_ASSIGN_OR_RETURN(Value other, one_arg(ip, Op, args));
  return compare_op(ip, Op, v, other);
}
constexpr char kEq[] = "==";
constexpr char kNe[] = "!=";
constexpr char kLt[] = "<";
constexpr char kLe[] = "<=";
constexpr char kGt[] = ">";
constexpr char kGe[] = ">=";
constexpr char kIn[] = "in";

Expected<bool> t_sameas(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_ASSIGN_OR_RETURN(Value other, one_arg(ip, "sameas", args));
  if (v.kind() != other.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined:
      return true;
    case Value::Kind::kBool:
      return v.as_bool() == other.as_bool();
    case Value::Kind::kInt:  // CPython caches small ints
      return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::kNamespace:
      return &v.as_namespace() == &other.as_namespace();
    case Value::Kind::kCallable:
      return &v.as_callable() == &other.as_callable();
    default:
      return false;
  }
}

struct TestEntry {
  const char* name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"defined", unary_test<is_defined>},
    {"undefined", unary_test<is_undefined>},
    {"none", unary_test<is_none>},
    {"boolean", unary_test<is_boolean>},
    {"false", unary_test<is_false>},
    {"true", unary_test<is_true>},
    {"integer", unary_test<is_integer>},
    {"float", unary_test<is_float>},
    {"number", unary_test<is_number>},
    {"string", unary_test<is_string>},
    {"mapping", unary_test<is_mapping>},
    {"iterable", unary_test<is_iterable>},
    {"sequence", unary_test<is_sequence>},
    {"callable", unary_test<is_callable>},
    {"escaped", unary_test<is_escaped>},
    {"lower", unary_test<is_lower>},
    {"upper", unary_test<is_upper>},
    {"odd", [](Interpreter& ip, const Value& v, CallArgs& a) { return parity(ip, v, a, 1); }},
    {"even", [](Interpreter& ip, const Value& v, CallArgs& a) { return parity(ip, v, a, 0); }},
    {"divisibleby", t_divisibleby},
    {"sameas", t_sameas},
    {"in", t_compare<kIn>},
    {"==", t_compare<kEq>},
    {"eq", t_compare<kEq>},
    {"equalto", t_compare<kEq>},
    {"!=", t_compare<kNe>},
    {"ne", t_compare<kNe>},
    {"<", t_compare<kLt>},
    {"lt", t_compare<kLt>},
    {"lessthan", t_compare<kLt>},
    {"<=", t_compare<kLe>},
    {"le", t_compare<kLe>},
    {">", t_compare<kGt>},
    {"gt", t_compare<kGt>},
    {"greaterthan", t_compare<kGt>},
    {">=", t_compare<kGe>},
    {"ge", t_compare<kGe>},
    {"filter", [](Interpreter& ip, const Value& v, CallArgs& a) -> Expected<bool> {
       VLLM_RETURN_IF_ERROR(bind_args(ip, "filter", a, {}, nullptr));
       return v.is_string() && find_filter(v.as_string()) != nullptr;
     }},
    {"test", [](Interpreter& ip, const Value& v, CallArgs& a) -> Expected<bool> {
       VLLM_RETURN_IF_ERROR(bind_args(ip, "test", a, {}, nullptr));
       return v.is_string() && find_test(v.as_string()) != nullptr;
     }},
};

// ---- globals ----

Value builtin(std::string name, std::function<Expected<Value>(Interpreter&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value::callable(std::move(c));
}

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Expected<Value> g_range(Interpreter& ip, CallArgs& args) {
  if (!args.keyword.empty()) return ip.fail("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    return ip.fail("range expected 1 to 3 arguments");
  }
  int64_t v[3] = {0, 0, 1};
  for (size_t k = 0; k < args.positional.size(); ++k) {
    VLLM_ASSIGN_OR_RETURN(v[k], int_arg(ip, args.positional[k], "range() argument"));
  }
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = v[0];
  } else {
    start = v[0];
    stop = v[1];
    if (args.positional.size() == 3) step = v[2];
  }
  if (step == 0) return ip.fail("range() arg 3 must not be zero");
  __int128 span = step > 0 ? (__int128)stop - start : (__int128)start - stop;
  __int128 abs_step = step > 0 ? (__int128)step : -(__int128)step;
  __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (count > kMaxRange) {
    return ip.fail(fmt::format("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange));
  }
  VLLM_RETURN_IF_ERROR(ip.check_items(static_cast<size_t>(count)));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (__int128 k = 0; k < count; ++k) out.push_back(Value::integer(static_cast<int64_t>(start + k * step)));
  return Value::list(std::move(out));
}

Expected<Value> g_dict(Interpreter& ip, CallArgs& args) {
  if (args.positional.size() > 1) return ip.fail("dict expected at most 1 argument");
  DictData d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      VLLM_ASSIGN_OR_RETURN(std::vector<Value> pairs, ip.iterate(src));
      for (const Value& p : pairs) {
        if (!p.is_list() || p.items().size() != 2) {
          return ip.fail("dictionary update sequence element has wrong length");
        }
        d.set(p.items()[0], p.items()[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) d.set(Value::string(key), value);
  return Value::dict(std::move(d));
}

Expected<Value> g_namespace(Interpreter& ip, CallArgs& args) {
  VLLM_ASSIGN_OR_RETURN(Value init, g_dict(ip, args));
  Value ns = Value::make_namespace();
  for (const auto& [key, value] : init.as_dict().entries) {
    if (key.is_string()) ns.as_namespace().attrs.set(key, value);
  }
  ip.track_namespace(ns);
  return ns;
}

Expected<Value> g_raise_exception(Interpreter& ip, CallArgs& args) {
  std::string message = args.positional.empty() ? "" : py_str(args.positional[0]);
  return ip.fail(message);
}

Expected<Value> g_strftime_now(Interpreter& ip, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "strftime_now", args, {"format"}, &a));
  if (!a[0].is_string()) return ip.fail("strftime_now() argument must be str");
  std::time_t now = ip.now_unix() >= 0 ? static_cast<std::time_t>(ip.now_unix()) : std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  const std::string& format = a[0].as_string();
  if (format.empty()) return Value::string("");
  std::vector<char> buf(format.size() * 8 + 256);
  size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
  if (n == 0) return ip.fail("strftime_now() format is too long or produced no output");
  return Value::string(std::string(buf.data(), n));
}

Expected<Value> g_joiner(Interpreter& ip, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "joiner", args, {"sep"}, &a));
  std::string sep = a[0].is_undefined() ? ", " : py_str(a[0]);
  auto used = std::make_shared<bool>(false);
  return builtin("joiner", [sep, used](Interpreter&, CallArgs&) -> Expected<Value> {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestEntry& t : kTests) {
    if (name == t.name) return t.fn;
  }
  return nullptr;
}

void add_globals(Scope* scope) {
  scope->vars["range"] = builtin("range", g_range);
  scope->vars["dict"] = builtin("dict", g_dict);
  scope->vars["namespace"] = builtin("namespace", g_namespace);
  scope->vars["joiner"] = builtin("joiner", g_joiner);
  scope->vars["raise_exception"] = builtin("raise_exception", g_raise_exception);
  scope->vars["strftime_now"] = builtin("strftime_now", g_strftime_now);
}

}  // namespace vllm::jinja
