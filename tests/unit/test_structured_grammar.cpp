// The grammar front ends and the automaton: EBNF / Lark text, regexes, left recursion,
// errors with positions, and what the compiled automaton matches.
#include <gtest/gtest.h>

#include <random>

#include "structured/automaton.h"
#include "structured_test_util.h"

namespace vllm::structured {
namespace test_structured_grammar {
namespace {

using testing::byte_vocab;
using testing::compile_ebnf;
using testing::compile_regex;
using testing::matches;

std::string error_of(std::string_view ebnf) {
  auto g = parse_ebnf(ebnf);
  if (!g) return g.status().message();
  auto a = build_automaton(*g);
  return a ? std::string("ok") : a.status().message();
}

std::string regex_error(std::string_view pattern) {
  auto g = regex_to_grammar(pattern);
  return g ? std::string("ok") : g.status().message();
}

TEST(StructuredEbnf, ParsesGbnfAndMatches) {
  auto g = compile_ebnf(R"(
    # simplified SQL, as vLLM's docs
    root ::= select_statement
    select_statement ::= "SELECT " column " from " table " where " condition
    column ::= "col_1 " | "col_2 "
    table ::= "table_1 " | "table_2 "
    condition ::= column "= " number
    number ::= "1 " | "2 "
  )",
                        byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "SELECT col_1  from table_2  where col_2 = 1 "));
  EXPECT_FALSE(matches(g, "SELECT col_3  from table_2  where col_2 = 1 "));
  EXPECT_FALSE(matches(g, "SELECT col_1  from table_2  where col_2 = 1"));
  // Non-recursive rules are inlined: one automaton rule, no calls.
  EXPECT_EQ(g->automaton().num_automaton_rules(), 1);
}

TEST(StructuredEbnf, RepetitionClassesAndEscapes) {
  auto g = compile_ebnf(R"(root ::= [a-c]{2,3} "-" [^0-9\n]+ "\x41\u00e9" ("x" | "y")? [\]\-]*)",
                        byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g,
                      "ab-zz"
                      "A\xC3\xA9"));
  EXPECT_TRUE(matches(g,
                      "abc-!"
                      "A\xC3\xA9"
                      "y]-]"));
  EXPECT_FALSE(matches(g,
                       "a-zz"
                       "A\xC3\xA9"));  // too few
  EXPECT_FALSE(matches(g,
                       "abca-zz"
                       "A\xC3\xA9"));  // too many
  EXPECT_FALSE(matches(g,
                       "ab-z9"
                       "A\xC3\xA9"));  // a digit in [^0-9]
  EXPECT_TRUE(matches(g,
                      "ab-\xE4\xB8\xAD"
                      "A\xC3\xA9"));  // a CJK character is one [^0-9]
}

TEST(StructuredEbnf, RecursionStaysARule) {
  auto g = compile_ebnf(R"g(root ::= "(" root ")" | "x")g", byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "((x))"));
  EXPECT_FALSE(matches(g, "((x)"));
  EXPECT_FALSE(matches(g, "(x))"));
}

TEST(StructuredEbnf, DirectLeftRecursionIsRewritten) {
  auto g = compile_ebnf(R"(
    root ::= expr
    expr ::= expr "+" term | expr "-" term | term
    term ::= [0-9]+
  )",
                        byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "1+22-3"));
  EXPECT_TRUE(matches(g, "7"));
  EXPECT_FALSE(matches(g, "1+"));
}

