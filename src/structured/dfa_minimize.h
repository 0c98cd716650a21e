// Internal to the automaton builder: one rule's DFA between subset construction and global
// numbering, and its minimization (automaton.h, step 3).
#pragma once

#include <cstdint>
#include <vector>

#include "structured/automaton.h"

namespace vllm::structured {

struct RuleDfa {
  int32_t rule = -1;
  std::vector<int32_t> next;  // [states x classes], local ids or -1
  std::vector<uint8_t> accepting;
  std::vector<std::vector<GrammarAutomaton::Call>> calls;  // return_state is local
  int32_t size() const { return static_cast<int32_t>(accepting.size()); }
};

// The minimal equivalent DFA (Hopcroft's partition refinement, O(k n log n) for k symbols:
// the byte classes plus one per called rule). State 0 stays the start state; states that
// cannot reach acceptance are dropped. DFAs too large for the tables (states x symbols over
// 4M) are returned unchanged.
RuleDfa minimize_dfa(const RuleDfa& dfa, int32_t num_classes);

}  // namespace vllm::structured
