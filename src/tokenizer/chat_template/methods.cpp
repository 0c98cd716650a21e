// Attribute and item access the way Jinja's ImmutableSandboxedEnvironment does it:
// `x.name` tries the Python attribute first (so `d.items` is the dict method, not the key
// "items"), then the item; `x[key]` tries the item first, then the attribute. Methods that
// would mutate a list or dict are refused, as the sandbox refuses them. Missing attributes
// and items are Undefined (an error only once used), with Jinja's messages.
#include <fmt/format.h>

#include <algorithm>

#include "tokenizer/chat_template/evaluator.h"
#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

using MethodFn = Expected<Value> (*)(Interpreter&, const Value& self, CallArgs&);

Value bind_method(std::string name, const Value& self, MethodFn fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = [self, fn](Interpreter& ip, CallArgs& args) { return fn(ip, self, args); };
  return Value::callable(std::move(c));
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "jinja2.utils.Namespace object";
  if (v.is_loop()) return "jinja2.runtime.LoopContext object";
  if (v.is_callable()) return v.as_callable().is_macro ? "jinja2.runtime.Macro object" : "builtin_function_or_method object";
  return std::string(v.type_name()) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), py_repr(key)));
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name,
                                      obj.type_name()));
}

Expected<std::string> str_arg(Interpreter& ip, const Value& v, std::string_view what) {
  if (!v.is_string()) {
    return ip.fail(fmt::format("{} must be str, not {}", what, v.type_name()));
  }
  return v.as_string();
}

// Optional "chars" / "sep" argument: None or missing means the default.
Expected<std::optional<std::string>> opt_str(Interpreter& ip, const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  VLLM_ASSIGN_OR_RETURN(std::string s, str_arg(ip, v, what));
  return std::optional<std::string>(std::move(s));
}

// Byte range of code points [start, end) given Python-style optional bounds.
void cp_bounds(const std::string& s, const Value& start, const Value& end, size_t* b, size_t* e) {
  std::vector<size_t> off = code_point_offsets(s);
  int64_t n = static_cast<int64_t>(off.size()) - 1;
  auto clamp = [&](const Value& v, int64_t def) {
    if (!v.is_integral()) return def;
    int64_t x = v.as_int();
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  int64_t lo = clamp(start, 0), hi = clamp(end, n);
  *b = off[static_cast<size_t>(lo)];
  *e = off[static_cast<size_t>(std::max(lo, hi))];
}

// ---- str methods ----

Expected<Value> str_affix(Interpreter& ip, const Value& self, CallArgs& args, bool prefix) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, prefix ? "startswith" : "endswith", args, {"prefix", "start", "end"}, &a));
  size_t b, e;
  cp_bounds(self.as_string(), a[1], a[2], &b, &e);
  std::string_view s = std::string_view(self.as_string()).substr(b, e - b);
  std::vector<Value> candidates = a[0].is_tuple() ? a[0].items() : std::vector<Value>{a[0]};
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return ip.fail(fmt::format("{} first arg must be str or a tuple of str, not {}",
                                 prefix ? "startswith" : "endswith", c.type_name()));
    }
    const std::string& x = c.as_string();
    if (x.size() <= s.size() && (prefix ? s.substr(0, x.size()) == x : s.substr(s.size() - x.size()) == x)) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

Expected<Value> str_strip(Interpreter& ip, const Value& self, CallArgs& args, bool l, bool r) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "strip", args, {"chars"}, &a));
  VLLM_ASSIGN_OR_RETURN(auto chars, opt_str(ip, a[0], "strip arg"));
  return Value::string(py_strip(self.as_string(), chars, l, r));
}

Expected<Value> str_split(Interpreter& ip, const Value& self, CallArgs& args, bool right) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "split", args, {"sep", "maxsplit"}, &a));
  VLLM_ASSIGN_OR_RETURN(auto sep, opt_str(ip, a[0], "separator"));
  int64_t maxsplit = -1;
  if (!a[1].is_undefined()) {
    VLLM_ASSIGN_OR_RETURN(maxsplit, int_arg(ip, a[1], "maxsplit"));
  }
  std::vector<std::string> parts;
  if (!py_split(self.as_string(), sep, maxsplit, right, &parts)) return ip.fail("empty separator");
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

