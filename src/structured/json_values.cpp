// JSON scalar grammar pieces (json_values.h).
#include "structured/json_values.h"

#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "structured/regex.h"

namespace vllm::structured {
namespace {

int32_t digit(Grammar* g, char lo = '0', char hi = '9') {
  return g->char_class({{static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)}});
}

int32_t digits(Grammar* g, int32_t min, int32_t max) {
  return g->repeat(digit(g), min, max);
}

// Same-length decimal strings lo..hi (lo <= hi), digit by digit.
int32_t same_length_range(Grammar* g, std::string_view lo, std::string_view hi) {
  if (lo == hi) return g->literal(lo);
  if (lo[0] == hi[0]) {
    return g->sequence(
        {g->literal(lo.substr(0, 1)), same_length_range(g, lo.substr(1), hi.substr(1))});
  }
  const size_t rest = lo.size() - 1;
  if (rest == 0) return digit(g, lo[0], hi[0]);
  const std::string nines(rest, '9'), zeros(rest, '0');
  std::vector<int32_t> parts;
  // lo[0] followed by >= lo[1..]; (lo[0]+1 .. hi[0]-1) followed by anything; hi[0] and <= hi[1..].
  if (lo.substr(1) == zeros && hi.substr(1) == nines) {
    return g->sequence({digit(g, lo[0], hi[0]),
                        digits(g, static_cast<int32_t>(rest), static_cast<int32_t>(rest))});
  }
  parts.push_back(
      g->sequence({g->literal(lo.substr(0, 1)), same_length_range(g, lo.substr(1), nines)}));
  if (hi[0] - lo[0] > 1) {
    parts.push_back(
        g->sequence({digit(g, static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)),
                     digits(g, static_cast<int32_t>(rest), static_cast<int32_t>(rest))}));
  }
  parts.push_back(
      g->sequence({g->literal(hi.substr(0, 1)), same_length_range(g, zeros, hi.substr(1))}));
  return g->choice(std::move(parts));
}

// Non-negative integers in [lo, hi] (hi absent: unbounded), canonical decimal.
int32_t natural_range(Grammar* g, uint64_t lo, std::optional<uint64_t> hi) {
  const std::string lo_s = std::to_string(lo);
  std::vector<int32_t> parts;
  const size_t max_len = hi ? std::to_string(*hi).size() : lo_s.size();
  for (size_t len = lo_s.size(); len <= max_len; ++len) {
    const std::string len_lo = len == lo_s.size() ? lo_s : "1" + std::string(len - 1, '0');
    std::string len_hi = std::string(len, '9');
    if (hi && len == max_len) len_hi = std::to_string(*hi);
    if (len == 1 && len_lo == "0" && len_hi == "0") {
      parts.push_back(g->literal("0"));
      continue;
    }
    parts.push_back(same_length_range(g, len_lo, len_hi));
  }
  if (!hi) {  // every longer number
    parts.push_back(
        g->sequence({digit(g, '1', '9'), digits(g, static_cast<int32_t>(lo_s.size()), -1)}));
  }
  return g->choice(std::move(parts));
}

// A fraction: any ("" or "." digits), zero-valued ("" or ".0+"), or nonzero.
int32_t any_fraction(Grammar* g) {
  return g->optional(g->sequence({g->literal("."), digits(g, 1, -1)}));
}
int32_t zero_fraction(Grammar* g) {
  return g->optional(g->sequence({g->literal("."), g->plus(g->literal("0"))}));
}
int32_t nonzero_fraction(Grammar* g) {
  return g->sequence({g->literal("."), digits(g, 0, -1), digit(g, '1', '9'), digits(g, 0, -1)});
}

// Magnitudes m (decimal, no sign, no exponent) with lo <= m <= hi (or < when exclusive;
// hi absent: unbounded). lo, hi >= 0. Returns -1 when empty.
int32_t magnitude_range(Grammar* g, NumberBound lo, std::optional<NumberBound> hi) {
  std::vector<int32_t> parts;
  // Integer parts with any fraction: [lo (+1 if exclusive), hi - 1].
  const int64_t first = lo.exclusive ? lo.value + 1 : lo.value;
  const std::optional<int64_t> last = hi ? std::optional<int64_t>(hi->value - 1) : std::nullopt;
  if (!last || first <= *last) {
    parts.push_back(g->sequence(
        {natural_range(g, static_cast<uint64_t>(first),
                       last ? std::optional<uint64_t>(static_cast<uint64_t>(*last)) : std::nullopt),
         any_fraction(g)}));
  }
  // lo itself with a nonzero fraction (exclusive lower bound), if below hi.
  if (lo.exclusive && (!hi || lo.value < hi->value)) {
    parts.push_back(g->sequence({g->literal(std::to_string(lo.value)), nonzero_fraction(g)}));
  }
  // hi itself with a zero fraction (inclusive upper bound), if not below lo.
  if (hi && !hi->exclusive && (hi->value > lo.value || (hi->value == lo.value && !lo.exclusive))) {
    parts.push_back(g->sequence({g->literal(std::to_string(hi->value)), zero_fraction(g)}));
  }
  if (parts.empty()) return -1;
  return g->choice(std::move(parts));
}

