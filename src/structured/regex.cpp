// Regex -> grammar expression, by recursive descent over the pattern's code points:
//   alternation := sequence ('|' sequence)*
//   sequence    := (atom quantifier?)*
//   atom        := literal | '.' | class | '(' group ')' | escape
#include "structured/regex.h"

#include <fmt/format.h>

#include <optional>
#include <utility>
#include <vector>

#include "structured/text_util.h"

namespace vllm::structured {
namespace {

class RegexParser {
 public:
  RegexParser(Grammar* grammar, std::string_view pattern) : g_(grammar), p_(pattern) {}

  Expected<int32_t> parse() {
    // ^ at the very start and an unescaped $ at the very end only restate that the whole
    // output is matched.
    if (!p_.empty() && p_[0] == '^') pos_ = 1;
    end_ = p_.size();
    if (end_ > pos_ && p_[end_ - 1] == '$' && !escaped_at(end_ - 1)) --end_;
    VLLM_ASSIGN_OR_RETURN(int32_t e, parse_alternation());
    if (pos_ < end_) {
      if (p_[pos_] == ')') return error("unbalanced ')'", pos_);
      return error(fmt::format("unexpected '{}'", p_[pos_]), pos_);
    }
    return e;
  }

 private:
  Status error(std::string_view what, size_t at) const {
    return make_error(ErrorCode::kInvalidArgument, "regex: {} at position {}", what, at);
  }

  // Whether the character at `i` is preceded by an odd number of backslashes.
  bool escaped_at(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  bool at_end() const { return pos_ >= end_; }
  char peek() const { return p_[pos_]; }

  Expected<uint32_t> next_code_point() {
    auto cp = decode_utf8(p_.substr(0, end_), &pos_);
    if (!cp) return error("invalid UTF-8", pos_);
    return *cp;
  }

  Expected<int32_t> parse_alternation() {
    std::vector<int32_t> alternatives;
    VLLM_ASSIGN_OR_RETURN(int32_t first, parse_sequence());
    alternatives.push_back(first);
    while (!at_end() && peek() == '|') {
      ++pos_;
      VLLM_ASSIGN_OR_RETURN(int32_t next, parse_sequence());
      alternatives.push_back(next);
    }
    return g_->choice(std::move(alternatives));
  }

  Expected<int32_t> parse_sequence() {
    std::vector<int32_t> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      const size_t atom_at = pos_;
      VLLM_ASSIGN_OR_RETURN(std::optional<int32_t> atom, parse_atom());
      if (!atom) continue;  // a construct that matches nothing extra (none yet)
      VLLM_ASSIGN_OR_RETURN(int32_t quantified, parse_quantifiers(*atom, atom_at));
      items.push_back(quantified);
    }
    return g_->sequence(std::move(items));
  }

  Expected<int32_t> parse_quantifiers(int32_t atom, size_t atom_at) {
    bool quantified = false;
    while (!at_end()) {
      const char c = peek();
      int32_t min = 0, max = -1;
      const size_t at = pos_;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{') {
        auto bounds = parse_braces();
        if (!bounds) return bounds.status();
        if (!bounds->has_value()) break;  // a literal '{'
        std::tie(min, max) = **bounds;
      } else {
        break;
      }
      if (quantified) return error("a quantifier cannot follow another quantifier", at);
      quantified = true;
      atom = g_->repeat(atom, min, max);
      // Lazy (?) and possessive (+) forms match the same strings here.
      if (!at_end() && (peek() == '?' || peek() == '+')) ++pos_;
    }
    (void)atom_at;
    return atom;
  }

  // {n}, {n,}, {n,m} -> bounds; anything else -> nullopt (the '{' is a literal).
  Expected<std::optional<std::pair<int32_t, int32_t>>> parse_braces() {
    size_t i = pos_ + 1;
    auto number = [&](int64_t* out) {
      const size_t start = i;
      int64_t v = 0;
      while (i < end_ && p_[i] >= '0' && p_[i] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[i] - '0'), 1'000'000);
        ++i;
      }
      *out = v;
      return i > start;
    };
    int64_t lo = 0, hi = -1;
    if (!number(&lo)) return std::optional<std::pair<int32_t, int32_t>>();
    if (i < end_ && p_[i] == '}') {
      hi = lo;
    } else if (i < end_ && p_[i] == ',') {
      ++i;
      if (!number(&hi)) hi = -1;
      if (i >= end_ || p_[i] != '}') return std::optional<std::pair<int32_t, int32_t>>();
    } else {
      return std::optional<std::pair<int32_t, int32_t>>();
    }
    if (hi >= 0 && hi < lo) return error("a repetition {n,m} needs n <= m", pos_);
    if (lo > kMaxRepeat || hi > kMaxRepeat) {
      return error(fmt::format("repetition counts above {} are not supported", kMaxRepeat), pos_);
    }
    pos_ = i + 1;
    return std::optional<std::pair<int32_t, int32_t>>(
        std::pair<int32_t, int32_t>(static_cast<int32_t>(lo), static_cast<int32_t>(hi)));
  }