Expected<Value> str_find(Interpreter& ip, const Value& self, CallArgs& args, bool right,
                         bool raise, bool count) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "find", args, {"sub", "start", "end"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::string sub, str_arg(ip, a[0], "substring"));
  const std::string& s = self.as_string();
  size_t b, e;
  cp_bounds(s, a[1], a[2], &b, &e);
  std::string_view hay = std::string_view(s).substr(b, e - b);
  if (count) {
    if (sub.empty()) return Value::integer(static_cast<int64_t>(code_point_count(hay)) + 1);
    int64_t n = 0;
    for (size_t p = hay.find(sub); p != std::string_view::npos; p = hay.find(sub, p + sub.size())) ++n;
    return Value::integer(n);
  }
  size_t hit = right ? hay.rfind(sub) : hay.find(sub);
  if (hit == std::string_view::npos) {
    if (raise) return ip.fail("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, b + hit))));
}

Expected<Value> str_justify(Interpreter& ip, const Value& self, CallArgs& args, char how) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "center", args, {"width", "fillchar"}, &a));
  VLLM_ASSIGN_OR_RETURN(int64_t width, int_arg(ip, a[0], "width"));
  std::string fill = " ";
  if (!a[1].is_undefined()) {
    VLLM_ASSIGN_OR_RETURN(fill, str_arg(ip, a[1], "fillchar"));
    if (code_point_count(fill) != 1) return ip.fail("The fill character must be exactly one character long");
  }
  const std::string& s = self.as_string();
  int64_t len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return self;
  VLLM_RETURN_IF_ERROR(ip.check_string(static_cast<size_t>(width) * fill.size()));
  int64_t total = width - len, left = 0;
  if (how == 'c') left = total / 2 + (total & width & 1);
  else if (how == 'r') left = total;
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = left; k < total; ++k) out += fill;
  return Value::string(std::move(out));
}

Expected<Value> str_join(Interpreter& ip, const Value& self, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "join", args, {"iterable"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(a[0]));
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (!items[k].is_string()) {
      return ip.fail(fmt::format("sequence item {}: expected str instance, {} found", k, items[k].type_name()));
    }
    if (k) out += self.as_string();
    out += items[k].as_string();
    VLLM_RETURN_IF_ERROR(ip.check_string(out.size()));
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(char32_t)>
Expected<Value> str_is(Interpreter& ip, const Value& self, CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) return ip.fail("method takes no arguments");
  const std::string& s = self.as_string();
  if (s.empty()) return Value::boolean(false);
  for (size_t p = 0; p < s.size();) {
    char32_t cp;
    p += utf8_next(s, p, &cp);
    if (!Pred(cp)) return Value::boolean(false);
  }
  return Value::boolean(true);
}
bool cp_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool cp_alpha(char32_t c) { return py_is_cased_letter(c) || (c >= 0x80 && !is_py_space(c) && !cp_digit(c) && c > 0x2FF); }
bool cp_alnum(char32_t c) { return cp_alpha(c) || cp_digit(c); }
bool cp_space(char32_t c) { return is_py_space(c); }

struct StrMethod {
  const char* name;
  Expected<Value> (*fn)(Interpreter&, const Value&, CallArgs&);
};

Status no_args(Interpreter& ip, CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) return ip.fail("method takes no arguments");
  return Status::ok();
}

#define VLLM_STR_MAP(fname, expr)                                                  \
  [](Interpreter& ip, const Value& self, CallArgs& args) -> Expected<Value> {      \
    VLLM_RETURN_IF_ERROR(no_args(ip, args));                                       \
    return Value::string(expr(self.as_string()));                                  \
  }

