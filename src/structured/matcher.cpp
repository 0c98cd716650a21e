// GrammarMatcher (matcher.h): accepting tokens and building next-token bitmasks.
#include "structured/matcher.h"

#include <algorithm>
#include <unordered_map>

namespace vllm::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)) {
  const GrammarAutomaton& a = grammar_->automaton();
  heads_ = {Head{a.root_start(), kRootParent}};
  PopFlags flags;
  close_pops(a, arena_, &heads_, &flags);
  levels_.resize(grammar_->vocab().max_token_length() + 1);
}

bool GrammarMatcher::can_end() const {
  return !terminated_ && structured::can_end(grammar_->automaton(), heads_);
}

bool GrammarMatcher::advance(std::string_view bytes, std::vector<Head>* result) {
  const GrammarAutomaton& a = grammar_->automaton();
  std::vector<Head> current = heads_;
  for (char c : bytes) {
    PopFlags flags;
    if (!step_byte(a, &arena_, current, static_cast<uint8_t>(c), result, &scratch_, &flags)) {
      return false;
    }
    current.swap(*result);
  }
  result->swap(current);
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  std::vector<Head> next;
  if (!advance(bytes, &next)) return false;
  heads_ = std::move(next);
  maybe_compact();
  return true;
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const TokenVocabulary& vocab = grammar_->vocab();
  if (terminated_ || token_id < 0 || token_id >= vocab.vocab_size()) return false;
  if (vocab.is_stop_token(token_id)) {
    if (!can_end()) return false;
    terminated_ = true;
    return true;
  }
  const std::string& bytes = vocab.token_bytes(token_id);
  if (bytes.empty()) return false;  // special or unknown tokens never match grammar text
  return accept_bytes(bytes);
}

bool GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> bitmask) {
  const TokenVocabulary& vocab = grammar_->vocab();
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (terminated_) return false;
  // Tokens accepted whatever the stack: the precomputed part, once per distinct state.
  seen_states_.clear();
  for (const Head& h : heads_) {
    if (std::find(seen_states_.begin(), seen_states_.end(), h.state) != seen_states_.end()) {
      continue;
    }
    seen_states_.push_back(h.state);
    grammar_->state_mask(h.state).apply(bitmask, vocab, &temp_);
  }
  // Tokens that leave the state's rule: checked against each real stack.
  for (const Head& h : heads_) {
    const StateMask& mask = grammar_->state_mask(h.state);
    if (!mask.uncertain.empty()) check_uncertain(h, mask, bitmask);
  }
  if (can_end()) {
    for (int32_t id : vocab.stop_token_ids())
      bitmask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
  uint32_t any = 0;
  for (uint32_t w : bitmask) any |= w;
  return any != 0;
}

void GrammarMatcher::check_uncertain(const Head& head, const StateMask& mask,
                                     std::span<uint32_t> bitmask) {
  const TokenVocabulary& vocab = grammar_->vocab();
  const GrammarAutomaton& a = grammar_->automaton();
  const std::span<const int32_t> sorted = vocab.sorted_ids();
  levels_[0] = {head};
  // Consecutive uncertain tokens share prefixes (they are in byte order): levels_[d] holds
  // the stacks after the first d bytes of `previous`, valid up to depth `valid`.
  const std::string* previous = nullptr;
  size_t valid = 0;
  for (int32_t p : mask.uncertain) {
    const int32_t id = sorted[static_cast<size_t>(p)];
    if ((bitmask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) continue;
    const std::string& bytes = vocab.token_bytes(id);
    size_t d = 0;
    if (previous != nullptr) {
      const size_t n = std::min({previous->size(), bytes.size(), valid});
      while (d < n && (*previous)[d] == bytes[d]) ++d;
    }
    bool alive = true;
    for (; d < bytes.size(); ++d) {
      PopFlags flags;
      if (!step_byte(a, &arena_, levels_[d], static_cast<uint8_t>(bytes[d]), &levels_[d + 1],
                     &scratch_, &flags)) {
        alive = false;
        break;
      }
    }
    previous = &bytes;
    valid = d;
    if (alive) bitmask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
}

// Frames pushed while checking tokens that were then rejected stay in the arena; rebuild it
// from the live stacks when it has grown.
void GrammarMatcher::maybe_compact() {
  if (arena_.size() < compact_at_) return;
  StackArena fresh;
  std::unordered_map<int32_t, int32_t> remap;
  auto copy = [&](auto&& self, int32_t node) -> int32_t {
    if (node < 0) return node;
    auto it = remap.find(node);
    if (it != remap.end()) return it->second;
    const StackArena::Node n = arena_.node(node);
    const int32_t parent = self(self, n.parent);
    const int32_t id = fresh.intern(n.state, parent);
    remap.emplace(node, id);
    return id;
  };
  for (Head& h : heads_) h.parent = copy(copy, h.parent);
  arena_ = std::move(fresh);
  compact_at_ = std::max<size_t>(4096, arena_.size() * 4);
}

}  // namespace vllm::structured
