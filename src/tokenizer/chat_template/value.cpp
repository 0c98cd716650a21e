// Value construction and the Python semantics of values: truthiness, ==, <, str(), repr().
#include "tokenizer/chat_template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

// Recursion guard for printing / comparing values built from cyclic namespaces.
constexpr int kMaxPrintDepth = 600;

const std::string& empty_string() {
  static const std::string kEmpty;
  return kEmpty;
}

int child_depth(const Value& v) { return v.depth(); }

// Python's str.isprintable() for one code point, approximated with the categories that
// matter in practice (controls, format characters, separators other than space, private use).
bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0)) return false;
  if (c < 0x7f) return true;
  if (c == 0xad || c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
      (c >= 0x205f && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0x3000 ||
      c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || c == 0xfffe || c == 0xffff) {
    return false;
  }
  if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x180e) {
    return false;
  }
  if ((c >= 0xd800 && c <= 0xf8ff) || c >= 0xf0000 || c == 0xe0001 ||
      (c >= 0xe0020 && c <= 0xe007f) || (c >= 0x1d173 && c <= 0x1d17a)) {
    return false;
  }
  return true;
}

void append_hex(uint32_t v, int digits, std::string* out) {
  static const char* kHex = "0123456789abcdef";
  for (int k = digits - 1; k >= 0; --k) out->push_back(kHex[(v >> (4 * k)) & 0xf]);
}

void repr_impl(const Value& v, std::string* out, int depth);

void str_impl(const Value& v, std::string* out, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kString:
      out->append(v.as_string());
      return;
    default:
      repr_impl(v, out, depth);
  }
}

void repr_impl(const Value& v, std::string* out, int depth) {
  if (depth > kMaxPrintDepth) {
    out->append("...");
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out->append("Undefined");
      return;
    case Value::Kind::kNone:
      out->append("None");
      return;
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "True" : "False");
      return;
    case Value::Kind::kInt:
      out->append(std::to_string(v.as_int()));
      return;
    case Value::Kind::kFloat:
      out->append(py_float_repr(v.as_double()));
      return;
    case Value::Kind::kString:
      out->append(py_string_repr(v.as_string()));
      return;
    case Value::Kind::kList: {
      const auto& items = v.items();
      bool tuple = v.is_tuple();
      out->push_back(tuple ? '(' : '[');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out->append(", ");
        repr_impl(items[k], out, depth + 1);
      }
      if (tuple && items.size() == 1) out->push_back(',');
      out->push_back(tuple ? ')' : ']');
      return;
    }
    case Value::Kind::kDict: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, value] : v.as_dict().entries) {
        if (!first) out->append(", ");
        first = false;
        repr_impl(key, out, depth + 1);
        out->append(": ");
        repr_impl(value, out, depth + 1);
      }
      out->push_back('}');
      return;
    }
    case Value::Kind::kGenerator:
      out->append("<generator object>");
      return;
    case Value::Kind::kNamespace: {
      out->append("<Namespace {");
      bool first = true;
      for (const auto& [key, value] : v.as_namespace().attrs.entries) {
        if (!first) out->append(", ");
        first = false;
        repr_impl(key, out, depth + 1);
        out->append(": ");
        repr_impl(value, out, depth + 1);
      }
      out->append("}>");
      return;
    }
    case Value::Kind::kCallable: {
      const Callable& fn = v.as_callable();
      if (fn.is_macro) {
        out->append("<Macro '" + fn.name + "'>");
      } else {
        out->append("<built-in method " + fn.name + ">");
      }
      return;
    }
    case Value::Kind::kLoop: {
      const LoopData& loop = v.as_loop();
      out->append("<LoopContext " + std::to_string(loop.index0 + 1) + "/" +
                  std::to_string(loop.items->size()) + ">");
      return;
    }
  }
}

bool equal_impl(const Value& a, const Value& b, int depth) {
  if (depth > kMaxPrintDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k) {
        if (!equal_impl(x[k], y[k], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.find(key);
        if (other == nullptr || !equal_impl(value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::kGenerator:
      return &a.items() == &b.items();
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    case Value::Kind::kLoop:
      return &a.as_loop() == &b.as_loop();
    default:
      return false;
  }
}

bool less_impl(const Value& a, const Value& b, bool* ok, int depth) {
  *ok = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && depth < kMaxPrintDepth) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equal_impl(x[k], y[k], depth + 1)) continue;
      return less_impl(x[k], y[k], ok, depth + 1);
    }
    return x.size() < y.size();
  }
  *ok = false;
  return false;
}

