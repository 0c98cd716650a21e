// Grammar building helpers, code point range arithmetic and the EBNF printer.
#include "structured/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace vllm::structured {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

void append_escaped_char(std::string* out, uint32_t c, bool in_class) {
  switch (c) {
    case '\n':
      *out += "\\n";
      return;
    case '\r':
      *out += "\\r";
      return;
    case '\t':
      *out += "\\t";
      return;
    case '\\':
      *out += "\\\\";
      return;
    case '"':
      *out += in_class ? "\"" : "\\\"";
      return;
    default:
      break;
  }
  if (in_class && (c == ']' || c == '-' || c == '^' || c == '[')) {
    out->push_back('\\');
    out->push_back(static_cast<char>(c));
    return;
  }
  if (c < 0x20 || c == 0x7F) {
    *out += fmt::format("\\x{:02x}", c);
    return;
  }
  append_utf8(out, c);
}

}  // namespace

std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges) {
  // Split around the surrogates, clamp, sort, merge.
  std::vector<CharRange> split;
  for (CharRange r : ranges) {
    if (r.lo > r.hi) continue;
    r.hi = std::min(r.hi, kMaxCodePoint);
    if (r.lo > kMaxCodePoint) continue;
    if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
      split.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateLo) split.push_back({r.lo, kSurrogateLo - 1});
    if (r.hi > kSurrogateHi) split.push_back({kSurrogateHi + 1, r.hi});
  }
  std::sort(split.begin(), split.end(),
            [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  for (const CharRange& r : split) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  // Ranges that touch only across the surrogate gap stay apart; that is fine.
  return out;
}

std::vector<CharRange> complement_ranges(const std::vector<CharRange>& ranges) {
  std::vector<CharRange> out;
  uint32_t next = 0;
  for (const CharRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize_ranges(std::move(out));
}

void append_utf8(std::string* out, uint32_t c) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

int32_t Grammar::add(Expr expr) {
  exprs_.push_back(std::move(expr));
  return static_cast<int32_t>(exprs_.size() - 1);
}

int32_t Grammar::add_rule(std::string name) {
  rules_.push_back({std::move(name), -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

int32_t Grammar::empty() {
  return add(Expr{});
}

int32_t Grammar::literal(std::string_view bytes) {
  if (bytes.empty()) return empty();
  Expr e;
  e.kind = ExprKind::kLiteral;
  e.text = std::string(bytes);
  return add(std::move(e));
}

int32_t Grammar::char_class(std::vector<CharRange> ranges, bool negated) {
  Expr e;
  e.kind = ExprKind::kCharClass;
  e.ranges = normalize_ranges(std::move(ranges));
  if (negated) e.ranges = complement_ranges(e.ranges);
  return add(std::move(e));
}

int32_t Grammar::any_char() {
  return char_class({{0, kMaxCodePoint}});
}

int32_t Grammar::ref(int32_t rule) {
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return add(std::move(e));
}

int32_t Grammar::sequence(std::vector<int32_t> children) {
  if (children.empty()) return empty();
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kSequence;
  e.children = std::move(children);
  return add(std::move(e));
}

int32_t Grammar::choice(std::vector<int32_t> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kChoice;
  e.children = std::move(children);
  return add(std::move(e));
}

int32_t Grammar::repeat(int32_t child, int32_t min, int32_t max) {
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

int32_t Grammar::find_rule(std::string_view name) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    if (rules_[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

std::string Grammar::to_ebnf() const {
  std::string out;
  // Precedence: 0 choice, 1 sequence, 2 atom.
  auto print = [&](auto&& self, int32_t index, int context) -> void {
    const Expr& e = expr(index);
    switch (e.kind) {
      case ExprKind::kEmpty:
        out += "\"\"";
        return;
      case ExprKind::kLiteral: {
        out.push_back('"');
        for (unsigned char c : e.text) {
          if (c >= 0x80) {
            out.push_back(static_cast<char>(c));
          } else {
            append_escaped_char(&out, c, false);
          }
        }
        out.push_back('"');
        return;
      }
      case ExprKind::kCharClass: {
        out.push_back('[');
        for (const CharRange& r : e.ranges) {
          append_escaped_char(&out, r.lo, true);
          if (r.hi != r.lo) {
            out.push_back('-');
            append_escaped_char(&out, r.hi, true);
          }
        }
        out.push_back(']');
        return;
      }
      case ExprKind::kRuleRef:
        out += rule(e.rule).name;
        return;
      case ExprKind::kSequence:
      case ExprKind::kChoice: {
        const bool is_choice = e.kind == ExprKind::kChoice;
        const int own = is_choice ? 0 : 1;
        if (context > own) out.push_back('(');
        for (size_t i = 0; i < e.children.size(); ++i) {
          if (i > 0) out += is_choice ? " | " : " ";
          self(self, e.children[i], own + 1);
        }
        if (context > own) out.push_back(')');
        return;
      }
      case ExprKind::kRepeat: {
        const bool wrap = context >= 3;  // a repeat of a repeat needs parentheses
        if (wrap) out.push_back('(');
        self(self, e.children[0], 3);
        if (e.min == 0 && e.max == 1) {
          out.push_back('?');
        } else if (e.min == 0 && e.max < 0) {
          out.push_back('*');
        } else if (e.min == 1 && e.max < 0) {
          out.push_back('+');
        } else if (e.max < 0) {
          out += fmt::format("{{{},}}", e.min);
        } else if (e.min == e.max) {
          out += fmt::format("{{{}}}", e.min);
        } else {
          out += fmt::format("{{{},{}}}", e.min, e.max);
        }
        if (wrap) out.push_back(')');
        return;
      }
    }
  };
  for (size_t i = 0; i < rules_.size(); ++i) {
    out += rules_[i].name;
    out += " ::= ";
    if (rules_[i].body >= 0) print(print, rules_[i].body, 0);
    out += "\n";
  }
  return out;
}

}  // namespace vllm::structured
