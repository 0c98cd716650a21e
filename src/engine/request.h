// A request as the engine core sees it: prompt, sampling parameters, the tokens generated so
// far and how many of its tokens the KV cache already holds.
//
// Lifecycle (vLLM V1's RequestStatus): WAITING -> RUNNING -> FINISHED_*; a running request
// that loses its blocks is PREEMPTED (back to the front of the waiting queue, its
// num_computed_tokens reset to 0: it is recomputed from scratch when rescheduled).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/block_hash.h"
#include "engine/kv_cache_manager.h"
#include "engine/sampling_ops.h"
#include "engine/sampling_params.h"
#include "engine/state_snapshot_policy.h"
#include "structured/matcher.h"

namespace vllm::engine {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,
  kFinishedStopped,        // EOS, a stop token id, or a stop string
  kFinishedLengthCapped,   // max_tokens or max_model_len reached
  kFinishedAborted,        // the client went away or asked to abort
  kFinishedError,          // cannot continue: its grammar allows no token (structured outputs)
};

bool is_finished(RequestStatus status);
// OpenAI finish_reason: "stop", "length", "abort", "error" (vLLM's FinishReason.ERROR);
// empty while unfinished.
std::string_view finish_reason(RequestStatus status);

// What happened to a request and when (vLLM's EngineCoreEvent): queued on arrival, scheduled
// each time it is admitted from the waiting queue, preempted. They ride along with the
// request's next output; the server derives its queue / prefill / decode time metrics from
// them. Timestamps are monotonic_seconds().
enum class EngineCoreEventType { kQueued, kScheduled, kPreempted };
struct EngineCoreEvent {
  EngineCoreEventType type = EngineCoreEventType::kQueued;
  double timestamp = 0.0;
};

// Seconds on the steady clock, the time base of EngineCoreEvent.
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Request {
 public:
  // `eos_token_ids` are the model's (config + generation_config); `block_size` keys the
  // prefix-cache hashes.
  Request(std::string request_id, std::vector<int32_t> prompt_token_ids, SamplingParams params,
          std::vector<int32_t> eos_token_ids, int32_t block_size, double arrival_time);

  const std::string& request_id() const { return request_id_; }
  const SamplingParams& params() const { return params_; }
  std::span<const int32_t> prompt_token_ids() const {
    return std::span<const int32_t>(all_token_ids_).first(num_prompt_tokens_);
  }
  std::span<const int32_t> output_token_ids() const {
    return std::span<const int32_t>(all_token_ids_).subspan(num_prompt_tokens_);
  }
  std::span<const int32_t> all_token_ids() const { return all_token_ids_; }
  std::span<const int32_t> eos_token_ids() const { return eos_token_ids_; }
  int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int64_t num_tokens() const { return static_cast<int64_t>(all_token_ids_.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  double arrival_time() const { return arrival_time_; }

  // Appends a sampled token (and its logprobs when asked for) and extends the block hashes.
  void append_output_token(const TokenLogprobs& sampled);
  const std::vector<TokenLogprobs>& output_logprobs() const { return output_logprobs_; }

  // The view the KV cache manager takes.
  KVCacheRequest kv_view() const;
  // What the GDN state snapshot policy looks at (hybrid models).
  SnapshotRequestView snapshot_view() const {
    return {num_tokens(), num_prompt_tokens_, snapshot_junction};
  }

  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_computed_tokens = 0;
  int64_t num_cached_tokens = -1;  // prefix-cache hits at first admission (-1: not yet)
  int32_t num_preemptions = 0;
  std::optional<int32_t> stop_token;  // the EOS / stop token id that finished it, if any
  // Prompt logprobs, filled while the prompt is computed (when params ask for them).
  std::vector<TokenLogprobs> prompt_logprobs;
  // Structured outputs: the request's position in its grammar (null without one). Masks
  // come from it before sampling; each sampled token advances it.
  std::unique_ptr<structured::GrammarMatcher> grammar;
  // With a reasoning model the grammar waits until the reasoning has ended (vLLM's
  // reasoning_ended); always true otherwise.
  bool reasoning_ended = true;
  int32_t reasoning_end_token = -1;  // the token that ends reasoning ("</think>")
  // Events not yet handed out with an output.
  std::vector<EngineCoreEvent> events;
  void record_event(EngineCoreEventType type) { events.push_back({type, monotonic_seconds()}); }
  // Hybrid models (state_snapshot_policy.h): the shared-prefix junction found at admission
  // (0: none) and the request's latest output snapshot, demoted when a newer one is saved.
  int64_t snapshot_junction = 0;
  std::optional<BlockHash> output_snapshot;

 private:
  std::string request_id_;
  SamplingParams params_;
  std::vector<int32_t> eos_token_ids_;
  int64_t num_prompt_tokens_;
  std::vector<int32_t> all_token_ids_;
  std::vector<TokenLogprobs> output_logprobs_;
  int32_t block_size_;
  std::vector<BlockHash> block_hashes_;
  double arrival_time_;
};

}  // namespace vllm::engine
