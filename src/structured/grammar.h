// Grammar: the one representation every structured-output front end compiles to.
//
// A grammar is a set of named rules, each an expression over Unicode text: literals,
// character classes, references to rules, sequences, alternatives and bounded or unbounded
// repetition. The EBNF parser (ebnf.h), the regex compiler (regex.h) and the JSON Schema
// compiler (json_schema.h) build one; the automaton builder (automaton.h) turns it into one
// byte-level DFA per rule, with rule calls as edges. Text is UTF-8: literals hold bytes,
// character classes hold code point ranges that the automaton expands into UTF-8 byte
// sequences.
//
// Expressions live in one arena and are referred to by index; an index may be used in
// several places (the automaton builder expands each use), so builders can share
// sub-expressions without copying them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vllm::structured {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A closed range of code points, lo <= hi.
struct CharRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};

// Sorts and merges overlapping or adjacent ranges; drops the surrogates D800-DFFF, which
// UTF-8 cannot encode.
std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges);
// Every code point not in `ranges` (surrogates excluded). `ranges` must be normalized.
std::vector<CharRange> complement_ranges(const std::vector<CharRange>& ranges);
// The UTF-8 encoding of a code point (<= kMaxCodePoint).
void append_utf8(std::string* out, uint32_t code_point);

enum class ExprKind : uint8_t {
  kEmpty,      // matches ""
  kLiteral,    // the bytes in `text`
  kCharClass,  // one code point in `ranges` (normalized; empty: matches nothing)
  kRuleRef,    // the rule `rule`
  kSequence,   // children in order
  kChoice,     // one of the children
  kRepeat,     // children[0] repeated min..max times (max -1: unbounded)
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string text;
  std::vector<CharRange> ranges;
  int32_t rule = -1;
  std::vector<int32_t> children;
  int32_t min = 0;
  int32_t max = -1;
};

struct Rule {
  std::string name;
  int32_t body = -1;  // expression index; -1 until defined
};

class Grammar {
 public:
  // --- building ---
  // Adds a rule (body undefined) and returns its index; names need not be unique, but
  // find_rule() returns the first.
  int32_t add_rule(std::string name);
  void set_body(int32_t rule, int32_t expr) { rules_[static_cast<size_t>(rule)].body = expr; }
  void set_root(int32_t rule) { root_ = rule; }

  int32_t empty();
  int32_t literal(std::string_view bytes);  // "" gives empty()
  int32_t char_class(std::vector<CharRange> ranges, bool negated = false);
  int32_t any_char();  // any code point
  int32_t ref(int32_t rule);
  int32_t sequence(std::vector<int32_t> children);  // 0 children: empty; 1: that child
  int32_t choice(std::vector<int32_t> children);    // 1 child: that child
  int32_t repeat(int32_t child, int32_t min, int32_t max);
  int32_t optional(int32_t child) { return repeat(child, 0, 1); }
  int32_t star(int32_t child) { return repeat(child, 0, -1); }
  int32_t plus(int32_t child) { return repeat(child, 1, -1); }

  // --- reading ---
  int32_t find_rule(std::string_view name) const;  // -1 if absent
  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const Rule& rule(int32_t index) const { return rules_[static_cast<size_t>(index)]; }
  const Expr& expr(int32_t index) const { return exprs_[static_cast<size_t>(index)]; }
  size_t num_exprs() const { return exprs_.size(); }

  // The grammar in the EBNF syntax ebnf.h parses (for tests and debugging).
  std::string to_ebnf() const;

 private:
  int32_t add(Expr expr);

  std::vector<Rule> rules_;
  std::vector<Expr> exprs_;
  int32_t root_ = -1;
};

}  // namespace vllm::structured
