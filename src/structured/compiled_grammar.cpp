// Per-state token masks (the vocabulary trie walk) and CompiledGrammar (compiled_grammar.h).
#include "structured/compiled_grammar.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>
#include <utility>

#include "structured/parser_state.h"

namespace vllm::structured {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void StateMask::apply(std::span<uint32_t> mask, const TokenVocabulary& vocab,
                      std::vector<uint32_t>* temp) const {
  switch (kind) {
    case Kind::kAcceptedList:
      for (int32_t id : ids) mask[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
      return;
    case Kind::kBitset:
      for (size_t w = 0; w < bits.size(); ++w) mask[w] |= bits[w];
      return;
    case Kind::kRejectedList: {
      const std::span<const uint32_t> usable = vocab.usable_mask();
      temp->assign(usable.begin(), usable.end());
      for (int32_t id : ids) (*temp)[static_cast<size_t>(id) / 32] &= ~(1u << (id % 32));
      for (size_t w = 0; w < temp->size(); ++w) mask[w] |= (*temp)[w];
      return;
    }
  }
}

size_t StateMask::memory_bytes() const {
  return sizeof(StateMask) + (ids.size() + uncertain.size()) * sizeof(int32_t) +
         bits.size() * sizeof(uint32_t);
}

StateMask compute_state_mask(const GrammarAutomaton& a, const TokenVocabulary& vocab,
                             int32_t state) {
  const std::span<const TokenVocabulary::TrieNode> trie = vocab.trie();
  const std::span<const int32_t> sorted = vocab.sorted_ids();
  const size_t max_depth = vocab.max_token_length() + 1;
  StackArena arena;
  // levels[d]: the stacks after the first d bytes of the current trie path. Most paths stay
  // in one state of the rule with nothing pushed: then single[d] holds that state and
  // levels[d] is not filled in (the fast path below, a plain DFA step).
  std::vector<std::vector<Head>> levels(max_depth);
  std::vector<int32_t> single(max_depth, -1);
  // escaped[d]: the state's rule may end after the first d bytes (d >= 1); viable[d]: it may
  // end after some k < d bytes with byte k+1 in the rule's FOLLOW set -- only then can the
  // caller take over the rest of the token.
  std::vector<uint8_t> escaped(max_depth, 0);
  std::vector<uint8_t> viable(max_depth, 0);
  const int32_t rule = a.state_rule(state);
  std::vector<Head> scratch, single_level;
  // The head set {state over an unknown stack} is closed: popping it at depth 0 is the
  // caller's own head's business (matchers keep their sets closed under pops).
  single[0] = state;
  std::vector<int32_t> accepted, uncertain;
  const auto n = static_cast<int32_t>(trie.size());
  for (int32_t i = 1; i < n;) {
    const TokenVocabulary::TrieNode& node = trie[static_cast<size_t>(i)];
    const size_t d = node.depth;
    const bool via = viable[d - 1] || (escaped[d - 1] && a.can_follow(rule, node.byte));
    bool alive = false;
    const int32_t from = single[d - 1];
    if (from >= 0 && !a.has_calls(from)) {
      const int32_t t = a.step(from, node.byte);
      alive = t >= 0;
      single[d] = t;
      escaped[d] = alive && a.accepting(t) ? 1 : 0;  // the only head is over kUnknownParent
    } else {
      const std::vector<Head>* in = &levels[d - 1];
      if (from >= 0) {
        single_level.assign(1, Head{from, kUnknownParent});
        in = &single_level;
      }
      PopFlags flags;
      alive = step_byte(a, &arena, *in, node.byte, &levels[d], &scratch, &flags);
      single[d] = -1;
      if (alive && levels[d].size() == 1 && levels[d][0].parent == kUnknownParent) {
        single[d] = levels[d][0].state;
      }
      escaped[d] = flags.escaped ? 1 : 0;
    }
    if (!alive) {
      // Dead inside the rule. If the rule could have ended at a shorter prefix followed by a
      // byte its callers accept, the rest of these tokens belongs to the caller: uncertain.
      // Otherwise rejected.
      if (via) {
        for (int32_t p = node.token_lo; p < vocab.subtree_token_end(i); ++p) uncertain.push_back(p);
      }
      i = node.subtree_end;
      continue;
    }
    viable[d] = via ? 1 : 0;
    for (int32_t p = node.token_lo; p < vocab.exact_token_end(i); ++p) {
      accepted.push_back(sorted[static_cast<size_t>(p)]);
    }
    ++i;
  }

  StateMask mask;
  mask.num_accepted = static_cast<int32_t>(accepted.size());
  const size_t words = static_cast<size_t>(vocab.bitmask_words());
  const size_t not_accepted = static_cast<size_t>(vocab.num_usable()) - accepted.size();
  if (accepted.size() <= not_accepted && accepted.size() < words) {
    mask.kind = StateMask::Kind::kAcceptedList;
    std::sort(accepted.begin(), accepted.end());
    mask.ids = std::move(accepted);
  } else if (not_accepted < words) {
    mask.kind = StateMask::Kind::kRejectedList;
    std::vector<uint32_t> bits(words, 0);
    for (int32_t id : accepted) bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    for (int32_t id : sorted) {
      if (!((bits[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u)) mask.ids.push_back(id);
    }
  } else {
    mask.kind = StateMask::Kind::kBitset;
    mask.bits.assign(words, 0);
    for (int32_t id : accepted) mask.bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
  mask.uncertain = std::move(uncertain);  // ascending: the walk visits positions in order
  return mask;
}

Expected<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(
    const Grammar& grammar, std::shared_ptr<const TokenVocabulary> vocab,
    const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VLLM_ASSIGN_OR_RETURN(GrammarAutomaton automaton, build_automaton(grammar, options.limits));
  auto compiled = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  compiled->automaton_seconds_ = seconds_since(start);
  compiled->automaton_ = std::move(automaton);
  compiled->vocab_ = std::move(vocab);
  const auto num_states = static_cast<size_t>(compiled->automaton_.num_states());
  compiled->masks_.resize(num_states);
  compiled->once_ = std::make_unique<std::once_flag[]>(num_states);
  compiled->memory_bytes_ = compiled->automaton_.memory_bytes();
  if (options.precompute_masks &&
      compiled->automaton_.num_states() <= options.max_precomputed_states) {
    const auto mask_start = std::chrono::steady_clock::now();
    // States are independent: workers take them in turn.
    int32_t threads =
        options.threads > 0
            ? options.threads
            : static_cast<int32_t>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
    threads = std::min<int32_t>(threads, static_cast<int32_t>(num_states));
    std::atomic<size_t> next{0};
    std::mutex cpu_mutex;
    double cpu = 0.0;
    auto work = [&] {
      const double start_cpu = thread_cpu_seconds();
      for (size_t s = next++; s < num_states; s = next++) {
        compiled->state_mask(static_cast<int32_t>(s));
      }
      std::lock_guard<std::mutex> lock(cpu_mutex);
      cpu += thread_cpu_seconds() - start_cpu;
    };
    std::vector<std::thread> workers;
    for (int32_t t = 1; t < threads; ++t) workers.emplace_back(work);
    work();
    for (std::thread& w : workers) w.join();
    for (size_t s = 0; s < num_states; ++s) {
      compiled->memory_bytes_ += compiled->masks_[s]->memory_bytes();
    }
    compiled->num_precomputed_ = static_cast<int32_t>(num_states);
    compiled->mask_seconds_ = seconds_since(mask_start);
    compiled->mask_cpu_seconds_ = cpu;
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(compiled));
}

const StateMask& CompiledGrammar::state_mask(int32_t state) const {
  const auto s = static_cast<size_t>(state);
  std::call_once(once_[s], [&] {
    masks_[s] = std::make_unique<StateMask>(compute_state_mask(automaton_, *vocab_, state));
  });
  return *masks_[s];
}

}  // namespace vllm::structured
