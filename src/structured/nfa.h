// Internal to the automaton builder: the Thompson NFA of the rules that keep their own
// automaton, after non-recursive rules have been inlined (see automaton.h, steps 1-2).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "structured/automaton.h"
#include "structured/grammar.h"

namespace vllm::structured {

struct Nfa {
  struct ByteEdge {
    uint8_t lo = 0;
    uint8_t hi = 0;
    int32_t target = -1;
  };
  struct CallEdge {
    int32_t rule = -1;
    int32_t target = -1;
  };
  struct State {
    std::vector<int32_t> eps;
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
  };
  std::vector<State> states;
  // Per grammar rule: its NFA start and accepting state, or -1 when the rule has no
  // automaton of its own (only ever inlined, or unused).
  std::vector<int32_t> rule_start;
  std::vector<int32_t> rule_accept;
};

// A code point range as UTF-8: sequences of byte ranges, e.g. [U+0080, U+07FF] is
// [C2-DF][80-BF]. Appends to `out`.
struct ByteRangeSeq {
  uint8_t len = 0;
  uint8_t lo[4] = {0, 0, 0, 0};
  uint8_t hi[4] = {0, 0, 0, 0};
};
void utf8_sequences(CharRange range, std::vector<ByteRangeSeq>* out);

Expected<Nfa> build_nfa(const Grammar& grammar, const AutomatonLimits& limits);

}  // namespace vllm::structured
