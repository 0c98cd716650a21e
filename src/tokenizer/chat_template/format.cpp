// Python's two string formatting mini-languages as templates use them: "%s" % x (and the
// |format filter) and "{}".format(x), with the common conversions, flags, widths and
// precisions.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "tokenizer/chat_template/evaluator.h"
#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

// Pads `body` (already signed) to `width` code points.
std::string pad(std::string body, int64_t width, char align, char32_t fill) {
  int64_t len = static_cast<int64_t>(code_point_count(body));
  if (width <= len) return body;
  size_t n = static_cast<size_t>(width - len);
  std::string fill_text;
  append_utf8(fill, &fill_text);
  auto fills = [&](size_t count) {
    std::string f;
    for (size_t k = 0; k < count; ++k) f += fill_text;
    return f;
  };
  if (align == '<') return body + fills(n);
  if (align == '^') return fills(n / 2) + body + fills(n - n / 2);
  if (align == '=') {
    size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    return body.substr(0, sign) + fills(n) + body.substr(sign);
  }
  return fills(n) + body;
}

std::string format_float(double d, char type, int precision) {
  if (std::isnan(d)) return std::isupper(static_cast<unsigned char>(type)) ? "NAN" : "nan";
  if (std::isinf(d)) {
    std::string s = d < 0 ? "-inf" : "inf";
    return std::isupper(static_cast<unsigned char>(type)) ? py_upper(s) : s;
  }
  char spec[16];
  std::snprintf(spec, sizeof(spec), "%%.%d%c", precision, type);
  char buf[512];
  std::snprintf(buf, sizeof(buf), spec, d);
  return buf;
}

