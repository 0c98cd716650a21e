// Jinja2's built-in filters (jinja2/filters.py) with transformers' tojson override
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)), and the
// argument binding helpers the filters, tests, methods and globals share.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tokenizer/chat_template/evaluator.h"
#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

Expected<int64_t> length_of(Interpreter& ip, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(code_point_count(v.as_string()));
    case Value::Kind::kList: return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    case Value::Kind::kLoop: return static_cast<int64_t>(v.as_loop().items->size());
    default: return ip.fail(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Expected<Value> lookup_path(Interpreter& ip, Value item, const Value& attribute) {
  if (!attribute.is_string()) return ip.get_item(item, attribute);
  std::vector<std::string> parts;
  py_split(attribute.as_string(), std::string("."), -1, false, &parts);
  for (const std::string& part : parts) {
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    Value key = digits ? Value::integer(std::strtoll(part.substr(0, 18).c_str(), nullptr, 10))
                       : Value::string(part);
    VLLM_ASSIGN_OR_RETURN(item, ip.get_item(item, key));
  }
  return item;
}

Value lowered(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value::string(py_lower(v.as_string())) : v;
}

Expected<Value> f_length(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "length", args, {}, nullptr));
  VLLM_ASSIGN_OR_RETURN(int64_t n, length_of(ip, v));
  return Value::integer(n);
}

Expected<Value> f_default(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "default", args, {"default_value", "boolean"}, &a));
  if (v.is_undefined() || (a[1].truthy() && !v.truthy())) {
    return a[0].is_undefined() ? Value::string("") : a[0];
  }
  return v;
}

Expected<Value> f_string(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "string", args, {}, nullptr));
  return v.is_string() ? v : Value::string(py_str(v));
}

Expected<Value> f_trim(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "trim", args, {"chars"}, &a));
  std::optional<std::string> chars;
  if (!a[0].is_undefined() && !a[0].is_none()) chars = py_str(a[0]);
  return Value::string(py_strip(py_str(v), chars, true, true));
}

template <std::string (*Fn)(std::string_view)>
Expected<Value> f_map_string(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "filter", args, {}, nullptr));
  return Value::string(Fn(py_str(v)));
}

std::string jinja_title(std::string_view s) {
  // Words start after runs of [-\s({\[<]; each word: first char upper, rest lower.
  std::string out;
  bool word_start = true;
  for (size_t p = 0; p < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, p, &cp);
    bool sep = is_py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (sep) {
      out.append(s.substr(p, n));
      word_start = true;
    } else {
      append_utf8(word_start ? py_to_upper(cp) : py_to_lower(cp), &out);
      word_start = false;
    }
    p += n;
  }
  return out;
}

Expected<Value> f_tojson(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, &a));
  JsonDumpOptions o;
  o.ensure_ascii = a[0].truthy();
  if (!a[1].is_undefined() && !a[1].is_none()) {
    o.pretty = true;
    o.item_separator.assign(1, ',');  // (assign: GCC 12 warns falsely on = ",")
    if (a[1].is_string()) {
      o.indent = a[1].as_string();
    } else {
      VLLM_ASSIGN_OR_RETURN(int64_t n, int_arg(ip, a[1], "indent"));
      o.indent.assign(static_cast<size_t>(std::clamp<int64_t>(n, 0, 256)), ' ');
    }
  }
  if (!a[2].is_undefined() && !a[2].is_none()) {
    if (!a[2].is_list() || a[2].items().size() != 2 || !a[2].items()[0].is_string() ||
        !a[2].items()[1].is_string()) {
      return ip.fail("tojson separators must be a pair of strings");
    }
    o.item_separator = a[2].items()[0].as_string();
    o.key_separator = a[2].items()[1].as_string();
  }
  o.sort_keys = a[3].truthy();
  std::string out, error;
  if (!json_dump(v, o, &out, &error)) return ip.fail(error);
  VLLM_RETURN_IF_ERROR(ip.check_string(out.size()));
  return Value::string(std::move(out));
}