struct Format {
  const char* name;
  const char* pattern;
};

// Our own patterns; each matches a subset of the format's valid strings (never an invalid
// one), which is all generation needs.
constexpr const char* kDate =
    "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
    "02-(0[1-9]|1[0-9]|2[0-8]))";
constexpr const char* kTime =
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
constexpr const char* kDurationTime = "T([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S)";
// Hostname labels of at most 63 characters (RFC 1123); emails and URIs take any length, as
// common validators do, which keeps their automata small.
constexpr const char* kLabel = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
constexpr const char* kLongLabel = "[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?";
constexpr const char* kIpv4Octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

std::string format_pattern(std::string_view format) {
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return fmt::format("{}T{}", kDate, kTime);
  if (format == "duration") {
    return fmt::format("P([0-9]+W|([0-9]+Y([0-9]+M)?([0-9]+D)?|[0-9]+M([0-9]+D)?|[0-9]+D)({})?|{})",
                       kDurationTime, kDurationTime);
  }
  if (format == "email") {
    return fmt::format("[a-zA-Z0-9_%+-]+(\\.[a-zA-Z0-9_%+-]+)*@({}\\.)+{}", kLongLabel, kLongLabel);
  }
  if (format == "hostname") return fmt::format("{}(\\.{})*", kLabel, kLabel);
  if (format == "ipv4") return fmt::format("{}(\\.{}){{3}}", kIpv4Octet, kIpv4Octet);
  if (format == "ipv6") return "([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}";
  if (format == "uuid") {
    return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  }
  const std::string uri = fmt::format(
      "[a-zA-Z][a-zA-Z0-9+.-]*://{}(\\.{})*(:[0-9]{{1,5}})?(/[a-zA-Z0-9._~!$&'()*+,;=:@-]*)*"
      "(\\?[a-zA-Z0-9._~!$&'()*+,;=:@/?-]*)?",
      kLongLabel, kLongLabel);
  if (format == "uri") return uri;
  if (format == "uri-reference") return fmt::format("{}|(/[a-zA-Z0-9._~!$&'()*+,;=:@-]*)+", uri);
  return "";
}

// The JSON-string spelling of one code point (escaped when JSON requires it), or "" when it
// needs no escape.
std::string escaped(uint32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  if (c < 0x20) return fmt::format("\\u{:04x}", c);
  return "";
}

}  // namespace

int32_t json_string_char(Grammar* g) {
  const int32_t plain = g->char_class({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, /*negated=*/true);
  const int32_t hex = g->char_class({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
  const int32_t escape = g->sequence(
      {g->literal("\\"), g->choice({g->char_class({{'"', '"'},
                                                   {'\\', '\\'},
                                                   {'/', '/'},
                                                   {'b', 'b'},
                                                   {'f', 'f'},
                                                   {'n', 'n'},
                                                   {'r', 'r'},
                                                   {'t', 't'}}),
                                    g->sequence({g->literal("u"), g->repeat(hex, 4, 4)})})});
  return g->choice({plain, escape});
}

int32_t json_string(Grammar* g, int32_t min_length, int32_t max_length) {
  return g->sequence(
      {g->literal("\""), g->repeat(json_string_char(g), min_length, max_length), g->literal("\"")});
}

Expected<int32_t> json_string_matching(Grammar* g, std::string_view pattern) {
  auto body = add_regex(g, pattern);
  if (!body) return body.status();
  return g->sequence({g->literal("\""), escape_for_json_string(g, *body), g->literal("\"")});
}

Expected<int32_t> json_string_format(Grammar* g, std::string_view format) {
  const std::string pattern = format_pattern(format);
  if (pattern.empty()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "string format '{}' is not supported (supported: date, time, date-time, "
                      "duration, email, hostname, ipv4, ipv6, uuid, uri, uri-reference)",
                      format);
  }
  return json_string_matching(g, pattern);
}

int32_t json_integer(Grammar* g) {
  return g->sequence(
      {g->optional(g->literal("-")),
       g->choice({g->literal("0"), g->sequence({digit(g, '1', '9'), digits(g, 0, -1)})})});
}

int32_t json_number(Grammar* g) {
  // At most two exponent digits: 1e999 is valid JSON but overflows a double, and common
  // parsers (Python's, nlohmann's) then fail or give inf.
  const int32_t exponent =
      g->sequence({g->char_class({{'e', 'e'}, {'E', 'E'}}),
                   g->optional(g->char_class({{'+', '+'}, {'-', '-'}})), digits(g, 1, 2)});
  return g->sequence({json_integer(g), any_fraction(g), g->optional(exponent)});
}

Expected<int32_t> integer_in_range(Grammar* g, std::optional<int64_t> lo,
                                   std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) {
    return make_error(ErrorCode::kInvalidArgument, "no integer lies in [{}, {}]", *lo, *hi);
  }
  std::vector<int32_t> parts;
  // Negative part: "-" then magnitudes in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t m_lo = hi && *hi < 0 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    std::optional<uint64_t> m_hi;
    if (lo) m_hi = static_cast<uint64_t>(-(*lo + 1)) + 1;
    parts.push_back(g->sequence({g->literal("-"), natural_range(g, m_lo, m_hi)}));
  }
  // Non-negative part: [max(0, lo), hi].
  if (!hi || *hi >= 0) {
    const uint64_t n_lo = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> n_hi;
    if (hi) n_hi = static_cast<uint64_t>(*hi);
    parts.push_back(natural_range(g, n_lo, n_hi));
  }
  return g->choice(std::move(parts));
}