void json_string(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, pos, &cp);
    switch (cp) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
          if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            out->append("\\u");
            append_hex(0xd800 + (v >> 10), 4, out);
            out->append("\\u");
            append_hex(0xdc00 + (v & 0x3ff), 4, out);
          } else {
            out->append("\\u");
            append_hex(cp, 4, out);
          }
        } else {
          out->append(s.substr(pos, n));
        }
    }
    pos += n;
  }
  out->push_back('"');
}

bool json_key(const Value& key, std::string* text, std::string* error) {
  switch (key.kind()) {
    case Value::Kind::kString: *text = key.as_string(); return true;
    case Value::Kind::kBool: *text = key.as_bool() ? "true" : "false"; return true;
    case Value::Kind::kNone: *text = "null"; return true;
    case Value::Kind::kInt: *text = std::to_string(key.as_int()); return true;
    case Value::Kind::kFloat: *text = py_float_repr(key.as_double()); return true;
    default:
      *error = "keys must be str, int, float, bool or None, not " + std::string(key.type_name());
      return false;
  }
}

bool dump_impl(const Value& v, const JsonDumpOptions& o, int level, std::string* out,
               std::string* error) {
  if (level > kMaxPrintDepth) {
    *error = "value is nested too deeply for JSON";
    return false;
  }
  auto newline = [&](int lvl) {
    out->push_back('\n');
    for (int k = 0; k < lvl; ++k) out->append(o.indent);
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out->append("null"); return true;
    case Value::Kind::kBool: out->append(v.as_bool() ? "true" : "false"); return true;
    case Value::Kind::kInt: out->append(std::to_string(v.as_int())); return true;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) out->append("NaN");
      else if (std::isinf(d)) out->append(d > 0 ? "Infinity" : "-Infinity");
      else out->append(py_float_repr(d));
      return true;
    }
    case Value::Kind::kString: json_string(v.as_string(), o.ensure_ascii, out); return true;
    case Value::Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out->append("[]");
        return true;
      }
      out->push_back('[');
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out->append(o.item_separator);
        if (o.pretty) newline(level + 1);
        if (!dump_impl(items[k], o, level + 1, out, error)) return false;
      }
      if (o.pretty) newline(level);
      out->push_back(']');
      return true;
    }
    case Value::Kind::kDict: {
      const auto& entries = v.as_dict().entries;
      if (entries.empty()) {
        out->append("{}");
        return true;
      }
      std::vector<std::pair<std::string, const Value*>> keyed;
      keyed.reserve(entries.size());
      for (const auto& [key, value] : entries) {
        std::string text;
        if (!json_key(key, &text, error)) return false;
        keyed.emplace_back(std::move(text), &value);
      }
      if (o.sort_keys) {
        std::stable_sort(keyed.begin(), keyed.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out->push_back('{');
      for (size_t k = 0; k < keyed.size(); ++k) {
        if (k) out->append(o.item_separator);
        if (o.pretty) newline(level + 1);
        json_string(keyed[k].first, o.ensure_ascii, out);
        out->append(o.key_separator);
        if (!dump_impl(*keyed[k].second, o, level + 1, out, error)) return false;
      }
      if (o.pretty) newline(level);
      out->push_back('}');
      return true;
    }
    default:
      *error = "Object of type " + std::string(v.type_name()) + " is not JSON serializable";
      return false;
  }
}

}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.obj_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.obj_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::list(std::vector<Value> items) {
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, child_depth(item));
  data->items = std::move(items);
  data->depth = depth + 1;
  Value v;
  v.kind_ = Kind::kList;
  v.obj_ = std::move(data);
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  static_cast<ListData*>(v.obj_.get())->is_tuple = true;
  return v;
}
Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kGenerator;
  return v;
}
Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.b_ = true;
  return v;
}
Value Value::dict(DictData d) {
  int depth = 0;
  for (const auto& entry : d.entries) depth = std::max(depth, child_depth(entry.second));
  d.depth = depth + 1;
  Value v;
  v.kind_ = Kind::kDict;
  v.obj_ = std::make_shared<DictData>(std::move(d));
  return v;
}
Value Value::make_namespace() {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.obj_ = std::make_shared<NamespaceData>();
  return v;
}
Value Value::callable(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.obj_ = std::const_pointer_cast<Callable>(std::move(fn));
  return v;
}
Value Value::loop(std::shared_ptr<const LoopData> loop) {
  Value v;
  v.kind_ = Kind::kLoop;
  v.obj_ = std::const_pointer_cast<LoopData>(std::move(loop));
  return v;
}

