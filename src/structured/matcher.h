// GrammarMatcher: one request's position in its grammar, advanced token by token.
//
// The engine asks it for the bitmask of tokens allowed next (fill_next_token_bitmask), the
// sampler masks the logits with it, and the sampled token is fed back (accept_token). The
// stop tokens are allowed exactly when the grammar may end; accepting one terminates the
// matcher. A matcher is used by one thread at a time (the engine computes masks on a worker
// thread while the model runs, and advances matchers after sampling; never both at once).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/parser_state.h"

namespace vllm::structured {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by one token; false (and no change) if the grammar does not allow it.
  bool accept_token(int32_t token_id);
  // Advances by raw bytes (tests); false (and no change) if not allowed.
  bool accept_bytes(std::string_view bytes);

  // Writes the tokens allowed next into `bitmask` (vocab().bitmask_words() words; bit
  // id % 32 of word id / 32). Returns whether any token is allowed; false means the request
  // cannot continue under its grammar.
  bool fill_next_token_bitmask(std::span<uint32_t> bitmask);

  bool can_end() const;                               // the output so far is a complete match
  bool is_terminated() const { return terminated_; }  // a stop token was accepted
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  bool advance(std::string_view bytes, std::vector<Head>* result);
  void check_uncertain(const Head& head, const StateMask& mask, std::span<uint32_t> bitmask);
  void maybe_compact();

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackArena arena_;
  std::vector<Head> heads_;
  bool terminated_ = false;
  size_t compact_at_ = 4096;
  // Scratch.
  std::vector<std::vector<Head>> levels_;
  std::vector<Head> scratch_;
  std::vector<uint32_t> temp_;
  std::vector<int32_t> seen_states_;
};

}  // namespace vllm::structured