TEST(StructuredEbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= \"a\" b"),
            "line 1, column 14: rule 'b' is referenced but not defined");
  EXPECT_EQ(error_of("root ::= \"a\"\n  x ::= \"unterminated"),
            "line 2, column 9: unterminated string");
  EXPECT_EQ(error_of("start ::= \"a\""), "the grammar has no rule named 'root'");
  EXPECT_EQ(error_of("root ::= (\"a\""), "line 1, column 10: unbalanced '('");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "line 1, column 13: a repetition {n,m} needs n <= m");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""),
            "line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("root ::= [\\d]"),
            "line 1, column 11: \\d is not supported in a character class; write the ranges "
            "([0-9], [a-zA-Z0-9_], [ \\t\\n\\r])");
  EXPECT_EQ(error_of("root ::= TagDispatch((\"<a>\", x))"),
            "line 1, column 10: macros such as TagDispatch(...) are not supported");
  EXPECT_EQ(error_of("root ::= \"a\" (= \"b\")"),
            "line 1, column 14: lookahead assertions (= ...) are not supported");
  EXPECT_EQ(error_of("root ::= \"a\"++"),
            "line 1, column 14: two repetition operators on one element; use parentheses");
}

TEST(StructuredEbnf, IndirectLeftRecursionIsRefused) {
  EXPECT_EQ(error_of("root ::= a\na ::= b \"x\" | \"y\"\nb ::= a \"z\""),
            "left recursion is not supported: a -> b -> a can recur without consuming any text "
            "(rewrite it with repetition, e.g. a ::= b (\"x\" b)*)");
  // Hidden behind a nullable prefix.
  EXPECT_NE(error_of("root ::= a\na ::= \"\"? a \"x\" | \"y\""), "ok");
}

TEST(StructuredEbnf, EmptyLanguageIsRefused) {
  EXPECT_EQ(error_of("root ::= a\na ::= \"x\" a"),
            "the grammar matches no string (rule 'root' can never complete)");
  EXPECT_EQ(error_of("root ::= [^\\x00-\\U0010FFFF]"),
            "the grammar matches no string (rule 'root' can never complete)");
}

TEST(StructuredEbnf, LarkGrammarsAreConverted) {
  auto g = compile_ebnf(R"(
    // a Lark grammar, as vLLM converts them
    ?start: greeting name
    greeting: "hello " | 'hi '
    name: /[A-Z][a-z]+/ ["!"]
  )",
                        byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "hello World"));
  EXPECT_TRUE(matches(g, "hi Bob!"));
  EXPECT_FALSE(matches(g, "hi bob"));
  EXPECT_EQ(error_of("start: a\n%import common.WORD"),
            "line 2, column 1: Lark directives (%import, %ignore, ...) are not supported");
}

TEST(StructuredEbnf, PrintedGrammarParsesBackToTheSameLanguage) {
  auto g = parse_ebnf(R"(root ::= ("a" | [x-z\n"])* "b"{2,} ("c"?)? item
                         item ::= "\"q\\" | "")");
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  const std::string printed = g->to_ebnf();
  auto again = compile_ebnf(printed, byte_vocab());
  auto first = testing::compile(*g, byte_vocab());
  ASSERT_NE(again, nullptr) << printed;
  for (const char* s : {"bb", "axz\nbbbc\"q\\", "bbbcc", "ab", "\"bb"}) {
    EXPECT_EQ(matches(first, s), matches(again, s)) << s << "\n" << printed;
  }
}

TEST(StructuredRegex, MatchesWholeStrings) {
  auto email = compile_regex(R"(^\w+@\w+\.com\n$)", byte_vocab());
  ASSERT_NE(email, nullptr);
  EXPECT_TRUE(matches(email, "alan_turing@enigma.com\n"));
  EXPECT_FALSE(matches(email, "alan.turing@enigma.com\n"));
  EXPECT_FALSE(matches(email, "alan@enigma.com"));

  auto g = compile_regex(R"((?:ab|c){2}[^\d\s]?\.*(?P<tail>x+?)\x41\u00e9\u{1F600}[\-\]]?)",
                         byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g,
                      "abcx"
                      "A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_TRUE(matches(g,
                      "ccZ..xx"
                      "A\xC3\xA9\xF0\x9F\x98\x80-"));
  EXPECT_FALSE(matches(g,
                       "ab5x"
                       "A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(g,
                       "abc"
                       "A\xC3\xA9\xF0\x9F\x98\x80"));

  auto dot = compile_regex("a.c", byte_vocab());
  EXPECT_TRUE(matches(dot,
                      "a\xC3\xA9"
                      "c"));
  EXPECT_FALSE(matches(dot, "a\nc"));
  EXPECT_FALSE(matches(dot,
                       "a\xC3"
                       "c"));  // not a whole character
}