bool Value::is_tuple() const {
  return kind_ == Kind::kList && static_cast<const ListData*>(obj_.get())->is_tuple;
}
const std::string& Value::as_string() const {
  return kind_ == Kind::kString ? *static_cast<const std::string*>(obj_.get()) : empty_string();
}
const std::vector<Value>& Value::items() const {
  return static_cast<const ListData*>(obj_.get())->items;
}
const DictData& Value::as_dict() const { return *static_cast<const DictData*>(obj_.get()); }
NamespaceData& Value::as_namespace() const { return *static_cast<NamespaceData*>(obj_.get()); }
const Callable& Value::as_callable() const { return *static_cast<const Callable*>(obj_.get()); }
const LoopData& Value::as_loop() const { return *static_cast<const LoopData*>(obj_.get()); }
const std::string& Value::undefined_hint() const {
  if (kind_ != Kind::kUndefined || !obj_) return empty_string();
  return *static_cast<const std::string*>(obj_.get());
}
int Value::depth() const {
  if (kind_ == Kind::kList || kind_ == Kind::kGenerator) return static_cast<const ListData*>(obj_.get())->depth;
  if (kind_ == Kind::kDict) return static_cast<const DictData*>(obj_.get())->depth;
  return 0;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !items().empty();
    case Kind::kDict: return as_dict().size() != 0;
    default: return true;
  }
}

std::string_view Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_tuple() ? "tuple" : "list";
    case Kind::kGenerator: return "generator";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return as_callable().is_macro ? "Macro" : "builtin_function_or_method";
    case Kind::kLoop: return "LoopContext";
  }
  return "object";
}

const Value* DictData::find(std::string_view key) const {
  auto it = string_index_.find(std::string(key));
  return it == string_index_.end() ? nullptr : &entries[it->second].second;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  for (const auto& entry : entries) {
    if (!entry.first.is_string() && py_equal(entry.first, key)) return &entry.second;
  }
  return nullptr;
}

void DictData::set(Value key, Value value) {
  if (key.is_string()) {
    auto [it, inserted] = string_index_.emplace(key.as_string(), entries.size());
    if (!inserted) {
      entries[it->second].second = std::move(value);
      return;
    }
    entries.emplace_back(std::move(key), std::move(value));
    return;
  }
  for (auto& entry : entries) {
    if (!entry.first.is_string() && py_equal(entry.first, key)) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

bool py_equal(const Value& a, const Value& b) { return equal_impl(a, b, 0); }
bool py_less(const Value& a, const Value& b, bool* ok) { return less_impl(a, b, ok, 0); }

void append_py_str(const Value& v, std::string* out) { str_impl(v, out, 0); }
void append_py_repr(const Value& v, std::string* out) { repr_impl(v, out, 0); }
std::string py_str(const Value& v) {
  std::string out;
  str_impl(v, &out, 0);
  return out;
}
std::string py_repr(const Value& v) {
  std::string out;
  repr_impl(v, &out, 0);
  return out;
}

std::string py_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, pos, &cp);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out.append("\\n");
    } else if (cp == '\r') {
      out.append("\\r");
    } else if (cp == '\t') {
      out.append("\\t");
    } else if (n == 1 && cp >= 0x80) {
      out.push_back(s[pos]);  // an invalid UTF-8 byte passes through
    } else if (!is_printable(cp)) {
      if (cp < 0x100) {
        out.append("\\x");
        append_hex(cp, 2, &out);
      } else if (cp < 0x10000) {
        out.append("\\u");
        append_hex(cp, 4, &out);
      } else {
        out.append("\\U");
        append_hex(cp, 8, &out);
      }
    } else {
      out.append(s.substr(pos, n));
    }
    pos += n;
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;  // value = 0.digits * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    int nd = static_cast<int>(digits.size());
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= nd) {
      out += digits;
      out.append(static_cast<size_t>(decpt - nd), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += ".";
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += ".";
    out += digits.substr(1);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                exponent < 0 ? -exponent : exponent);
  out += exp_buf;
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::floating(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.set(Value::string(it.key()), from_json(it.value()));
      }
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

bool json_dump(const Value& v, const JsonDumpOptions& options, std::string* out,
               std::string* error) {
  return dump_impl(v, options, 0, out, error);
}

}  // namespace vllm::jinja