// One "%..." conversion of printf-style formatting.
Expected<std::string> percent_one(Interpreter& ip, const Value& v, std::string_view flags,
                                  int64_t width, int64_t precision, char conv) {
  bool left = flags.find('-') != std::string_view::npos;
  bool zero = flags.find('0') != std::string_view::npos && !left;
  bool plus = flags.find('+') != std::string_view::npos;
  bool space = flags.find(' ') != std::string_view::npos;
  bool alt = flags.find('#') != std::string_view::npos;
  std::string body;
  bool numeric = true;
  auto sign_prefix = [&](bool negative) { return negative ? "-" : plus ? "+" : space ? " " : ""; };
  switch (conv) {
    case 's':
    case 'r':
    case 'a': {
      numeric = false;
      body = conv == 's' ? py_str(v) : py_repr(v);
      if (precision >= 0) {
        std::vector<size_t> offsets = code_point_offsets(body);
        if (static_cast<size_t>(precision) + 1 < offsets.size()) {
          body.resize(offsets[static_cast<size_t>(precision)]);
        }
      }
      break;
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      if (!v.is_number()) {
        return ip.fail(fmt::format("%{} format: a real number is required, not {}", conv,
                                   v.type_name()));
      }
      int64_t n = v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int();
      uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
      std::string digits = conv == 'x'   ? fmt::format("{:x}", mag)
                           : conv == 'X' ? fmt::format("{:X}", mag)
                           : conv == 'o' ? fmt::format("{:o}", mag)
                                         : std::to_string(mag);
      if (precision >= 0 && static_cast<int64_t>(digits.size()) < precision) {
        digits.insert(0, static_cast<size_t>(precision) - digits.size(), '0');
      }
      if (alt && conv != 'd' && conv != 'i' && conv != 'u') {
        digits.insert(0, conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X");
      }
      body = sign_prefix(n < 0) + digits;
      break;
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      if (!v.is_number()) {
        return ip.fail(fmt::format("must be real number, not {}", v.type_name()));
      }
      double d = v.as_double();
      std::string text = format_float(std::fabs(d), conv, precision < 0 ? 6 : static_cast<int>(std::min<int64_t>(precision, 100)));
      body = sign_prefix(std::signbit(d) && !std::isnan(d)) + text;
      break;
    }
    case 'c': {
      numeric = false;
      if (v.is_string() && code_point_count(v.as_string()) == 1) {
        body = v.as_string();
      } else if (v.is_integral() && v.as_int() >= 0 && v.as_int() <= 0x10ffff) {
        append_utf8(static_cast<char32_t>(v.as_int()), &body);
      } else {
        return ip.fail("%c requires int or char");
      }
      break;
    }
    default:
      return ip.fail(fmt::format("unsupported format character '{}'", conv));
  }
  if (width > 0) {
    if (width > static_cast<int64_t>(ip.limits().max_output_bytes)) return ip.fail("width too large");
    body = pad(std::move(body), width, left ? '<' : (zero && numeric) ? '=' : '>',
               (zero && numeric) ? U'0' : U' ');
  }
  return body;
}

// Applies a str.format() spec ("[[fill]align][sign][0][width][.precision][type]").
Expected<std::string> apply_spec(Interpreter& ip, const Value& v, std::string_view spec) {
  if (spec.empty()) return py_str(v);
  char32_t fill = U' ';
  char align = '\0';
  size_t p = 0;
  std::vector<size_t> offsets = code_point_offsets(spec);
  if (offsets.size() > 2) {
    std::string_view second = spec.substr(offsets[1], offsets[2] - offsets[1]);
    if (second.size() == 1 && std::string_view("<>^=").find(second[0]) != std::string_view::npos) {
      utf8_next(spec, 0, &fill);
      align = second[0];
      p = offsets[2];
    }
  }
  if (align == '\0' && p < spec.size() && std::string_view("<>^=").find(spec[p]) != std::string_view::npos) {
    align = spec[p++];
  }
  char sign = '-';
  if (p < spec.size() && (spec[p] == '+' || spec[p] == '-' || spec[p] == ' ')) sign = spec[p++];
  if (p < spec.size() && spec[p] == '0') {
    if (align == '\0') {
      align = '=';
      fill = U'0';
    }
    ++p;
  }
  int64_t width = 0;
  while (p < spec.size() && spec[p] >= '0' && spec[p] <= '9' && width < 100000) width = width * 10 + (spec[p++] - '0');
  int64_t precision = -1;
  if (p < spec.size() && spec[p] == '.') {
    ++p;
    precision = 0;
    while (p < spec.size() && spec[p] >= '0' && spec[p] <= '9' && precision < 1000) precision = precision * 10 + (spec[p++] - '0');
  }
  char type = p < spec.size() ? spec[p++] : '\0';
  if (p != spec.size()) return ip.fail(fmt::format("invalid format specifier '{}'", spec));
  std::string body;
  bool numeric = v.is_number() && type != 's';
  std::string flags = sign == '+' ? "+" : sign == ' ' ? " " : "";
  if (!numeric) {
    if (type != '\0' && type != 's') {
      return ip.fail(fmt::format("unknown format code '{}' for object of type '{}'", type, v.type_name()));
    }
    VLLM_ASSIGN_OR_RETURN(body, percent_one(ip, v, "", 0, precision, 's'));
  } else if (type == '\0' && v.is_float() && precision < 0) {
    double d = v.as_double();
    body = py_float_repr(d);
    if (sign != '-' && !std::signbit(d)) body.insert(0, 1, sign);
  } else if (type == '\0' && !v.is_float()) {
    VLLM_ASSIGN_OR_RETURN(body, percent_one(ip, v, flags, 0, -1, 'd'));
  } else {
    char conv = type == '\0' ? 'g' : type == 'b' ? 'd' : type;
    if (type == '%') {
      VLLM_ASSIGN_OR_RETURN(body, percent_one(ip, Value::floating(v.as_double() * 100), flags, 0, precision, 'f'));
      body += "%";
    } else {
      VLLM_ASSIGN_OR_RETURN(body, percent_one(ip, v, flags, 0, precision, conv));
    }
  }
  if (width > 0) body = pad(std::move(body), width, align ? align : (numeric ? '>' : '<'), fill);
  return body;
}

}  // namespace

