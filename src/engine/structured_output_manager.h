// StructuredOutputManager (vLLM's, in vllm/v1/structured_output): the engine's side of
// structured outputs.
//
//   validate()      compiles a request's grammar (cached by its text), on the caller's
//                   thread, so a bad schema / regex / grammar is refused before queueing
//   make_matcher()  the request's GrammarMatcher, kept on its Request
//   start_bitmask() the allowed-token bitmask of every row that samples this step, computed
//                   on the manager's worker thread while the model runs; the model runner
//                   waits for it just before sampling (BitmaskJob::wait)
// The scheduler advances each matcher with the sampled token (Scheduler::update_from_output)
// after the job is done, so a matcher is never touched by two threads at once.
//
// Reasoning models (vLLM's reasoner, set when the server runs a reasoning parser): a
// request's grammar applies once its reasoning has ended. Where the prompt stands decides
// the start: after a closed <think>...</think> (thinking turned off) the grammar applies at
// once; inside an open <think> it waits for the model's </think>; with neither it applies at
// once unless the request expects the model to open a <think> itself
// (StructuredOutputsParams::await_reasoning_end: chat with thinking on). Once it applies, the
// reasoning marker tokens are masked: a structured answer never holds them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/scheduler.h"
#include "structured/grammar_compiler.h"
#include "structured/matcher.h"

namespace vllm::engine {

// The bitmasks of one step: a row per scheduled request that samples under a grammar.
struct GrammarBitmask {
  int32_t words_per_row = 0;
  std::vector<uint32_t> words;          // [rows, words_per_row]
  std::vector<int32_t> row_of_request;  // per SchedulerOutput::requests entry: row or -1
  // The mask of scheduled request `index`; empty when it has no grammar.
  std::span<const uint32_t> mask_of(size_t index) const;
};

// A step's bitmask being computed on the worker thread.
class BitmaskJob {
 public:
  ~BitmaskJob();  // waits: the job reads the step's requests
  const GrammarBitmask& wait();

 private:
  friend class StructuredOutputManager;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  GrammarBitmask result_;
};

class StructuredOutputManager {
 public:
  explicit StructuredOutputManager(std::shared_ptr<const structured::TokenVocabulary> vocab,
                                   structured::GrammarCompilerOptions options = {});
  ~StructuredOutputManager();

  StructuredOutputManager(const StructuredOutputManager&) = delete;
  StructuredOutputManager& operator=(const StructuredOutputManager&) = delete;

  // kInvalidArgument naming the problem in the schema / regex / grammar. Thread-safe.
  Status validate(const structured::StructuredOutputsParams& params);
  Expected<std::unique_ptr<structured::GrammarMatcher>> make_matcher(
      const structured::StructuredOutputsParams& params);

  // Starts computing the masks of the scheduled rows that sample under a grammar; nullptr
  // when there are none.
  std::unique_ptr<BitmaskJob> start_bitmask(const SchedulerOutput& output);

  const structured::GrammarCompiler& compiler() const { return compiler_; }

  // The tokens that open and close reasoning ("<think>", "</think>"); set before requests
  // arrive. `start` may be absent.
  void set_reasoning_tokens(std::optional<int32_t> start, int32_t end) {
    reasoning_start_token_ = start;
    reasoning_end_token_ = end;
  }
  std::optional<int32_t> reasoning_end_token() const { return reasoning_end_token_; }
  // Whether a request with this prompt starts with its reasoning ended (see above).
  bool reasoning_ended_at(std::span<const int32_t> prompt, bool await_reasoning_end) const;

 private:
  void worker_loop();

  structured::GrammarCompiler compiler_;
  std::optional<int32_t> reasoning_start_token_;
  std::optional<int32_t> reasoning_end_token_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> task_;  // at most one step's job is pending
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace vllm::engine
