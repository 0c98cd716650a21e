// The output processor: turns the engine core's token outputs into what callers read --
// text through incremental detokenization, stop strings, finish reasons, logprobs -- and
// gathers the n samples of a request (vLLM's parallel sampling: child requests
// "<i>_<id>", child i seeded with seed + i).
//
// Stop strings (vLLM's semantics): the text is searched for each stop string as it grows;
// on a match the request finishes with reason "stop", its text cut before the stop string
// (or after it with include_stop_str_in_output), and the caller aborts it in the engine.
// While undecided, the last (longest stop string - 1) characters are held back from
// streamed deltas, so a client never sees text that a later stop string removes.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/scheduler.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vllm::engine {

struct CompletionOutput {
  int index = 0;
  std::string text;        // everything decided so far
  std::string delta;       // what this update added to text (all of it, when one process()
                           // call applied several outputs of the request)
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;  // per token, when asked for
  std::string finish_reason;            // "stop", "length", "abort"; empty while running
  std::optional<int32_t> stop_token;    // stop_reason when a stop token id ended it
  std::optional<std::string> stop_string;  // stop_reason when a stop string ended it
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<TokenLogprobs> prompt_logprobs;
  std::vector<CompletionOutput> outputs;  // n of them, by index
  int64_t num_cached_tokens = 0;
  bool finished = false;
};

class OutputProcessor {
 public:
  // `tokenizer` may be null: then no text is produced and stop strings are refused.
  explicit OutputProcessor(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // The engine requests to submit for a request: n children (or the request itself when
  // n == 1) with their ids and params.
  struct EngineRequest {
    std::string request_id;
    SamplingParams params;
  };
  Expected<std::vector<EngineRequest>> add_request(const std::string& request_id,
                                                   std::span<const int32_t> prompt,
                                                   const SamplingParams& params);

  // Applies engine outputs; returns the updated requests (finished ones for the last time).
  // Engine requests that a stop string finished are appended to `to_abort`.
  std::vector<RequestOutput> process(const std::vector<EngineCoreOutput>& outputs,
                                     std::vector<std::string>* to_abort);

  bool has_unfinished() const { return !parents_.empty(); }

 private:
  struct Child;
  struct Parent;
  bool update_child(Child& child, const EngineCoreOutput& out);

  const Tokenizer* tokenizer_;
  std::unordered_map<std::string, std::shared_ptr<Parent>> parents_;
  std::unordered_map<std::string, std::pair<std::shared_ptr<Parent>, int>> children_;
};

}  // namespace vllm::engine