  Expected<std::optional<int32_t>> parse_atom() {
    const size_t at = pos_;
    const char c = peek();
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return std::optional<int32_t>(g_->char_class({{'\n', '\n'}, {'\r', '\r'}}, true));
      case '\\':
        return parse_escape_atom();
      case '*':
      case '+':
      case '?':
        return error(fmt::format("nothing to repeat before '{}'", c), at);
      case '^':
        return error("'^' is only supported at the start of the pattern", at);
      case '$':
        return error("'$' is only supported at the end of the pattern", at);
      default: {
        VLLM_ASSIGN_OR_RETURN(uint32_t cp, next_code_point());
        std::string bytes;
        append_utf8(&bytes, cp);
        return std::optional<int32_t>(g_->literal(bytes));
      }
    }
  }

  Expected<std::optional<int32_t>> parse_group() {
    const size_t open = pos_;
    if (depth_ >= kMaxNesting) {
      return error(fmt::format("groups nest deeper than {} levels", kMaxNesting), open);
    }
    ++pos_;
    if (!at_end() && peek() == '?') {
      const std::string_view rest = p_.substr(pos_, end_ - pos_);
      if (rest.substr(0, 2) == "?:") {
        pos_ += 2;
      } else if (rest.substr(0, 3) == "?P<" || (rest.substr(0, 2) == "?<" && rest.size() > 2 &&
                                                rest[2] != '=' && rest[2] != '!')) {
        const size_t close = p_.find('>', pos_);
        if (close == std::string_view::npos || close >= end_) {
          return error("unterminated group name", open);
        }
        pos_ = close + 1;
      } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!" ||
                 rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
        return error("lookaround assertions are not supported", open);
      } else if (rest.substr(0, 3) == "?P=") {
        return error("backreferences are not supported", open);
      } else {
        return error("inline flags and other (? groups are not supported", open);
      }
    }
    ++depth_;
    auto inner_or = parse_alternation();
    --depth_;
    VLLM_ASSIGN_OR_RETURN(int32_t inner, std::move(inner_or));
    if (at_end() || peek() != ')') return error("unbalanced '('", open);
    ++pos_;
    return std::optional<int32_t>(inner);
  }

  // Shorthand classes \d \w \s and their negations.
  static std::optional<std::pair<std::vector<CharRange>, bool>> shorthand(char c) {
    static const std::vector<CharRange> kDigit = {{'0', '9'}};
    static const std::vector<CharRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    static const std::vector<CharRange> kSpace = {{'\t', '\r'}, {' ', ' '}};
    switch (c) {
      case 'd':
        return std::make_pair(kDigit, false);
      case 'D':
        return std::make_pair(kDigit, true);
      case 'w':
        return std::make_pair(kWord, false);
      case 'W':
        return std::make_pair(kWord, true);
      case 's':
        return std::make_pair(kSpace, false);
      case 'S':
        return std::make_pair(kSpace, true);
      default:
        return std::nullopt;
    }
  }

  // After a backslash: one code point (\n, \x41, \u00e9, \., ...). `in_class` allows \b as
  // backspace.
  Expected<uint32_t> parse_escaped_char(size_t at, bool in_class) {
    if (at_end()) return error("a pattern cannot end with '\\'", at);
    const char c = peek();
    ++pos_;
    auto hex = [&](size_t digits, bool braces) -> Expected<uint32_t> {
      uint32_t v = 0;
      size_t n = 0;
      if (braces) {
        while (!at_end() && peek() != '}' && n < 8) {
          const int d = hex_digit(peek());
          if (d < 0) return error("bad hex digit in escape", pos_);
          v = v * 16 + static_cast<uint32_t>(d);
          ++pos_;
          ++n;
        }
        if (at_end() || peek() != '}' || n == 0) return error("bad \\u{...} escape", at);
        ++pos_;
      } else {
        for (; n < digits; ++n) {
          if (at_end() || hex_digit(peek()) < 0) return error("bad hex escape", at);
          v = v * 16 + static_cast<uint32_t>(hex_digit(peek()));
          ++pos_;
        }
      }
      if (v > kMaxCodePoint) return error("code point out of range", at);
      return v;
    };
    switch (c) {
      case 'n':
        return uint32_t{'\n'};
      case 'r':
        return uint32_t{'\r'};
      case 't':
        return uint32_t{'\t'};
      case 'f':
        return uint32_t{'\f'};
      case 'v':
        return uint32_t{'\v'};
      case '0':
        return uint32_t{0};
      case 'a':
        return uint32_t{7};
      case 'e':
        return uint32_t{27};
      case 'x':
        return hex(2, false);
      case 'u':
        if (!at_end() && peek() == '{') {
          ++pos_;
          return hex(0, true);
        }
        return hex(4, false);
      case 'U':
        return hex(8, false);
      case 'b':
        if (in_class) return uint32_t{8};
        return error("word boundaries (\\b) are not supported", at);
      case 'B':
        return error("word boundaries (\\B) are not supported", at);
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        return error(fmt::format("the anchor \\{} is not supported", c), at);
      case 'p':
      case 'P':
        return error("Unicode property classes (\\p, \\P) are not supported", at);
      default:
        break;
    }
    if (c >= '1' && c <= '9') return error("backreferences are not supported", at);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      return error(fmt::format("unknown escape \\{}", c), at);
    }
    --pos_;
    return next_code_point();  // an escaped punctuation or other character stands for itself
  }

  Expected<std::optional<int32_t>> parse_escape_atom() {
    const size_t at = pos_;
    ++pos_;
    if (!at_end()) {
      if (auto s = shorthand(peek())) {
        ++pos_;
        return std::optional<int32_t>(g_->char_class(s->first, s->second));
      }
    }
    VLLM_ASSIGN_OR_RETURN(uint32_t cp, parse_escaped_char(at, false));
    std::string bytes;
    append_utf8(&bytes, cp);
    return std::optional<int32_t>(g_->literal(bytes));
  }

  Expected<std::optional<int32_t>> parse_class() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (!at_end() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CharRange> ranges;
    bool first = true;
    while (true) {
      if (at_end()) return error("unterminated character class", open);
      if (peek() == ']' && !first) break;
      first = false;
      const size_t item_at = pos_;
      if (p_.substr(pos_, 2) == "[:")
        return error("POSIX classes ([:name:]) are not supported", pos_);
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++pos_;
        if (!at_end()) {
          if (auto s = shorthand(peek())) {
            ++pos_;
            std::vector<CharRange> part = normalize_ranges(s->first);
            if (s->second) part = complement_ranges(part);
            ranges.insert(ranges.end(), part.begin(), part.end());
            continue;
          }
        }
        VLLM_ASSIGN_OR_RETURN(lo, parse_escaped_char(item_at, true));
      } else {
        VLLM_ASSIGN_OR_RETURN(lo, next_code_point());
      }
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        const size_t hi_at = pos_;
        if (peek() == '\\') {
          ++pos_;
          if (!at_end() && shorthand(peek())) {
            return error("a class shorthand cannot end a range", hi_at);
          }
          VLLM_ASSIGN_OR_RETURN(hi, parse_escaped_char(hi_at, true));
        } else {
          VLLM_ASSIGN_OR_RETURN(hi, next_code_point());
        }
        if (hi < lo) return error("a range's end is before its start", item_at);
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;  // ']'
    return std::optional<int32_t>(g_->char_class(std::move(ranges), negated));
  }

  static constexpr int64_t kMaxRepeat = 10000;
  static constexpr int kMaxNesting = 256;

  Grammar* g_;
  std::string_view p_;
  size_t pos_ = 0;
  size_t end_ = 0;
  int depth_ = 0;
};

}  // namespace

Expected<int32_t> add_regex(Grammar* grammar, std::string_view pattern) {
  RegexParser parser(grammar, pattern);
  return parser.parse();
}

Expected<Grammar> regex_to_grammar(std::string_view pattern) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  VLLM_ASSIGN_OR_RETURN(int32_t body, add_regex(&g, pattern));
  g.set_body(root, body);
  g.set_root(root);
  return g;
}

}  // namespace vllm::structured