const StrMethod kStrMethods[] = {
    {"startswith", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_affix(ip, s, a, true); }},
    {"endswith", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_affix(ip, s, a, false); }},
    {"strip", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_strip(ip, s, a, true, true); }},
    {"lstrip", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_strip(ip, s, a, true, false); }},
    {"rstrip", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_strip(ip, s, a, false, true); }},
    {"split", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_split(ip, s, a, false); }},
    {"rsplit", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_split(ip, s, a, true); }},
    {"find", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_find(ip, s, a, false, false, false); }},
    {"rfind", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_find(ip, s, a, true, false, false); }},
    {"index", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_find(ip, s, a, false, true, false); }},
    {"rindex", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_find(ip, s, a, true, true, false); }},
    {"count", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_find(ip, s, a, false, false, true); }},
    {"center", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_justify(ip, s, a, 'c'); }},
    {"ljust", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_justify(ip, s, a, 'l'); }},
    {"rjust", [](Interpreter& ip, const Value& s, CallArgs& a) { return str_justify(ip, s, a, 'r'); }},
    {"join", str_join},
    {"upper", VLLM_STR_MAP(upper, py_upper)},
    {"lower", VLLM_STR_MAP(lower, py_lower)},
    {"casefold", VLLM_STR_MAP(casefold, py_lower)},
    {"title", VLLM_STR_MAP(title, py_title)},
    {"capitalize", VLLM_STR_MAP(capitalize, py_capitalize)},
    {"swapcase", VLLM_STR_MAP(swapcase, py_swapcase)},
    {"isdigit", str_is<cp_digit>},
    {"isdecimal", str_is<cp_digit>},
    {"isnumeric", str_is<cp_digit>},
    {"isalpha", str_is<cp_alpha>},
    {"isalnum", str_is<cp_alnum>},
    {"isspace", str_is<cp_space>},
    {"islower", [](Interpreter& ip, const Value& s, CallArgs& a) -> Expected<Value> {
       VLLM_RETURN_IF_ERROR(no_args(ip, a));
       return Value::boolean(py_islower(s.as_string()));
     }},
    {"isupper", [](Interpreter& ip, const Value& s, CallArgs& a) -> Expected<Value> {
       VLLM_RETURN_IF_ERROR(no_args(ip, a));
       return Value::boolean(py_isupper(s.as_string()));
     }},
    {"replace", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "replace", args, {"old", "new", "count"}, &a));
       VLLM_ASSIGN_OR_RETURN(std::string old, str_arg(ip, a[0], "replace() argument 1"));
       VLLM_ASSIGN_OR_RETURN(std::string repl, str_arg(ip, a[1], "replace() argument 2"));
       int64_t count = -1;
       if (!a[2].is_undefined()) {
         VLLM_ASSIGN_OR_RETURN(count, int_arg(ip, a[2], "count"));
       }
       size_t estimate = s.as_string().size() + (repl.size() + 1) * (old.empty() ? s.as_string().size() + 1 : s.as_string().size() / old.size() + 1);
       if (repl.size() > old.size()) VLLM_RETURN_IF_ERROR(ip.check_string(estimate));
       return Value::string(py_replace(s.as_string(), old, repl, count));
     }},
    {"splitlines", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "splitlines", args, {"keepends"}, &a));
       std::vector<Value> items;
       for (std::string& line : py_splitlines(s.as_string(), a[0].truthy())) items.push_back(Value::string(std::move(line)));
       return Value::list(std::move(items));
     }},
    {"removeprefix", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "removeprefix", args, {"prefix"}, &a));
       VLLM_ASSIGN_OR_RETURN(std::string p, str_arg(ip, a[0], "prefix"));
       const std::string& x = s.as_string();
       return Value::string(x.compare(0, p.size(), p) == 0 ? x.substr(p.size()) : x);
     }},
    {"removesuffix", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "removesuffix", args, {"suffix"}, &a));
       VLLM_ASSIGN_OR_RETURN(std::string p, str_arg(ip, a[0], "suffix"));
       const std::string& x = s.as_string();
       bool has = !p.empty() && x.size() >= p.size() && x.compare(x.size() - p.size(), p.size(), p) == 0;
       return Value::string(has ? x.substr(0, x.size() - p.size()) : x);
     }},
    {"partition", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "partition", args, {"sep"}, &a));
       VLLM_ASSIGN_OR_RETURN(std::string sep, str_arg(ip, a[0], "sep"));
       if (sep.empty()) return ip.fail("empty separator");
       const std::string& x = s.as_string();
       size_t hit = x.find(sep);
       if (hit == std::string::npos) return Value::tuple({s, Value::string(""), Value::string("")});
       return Value::tuple({Value::string(x.substr(0, hit)), Value::string(sep), Value::string(x.substr(hit + sep.size()))});
     }},
    {"zfill", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "zfill", args, {"width"}, &a));
       VLLM_ASSIGN_OR_RETURN(int64_t width, int_arg(ip, a[0], "width"));
       std::string x = s.as_string();
       int64_t len = static_cast<int64_t>(code_point_count(x));
       if (width <= len) return s;
       VLLM_RETURN_IF_ERROR(ip.check_string(static_cast<size_t>(width)));
       size_t at = (!x.empty() && (x[0] == '-' || x[0] == '+')) ? 1 : 0;
       x.insert(at, static_cast<size_t>(width - len), '0');
       return Value::string(std::move(x));
     }},
    {"format", [](Interpreter& ip, const Value& s, CallArgs& args) -> Expected<Value> {
       VLLM_ASSIGN_OR_RETURN(std::string out, brace_format(ip, s.as_string(), args));
       return Value::string(std::move(out));
     }},
};

// ---- dict / list methods ----

