// Pops, call expansion and byte steps over sets of stacks (see parser_state.h).
#include "structured/parser_state.h"

#include <algorithm>

namespace vllm::structured {
namespace {

bool contains(const std::vector<Head>& heads, const Head& h) {
  return std::find(heads.begin(), heads.end(), h) != heads.end();
}

void add_unique(std::vector<Head>* heads, const Head& h) {
  if (!contains(*heads, h)) heads->push_back(h);
}

void dedupe(std::vector<Head>* heads) {
  if (heads->size() < 2) return;
  std::sort(heads->begin(), heads->end());
  heads->erase(std::unique(heads->begin(), heads->end()), heads->end());
}

// Pushes every callable rule and pops every accepting state until nothing new appears.
void expand_calls(const GrammarAutomaton& a, StackArena* arena, std::vector<Head>* heads) {
  for (size_t i = 0; i < heads->size(); ++i) {
    const Head h = (*heads)[i];
    for (const GrammarAutomaton::Call& call : a.calls(h.state)) {
      const int32_t frame = arena->intern(call.return_state, h.parent);
      add_unique(heads, Head{a.rule_start(call.rule), frame});
    }
    if (a.accepting(h.state) && h.parent >= 0) {
      const StackArena::Node& n = arena->node(h.parent);
      add_unique(heads, Head{n.state, n.parent});
    }
  }
}

}  // namespace

int32_t StackArena::intern(int32_t state, int32_t parent) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = index_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({state, parent});
  return it->second;
}

void close_pops(const GrammarAutomaton& a, const StackArena& arena, std::vector<Head>* heads,
                PopFlags* flags) {
  for (size_t i = 0; i < heads->size(); ++i) {
    const Head h = (*heads)[i];
    if (!a.accepting(h.state)) continue;
    if (h.parent == kRootParent) {
      flags->can_end = true;
    } else if (h.parent == kUnknownParent) {
      flags->escaped = true;
    } else {
      const StackArena::Node& n = arena.node(h.parent);
      add_unique(heads, Head{n.state, n.parent});
    }
  }
  dedupe(heads);
}

bool step_byte(const GrammarAutomaton& a, StackArena* arena, const std::vector<Head>& in,
               uint8_t byte, std::vector<Head>* out, std::vector<Head>* scratch, PopFlags* flags) {
  out->clear();
  const std::vector<Head>* source = &in;
  bool any_calls = false;
  for (const Head& h : in) any_calls = any_calls || a.has_calls(h.state);
  if (any_calls) {
    scratch->assign(in.begin(), in.end());
    expand_calls(a, arena, scratch);
    source = scratch;
  }
  for (const Head& h : *source) {
    const int32_t t = a.step(h.state, byte);
    if (t >= 0) out->push_back(Head{t, h.parent});
  }
  if (out->empty()) return false;
  if (out->size() == 1 && !a.accepting((*out)[0].state)) return true;  // the common case
  close_pops(a, *arena, out, flags);
  return true;
}

bool can_end(const GrammarAutomaton& a, const std::vector<Head>& heads) {
  for (const Head& h : heads) {
    if (h.parent == kRootParent && a.accepting(h.state)) return true;
  }
  return false;
}

}  // namespace vllm::structured
