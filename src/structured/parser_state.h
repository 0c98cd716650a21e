// The pushdown state of a grammar match: a set of stacks over the automaton's rules.
//
// A stack is its top -- a Head: the automaton state the innermost rule is in -- and the
// frames below it, each "resume rule R at state t" (a return point). Frames are interned in
// a StackArena, so two equal stacks are equal (state, parent) pairs and sets of stacks stay
// small. Several stacks are live at once where the grammar is ambiguous (GLR-style).
//
// Head sets are kept closed under pops: a head whose state accepts stands both for itself
// and for its parent frame resumed, so the parent is in the set too. Calls are expanded only
// when a byte is consumed (step()). Two parent sentinels mark the bottom of a stack:
// kRootParent (popping it means the whole grammar may end here) and kUnknownParent (used
// when precomputing token masks for a state without knowing what lies below: popping it
// means the rest of the token depends on the caller -- the token is "uncertain").
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "structured/automaton.h"

namespace vllm::structured {

inline constexpr int32_t kRootParent = -1;
inline constexpr int32_t kUnknownParent = -2;

struct Head {
  int32_t state = -1;
  int32_t parent = kRootParent;  // a StackArena node, or a sentinel
  bool operator==(const Head& o) const { return state == o.state && parent == o.parent; }
  bool operator<(const Head& o) const {
    return state != o.state ? state < o.state : parent < o.parent;
  }
};

class StackArena {
 public:
  struct Node {
    int32_t state;   // the return state of the caller
    int32_t parent;  // the caller's own parent
  };
  int32_t intern(int32_t state, int32_t parent);
  const Node& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  void clear() {
    nodes_.clear();
    index_.clear();
  }

 private:
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
};

// What popping revealed while closing a head set.
struct PopFlags {
  bool can_end = false;  // a stack popped its root: the grammar may end here
  bool escaped = false;  // a stack popped kUnknownParent
};

// Adds the parents of accepting heads (recursively) and removes duplicates.
void close_pops(const GrammarAutomaton& a, const StackArena& arena, std::vector<Head>* heads,
                PopFlags* flags);

// Consumes one byte from every stack in `in` (a closed set): calls are expanded first, then
// each state takes the byte, then the result is closed. `scratch` is working memory. Returns
// whether any stack survived.
bool step_byte(const GrammarAutomaton& a, StackArena* arena, const std::vector<Head>& in,
               uint8_t byte, std::vector<Head>* out, std::vector<Head>* scratch, PopFlags* flags);

// Whether some head can end the grammar (an accepting state over the root).
bool can_end(const GrammarAutomaton& a, const std::vector<Head>& heads);

}  // namespace vllm::structured