Expected<Value> dict_method(Interpreter& ip, const Value& self, CallArgs& args, int which) {
  const DictData& d = self.as_dict();
  if (which == 3) {  // get
    std::vector<Value> a;
    VLLM_RETURN_IF_ERROR(bind_args(ip, "get", args, {"key", "default"}, &a));
    if (a[0].is_undefined()) return ip.fail("get expected at least 1 argument, got 0");
    const Value* v = d.find(a[0]);
    if (v != nullptr) return *v;
    return a[1].is_undefined() ? Value::none() : a[1];
  }
  VLLM_RETURN_IF_ERROR(no_args(ip, args));
  if (which == 4) return self;  // copy (values are immutable to templates)
  std::vector<Value> out;
  out.reserve(d.size());
  for (const auto& [key, value] : d.entries) {
    if (which == 0) out.push_back(key);
    else if (which == 1) out.push_back(value);
    else out.push_back(Value::tuple({key, value}));
  }
  return Value::list(std::move(out));
}

Expected<Value> dict_keys(Interpreter& ip, const Value& s, CallArgs& a) { return dict_method(ip, s, a, 0); }
Expected<Value> dict_values(Interpreter& ip, const Value& s, CallArgs& a) { return dict_method(ip, s, a, 1); }
Expected<Value> dict_items(Interpreter& ip, const Value& s, CallArgs& a) { return dict_method(ip, s, a, 2); }
Expected<Value> dict_get(Interpreter& ip, const Value& s, CallArgs& a) { return dict_method(ip, s, a, 3); }
Expected<Value> dict_copy(Interpreter& ip, const Value& s, CallArgs& a) { return dict_method(ip, s, a, 4); }

Expected<Value> list_index_or_count(Interpreter& ip, const Value& self, CallArgs& args, bool count) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, count ? "count" : "index", args, {"value"}, &a));
  int64_t n = 0;
  const auto& items = self.items();
  for (size_t k = 0; k < items.size(); ++k) {
    if (!py_equal(items[k], a[0])) continue;
    if (!count) return Value::integer(static_cast<int64_t>(k));
    ++n;
  }
  if (!count) return ip.fail(fmt::format("{} is not in list", py_repr(a[0])));
  return Value::integer(n);
}

// ---- loop ----

Expected<Value> loop_cycle(Interpreter& ip, const Value& self, CallArgs& args) {
  if (args.positional.empty()) return ip.fail("no items for cycling given");
  const LoopData& loop = self.as_loop();
  return args.positional[static_cast<size_t>(loop.index0) % args.positional.size()];
}

Expected<Value> loop_changed(Interpreter& ip, const Value& self, CallArgs& args) {
  const LoopData& loop = self.as_loop();
  if (loop.last_changed->size() == args.positional.size() &&
      std::equal(args.positional.begin(), args.positional.end(), loop.last_changed->begin(),
                 [](const Value& a, const Value& b) { return py_equal(a, b); }) &&
      !loop.last_changed->empty()) {
    return Value::boolean(false);
  }
  *loop.last_changed = args.positional;
  return Value::boolean(true);
}

Value loop_attribute(const Value& obj, const std::string& name) {
  const LoopData& loop = obj.as_loop();
  int64_t length = static_cast<int64_t>(loop.items->size());
  int64_t i = loop.index0;
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(length - i);
  if (name == "revindex0") return Value::integer(length - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == length - 1);
  if (name == "length") return Value::integer(length);
  if (name == "depth") return Value::integer(loop.depth0 + 1);
  if (name == "depth0") return Value::integer(loop.depth0);
  if (name == "previtem") {
    return i == 0 ? Value::undefined("there is no previous item") : (*loop.items)[static_cast<size_t>(i - 1)];
  }
  if (name == "nextitem") {
    return i + 1 >= length ? Value::undefined("there is no next item") : (*loop.items)[static_cast<size_t>(i + 1)];
  }
  if (name == "cycle") return bind_method("cycle", obj, loop_cycle);
  if (name == "changed") return bind_method("changed", obj, loop_changed);
  return missing_attribute(obj, name);
}

bool is_dunder(const std::string& name) { return name.size() >= 2 && name[0] == '_' && name[1] == '_'; }

