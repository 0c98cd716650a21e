// EBNF / GBNF (and Lark-style) grammar text -> Grammar, by recursive descent:
//   grammar  := rule*
//   rule     := name '::=' choice          (Lark: ['?'|'!'] name ':' choice)
//   choice   := sequence ('|' sequence)*
//   sequence := (element)*                 ends at '|', ')', end, or the next `name ::=`
//   element  := atom ('?' | '*' | '+' | '{' n [',' [m]] '}')?
//   atom     := string | class | name | '(' choice ')'     (Lark: [choice], /regex/)
#include "structured/ebnf.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "structured/regex.h"
#include "structured/text_util.h"

namespace vllm::structured {
namespace {

constexpr int64_t kMaxRepeat = 10000;
constexpr int kMaxNesting = 256;  // parentheses deep; keeps the recursive descent's stack small

bool is_name_start(char c, bool lark) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         (!lark && (c == '-' || c == '.'));
}
bool is_name_char(char c, bool lark) {
  return is_name_start(c, lark) || (c >= '0' && c <= '9');
}

class EbnfParser {
 public:
  EbnfParser(std::string_view text, bool lark) : t_(text), lark_(lark) {}

  Expected<Grammar> parse(std::string_view root_name) {
    skip_space();
    if (at_end()) return error("the grammar is empty", pos_);
    while (!at_end()) {
      VLLM_RETURN_IF_ERROR(parse_rule());
      skip_space();
    }
    for (const auto& [name, info] : rules_) {
      if (g_.rule(info.index).body < 0) {
        return error(fmt::format("rule '{}' is referenced but not defined", name), info.first_use);
      }
    }
    const int32_t root = g_.find_rule(root_name);
    if (root < 0 || g_.rule(root).body < 0) {
      return make_error(ErrorCode::kInvalidArgument, "the grammar has no rule named '{}'",
                        root_name);
    }
    g_.set_root(root);
    return std::move(g_);
  }

 private:
  struct RuleInfo {
    int32_t index = -1;
    size_t first_use = 0;
  };

  Status error(std::string_view what, size_t at) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return make_error(ErrorCode::kInvalidArgument, "line {}, column {}: {}", line, column, what);
  }

  bool at_end() const { return pos_ >= t_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }
  bool starts_with(size_t at, std::string_view s) const { return t_.substr(at, s.size()) == s; }

