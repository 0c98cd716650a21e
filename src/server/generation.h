// One API call's generation, as vLLM's AsyncLLM.generate() serves it: the call's prompts (a
// completions batch has several) with n samples each go to the engine together, and come
// back as RequestOutputs with text deltas, stop strings applied -- the output processor runs
// here, on the caller's thread, one per call, so calls never share mutable state.
//
// The engine requests are "<id>-<prompt index>" (n = 1) or the output processor's children
// "<i>_<id>-<prompt index>". Whatever ends a Generation early -- abort(), or destroying it,
// e.g. when the HTTP client went away -- aborts its unfinished engine requests, which frees
// their KV blocks. Timing metrics (TTFT, inter-token latency, e2e; queue, prefill, decode and
// inference time from the engine's events) are recorded per engine request as outputs
// arrive.
//
// Nothing here blocks unless asked to: next(0ms) only takes what has arrived, and
// set_wake() says when that is worth doing.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine_client.h"
#include "engine/output_processor.h"
#include "server/metrics.h"
#include "server/request_logger.h"

namespace vllm::server {

class Generation {
 public:
  using Clock = std::chrono::steady_clock;

  // Validates and submits; kInvalidArgument (prompt too long, bad sampling values, ...) if
  // the engine refuses any prompt, in which case nothing was submitted. `metrics` and
  // `logger` may be null.
  static Expected<std::unique_ptr<Generation>> start(
      engine::EngineClient* client, const Tokenizer* tokenizer, ServerMetrics* metrics,
      const RequestLogger* logger, const std::string& request_id,
      const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params,
      Clock::time_point arrival = Clock::now());
  ~Generation();

  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  struct Update {
    size_t prompt_index = 0;
    engine::RequestOutput output;  // outputs[i].delta: what arrived since the last update
  };
  // Waits up to `timeout` for outputs; returns the prompts that advanced (empty on timeout).
  std::vector<Update> next(std::chrono::milliseconds timeout);
  bool finished() const { return num_finished_ == prompt_count_; }
  // True when requests ended because the engine died (not because we aborted them).
  bool engine_died() const { return engine_died_; }

  // Calls `wake` (from the engine thread, or at once) whenever next() has something; null
  // clears it. The destructor clears it too.
  void set_wake(std::function<void()> wake);

  // Aborts every unfinished engine request. Idempotent.
  void abort();

 private:
  struct EngineRequest {
    int64_t num_prompt_tokens = 0;
    int64_t num_tokens = 0;
    Clock::time_point first_token;
    Clock::time_point last_token;
    double queued_ts = -1.0;     // engine events (engine::monotonic_seconds); < 0: not yet
    double scheduled_ts = -1.0;  // the first time it was scheduled
    double first_token_ts = -1.0;
    double last_token_ts = -1.0;
    bool engine_finished = false;  // the engine sent its finished output
    bool recorded = false;         // its finish went to the metrics
  };
  Generation() = default;
  void observe(const engine::EngineCoreOutput& out, Clock::time_point now);
  void record_finished(EngineRequest& r, const std::string& reason, Clock::time_point now);
  std::string engine_id(size_t prompt, int sample) const;

  engine::EngineClient* client_ = nullptr;
  ServerMetrics* metrics_ = nullptr;
  const RequestLogger* logger_ = nullptr;
  std::optional<int32_t> max_tokens_;
  bool aborted_ = false;  // abort() was called
  bool engine_died_ = false;
  std::unique_ptr<engine::OutputProcessor> processor_;
  std::shared_ptr<engine::OutputStream> stream_;
  std::string request_id_;
  int n_ = 1;
  size_t prompt_count_ = 0;
  size_t num_finished_ = 0;
  Clock::time_point arrival_;
  std::map<std::string, size_t> prompt_of_parent_;
  std::map<std::string, EngineRequest> engine_requests_;
};

}  // namespace vllm::server