Expected<Value> f_join(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "join", args, {"d", "attribute"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  std::string sep = a[0].is_undefined() ? "" : py_str(a[0]);
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += sep;
    Value item = items[k];
    if (!a[1].is_undefined() && !a[1].is_none()) {
      VLLM_ASSIGN_OR_RETURN(item, lookup_path(ip, item, a[1]));
    }
    append_py_str(item, &out);
    VLLM_RETURN_IF_ERROR(ip.check_string(out.size()));
  }
  return Value::string(std::move(out));
}

Expected<Value> f_first_last(Interpreter& ip, const Value& v, CallArgs& args, bool first) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, first ? "first" : "last", args, {}, nullptr));
  if (!first && v.is_generator()) return ip.fail("'generator' object is not reversible");
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  if (items.empty()) {
    return Value::undefined(first ? "No first item, sequence was empty." : "No last item, sequence was empty.");
  }
  return first ? items.front() : items.back();
}

Expected<Value> f_list(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "list", args, {}, nullptr));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  return Value::list(std::move(items));
}

Expected<Value> f_items(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "items", args, {}, nullptr));
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) return ip.fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [key, value] : v.as_dict().entries) out.push_back(Value::tuple({key, value}));
  return Value::generator(std::move(out));
}

Expected<Value> f_select(Interpreter& ip, const Value& v, CallArgs& args, bool attr, bool keep) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::generator({});
  size_t off = attr ? 1 : 0;
  if (attr && args.positional.empty()) return ip.fail("Missing parameter for attribute name");
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  for (const Value& item : items) {
    Value probe = item;
    if (attr) {
      VLLM_ASSIGN_OR_RETURN(probe, lookup_path(ip, item, args.positional[0]));
    }
    bool pass;
    if (args.positional.size() > off) {
      if (!args.positional[off].is_string()) return ip.fail("test name must be a string");
      CallArgs test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(off) + 1, args.positional.end());
      test_args.keyword = args.keyword;
      VLLM_ASSIGN_OR_RETURN(pass, ip.apply_test(args.positional[off].as_string(), probe, test_args));
    } else {
      pass = probe.truthy();
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Expected<Value> f_map(Interpreter& ip, const Value& v, CallArgs& args) {
  if (!v.truthy()) return Value::generator({});
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    Value attribute, def;
    for (auto& [key, value] : args.keyword) {
      if (key == "attribute") attribute = value;
      else if (key == "default") def = value;
      else return ip.fail(fmt::format("Unexpected keyword argument '{}'", key));
    }
    if (attribute.is_undefined()) return ip.fail("map requires a filter argument");
    for (const Value& item : items) {
      VLLM_ASSIGN_OR_RETURN(Value r, lookup_path(ip, item, attribute));
      if (r.is_undefined() && !def.is_undefined() && !def.is_none()) r = def;
      out.push_back(std::move(r));
    }
    return Value::generator(std::move(out));
  }
  if (!args.positional[0].is_string()) return ip.fail("map filter name must be a string");
  std::string name = args.positional[0].as_string();
  for (const Value& item : items) {
    CallArgs fargs;
    fargs.positional.assign(args.positional.begin() + 1, args.positional.end());
    fargs.keyword = args.keyword;
    VLLM_ASSIGN_OR_RETURN(Value r, ip.apply_filter(name, item, fargs));
    out.push_back(std::move(r));
  }
  return Value::generator(std::move(out));
}

Expected<Value> f_replace(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "replace", args, {"old", "new", "count"}, &a));
  int64_t count = -1;
  if (!a[2].is_undefined() && !a[2].is_none()) {
    VLLM_ASSIGN_OR_RETURN(count, int_arg(ip, a[2], "count"));
  }
  std::string s = py_str(v), old = py_str(a[0]), repl = py_str(a[1]);
  if (repl.size() > old.size()) {
    size_t hits = old.empty() ? code_point_count(s) + 1 : s.size() / old.size() + 1;
    VLLM_RETURN_IF_ERROR(ip.check_string(s.size() + hits * (repl.size() - old.size())));
  }
  return Value::string(py_replace(s, old, repl, count));
}