Expected<std::string> percent_format(Interpreter& ip, std::string_view format, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.as_dict();
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t p = 0; p < format.size();) {
    if (format[p] != '%') {
      size_t q = format.find('%', p);
      if (q == std::string_view::npos) q = format.size();
      out.append(format.substr(p, q - p));
      p = q;
      continue;
    }
    ++p;
    if (p >= format.size()) return ip.fail("incomplete format");
    if (format[p] == '%') {
      out.push_back('%');
      ++p;
      continue;
    }
    const Value* value = nullptr;
    Value keyed;
    if (format[p] == '(') {
      size_t close = format.find(')', p);
      if (close == std::string_view::npos) return ip.fail("incomplete format key");
      if (mapping == nullptr) return ip.fail("format requires a mapping");
      const Value* found = mapping->find(format.substr(p + 1, close - p - 1));
      if (found == nullptr) {
        return ip.fail(fmt::format("KeyError: '{}'", format.substr(p + 1, close - p - 1)));
      }
      keyed = *found;
      value = &keyed;
      used_mapping = true;
      p = close + 1;
    }
    size_t flags_start = p;
    while (p < format.size() && std::string_view("-+ #0").find(format[p]) != std::string_view::npos) ++p;
    std::string_view flags = format.substr(flags_start, p - flags_start);
    auto read_number = [&](int64_t* n) -> Status {
      if (p < format.size() && format[p] == '*') {
        ++p;
        if (next >= positional.size()) return ip.fail("not enough arguments for format string");
        VLLM_ASSIGN_OR_RETURN(*n, int_arg(ip, positional[next++], "* width"));
        return Status::ok();
      }
      while (p < format.size() && format[p] >= '0' && format[p] <= '9' && *n < 1000000) {
        *n = *n * 10 + (format[p++] - '0');
      }
      return Status::ok();
    };
    int64_t width = 0, precision = -1;
    VLLM_RETURN_IF_ERROR(read_number(&width));
    if (p < format.size() && format[p] == '.') {
      ++p;
      precision = 0;
      VLLM_RETURN_IF_ERROR(read_number(&precision));
    }
    while (p < format.size() && (format[p] == 'h' || format[p] == 'l' || format[p] == 'L')) ++p;
    if (p >= format.size()) return ip.fail("incomplete format");
    char conv = format[p++];
    if (value == nullptr) {
      if (next >= positional.size()) return ip.fail("not enough arguments for format string");
      value = &positional[next++];
    }
    VLLM_ASSIGN_OR_RETURN(std::string piece, percent_one(ip, *value, flags, width, precision, conv));
    out += piece;
    VLLM_RETURN_IF_ERROR(ip.check_string(out.size()));
  }
  if (!used_mapping && mapping == nullptr && next < positional.size()) {
    return ip.fail("not all arguments converted during string formatting");
  }
  return out;
}

Expected<std::string> brace_format(Interpreter& ip, std::string_view format, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t p = 0; p < format.size();) {
    char c = format[p];
    if (c == '}') {
      if (p + 1 < format.size() && format[p + 1] == '}') {
        out.push_back('}');
        p += 2;
        continue;
      }
      return ip.fail("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++p;
      continue;
    }
    if (p + 1 < format.size() && format[p + 1] == '{') {
      out.push_back('{');
      p += 2;
      continue;
    }
    size_t close = format.find('}', p);
    if (close == std::string_view::npos) return ip.fail("expected '}' before end of string");
    std::string_view field = format.substr(p + 1, close - p - 1);
    p = close + 1;
    std::string_view spec;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    char conversion = '\0';
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return ip.fail("invalid conversion in format string");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string_view head = field.substr(0, name_end);
    Value value;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) return ip.fail("Replacement index out of range");
      value = args.positional[auto_index++];
    } else if (head.find_first_not_of("0123456789") == std::string_view::npos) {
      size_t index = std::stoul(std::string(head.substr(0, 9)));
      if (index >= args.positional.size()) return ip.fail("Replacement index out of range");
      value = args.positional[index];
    } else {
      bool found = false;
      for (auto& [key, v] : args.keyword) {
        if (key == head) {
          value = v;
          found = true;
        }
      }
      if (!found) return ip.fail(fmt::format("KeyError: '{}'", head));
    }
    for (size_t q = name_end; q != std::string_view::npos && q < field.size();) {
      if (field[q] == '.') {
        size_t e = field.find_first_of(".[", q + 1);
        VLLM_ASSIGN_OR_RETURN(value, ip.get_attr(value, std::string(field.substr(q + 1, e == std::string_view::npos ? std::string_view::npos : e - q - 1))));
        q = e;
      } else {
        size_t e = field.find(']', q);
        if (e == std::string_view::npos) return ip.fail("Missing ']' in format string");
        std::string key(field.substr(q + 1, e - q - 1));
        Value k = key.find_first_not_of("0123456789") == std::string::npos && !key.empty()
                      ? Value::integer(std::stoll(key.substr(0, 18)))
                      : Value::string(key);
        VLLM_ASSIGN_OR_RETURN(value, ip.get_item(value, k));
        q = e + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a') {
      value = Value::string(py_repr(value));
    } else if (conversion == 's') {
      value = Value::string(py_str(value));
    } else if (conversion != '\0') {
      return ip.fail(fmt::format("Unknown conversion specifier {}", conversion));
    }
    VLLM_ASSIGN_OR_RETURN(std::string piece, apply_spec(ip, value, spec));
    out += piece;
    VLLM_RETURN_IF_ERROR(ip.check_string(out.size()));
  }
  return out;
}

}  // namespace vllm::jinja