  void skip_space() { pos_ = space_end(pos_); }
  size_t space_end(size_t i) const {
    while (i < t_.size()) {
      const char c = t_[i];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i;
      } else if ((!lark_ && c == '#') || (lark_ && starts_with(i, "//"))) {
        while (i < t_.size() && t_[i] != '\n') ++i;
      } else {
        break;
      }
    }
    return i;
  }

  // The name at `i` (empty if none) and where it ends.
  std::string_view name_at(size_t i, size_t* end) const {
    size_t j = i;
    if (j < t_.size() && is_name_start(t_[j], lark_)) {
      while (j < t_.size() && is_name_char(t_[j], lark_)) ++j;
    }
    *end = j;
    return t_.substr(i, j - i);
  }

  // Whether a rule definition starts at `i` (so the current sequence ends before it).
  bool rule_starts_at(size_t i) const {
    if (lark_ && i < t_.size() && t_[i] == '%') return true;  // a directive (refused later)
    if (lark_ && i < t_.size() && (t_[i] == '?' || t_[i] == '!')) ++i;
    size_t end = 0;
    if (name_at(i, &end).empty()) return false;
    if (lark_) {
      while (end < t_.size() && (t_[end] == '.' || (t_[end] >= '0' && t_[end] <= '9'))) ++end;
    }
    size_t j = space_end(end);
    if (lark_) return j < t_.size() && t_[j] == ':' && !starts_with(j, "::=");
    return starts_with(j, "::=");
  }

  int32_t rule_index(std::string_view name, size_t at) {
    auto it = rules_.find(std::string(name));
    if (it != rules_.end()) return it->second.index;
    RuleInfo info;
    info.index = g_.add_rule(std::string(name));
    info.first_use = at;
    rules_.emplace(std::string(name), info);
    return info.index;
  }

  Status parse_rule() {
    const size_t start = pos_;
    if (lark_ && (peek() == '%')) {
      return error("Lark directives (%import, %ignore, ...) are not supported", pos_);
    }
    if (lark_ && (peek() == '?' || peek() == '!')) ++pos_;
    size_t end = 0;
    std::string_view name = name_at(pos_, &end);
    if (name.empty()) return error("expected a rule name", pos_);
    pos_ = end;
    if (lark_) {
      if (peek() == '.') {  // Lark priority: name.2
        ++pos_;
        while (peek() >= '0' && peek() <= '9') ++pos_;
      }
    } else if (peek() == '[') {
      return error(fmt::format("rule options ({}[...]) are not supported", name), pos_);
    }
    skip_space();
    if (lark_) {
      if (peek() != ':') return error(fmt::format("expected ':' after '{}'", name), pos_);
      ++pos_;
    } else {
      if (!starts_with(pos_, "::=")) {
        return error(fmt::format("expected '::=' after '{}'", name), pos_);
      }
      pos_ += 3;
    }
    std::string rule_name(name);
    if (lark_ && rule_name == "start") rule_name = "root";
    const int32_t rule = rule_index(rule_name, start);
    if (g_.rule(rule).body >= 0) {
      return error(fmt::format("rule '{}' is defined twice", rule_name), start);
    }
    VLLM_ASSIGN_OR_RETURN(int32_t body, parse_choice());
    g_.set_body(rule, body);
    skip_space();
    if (!at_end() && !rule_starts_at(pos_)) {
      if (peek() == ')') return error("unbalanced ')'", pos_);
      return error(fmt::format("unexpected '{}'", peek()), pos_);
    }
    return Status::ok();
  }

  Expected<int32_t> parse_choice() {
    std::vector<int32_t> alternatives;
    VLLM_ASSIGN_OR_RETURN(int32_t first, parse_sequence());
    alternatives.push_back(first);
    skip_space();
    while (peek() == '|') {
      ++pos_;
      VLLM_ASSIGN_OR_RETURN(int32_t next, parse_sequence());
      alternatives.push_back(next);
      skip_space();
    }
    return g_.choice(std::move(alternatives));
  }

  Expected<int32_t> parse_sequence() {
    std::vector<int32_t> items;
    while (true) {
      skip_space();
      if (at_end()) break;
      const char c = peek();
      if (c == '|' || c == ')' || (lark_ && c == ']')) break;
      if (rule_starts_at(pos_)) break;
      VLLM_ASSIGN_OR_RETURN(int32_t element, parse_element());
      items.push_back(element);
    }
    return g_.sequence(std::move(items));
  }

  Expected<int32_t> parse_element() {
    VLLM_ASSIGN_OR_RETURN(int32_t atom, parse_atom());
    // No space between an element and its operator in GBNF, but xgrammar allows it.
    const size_t after = space_end(pos_);
    const char c = after < t_.size() ? t_[after] : '\0';
    int32_t min = 0, max = -1;
    if (c == '*') {
      pos_ = after + 1;
    } else if (c == '+') {
      pos_ = after + 1, min = 1;
    } else if (c == '?') {
      pos_ = after + 1, max = 1;
    } else if (c == '{' && !lark_) {
      pos_ = after;
      VLLM_RETURN_IF_ERROR(parse_braces(&min, &max));
    } else if (c == '~' && lark_) {
      return error("Lark repetition with '~' is not supported; use {n,m} in EBNF", after);
    } else {
      return atom;
    }
    const size_t next = space_end(pos_);
    if (next < t_.size() &&
        (t_[next] == '*' || t_[next] == '+' || t_[next] == '?' || (!lark_ && t_[next] == '{'))) {
      return error("two repetition operators on one element; use parentheses", next);
    }
    return g_.repeat(atom, min, max);
  }

  Status parse_braces(int32_t* min, int32_t* max) {
    const size_t open = pos_;
    ++pos_;
    auto number = [&](int64_t* out) {
      skip_space();
      const size_t start = pos_;
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        v = std::min<int64_t>(v * 10 + (peek() - '0'), kMaxRepeat + 1);
        ++pos_;
      }
      *out = v;
      return pos_ > start;
    };
    int64_t lo = 0, hi = 0;
    if (!number(&lo)) return error("expected a number after '{' (write {0,n}, not {,n})", pos_);
    skip_space();
    if (peek() == '}') {
      hi = lo;
    } else if (peek() == ',') {
      ++pos_;
      if (!number(&hi)) hi = -1;
      skip_space();
      if (peek() != '}') return error("expected '}'", pos_);
    } else {
      return error("expected ',' or '}' in a repetition", pos_);
    }
    ++pos_;
    if (lo > kMaxRepeat || hi > kMaxRepeat) {
      return error(fmt::format("repetition counts above {} are not supported", kMaxRepeat), open);
    }
    if (hi >= 0 && hi < lo) return error("a repetition {n,m} needs n <= m", open);
    *min = static_cast<int32_t>(lo);
    *max = static_cast<int32_t>(hi);
    return Status::ok();
  }

  Expected<int32_t> parse_atom() {
    const size_t at = pos_;
    const char c = peek();
    if (c == '"' || (lark_ && c == '\'')) return parse_string(c);
    if ((c == '(' || (lark_ && c == '[')) && depth_ >= kMaxNesting) {
      return error(fmt::format("groups nest deeper than {} levels", kMaxNesting), at);
    }
    if (c == '[') {
      if (lark_) {
        ++pos_;
        ++depth_;
        auto inner_or = parse_choice();
        --depth_;
        VLLM_ASSIGN_OR_RETURN(int32_t inner, std::move(inner_or));
        skip_space();
        if (peek() != ']') return error("unbalanced '['", at);
        ++pos_;
        return g_.optional(inner);
      }
      return parse_class();
    }
    if (c == '(') {
      ++pos_;
      skip_space();
      if (peek() == '=') return error("lookahead assertions (= ...) are not supported", at);
      if (peek() == ')') {
        ++pos_;
        return g_.empty();
      }
      ++depth_;
      auto inner_or = parse_choice();
      --depth_;
      VLLM_ASSIGN_OR_RETURN(int32_t inner, std::move(inner_or));
      skip_space();
      if (peek() != ')') return error("unbalanced '('", at);
      ++pos_;
      return inner;
    }
    if (lark_ && c == '/') return parse_lark_regex();
    size_t end = 0;
    std::string_view name = name_at(pos_, &end);
    if (!name.empty()) {
      if (end < t_.size() && t_[end] == '(') {
        return error(fmt::format("macros such as {}(...) are not supported", name), at);
      }
      pos_ = end;
      std::string rule_name(name);
      if (lark_ && rule_name == "start") rule_name = "root";
      return g_.ref(rule_index(rule_name, at));
    }
    if (at_end()) return error("unexpected end of the grammar", at);
    return error(fmt::format("unexpected '{}'", c), at);
  }

  // One code point after a backslash (string or class). `in_class` also accepts escaped
  // regex punctuation.
  Expected<uint32_t> parse_escape(size_t at, bool in_class) {
    if (at_end()) return error("the grammar ends inside an escape", at);
    const char c = peek();
    ++pos_;
    auto hex = [&](size_t exact) -> Expected<uint32_t> {
      uint32_t v = 0;
      size_t n = 0;
      while (!at_end() && hex_digit(peek()) >= 0 && (exact == 0 || n < exact)) {
        v = v * 16 + static_cast<uint32_t>(hex_digit(peek()));
        if (v > kMaxCodePoint) return error("code point out of range", at);
        ++pos_;
        ++n;
      }
      if (n == 0 || (exact != 0 && n != exact)) return error("bad hex escape", at);
      return v;
    };
    switch (c) {
      case 'n':
        return uint32_t{'\n'};
      case 'r':
        return uint32_t{'\r'};
      case 't':
        return uint32_t{'\t'};
      case 'b':
        return uint32_t{8};
      case 'f':
        return uint32_t{12};
      case 'a':
        return uint32_t{7};
      case 'v':
        return uint32_t{11};
      case '0':
        return uint32_t{0};
      case 'e':
        return uint32_t{27};
      case 'x':
        return hex(0);
      case 'u':
        return hex(4);
      case 'U':
        return hex(8);
      case '"':
      case '\\':
      case '/':
      case '\'':
      case '?':
        return static_cast<uint32_t>(c);
      default:
        break;
    }
    if (in_class && std::string_view("^$.*+()[]{}|-").find(c) != std::string_view::npos) {
      return static_cast<uint32_t>(c);
    }
    if (in_class && (c == 'd' || c == 'w' || c == 's' || c == 'D' || c == 'W' || c == 'S')) {
      return error(fmt::format("\\{} is not supported in a character class; write the ranges "
                               "([0-9], [a-zA-Z0-9_], [ \\t\\n\\r])",
                               c),
                   at);
    }
    return error(fmt::format("unknown escape \\{}", c), at);
  }

  Expected<int32_t> parse_string(char quote) {
    const size_t open = pos_;
    ++pos_;
    std::string bytes;
    while (true) {
      if (at_end()) return error("unterminated string", open);
      const char c = peek();
      if (c == quote) break;
      if (c == '\n') return error("a string cannot hold a raw newline; write \\n", pos_);
      if (c == '\\') {
        const size_t at = pos_;
        ++pos_;
        VLLM_ASSIGN_OR_RETURN(uint32_t cp, parse_escape(at, false));
        append_utf8(&bytes, cp);
        continue;
      }
      const size_t before = pos_;
      if (!decode_utf8(t_, &pos_)) return error("invalid UTF-8", before);
      bytes.append(t_.substr(before, pos_ - before));
    }
    ++pos_;
    if (lark_ && peek() == 'i' && !is_name_char(peek(1), true)) {
      return error("case-insensitive Lark strings (\"...\"i) are not supported", pos_);
    }
    return g_.literal(bytes);
  }

  Expected<int32_t> parse_class() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CharRange> ranges;
    auto one = [&]() -> Expected<uint32_t> {
      const size_t at = pos_;
      if (peek() == '\\') {
        ++pos_;
        return parse_escape(at, true);
      }
      if (peek() == '\n') return error("a character class cannot hold a raw newline", at);
      auto cp = decode_utf8(t_, &pos_);
      if (!cp) return error("invalid UTF-8", at);
      return *cp;
    };
    while (true) {
      if (at_end()) return error("unterminated character class", open);
      if (peek() == ']') break;
      const size_t item_at = pos_;
      VLLM_ASSIGN_OR_RETURN(uint32_t lo, one());
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && pos_ + 1 < t_.size()) {
        ++pos_;
        VLLM_ASSIGN_OR_RETURN(hi, one());
        if (hi < lo) return error("a range's end is before its start", item_at);
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return g_.char_class(std::move(ranges), negated);
  }

  Expected<int32_t> parse_lark_regex() {
    const size_t open = pos_;
    ++pos_;
    std::string pattern;
    while (true) {
      if (at_end() || peek() == '\n') return error("unterminated /regex/", open);
      const char c = peek();
      if (c == '/') break;
      if (c == '\\' && peek(1) == '/') {
        pattern.push_back('/');
        pos_ += 2;
        continue;
      }
      if (c == '\\') {
        pattern.push_back(c);
        ++pos_;
        if (at_end()) return error("unterminated /regex/", open);
      }
      pattern.push_back(peek());
      ++pos_;
    }
    ++pos_;
    if (is_name_char(peek(), true)) return error("regex flags are not supported", pos_);
    auto e = add_regex(&g_, pattern);
    if (!e) return error(e.status().message(), open);
    return *e;
  }

  std::string_view t_;
  bool lark_;
  size_t pos_ = 0;
  int depth_ = 0;
  Grammar g_;
  std::map<std::string, RuleInfo> rules_;
};