Expected<Value> f_indent(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "indent", args, {"width", "first", "blank"}, &a));
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].as_string();
  } else {
    int64_t width = 4;
    if (!a[0].is_undefined()) {
      VLLM_ASSIGN_OR_RETURN(width, int_arg(ip, a[0], "width"));
    }
    indention.assign(static_cast<size_t>(std::clamp<int64_t>(width, 0, 4096)), ' ');
  }
  std::string s = py_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (a[2].truthy()) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + indention;
      rv += lines[k];
      VLLM_RETURN_IF_ERROR(ip.check_string(rv.size()));
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += indention;
      rv += lines[k];
      VLLM_RETURN_IF_ERROR(ip.check_string(rv.size()));
    }
  }
  if (a[1].truthy()) rv = indention + rv;
  return Value::string(std::move(rv));
}

// Python int(str, base) / float(str) parsing; false when the text is not a number.
bool parse_py_int(std::string s, int base, int64_t* out) {
  s = py_strip(s, std::nullopt, true, true);
  std::string t;
  for (char c : s) {
    if (c != '_') t.push_back(c);
  }
  if (t.empty()) return false;
  size_t p = 0;
  bool neg = false;
  if (t[0] == '+' || t[0] == '-') {
    neg = t[0] == '-';
    ++p;
  }
  if (p + 1 < t.size() && t[p] == '0') {
    char x = static_cast<char>(t[p + 1] | 0x20);
    int pb = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
    if (pb != 0 && (base == pb || base == 0)) {
      base = pb;
      p += 2;
    }
  }
  if (base == 0) base = 10;
  if (p >= t.size()) return false;
  int64_t v = 0;
  for (; p < t.size(); ++p) {
    char c = t[p];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : (c >= 'A' && c <= 'Z') ? c - 'A' + 10 : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
  }
  *out = neg ? -v : v;
  return true;
}

bool parse_py_float(std::string s, double* out) {
  s = py_strip(s, std::nullopt, true, true);
  std::string t;
  for (char c : s) {
    if (c != '_') t.push_back(c);
  }
  if (t.empty()) return false;
  std::string lower = py_lower(t);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double x = body == "nan" ? NAN : INFINITY;
    *out = lower[0] == '-' ? -x : x;
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end != nullptr && *end == '\0';
}

Expected<Value> f_int(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "int", args, {"default", "base"}, &a));
  Value def = a[0].is_undefined() ? Value::integer(0) : a[0];
  int64_t base = 10;
  if (!a[1].is_undefined()) {
    VLLM_ASSIGN_OR_RETURN(base, int_arg(ip, a[1], "base"));
  }
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t n;
    if (base >= 0 && base <= 36 && base != 1 && parse_py_int(v.as_string(), static_cast<int>(base), &n)) return Value::integer(n);
    double d;
    if (parse_py_float(v.as_string(), &d) && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
  }
  return def;
}

Expected<Value> f_float(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "float", args, {"default"}, &a));
  if (v.is_number()) return Value::floating(v.as_double());
  double d;
  if (v.is_string() && parse_py_float(v.as_string(), &d)) return Value::floating(d);
  return a[0].is_undefined() ? Value::floating(0.0) : a[0];
}