TEST(StructuredRegex, ErrorsNameTheConstructAndPosition) {
  EXPECT_EQ(regex_error("ab(c"), "regex: unbalanced '(' at position 2");
  EXPECT_EQ(regex_error("abc)"), "regex: unbalanced ')' at position 3");
  EXPECT_EQ(regex_error("a(?=b)"), "regex: lookaround assertions are not supported at position 1");
  EXPECT_EQ(regex_error("(a)\\1"), "regex: backreferences are not supported at position 3");
  EXPECT_EQ(regex_error("\\bword"), "regex: word boundaries (\\b) are not supported at position 0");
  EXPECT_EQ(regex_error("a{3,2}"), "regex: a repetition {n,m} needs n <= m at position 1");
  EXPECT_EQ(regex_error("*a"), "regex: nothing to repeat before '*' at position 0");
  EXPECT_EQ(regex_error("[z-a]"), "regex: a range's end is before its start at position 1");
  EXPECT_EQ(regex_error("[abc"), "regex: unterminated character class at position 0");
  EXPECT_EQ(regex_error("a^b"),
            "regex: '^' is only supported at the start of the pattern at position 1");
  EXPECT_EQ(regex_error("(?i)abc"),
            "regex: inline flags and other (? groups are not supported at position 0");
}

TEST(StructuredAutomaton, MinimizedStateCounts) {
  // "ab|cb" determinizes to start, after-a-or-c (merged), accept.
  auto g = regex_to_grammar("ab|cb");
  ASSERT_TRUE(g.has_value());
  auto a = build_automaton(*g);
  ASSERT_TRUE(a.has_value()) << a.status().to_string();
  EXPECT_EQ(a->num_states(), 3);
  // [0-9]{1,3}: 4 states (0, 1, 2 and 3 digits).
  auto digits = build_automaton(*regex_to_grammar("[0-9]{1,3}"));
  ASSERT_TRUE(digits.has_value());
  EXPECT_EQ(digits->num_states(), 4);
}

TEST(StructuredAutomaton, LongChainsStayExact) {
  auto g = compile_regex("[a-c]{3000}", byte_vocab());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->automaton().num_states(), 3001);
  EXPECT_TRUE(matches(g, std::string(3000, 'b')));
  EXPECT_FALSE(matches(g, std::string(2999, 'b')));
  EXPECT_FALSE(matches(g, std::string(3001, 'b')));
}

// Random regexes over {a, b, c}: our automaton (determinized and minimized) must match
// exactly what an independent reference matches. The reference walks the same random tree
// and computes, for a start position, the set of positions where the node can end (a
// bitmask over the text); std::regex is no reference here, its backtracking is exponential
// on nested quantifiers.
struct RegexNode {
  enum Kind { kChar, kClass, kConcat, kAlt, kRepeat } kind = kChar;
  std::string chars;    // kChar / kClass: the bytes it accepts
  std::string text;     // the regex syntax of this node
  int lo = 0, hi = -1;  // kRepeat: {lo, hi}, hi < 0 unbounded
  std::vector<RegexNode> children;
};

