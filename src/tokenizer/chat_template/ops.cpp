// Python's arithmetic, comparison and membership operators on template values. An Undefined
// operand raises the undefined error (as Jinja's Undefined does), except for == / != / in.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "tokenizer/chat_template/evaluator.h"
#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

Status type_error(Interpreter& ip, std::string_view op, const Value& a, const Value& b) {
  return ip.fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                             a.type_name(), b.type_name()));
}

Expected<Value> repeat(Interpreter& ip, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > ip.limits().max_output_bytes / s.size()) {
      return ip.check_string(ip.limits().max_output_bytes + 1);
    }
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) > ip.limits().max_items / items.size()) {
    return ip.check_items(ip.limits().max_items + 1);
  }
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0.0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

Expected<bool> contains(Interpreter& ip, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return ip.fail(fmt::format("'in <string>' requires string as left operand, not {}",
                                   item.type_name()));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kGenerator:
      for (const Value& v : container.items()) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kLoop:
      for (const Value& v : *container.as_loop().items) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        return ip.fail(fmt::format("unhashable type: '{}'", item.type_name()));
      }
      return container.as_dict().find(item) != nullptr;
    default:
      return ip.fail(
          fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Expected<Value> binary_op(Interpreter& ip, std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return ip.undefined_error(a);
  if (b.is_undefined()) return ip.undefined_error(b);
  bool ints = a.is_integral() && b.is_integral();
  bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return ip.fail("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      VLLM_RETURN_IF_ERROR(ip.check_string(a.as_string().size() + b.as_string().size()));
      if (a.is_markup() != b.is_markup()) {  // Markup escapes the plain side
        return Value::markup(a.is_markup() ? a.as_string() + html_escape(b.as_string())
                                           : html_escape(a.as_string()) + b.as_string());
      }
      if (a.is_markup()) return Value::markup(a.as_string() + b.as_string());
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      VLLM_RETURN_IF_ERROR(ip.check_items(a.items().size() + b.items().size()));
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string()) {
      return ip.fail(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
    }
    if (a.is_list() && !a.is_tuple()) {
      return ip.fail(fmt::format("can only concatenate list (not \"{}\") to list", b.type_name()));
    }
    return type_error(ip, op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return ip.fail("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    return type_error(ip, op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return ip.fail("integer overflow");
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(ip, a, b.as_int());
    if (a.is_integral() && (b.is_string() || b.is_list())) return repeat(ip, b, a.as_int());
    return type_error(ip, op, a, b);
  }
  if (op == "/") {
    if (!nums) return type_error(ip, op, a, b);
    if (b.as_double() == 0.0) return ip.fail("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (a.is_string() && op == "%") {
      VLLM_ASSIGN_OR_RETURN(std::string s, percent_format(ip, a.as_string(), b));
      return Value::string(std::move(s));
    }
    if (!nums) return type_error(ip, op, a, b);
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) return ip.fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return ip.fail("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    double x = a.as_double(), y = b.as_double();
    if (y == 0.0) return ip.fail(op == "//" ? "float floor division by zero" : "float modulo");
    if (op == "%") return Value::floating(py_fmod(x, y));
    return Value::floating(std::floor(x / y));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(r, base, &r)) return ip.fail("integer overflow");
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return ip.fail("integer overflow");
      }
      return Value::integer(r);
    }
    if (!nums) return type_error(ip, "** or pow()", a, b);
    if (a.as_double() == 0.0 && b.as_double() < 0) {
      return ip.fail("0.0 cannot be raised to a negative power");
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  return ip.fail(fmt::format("unknown operator '{}'", op));
}

Expected<bool> compare_op(Interpreter& ip, std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(ip, b, a);
  if (op == "notin") {
    VLLM_ASSIGN_OR_RETURN(bool in, contains(ip, b, a));
    return !in;
  }
  if (a.is_undefined()) return ip.undefined_error(a);
  if (b.is_undefined()) return ip.undefined_error(b);
  bool ok = true;
  bool result;
  if (op == "<") {
    result = py_less(a, b, &ok);
  } else if (op == ">") {
    result = py_less(b, a, &ok);
  } else if (op == "<=") {
    result = py_less(a, b, &ok) || (ok && py_equal(a, b));
  } else {
    result = py_less(b, a, &ok) || (ok && py_equal(a, b));
  }
  if (!ok) {
    return ip.fail(fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                               a.type_name(), b.type_name()));
  }
  return result;
}

Expected<Value> negate(Interpreter& ip, const Value& v, bool minus) {
  if (v.is_undefined()) return ip.undefined_error(v);
  if (v.is_integral()) {
    if (!minus) return Value::integer(v.as_int());
    if (v.as_int() == INT64_MIN) return ip.fail("integer overflow");
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::floating(minus ? -v.as_double() : v.as_double());
  return ip.fail(fmt::format("bad operand type for unary {}: '{}'", minus ? '-' : '+',
                             v.type_name()));
}

}  // namespace vllm::jinja