Expected<Value> f_abs(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "abs", args, {}, nullptr));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return ip.fail("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  return ip.fail(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Expected<Value> f_round(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "round", args, {"precision", "method"}, &a));
  int64_t precision = 0;
  if (!a[0].is_undefined()) {
    VLLM_ASSIGN_OR_RETURN(precision, int_arg(ip, a[0], "precision"));
  }
  std::string method = a[1].is_undefined() ? "common" : py_str(a[1]);
  if (!v.is_number()) return ip.fail(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  double d = v.as_double();
  precision = std::clamp<int64_t>(precision, -300, 300);
  if (method == "common") {
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), d);
      return Value::floating(std::strtod(buf, nullptr));
    }
    double f = std::pow(10.0, static_cast<double>(-precision));
    return Value::floating(std::nearbyint(d / f) * f);
  }
  if (method != "ceil" && method != "floor") return ip.fail("method must be common, ceil or floor");
  double f = std::pow(10.0, static_cast<double>(precision));
  return Value::floating((method == "ceil" ? std::ceil(d * f) : std::floor(d * f)) / f);
}

Expected<Value> f_reverse(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "reverse", args, {}, nullptr));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  std::reverse(items.begin(), items.end());
  if (v.is_string()) {
    std::string out;
    for (const Value& c : items) out += c.as_string();
    return Value::string(std::move(out));
  }
  return Value::generator(std::move(items));
}

Expected<Value> f_sort(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "sort", args, {"reverse", "case_sensitive", "attribute"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = item;
    if (!a[2].is_undefined() && !a[2].is_none()) {
      VLLM_ASSIGN_OR_RETURN(key, lookup_path(ip, item, a[2]));
    }
    keyed.emplace_back(lowered(key, a[1].truthy()), std::move(item));
  }
  bool ok = true;
  bool reverse = a[0].truthy();
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    bool fine = true;
    bool r = reverse ? py_less(y.first, x.first, &fine) : py_less(x.first, y.first, &fine);
    if (!fine) ok = false;
    return r;
  });
  if (!ok) return ip.fail("'<' not supported between the items being sorted");
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Expected<Value> f_dictsort(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "dictsort", args, {"case_sensitive", "by", "reverse"}, &a));
  if (!v.is_dict()) return ip.fail("dictsort expects a mapping");
  std::string by = a[1].is_undefined() ? "key" : py_str(a[1]);
  if (by != "key" && by != "value") return ip.fail("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [key, value] : v.as_dict().entries) pairs.push_back(Value::tuple({key, value}));
  size_t pos = by == "key" ? 0 : 1;
  bool ok = true, reverse = a[2].truthy(), cs = a[0].truthy();
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    bool fine = true;
    Value kx = lowered(x.items()[pos], cs), ky = lowered(y.items()[pos], cs);
    bool r = reverse ? py_less(ky, kx, &fine) : py_less(kx, ky, &fine);
    if (!fine) ok = false;
    return r;
  });
  if (!ok) return ip.fail("'<' not supported between the items being sorted");
  return Value::list(std::move(pairs));
}

Expected<Value> f_unique(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "unique", args, {"case_sensitive", "attribute"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  std::vector<Value> seen, out;
  for (Value& item : items) {
    Value key = item;
    if (!a[1].is_undefined() && !a[1].is_none()) {
      VLLM_ASSIGN_OR_RETURN(key, lookup_path(ip, item, a[1]));
    }
    key = lowered(key, a[0].truthy());
    bool dup = false;
    for (const Value& s : seen) dup = dup || py_equal(s, key);
    VLLM_RETURN_IF_ERROR(ip.charge(static_cast<int64_t>(seen.size())));
    if (dup) continue;
    seen.push_back(key);
    out.push_back(std::move(item));
  }
  return Value::generator(std::move(out));
}

Expected<Value> f_min_max(Interpreter& ip, const Value& v, CallArgs& args, bool want_max) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, want_max ? "max" : "min", args, {"case_sensitive", "attribute"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t k = 0; k < items.size(); ++k) {
    Value key = items[k];
    if (!a[1].is_undefined() && !a[1].is_none()) {
      VLLM_ASSIGN_OR_RETURN(key, lookup_path(ip, items[k], a[1]));
    }
    key = lowered(key, a[0].truthy());
    if (k == 0) {
      best_key = key;
      continue;
    }
    bool ok = true;
    bool better = want_max ? py_less(best_key, key, &ok) : py_less(key, best_key, &ok);
    if (!ok) return ip.fail("'<' not supported between the items compared");
    if (better) {
      best = k;
      best_key = key;
    }
  }
  return items[best];
}