// The Python attribute, or Undefined (nullopt) when the object has none of that name.
std::optional<Value> python_attribute(const Value& obj, const std::string& name) {
  if (is_dunder(name)) return unsafe(obj, name);
  switch (obj.kind()) {
    case Value::Kind::kString:
      for (const StrMethod& m : kStrMethods) {
        if (name == m.name) return bind_method(name, obj, m.fn);
      }
      return std::nullopt;
    case Value::Kind::kDict:
      if (name == "keys") return bind_method(name, obj, dict_keys);
      if (name == "values") return bind_method(name, obj, dict_values);
      if (name == "items") return bind_method(name, obj, dict_items);
      if (name == "get") return bind_method(name, obj, dict_get);
      if (name == "copy") return bind_method(name, obj, dict_copy);
      if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
          name == "clear") {
        return unsafe(obj, name);
      }
      return std::nullopt;
    case Value::Kind::kList:
      if (name == "index") {
        return bind_method(name, obj, [](Interpreter& ip, const Value& s, CallArgs& a) { return list_index_or_count(ip, s, a, false); });
      }
      if (name == "count") {
        return bind_method(name, obj, [](Interpreter& ip, const Value& s, CallArgs& a) { return list_index_or_count(ip, s, a, true); });
      }
      if (!obj.is_tuple() && (name == "append" || name == "extend" || name == "insert" ||
                              name == "pop" || name == "remove" || name == "reverse" ||
                              name == "sort" || name == "clear")) {
        return unsafe(obj, name);
      }
      if (!obj.is_tuple() && name == "copy") {
        return bind_method(name, obj, [](Interpreter& ip, const Value& s, CallArgs& a) -> Expected<Value> {
          VLLM_RETURN_IF_ERROR(no_args(ip, a));
          return s;
        });
      }
      return std::nullopt;
    case Value::Kind::kNamespace: {
      const Value* v = obj.as_namespace().attrs.find(name);
      if (v != nullptr) return *v;
      return std::nullopt;
    }
    case Value::Kind::kLoop: {
      Value v = loop_attribute(obj, name);
      if (v.is_undefined() && v.undefined_hint().find("has no attribute") != std::string::npos) return std::nullopt;
      return v;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace

Expected<Value> attribute_of(Interpreter& ip, const Value& obj, const std::string& name) {
  if (std::optional<Value> attr = python_attribute(obj, name)) return *attr;
  if (obj.is_dict()) {
    const Value* v = obj.as_dict().find(name);
    if (v != nullptr) return *v;
  }
  return missing_attribute(obj, name);
}

Expected<Value> item_of(Interpreter& ip, const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (!(key.is_list() && !key.is_tuple()) && !key.is_dict()) {
      const Value* v = obj.as_dict().find(key);
      if (v != nullptr) return *v;
    }
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
    } else {
      const std::string& s = obj.as_string();
      std::vector<size_t> off = code_point_offsets(s);
      int64_t n = static_cast<int64_t>(off.size()) - 1;
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        size_t k = static_cast<size_t>(i);
        return Value::string(s.substr(off[k], off[k + 1] - off[k]));
      }
    }
    return missing_element(obj, key);
  }
  if (key.is_string()) {
    if (std::optional<Value> attr = python_attribute(obj, key.as_string())) return *attr;
    return missing_attribute(obj, key.as_string());
  }
  return missing_element(obj, key);
}

Expected<Value> slice_of(Interpreter& ip, const Value& obj, const Value& start, const Value& stop,
                         const Value& step) {
  if (obj.is_undefined()) return ip.undefined_error(obj);
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !v->is_integral()) {
      if (v->is_undefined()) return ip.undefined_error(*v);
      return ip.fail("slice indices must be integers or None or have an __index__ method");
    }
  }
  if (!obj.is_list() && !obj.is_string()) return missing_element(obj, Value::string("slice"));
  std::vector<size_t> off;
  int64_t n;
  if (obj.is_string()) {
    off = code_point_offsets(obj.as_string());
    n = static_cast<int64_t>(off.size()) - 1;
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) return ip.fail("slice step cannot be zero");
  int64_t lo, hi;
  if (st > 0) {
    lo = start.is_none() ? 0 : start.as_int();
    hi = stop.is_none() ? n : stop.as_int();
    if (lo < 0) lo = std::max<int64_t>(lo + n, 0);
    if (hi < 0) hi = std::max<int64_t>(hi + n, 0);
    lo = std::min(lo, n);
    hi = std::min(hi, n);
  } else {
    lo = start.is_none() ? n - 1 : start.as_int();
    hi = stop.is_none() ? -1 : stop.as_int();
    if (lo < 0) lo = std::max<int64_t>(lo + n, -1);
    if (lo >= n) lo = n - 1;
    if (!stop.is_none() && hi < 0) hi = std::max<int64_t>(hi + n, -1);
    if (hi >= n) hi = n - 1;
  }
  std::vector<int64_t> picks;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi;) {
    picks.push_back(i);
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    for (int64_t i : picks) {
      size_t k = static_cast<size_t>(i);
      out.append(s, off[k], off[k + 1] - off[k]);
    }
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(picks.size());
  for (int64_t i : picks) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

}  // namespace vllm::jinja
