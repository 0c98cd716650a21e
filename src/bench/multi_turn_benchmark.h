// `vllm bench multi-turn`: a chat workload on the offline engine, to measure prefix caching.
//
// Every conversation opens with the same system prompt (--system-prompt-len random tokens),
// then --num-turns turns; each turn sends the whole history -- system prompt, every earlier
// user message and reply -- plus a new user message of --user-len random tokens, and gets a
// reply of exactly --output-len tokens (greedy, EOS ignored, so a run with prefix caching and
// one without produce the same conversations; the printed output digest shows it). Token ids
// stand in for text, so dummy weights (--load-format dummy) work too. Up to --max-concurrency
// conversations are in flight; a conversation's next turn is sent the moment its previous
// reply ends, and the next conversation starts when one ends.
//
// Reported: TTFT (from the request reaching the engine to its first token) overall and per
// turn, prompt tokens, the tokens prefix-cache hits skipped (the engine's cached tokens) and
// the prefill tokens actually computed, output throughput, and the digest.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/engine_args.h"

namespace vllm::bench {

struct MultiTurnOptions {
  int64_t num_conversations = 8;
  int64_t num_turns = 5;
  int64_t system_prompt_len = 2000;
  int64_t user_len = 64;
  int64_t output_len = 64;
  int64_t max_concurrency = 4;
  uint64_t seed = 0;
};

// Prints the result table to `out`; returns the figures as JSON (--output-json).
Expected<nlohmann::json> run_multi_turn_benchmark(const MultiTurnOptions& options,
                                                  engine::LoadedEngine& engine, std::FILE* out);

}  // namespace vllm::bench