Expected<Value> f_sum(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "sum", args, {"attribute", "start"}, &a));
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  Value total = a[1].is_undefined() ? Value::integer(0) : a[1];
  for (const Value& item : items) {
    Value x = item;
    if (!a[0].is_undefined() && !a[0].is_none()) {
      VLLM_ASSIGN_OR_RETURN(x, lookup_path(ip, item, a[0]));
    }
    VLLM_ASSIGN_OR_RETURN(total, binary_op(ip, "+", total, x));
  }
  return total;
}

Expected<Value> f_batch(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "batch", args, {"linecount", "fill_with"}, &a));
  VLLM_ASSIGN_OR_RETURN(int64_t n, int_arg(ip, a[0], "linecount"));
  if (n <= 0) return ip.fail("batch linecount must be positive");
  VLLM_ASSIGN_OR_RETURN(std::vector<Value> items, ip.iterate(v));
  std::vector<Value> out, row;
  for (Value& item : items) {
    row.push_back(std::move(item));
    if (static_cast<int64_t>(row.size()) == n) {
      out.push_back(Value::list(std::move(row)));
      row.clear();
    }
  }
  if (!row.empty()) {
    if (!a[1].is_undefined() && !a[1].is_none()) {
      while (static_cast<int64_t>(row.size()) < n) row.push_back(a[1]);
    }
    out.push_back(Value::list(std::move(row)));
  }
  return Value::generator(std::move(out));
}

Expected<Value> f_format(Interpreter& ip, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return ip.fail("can't handle positional and keyword arguments at the same time");
  }
  Value params;
  if (!args.keyword.empty()) {
    DictData d;
    for (auto& [key, value] : args.keyword) d.set(Value::string(key), value);
    params = Value::dict(std::move(d));
  } else {
    params = Value::tuple(args.positional);
  }
  VLLM_ASSIGN_OR_RETURN(std::string out, percent_format(ip, py_str(v), params));
  return Value::string(std::move(out));
}

Expected<Value> f_escape(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "escape", args, {}, nullptr));
  if (v.is_markup()) return v;
  return Value::markup(html_escape(py_str(v)));
}

Expected<Value> f_center(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "center", args, {"width"}, &a));
  CallArgs inner;
  inner.positional.push_back(a[0].is_undefined() ? Value::integer(80) : a[0]);
  VLLM_ASSIGN_OR_RETURN(Value method, ip.get_attr(Value::string(py_str(v)), "center"));
  return ip.call(method, inner);
}

