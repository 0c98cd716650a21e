// Jinja2's lexer rules (jinja2/lexer.py) re-expressed as a hand-written scanner. The
// subtle parts are whitespace handling between text and tags: which text a tag strips
// ("-" strips all whitespace, lstrip_blocks only spaces on the tag's own line, and only
// when the line starts there) and which newline a tag end swallows (trim_blocks).
#include "tokenizer/chat_template/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "tokenizer/chat_template/pystr.h"

namespace vllm::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Length in bytes of the Python whitespace code point at `pos`, 0 if none.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  char32_t cp;
  size_t n = utf8_next(s, pos, &cp);
  return is_py_space(cp) ? n : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

// Python's str.rstrip() (all Unicode whitespace).
std::string_view rstrip_space(std::string_view s) {
  std::vector<size_t> offsets = code_point_offsets(s);
  size_t end = offsets.size() - 1;
  while (end > 0) {
    char32_t cp;
    utf8_next(s, offsets[end - 1], &cp);
    if (!is_py_space(cp)) break;
    --end;
  }
  return s.substr(0, offsets[end]);
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;  // the lexer's \s+ needs at least one character
  for (size_t pos = 0; pos < s.size();) {
    size_t n = space_at(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

const char* const kOperators[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                  "~",  "[",  "]",  "(",  ")",  "{",  "}", "=", ".", ":", "|",
                                  ",",  ";",  ">",  "<"};

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : name_(name) {
    // Newlines: \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline
    // is off).
    src_.reserve(source.size());
    for (size_t k = 0; k < source.size(); ++k) {
      if (source[k] == '\r') {
        src_.push_back('\n');
        if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
      } else {
        src_.push_back(source[k]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t k = 0; k < src_.size(); ++k) {
      if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }
  }

  Expected<std::vector<Token>> run() {
    std::string_view s = src_;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string_view::npos) {
        emit_text(s.substr(pos), pos);
        break;
      }
      char kind = s[tag + 1];
      size_t after_open = tag + 2;
      char sign = (after_open < s.size() && (s[after_open] == '-' || s[after_open] == '+'))
                      ? s[after_open]
                      : '\0';
      size_t raw_end = kind == '%' ? match_raw_begin(tag) : 0;
      std::string_view text = s.substr(pos, tag - pos);
      text = strip_text(text, sign, kind != '{', line_starting);
      emit_text(text, pos);
      size_t body = after_open + (sign ? 1 : 0);
      if (raw_end != 0) {
        VLLM_RETURN_IF_ERROR(lex_raw(raw_end, &pos, &line_starting));
      } else if (kind == '#') {
        VLLM_RETURN_IF_ERROR(lex_comment(tag, body, &pos, &line_starting));
      } else {
        VLLM_RETURN_IF_ERROR(lex_tag(kind == '%', tag, body, &pos, &line_starting));
      }
    }
    push(TokenType::kEof, "", s.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    std::string_view s = src_;
    while (true) {
      size_t k = s.find('{', pos);
      if (k == std::string_view::npos || k + 1 >= s.size()) return std::string_view::npos;
      char c = s[k + 1];
      if (c == '{' || c == '%' || c == '#') return k;
      pos = k + 1;
    }
  }

  // lstrip_blocks / "-" handling of the text before a tag.
  std::string_view strip_text(std::string_view text, char sign, bool lstrip_kind,
                              bool line_starting) const {
    if (sign == '-') return rstrip_space(text);
    if (sign == '+' || !lstrip_kind) return text;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) return text.substr(0, l_pos);
    return text;
  }

  // "{% raw %}" at `tag`: returns the offset just past it, 0 when this is not a raw tag.
  size_t match_raw_begin(size_t tag) const {
    std::string_view s = src_;
    size_t p = tag + 2;
    if (p < s.size() && (s[p] == '-' || s[p] == '+')) ++p;
    p = skip_spaces(s, p);
    if (s.substr(p, 3) != "raw") return 0;
    p = skip_spaces(s, p + 3);
    if (s.substr(p, 3) == "-%}") return skip_spaces(s, p + 3);
    if (s.substr(p, 2) == "%}") return p + 2;
    return 0;
  }

  Status lex_raw(size_t body, size_t* pos, bool* line_starting) {
    std::string_view s = src_;
    // line_starting as it stands after the raw-begin tag.
    bool starting = s[body - 1] == '\n';
    for (size_t k = s.find("{%", body); k != std::string_view::npos; k = s.find("{%", k + 1)) {
      size_t p = k + 2;
      char sign = (p < s.size() && (s[p] == '-' || s[p] == '+')) ? s[p] : '\0';
      if (sign) ++p;
      p = skip_spaces(s, p);
      if (s.substr(p, 6) != "endraw") continue;
      p = skip_spaces(s, p + 6);
      size_t end;
      if (s.substr(p, 3) == "+%}") {
        end = p + 3;
      } else if (s.substr(p, 3) == "-%}") {
        end = skip_spaces(s, p + 3);
      } else if (s.substr(p, 2) == "%}") {
        end = p + 2;
        if (end < s.size() && s[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string_view text = strip_text(s.substr(body, k - body), sign, true, starting);
      emit_text(text, body);
      *pos = end;
      *line_starting = s[end - 1] == '\n';
      return Status::ok();
    }
    return error_at(body, "Missing end of raw directive");
  }

  Status lex_comment(size_t tag, size_t body, size_t* pos, bool* line_starting) {
    std::string_view s = src_;
    size_t q = s.find("#}", body);
    if (q == std::string_view::npos) return error_at(tag, "Missing end of comment tag");
    size_t end;
    if (q > body && s[q - 1] == '+') {
      end = q + 2;
    } else if (q > body && s[q - 1] == '-') {
      end = skip_spaces(s, q + 2);
    } else {
      end = q + 2;
      if (end < s.size() && s[end] == '\n') ++end;
    }
    *pos = end;
    *line_starting = s[end - 1] == '\n';
    return Status::ok();
  }

  Status lex_tag(bool block, size_t tag, size_t body, size_t* pos, bool* line_starting) {
    std::string_view s = src_;
    push(block ? TokenType::kBlockBegin : TokenType::kVariableBegin, block ? "{%" : "{{", tag);
    std::vector<char> balance;
    size_t p = body;
    while (true) {
      if (p >= s.size()) {
        *pos = p;
        *line_starting = false;
        return Status::ok();  // the parser reports the missing end tag
      }
      if (balance.empty()) {
        size_t end = match_tag_end(block, p);
        if (end != 0) {
          push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, block ? "%}" : "}}", p);
          *pos = end;
          *line_starting = s[end - 1] == '\n';
          return Status::ok();
        }
      }
      if (size_t n = space_at(s, p)) {
        p = skip_spaces(s, p + n);
        continue;
      }
      size_t next = 0;
      if (is_digit(s[p])) {
        VLLM_ASSIGN_OR_RETURN(next, lex_number(p));
      } else if (is_name_start(s[p])) {
        next = p;
        while (next < s.size() && is_name_char(s[next])) ++next;
        push(TokenType::kName, std::string(s.substr(p, next - p)), p);
      } else if (s[p] == '\'' || s[p] == '"') {
        VLLM_ASSIGN_OR_RETURN(next, lex_string(p));
      } else {
        VLLM_ASSIGN_OR_RETURN(next, lex_operator(p, &balance));
      }
      p = next;
    }
  }

  // Offset past the tag end at `p`, or 0.
  size_t match_tag_end(bool block, size_t p) const {
    std::string_view s = src_;
    if (block) {
      if (s.substr(p, 3) == "+%}") return p + 3;
      if (s.substr(p, 3) == "-%}") return skip_spaces(s, p + 3);
      if (s.substr(p, 2) == "%}") {
        size_t end = p + 2;
        if (end < s.size() && s[end] == '\n') ++end;
        return end;
      }
      return 0;
    }
    if (s.substr(p, 3) == "-}}") return skip_spaces(s, p + 3);
    if (s.substr(p, 2) == "}}") return p + 2;
    return 0;
  }

  Expected<size_t> lex_number(size_t p) {
    std::string_view s = src_;
    auto digits = [&](size_t q, auto pred) {  // (_?digit)+ style run, returns end
      size_t e = q;
      while (e < s.size()) {
        if (pred(s[e])) {
          ++e;
        } else if (s[e] == '_' && e + 1 < s.size() && pred(s[e + 1]) && e > q) {
          e += 2;
        } else {
          break;
        }
      }
      return e;
    };
    auto dec = [](char c) { return c >= '0' && c <= '9'; };
    // Float: digits then (fraction? exponent | fraction); not right after a '.'.
    bool after_dot = p > 0 && s[p - 1] == '.';
    if (!after_dot) {
      size_t e = digits(p, dec);
      size_t f = e;
      bool fraction = false;
      if (f + 1 < s.size() && s[f] == '.' && dec(s[f + 1])) {
        f = digits(f + 1, dec);
        fraction = true;
      }
      size_t x = f;
      bool exponent = false;
      if (x < s.size() && (s[x] == 'e' || s[x] == 'E')) {
        size_t y = x + 1;
        if (y < s.size() && (s[y] == '+' || s[y] == '-')) ++y;
        if (y < s.size() && dec(s[y])) {
          x = digits(y, dec);
          exponent = true;
        }
      }
      if (fraction || exponent) {
        std::string text;
        for (char c : s.substr(p, x - p)) {
          if (c != '_') text.push_back(c);
        }
        Token t = make(TokenType::kFloat, text, p);
        t.float_value = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(std::move(t));
        return x;
      }
    }
    int base = 10;
    size_t start = p, end;
    char c1 = p + 1 < s.size() ? static_cast<char>(s[p + 1] | 0x20) : '\0';
    auto bin = [](char c) { return c == '0' || c == '1'; };
    auto oct = [](char c) { return c >= '0' && c <= '7'; };
    auto hex = [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    };
    auto prefixed = [&](auto pred) {  // 0b(_?[01])+ : underscores may follow the prefix
      size_t e = p + 2;
      size_t q = e;
      while (q < s.size()) {
        if (pred(s[q])) {
          ++q;
        } else if (s[q] == '_' && q + 1 < s.size() && pred(s[q + 1])) {
          q += 2;
        } else {
          break;
        }
      }
      return q;
    };
    if (s[p] == '0' && c1 == 'b' && p + 2 < s.size()) {
      base = 2;
      end = prefixed(bin);
      start = p + 2;
    } else if (s[p] == '0' && c1 == 'o') {
      base = 8;
      end = prefixed(oct);
      start = p + 2;
    } else if (s[p] == '0' && c1 == 'x') {
      base = 16;
      end = prefixed(hex);
      start = p + 2;
    } else if (s[p] == '0') {
      end = digits(p, [](char c) { return c == '0'; });
    } else {
      end = digits(p, dec);
    }
    if (base != 10 && end == p + 2) {  // bare "0x": the integer is just "0"
      base = 10;
      start = p;
      end = p + 1;
    }
    int64_t value = 0;
    for (char c : s.substr(start, end - start)) {
      if (c == '_') continue;
      int d = (c >= '0' && c <= '9') ? c - '0' : (c | 0x20) - 'a' + 10;
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value)) {
        return error_at(p, "integer literal is too large");
      }
    }
    Token t = make(TokenType::kInteger, std::string(s.substr(p, end - p)), p);
    t.int_value = value;
    tokens_.push_back(std::move(t));
    return end;
  }

  Expected<size_t> lex_string(size_t p) {
    std::string_view s = src_;
    char quote = s[p];
    size_t q = p + 1;
    while (q < s.size() && s[q] != quote) {
      if (s[q] == '\\') ++q;
      ++q;
    }
    if (q >= s.size()) return error_at(p, "unexpected char '" + std::string(1, quote) + "'");
    std::string value;
    VLLM_RETURN_IF_ERROR(unescape(s.substr(p + 1, q - p - 1), p, &value));
    push(TokenType::kString, std::move(value), p);
    return q + 1;
  }

  // Python's unicode-escape decoding of a string literal's body.
  Status unescape(std::string_view raw, size_t at, std::string* out) {
    for (size_t k = 0; k < raw.size(); ++k) {
      char c = raw[k];
      if (c != '\\' || k + 1 >= raw.size()) {
        out->push_back(c);
        continue;
      }
      char e = raw[++k];
      auto hex_escape = [&](size_t n) -> Status {
        uint32_t v = 0;
        for (size_t d = 1; d <= n; ++d) {
          if (k + d >= raw.size()) return error_at(at, "truncated escape in string literal");
          char h = raw[k + d];
          int hv = (h >= '0' && h <= '9')   ? h - '0'
                   : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                   : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                            : -1;
          if (hv < 0) return error_at(at, "truncated escape in string literal");
          v = v * 16 + static_cast<uint32_t>(hv);
        }
        if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
          return error_at(at, "escape is not a valid code point");
        }
        append_utf8(v, out);
        k += n;
        return Status::ok();
      };
      switch (e) {
        case '\n': break;
        case '\\': out->push_back('\\'); break;
        case '\'': out->push_back('\''); break;
        case '"': out->push_back('"'); break;
        case 'a': out->push_back('\a'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'v': out->push_back('\v'); break;
        case 'x': VLLM_RETURN_IF_ERROR(hex_escape(2)); break;
        case 'u': VLLM_RETURN_IF_ERROR(hex_escape(4)); break;
        case 'U': VLLM_RETURN_IF_ERROR(hex_escape(8)); break;
        case 'N': return error_at(at, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && k + 1 < raw.size() && raw[k + 1] >= '0' && raw[k + 1] <= '7';
                 ++d) {
              v = v * 8 + static_cast<uint32_t>(raw[++k] - '0');
            }
            append_utf8(v, out);
          } else {
            out->push_back('\\');
            out->push_back(e);
          }
      }
    }
    return Status::ok();
  }

  Expected<size_t> lex_operator(size_t p, std::vector<char>* balance) {
    std::string_view s = src_;
    for (const char* op : kOperators) {
      std::string_view o = op;
      if (s.substr(p, o.size()) != o) continue;
      if (o == "(" || o == "[" || o == "{") {
        balance->push_back(o == "(" ? ')' : o == "[" ? ']' : '}');
      } else if (o == ")" || o == "]" || o == "}") {
        if (balance->empty()) return error_at(p, fmt::format("unexpected '{}'", o));
        char expected = balance->back();
        balance->pop_back();
        if (expected != o[0]) {
          return error_at(p, fmt::format("unexpected '{}', expected '{}'", o, expected));
        }
      }
      push(TokenType::kOperator, std::string(o), p);
      return p + o.size();
    }
    char32_t cp;
    size_t n = utf8_next(s, p, &cp);
    return error_at(p, fmt::format("unexpected char '{}'", s.substr(p, n)));
  }

  void emit_text(std::string_view text, size_t at) {
    if (!text.empty()) push(TokenType::kText, std::string(text), at);
  }

  // Columns count code points. Tokens arrive in source order, so the count resumes from the
  // previous token's position when it is on the same line (long lines stay linear).
  void line_col(size_t offset, int* line, int* column) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<int>(idx) + 1;
    size_t from = line_starts_[idx];
    int col = 1;
    if (cache_line_ == idx && cache_offset_ <= offset) {
      from = cache_offset_;
      col = cache_column_;
    }
    for (size_t k = from; k < offset && k < src_.size(); ++k) {
      if ((static_cast<unsigned char>(src_[k]) & 0xc0) != 0x80) ++col;
    }
    cache_line_ = idx;
    cache_offset_ = offset;
    cache_column_ = col;
    *column = col;
  }

  Token make(TokenType type, std::string text, size_t at) const {
    Token t;
    t.type = type;
    t.text = std::move(text);
    line_col(at, &t.line, &t.column);
    return t;
  }
  void push(TokenType type, std::string text, size_t at) {
    tokens_.push_back(make(type, std::move(text), at));
  }

  Status error_at(size_t offset, std::string_view message) const {
    int line, column;
    line_col(offset, &line, &column);
    return template_error(name_, line, column, message);
  }

  std::string_view name_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  mutable size_t cache_line_ = SIZE_MAX;
  mutable size_t cache_offset_ = 0;
  mutable int cache_column_ = 1;
};

}  // namespace

Status template_error(std::string_view name, int line, int column, std::string_view message) {
  return make_error(ErrorCode::kInvalidArgument, "chat template '{}', line {}, column {}: {}", name,
                    line, column, message);
}

Expected<std::vector<Token>> tokenize(std::string_view source, std::string_view name) {
  Lexer lexer(source, name);
  return lexer.run();
}

}  // namespace vllm::jinja