Expected<int32_t> number_in_range(Grammar* g, std::optional<NumberBound> lo,
                                  std::optional<NumberBound> hi) {
  std::vector<int32_t> parts;
  // x >= 0 part: m in [max(lo, 0), hi].
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    NumberBound m_lo{0, false};
    if (lo && (lo->value > 0 || (lo->value == 0 && lo->exclusive))) m_lo = *lo;
    const int32_t e = magnitude_range(g, m_lo, hi);
    if (e >= 0) parts.push_back(e);
  }
  // x < 0 part: x = -m, m in (|hi| if hi < 0, else 0) .. |lo|; bounds swap sides.
  if (!lo || lo->value < 0) {
    NumberBound m_lo{0, true};  // m > 0: "-0" adds nothing
    if (hi && hi->value < 0) m_lo = {-hi->value, hi->exclusive};
    std::optional<NumberBound> m_hi;
    if (lo) m_hi = NumberBound{-lo->value, lo->exclusive};
    const int32_t e = magnitude_range(g, m_lo, m_hi);
    if (e >= 0) parts.push_back(g->sequence({g->literal("-"), e}));
  }
  if (parts.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "no number lies within the bounds");
  }
  return g->choice(std::move(parts));
}

int32_t escape_for_json_string(Grammar* g, int32_t root) {
  std::map<int32_t, int32_t> done;
  auto rewrite = [&](auto&& self, int32_t e) -> int32_t {
    auto it = done.find(e);
    if (it != done.end()) return it->second;
    const Expr x = g->expr(e);  // copy: `g` grows below
    int32_t out = e;
    switch (x.kind) {
      case ExprKind::kEmpty:
      case ExprKind::kRuleRef:
        break;
      case ExprKind::kLiteral: {
        std::string text;
        for (unsigned char c : x.text) {
          const std::string esc = c < 0x80 ? escaped(c) : "";
          if (esc.empty()) {
            text.push_back(static_cast<char>(c));
          } else {
            text += esc;
          }
        }
        out = g->literal(text);
        break;
      }
      case ExprKind::kCharClass: {
        // Plain characters stay a class; each special one becomes its escape.
        std::vector<int32_t> alternatives;
        std::vector<CharRange> plain;
        for (const CharRange& r : x.ranges) {
          uint32_t lo = r.lo;
          for (uint32_t c = r.lo; c <= r.hi && c <= '\\'; ++c) {
            if (!escaped(c).empty()) {
              if (c > lo) plain.push_back({lo, c - 1});
              alternatives.push_back(g->literal(escaped(c)));
              lo = c + 1;
            }
          }
          if (lo <= r.hi) plain.push_back({lo, r.hi});
        }
        if (!plain.empty()) alternatives.insert(alternatives.begin(), g->char_class(plain));
        out = alternatives.empty() ? g->char_class({}) : g->choice(std::move(alternatives));
        break;
      }
      case ExprKind::kSequence:
      case ExprKind::kChoice: {
        std::vector<int32_t> children;
        for (int32_t c : x.children) children.push_back(self(self, c));
        out = x.kind == ExprKind::kSequence ? g->sequence(std::move(children))
                                            : g->choice(std::move(children));
        break;
      }
      case ExprKind::kRepeat:
        out = g->repeat(self(self, x.children[0]), x.min, x.max);
        break;
    }
    done[e] = out;
    return out;
  };
  return rewrite(rewrite, root);
}

}  // namespace vllm::structured