Expected<Value> f_wordcount(Interpreter& ip, const Value& v, CallArgs& args) {
  VLLM_RETURN_IF_ERROR(bind_args(ip, "wordcount", args, {}, nullptr));
  std::string s = py_str(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t p = 0; p < s.size();) {
    char32_t cp;
    p += utf8_next(s, p, &cp);
    bool w = cp == '_' || (cp >= '0' && cp <= '9') || py_is_cased_letter(cp) || (cp > 0x2ff && !is_py_space(cp));
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value::integer(words);
}

Expected<Value> f_truncate(Interpreter& ip, const Value& v, CallArgs& args) {
  std::vector<Value> a;
  VLLM_RETURN_IF_ERROR(bind_args(ip, "truncate", args, {"length", "killwords", "end", "leeway"}, &a));
  int64_t length = 255, leeway = 5;
  if (!a[0].is_undefined()) {
    VLLM_ASSIGN_OR_RETURN(length, int_arg(ip, a[0], "length"));
  }
  if (!a[3].is_undefined() && !a[3].is_none()) {
    VLLM_ASSIGN_OR_RETURN(leeway, int_arg(ip, a[3], "leeway"));
  }
  std::string end = a[2].is_undefined() ? "..." : py_str(a[2]);
  std::string s = py_str(v);
  std::vector<size_t> off = code_point_offsets(s);
  int64_t n = static_cast<int64_t>(off.size()) - 1;
  int64_t end_len = static_cast<int64_t>(code_point_count(end));
  if (length < end_len) return ip.fail("expected length >= len(end)");
  if (n <= length + leeway) return Value::string(s);
  std::string head = s.substr(0, off[static_cast<size_t>(length - end_len)]);
  if (a[1].truthy()) return Value::string(head + end);
  size_t space = head.rfind(' ');
  if (space != std::string::npos) head.resize(space);
  return Value::string(head + end);
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", [](Interpreter& ip, const Value& v, CallArgs& args) -> Expected<Value> {
       std::vector<Value> a;
       VLLM_RETURN_IF_ERROR(bind_args(ip, "attr", args, {"name"}, &a));
       return ip.get_attr(v, py_str(a[0]));
     }},
    {"batch", f_batch},
    {"capitalize", f_map_string<py_capitalize>},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_first_last(ip, v, a, true); }},
    {"float", f_float},
    {"forceescape", f_escape},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_first_last(ip, v, a, false); }},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_map_string<py_lower>},
    {"map", f_map},
    {"max", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_min_max(ip, v, a, true); }},
    {"min", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_min_max(ip, v, a, false); }},
    {"pprint", [](Interpreter& ip, const Value& v, CallArgs& a) -> Expected<Value> {
       VLLM_RETURN_IF_ERROR(bind_args(ip, "pprint", a, {}, nullptr));
       return Value::string(py_repr(v));
     }},
    {"reject", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_select(ip, v, a, false, false); }},
    {"rejectattr", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_select(ip, v, a, true, false); }},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", [](Interpreter& ip, const Value& v, CallArgs& a) -> Expected<Value> {
       VLLM_RETURN_IF_ERROR(bind_args(ip, "safe", a, {}, nullptr));
       return Value::markup(py_str(v));
     }},
    {"select", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_select(ip, v, a, false, true); }},
    {"selectattr", [](Interpreter& ip, const Value& v, CallArgs& a) { return f_select(ip, v, a, true, true); }},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_map_string<jinja_title>},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_map_string<py_upper>},
    {"wordcount", f_wordcount},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& f : kFilters) {
    if (name == f.name) return f.fn;
  }
  return nullptr;
}

Status bind_args(Interpreter& ip, std::string_view what, CallArgs& args,
                 std::initializer_list<std::string_view> names, std::vector<Value>* out) {
  std::vector<Value> scratch;
  if (out == nullptr) out = &scratch;
  out->assign(names.size(), Value());
  if (args.positional.size() > names.size()) {
    return ip.fail(fmt::format("{}() takes at most {} argument(s) ({} given)", what, names.size(),
                               args.positional.size()));
  }
  std::vector<bool> set(names.size(), false);
  for (size_t k = 0; k < args.positional.size(); ++k) {
    (*out)[k] = args.positional[k];
    set[k] = true;
  }
  for (auto& [key, value] : args.keyword) {
    size_t k = 0;
    for (std::string_view n : names) {
      if (n == key) break;
      ++k;
    }
    if (k == names.size()) {
      return ip.fail(fmt::format("{}() got an unexpected keyword argument '{}'", what, key));
    }
    if (set[k]) return ip.fail(fmt::format("{}() got multiple values for argument '{}'", what, key));
    (*out)[k] = value;
    set[k] = true;
  }
  return Status::ok();
}

Expected<int64_t> int_arg(Interpreter& ip, const Value& v, std::string_view what) {
  if (v.is_integral()) return v.as_int();
  if (v.is_undefined()) return ip.undefined_error(v);
  return ip.fail(fmt::format("{} must be an integer, not {}", what, v.type_name()));
}

}  // namespace vllm::jinja
