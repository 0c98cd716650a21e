// Python str operations on UTF-8 text (see pystr.h). Case mapping uses the C library's
// Unicode tables (simple one-to-one mappings; Python's few one-to-many mappings such as
// "ß".upper() == "SS" are not reproduced).
#include "tokenizer/chat_template/pystr.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>

namespace vllm::jinja {
namespace {

locale_t utf8_locale() {
  static locale_t loc = [] {
    locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
    if (l == static_cast<locale_t>(0)) l = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", static_cast<locale_t>(0));
    return l;
  }();
  return loc;
}

bool in_chars(char32_t c, const std::vector<char32_t>& set) {
  return std::find(set.begin(), set.end(), c) != set.end();
}

std::vector<char32_t> decode_all(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    pos += utf8_next(s, pos, &cp);
    out.push_back(cp);
  }
  return out;
}

template <typename F>
std::string map_code_points(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    char32_t cp;
    size_t n = utf8_next(s, pos, &cp);
    if (n == 1 && static_cast<unsigned char>(s[pos]) >= 0x80) {
      out.push_back(s[pos]);  // invalid byte: keep it as it is
    } else {
      append_utf8(f(cp), &out);
    }
    pos += n;
  }
  return out;
}

}  // namespace

bool is_py_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

size_t utf8_next(std::string_view s, size_t pos, char32_t* cp) {
  auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t len = b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : b0 >= 0xc0 ? 2 : 0;
  if (len == 0 || b0 > 0xf4 || pos + len > s.size()) {
    *cp = b0;
    return 1;
  }
  char32_t v = b0 & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) {
    auto b = static_cast<unsigned char>(s[pos + k]);
    if ((b & 0xc0) != 0x80) {
      *cp = b0;
      return 1;
    }
    v = (v << 6) | (b & 0x3f);
  }
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
    *cp = b0;
    return 1;
  }
  *cp = v;
  return len;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    char32_t cp;
    pos += utf8_next(s, pos, &cp);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) {
    char32_t cp;
    pos += utf8_next(s, pos, &cp);
  }
  return n;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::vector<char32_t> set;
  if (chars) set = decode_all(*chars);
  auto strip_it = [&](char32_t c) { return chars ? in_chars(c, set) : is_py_space(c); };
  std::vector<size_t> offsets = code_point_offsets(s);
  size_t n = offsets.size() - 1;
  size_t begin = 0, end = n;
  auto cp_at = [&](size_t k) {
    char32_t cp;
    utf8_next(s, offsets[k], &cp);
    return cp;
  };
  if (left) {
    while (begin < end && strip_it(cp_at(begin))) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cp_at(end - 1))) --end;
  }
  return std::string(s.substr(offsets[begin], offsets[end] - offsets[begin]));
}

bool py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
              bool from_right, std::vector<std::string>* out) {
  out->clear();
  if (sep) {
    if (sep->empty()) return false;
    std::vector<std::string> parts;
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    *out = std::move(parts);
    return true;
  }
  // Whitespace split: runs of whitespace separate, leading / trailing runs are dropped.
  std::vector<size_t> offsets = code_point_offsets(s);
  size_t n = offsets.size() - 1;
  std::vector<char32_t> cps(n);
  for (size_t k = 0; k < n; ++k) utf8_next(s, offsets[k], &cps[k]);
  std::vector<std::string> parts;
  if (!from_right) {
    size_t k = 0;
    while (k < n) {
      while (k < n && is_py_space(cps[k])) ++k;
      if (k == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = n;
        while (e > k && is_py_space(cps[e - 1])) --e;
        parts.emplace_back(s.substr(offsets[k], offsets[e] - offsets[k]));
        break;
      }
      size_t start = k;
      while (k < n && !is_py_space(cps[k])) ++k;
      parts.emplace_back(s.substr(offsets[start], offsets[k] - offsets[start]));
    }
  } else {
    size_t k = n;
    while (k > 0) {
      while (k > 0 && is_py_space(cps[k - 1])) --k;
      if (k == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t b = 0;
        while (b < k && is_py_space(cps[b])) ++b;
        parts.emplace_back(s.substr(offsets[b], offsets[k] - offsets[b]));
        break;
      }
      size_t end = k;
      while (k > 0 && !is_py_space(cps[k - 1])) --k;
      parts.emplace_back(s.substr(offsets[k], offsets[end] - offsets[k]));
    }
    std::reverse(parts.begin(), parts.end());
  }
  *out = std::move(parts);
  return true;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  size_t start = 0, pos = 0;
  while (pos < s.size()) {
    char32_t cp;
    size_t n = utf8_next(s, pos, &cp);
    bool is_break = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c ||
                    cp == 0x1d || cp == 0x1e || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!is_break) {
      pos += n;
      continue;
    }
    size_t brk_end = pos + n;
    if (cp == '\r' && brk_end < s.size() && s[brk_end] == '\n') ++brk_end;
    lines.emplace_back(s.substr(start, (keepends ? brk_end : pos) - start));
    start = pos = brk_end;
  }
  if (start < s.size()) lines.emplace_back(s.substr(start));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<size_t> offsets = code_point_offsets(s);
    int64_t done = 0;
    for (size_t k = 0; k + 1 < offsets.size(); ++k) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      out.append(s.substr(offsets[k], offsets[k + 1] - offsets[k]));
    }
    if (count < 0 || done < count) out.append(repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

char32_t py_to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t loc = utf8_locale();
  if (loc == static_cast<locale_t>(0)) return c;
  return static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc));
}

char32_t py_to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t loc = utf8_locale();
  if (loc == static_cast<locale_t>(0)) return c;
  return static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc));
}

bool py_is_cased_letter(char32_t c) { return py_to_upper(c) != c || py_to_lower(c) != c; }

std::string py_upper(std::string_view s) {
  std::string out = map_code_points(s, py_to_upper);
  // The one-to-many mapping that shows up in practice: German sharp s.
  if (out.find("\xc3\x9f") != std::string::npos) out = py_replace(out, "\xc3\x9f", "SS", -1);
  return out;
}
std::string py_lower(std::string_view s) { return map_code_points(s, py_to_lower); }
std::string py_swapcase(std::string_view s) {
  return map_code_points(s, [](char32_t c) {
    char32_t u = py_to_upper(c);
    return u != c ? u : py_to_lower(c);
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_code_points(s, [&](char32_t c) {
    char32_t r = first ? py_to_upper(c) : py_to_lower(c);
    first = false;
    return r;
  });
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_code_points(s, [&](char32_t c) {
    bool cased = py_is_cased_letter(c);
    char32_t r = cased ? (prev_cased ? py_to_lower(c) : py_to_upper(c)) : c;
    prev_cased = cased;
    return r;
  });
}

bool py_islower(std::string_view s) {
  bool any_cased = false;
  for (char32_t c : decode_all(s)) {
    if (py_to_lower(c) != c) return false;
    if (py_to_upper(c) != c) any_cased = true;
  }
  return any_cased;
}

bool py_isupper(std::string_view s) {
  bool any_cased = false;
  for (char32_t c : decode_all(s)) {
    if (py_to_upper(c) != c) return false;
    if (py_to_lower(c) != c) any_cased = true;
  }
  return any_cased;
}

}  // namespace vllm::jinja