// a ::= a x | a y | b | c   becomes   a ::= (b | c) (x | y)*
Status rewrite_direct_left_recursion(Grammar* g) {
  for (int32_t r = 0; r < static_cast<int32_t>(g->rules().size()); ++r) {
    const int32_t body = g->rule(r).body;
    std::vector<int32_t> alternatives;
    if (g->expr(body).kind == ExprKind::kChoice) {
      alternatives = g->expr(body).children;
    } else {
      alternatives = {body};
    }
    std::vector<int32_t> bases, tails;
    for (int32_t alt : alternatives) {
      const Expr& e = g->expr(alt);
      if (e.kind == ExprKind::kRuleRef && e.rule == r) {
        continue;  // a ::= a | ... adds nothing
      }
      if (e.kind == ExprKind::kSequence && !e.children.empty()) {
        const Expr& head = g->expr(e.children[0]);
        if (head.kind == ExprKind::kRuleRef && head.rule == r) {
          std::vector<int32_t> rest(e.children.begin() + 1, e.children.end());
          tails.push_back(g->sequence(std::move(rest)));
          continue;
        }
      }
      bases.push_back(alt);
    }
    if (tails.empty() && bases.size() == alternatives.size()) continue;
    if (bases.empty()) {
      return make_error(ErrorCode::kInvalidArgument,
                        "rule '{}' is left-recursive with no alternative that ends the "
                        "recursion, so it matches nothing",
                        g->rule(r).name);
    }
    const int32_t base = g->choice(std::move(bases));
    g->set_body(r,
                tails.empty() ? base : g->sequence({base, g->star(g->choice(std::move(tails)))}));
  }
  return Status::ok();
}

}  // namespace

bool looks_like_lark(std::string_view text) {
  return text.find("::=") == std::string_view::npos;
}

Expected<Grammar> parse_ebnf(std::string_view text, std::string_view root_name) {
  const bool lark = looks_like_lark(text);
  EbnfParser parser(text, lark);
  auto grammar = parser.parse(root_name);  // Lark's `start` is read as `root`
  if (!grammar) return grammar.status();
  VLLM_RETURN_IF_ERROR(rewrite_direct_left_recursion(&*grammar));
  return grammar;
}

}  // namespace vllm::structured