RegexNode random_regex(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  const int kind = depth > 3 ? pick(3) : pick(9);
  RegexNode n;
  switch (kind) {
    case 0:
      n.chars = std::string(1, static_cast<char>('a' + pick(3)));
      n.text = n.chars;
      return n;
    case 1:
      n.kind = RegexNode::kClass;
      n.chars = pick(2) ? "ab" : "bc";
      n.text = n.chars == "ab" ? "[ab]" : "[^a]";
      return n;
    case 2:
      n.kind = RegexNode::kClass;
      n.chars = "abc";
      n.text = ".";
      return n;
    case 3:
      n.kind = RegexNode::kConcat;
      n.children = {random_regex(rng, depth + 1), random_regex(rng, depth + 1)};
      n.text = n.children[0].text + n.children[1].text;
      return n;
    case 4:
      n.kind = RegexNode::kAlt;
      n.children = {random_regex(rng, depth + 1), random_regex(rng, depth + 1)};
      n.text = "(" + n.children[0].text + "|" + n.children[1].text + ")";
      return n;
    default: {
      n.kind = RegexNode::kRepeat;
      n.children = {random_regex(rng, depth + 1)};
      const std::string inner = "(" + n.children[0].text + ")";
      if (kind == 5) {
        n.text = inner + "*";
      } else if (kind == 6) {
        n.lo = 1;
        n.text = inner + "+";
      } else if (kind == 7) {
        n.hi = 1;
        n.text = inner + "?";
      } else {
        n.lo = pick(3);
        n.hi = n.lo + pick(3);
        n.text = inner + "{" + std::to_string(n.lo) + "," + std::to_string(n.hi) + "}";
      }
      return n;
    }
  }
}

// Bit j of the result: the node matches text[from, j).
uint32_t regex_ends(const RegexNode& n, const std::string& text, uint32_t from_set) {
  uint32_t out = 0;
  switch (n.kind) {
    case RegexNode::kChar:
    case RegexNode::kClass:
      for (size_t i = 0; i < text.size(); ++i) {
        if ((from_set >> i & 1u) && n.chars.find(text[i]) != std::string::npos)
          out |= 1u << (i + 1);
      }
      return out;
    case RegexNode::kConcat:
      return regex_ends(n.children[1], text, regex_ends(n.children[0], text, from_set));
    case RegexNode::kAlt:
      return regex_ends(n.children[0], text, from_set) | regex_ends(n.children[1], text, from_set);
    case RegexNode::kRepeat: {
      uint32_t current = from_set;
      for (int k = 0; k < n.lo; ++k) current = regex_ends(n.children[0], text, current);
      out = current;
      const int extra = n.hi < 0 ? static_cast<int>(text.size()) + 1 : n.hi - n.lo;
      for (int k = 0; k < extra; ++k) {
        current = regex_ends(n.children[0], text, current);
        out |= current;
      }
      return out;
    }
  }
  return out;
}

TEST(StructuredAutomaton, RandomRegexesMatchAReference) {
  std::mt19937 rng(99);
  auto vocab = byte_vocab();
  for (int trial = 0; trial < 300; ++trial) {
    const RegexNode tree = random_regex(rng, 0);
    auto g = compile_regex(tree.text, vocab);
    ASSERT_NE(g, nullptr) << tree.text;
    for (int k = 0; k < 120; ++k) {
      std::string text;
      const int len = std::uniform_int_distribution<int>(0, 8)(rng);
      for (int i = 0; i < len; ++i) text.push_back(static_cast<char>('a' + rng() % 3));
      const bool expected = (regex_ends(tree, text, 1u) >> text.size()) & 1u;
      ASSERT_EQ(matches(g, text), expected) << tree.text << " on '" << text << "'";
    }
  }
}

TEST(StructuredAutomaton, SizeLimitIsAnError) {
  AutomatonLimits limits;
  limits.max_dfa_states = 1000;
  // The classic exponential blow-up: the 12th character from the end is an 'a'.
  auto g = regex_to_grammar("(a|b)*a(a|b){12}");
  ASSERT_TRUE(g.has_value());
  auto a = build_automaton(*g, limits);
  ASSERT_FALSE(a.has_value());
  EXPECT_EQ(a.status().message(),
            "the grammar is too large: its automaton needs more than 1000 states");
}

}  // namespace
}  // namespace test_structured_grammar
}  // namespace vllm::structured
