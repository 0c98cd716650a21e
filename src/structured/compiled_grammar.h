// CompiledGrammar: a grammar's automaton bound to a vocabulary, with a token mask per state.
//
// The adaptive mask idea (xgrammar's): for each automaton state, walk the vocabulary trie
// once, consuming bytes within the state's own rule (calls into other rules included) with
// the stack below unknown. Each token is then
//   accepted  -- all its bytes are consumed inside the rule: valid whatever the stack;
//   rejected  -- it dies inside the rule before the rule could end;
//   uncertain -- the rule may end after some of its bytes and the rest depend on the caller.
// At run time a matcher ORs the accepted sets of its stacks' states and checks only the
// uncertain tokens against its real stacks. Grammars that inline into one rule (regexes,
// choices, non-recursive JSON schemas) have no uncertain tokens at all. Each state's mask is
// stored as the smallest of an accepted list, a rejected list or a bitset.
//
// Masks are computed when the grammar is compiled (CompileOptions::precompute_masks), or on
// first use; either way a CompiledGrammar is immutable to its users and safe to share
// between threads and requests.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"
#include "structured/automaton.h"
#include "structured/grammar.h"
#include "structured/vocab.h"

namespace vllm::structured {

struct StateMask {
  enum class Kind : uint8_t { kAcceptedList, kRejectedList, kBitset };
  Kind kind = Kind::kAcceptedList;
  std::vector<int32_t> ids;        // accepted ids, or usable ids that are not accepted
  std::vector<uint32_t> bits;      // kBitset: the accepted tokens
  std::vector<int32_t> uncertain;  // positions in TokenVocabulary::sorted_ids(), ascending
  int32_t num_accepted = 0;

  // ORs the accepted tokens into `mask`; `temp` is scratch of the mask's size.
  void apply(std::span<uint32_t> mask, const TokenVocabulary& vocab,
             std::vector<uint32_t>* temp) const;
  size_t memory_bytes() const;
};

// Walks the vocabulary from `state` (see above).
StateMask compute_state_mask(const GrammarAutomaton& automaton, const TokenVocabulary& vocab,
                             int32_t state);

struct CompileOptions {
  AutomatonLimits limits;
  // Compute every state's mask while compiling; otherwise each on first use. Grammars with
  // more states than this are always computed lazily.
  bool precompute_masks = true;
  int32_t max_precomputed_states = 4096;
  // Threads for the precomputation (0: the machine's cores, at most 8).
  int32_t threads = 0;
};

class CompiledGrammar {
 public:
  static Expected<std::shared_ptr<const CompiledGrammar>> compile(
      const Grammar& grammar, std::shared_ptr<const TokenVocabulary> vocab,
      const CompileOptions& options = CompileOptions());

  const GrammarAutomaton& automaton() const { return automaton_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  // The mask of `state`, computing it if needed (thread-safe).
  const StateMask& state_mask(int32_t state) const;

  // Sizes and times, for the compiler's cache and BENCHMARKS.md (masks computed lazily
  // later are not counted).
  size_t memory_bytes() const { return memory_bytes_; }
  double automaton_seconds() const { return automaton_seconds_; }
  double mask_seconds() const { return mask_seconds_; }          // wall time
  double mask_cpu_seconds() const { return mask_cpu_seconds_; }  // summed over the threads
  int32_t num_precomputed() const { return num_precomputed_; }

 private:
  CompiledGrammar() = default;

  GrammarAutomaton automaton_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  mutable std::vector<std::unique_ptr<StateMask>> masks_;  // each set once, under once_[s]
  std::unique_ptr<std::once_flag[]> once_;
  size_t memory_bytes_ = 0;  // automaton + precomputed masks
  double automaton_seconds_ = 0.0;
  double mask_seconds_ = 0.0;
  double mask_cpu_seconds_ = 0.0;
  int32_t num_precomputed_ = 0;
};

}  // namespace vllm::structured
