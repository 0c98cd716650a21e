// GrammarAutomaton: a grammar compiled into one deterministic byte automaton per rule,
// where an edge either consumes one byte or calls another rule (a recursive transition
// network, run by a pushdown matcher: parser_state.h).
//
// Building (build_automaton):
//   1. rules that are not recursive are inlined where they are used, so most grammars --
//      every regex, choice list and non-recursive JSON schema -- become a single rule whose
//      every state is context-free; only recursion (nested JSON values, recursive $refs,
//      recursive EBNF rules) leaves call edges behind;
//   2. each remaining rule's expression becomes a Thompson NFA over bytes (character classes
//      expanded into UTF-8 byte sequences) and call edges;
//   3. subset construction gives a DFA per rule (calls are symbols like bytes), which is
//      then minimized and pruned of states that cannot reach an accepting state;
//   4. rules that can only recurse without consuming a byte (left recursion) are refused;
//   5. each rule's FOLLOW set (bytes that may come right after it) is computed.
// States are numbered globally across rules. Bytes that every edge treats alike share a
// byte class, so the transition table is num_states x num_classes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "structured/grammar.h"

namespace vllm::structured {

struct AutomatonLimits {
  int64_t max_nfa_states = 2'000'000;  // per grammar, after inlining
  int64_t max_dfa_states = 200'000;    // per grammar, before minimization
  int64_t inline_limit = 200'000;      // NFA states of one inlined use of a rule
};

class GrammarAutomaton {
 public:
  struct Call {
    int32_t rule = -1;          // the callee
    int32_t return_state = -1;  // where the caller continues after the callee accepts
  };

  int32_t num_states() const { return num_states_; }
  int32_t num_classes() const { return num_classes_; }
  // The state after `byte`, or -1.
  int32_t step(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * static_cast<size_t>(num_classes_) +
                 byte_class_[byte]];
  }
  bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
  std::span<const Call> calls(int32_t state) const {
    return {calls_.data() + call_begin_[static_cast<size_t>(state)],
            static_cast<size_t>(call_begin_[static_cast<size_t>(state) + 1] -
                                call_begin_[static_cast<size_t>(state)])};
  }
  bool has_calls(int32_t state) const {
    return call_begin_[static_cast<size_t>(state) + 1] != call_begin_[static_cast<size_t>(state)];
  }
  int32_t rule_start(int32_t rule) const { return rule_start_[static_cast<size_t>(rule)]; }
  int32_t state_rule(int32_t state) const { return state_rule_[static_cast<size_t>(state)]; }
  int32_t root_rule() const { return root_rule_; }
  int32_t root_start() const { return rule_start(root_rule_); }
  const std::string& rule_name(int32_t rule) const {
    return rule_names_[static_cast<size_t>(rule)];
  }
  // Rules with their own DFA (the root and every rule still called after inlining).
  int32_t num_automaton_rules() const { return num_automaton_rules_; }
  // Whether `byte` can come right after rule `rule` completes, in some caller (its FOLLOW
  // set; nothing follows the root). Token masks use it to tell which tokens that run past
  // the end of a rule are worth checking against the real stack.
  bool can_follow(int32_t rule, uint8_t byte) const {
    return (follow_[static_cast<size_t>(rule)][byte / 64] >> (byte % 64)) & 1u;
  }
  // Total size of the tables, for cache accounting.
  size_t memory_bytes() const;

 private:
  friend class AutomatonBuilder;

  int32_t num_states_ = 0;
  int32_t num_classes_ = 0;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<int32_t> next_;
  std::vector<uint8_t> accepting_;
  std::vector<int32_t> call_begin_;
  std::vector<Call> calls_;
  std::vector<int32_t> rule_start_;  // per grammar rule; -1 for rules without a DFA
  std::vector<int32_t> state_rule_;
  std::vector<std::string> rule_names_;
  int32_t root_rule_ = -1;
  int32_t num_automaton_rules_ = 0;
  std::vector<std::array<uint64_t, 4>> follow_;  // per grammar rule: a 256-bit byte set
};

// kInvalidArgument naming the problem: a grammar that matches nothing, left recursion
// (naming the rules), or a grammar over the size limits.
Expected<GrammarAutomaton> build_automaton(const Grammar& grammar,
                                           const AutomatonLimits& limits = AutomatonLimits());

}  // namespace vllm::structured
