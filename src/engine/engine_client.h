// The engine client: runs the EngineCore loop on its own thread and gives callers
// (the CLI, the server, the C ABI) a thread-safe way in and out.
//
// Callers add and abort requests through a queue; the engine thread drains it between steps,
// steps while any request is unfinished and sleeps when there is nothing to do. Each request's
// outputs go to its own OutputStream, which the caller reads (blocking, or with a timeout).
// All mutable engine state stays on the engine thread.
//
// A failed step (the model errored, or threw) kills the engine, as vLLM's EngineDeadError:
// every request in flight ends aborted, new ones are refused, and dead() stays true; the
// server answers /health with 503 and exits non-zero. So does a tensor-parallel worker that
// dies, even while the engine is idle (EngineCore::set_failure_callback).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "engine/engine_core.h"

namespace vllm::engine {

// One request's outputs, in order; or the outputs of several requests interleaved (a
// request's n samples, a batch of prompts: add_requests), each ending with its finished()
// output. The stream is done once every request's finished output has been read.
class OutputStream {
 public:
  explicit OutputStream(size_t num_requests = 1) : num_requests_(num_requests) {}

  // The next output; nullopt if none arrived within `timeout` or the stream is done.
  std::optional<EngineCoreOutput> next(std::chrono::milliseconds timeout);
  // Blocks until the next output; nullopt once the finished output has been read.
  std::optional<EngineCoreOutput> next();
  bool done() const;

  // `notify` is called after each output arrives (on the engine thread), and at once if
  // outputs are already waiting; it must return quickly and call neither this stream nor the
  // engine client (an event loop posts a read instead). Null clears it; once set_notify returns,
  // the previous notify is not running and is never called again.
  void set_notify(std::function<void()> notify);

 private:
  friend class EngineClient;
  void push(EngineCoreOutput output);
  void fail(const std::string& request_id, const Status& status);
  void call_notify();

  std::mutex notify_mutex_;  // held while notify_ runs
  std::function<void()> notify_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<EngineCoreOutput> queue_;
  const size_t num_requests_;
  std::unordered_set<std::string> finished_pushed_;  // request ids
  size_t num_finished_read_ = 0;
  bool finished_read_ = false;  // every request's finished output has been read
};

class EngineClient {
 public:
  explicit EngineClient(std::unique_ptr<EngineCore> core);
  ~EngineClient();  // aborts what is left and joins the engine thread

  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // Validates on the caller's thread (against the model's immutable limits) and queues the
  // request; the stream receives its outputs.
  Expected<std::shared_ptr<OutputStream>> add_request(const std::string& request_id,
                                                      std::vector<int32_t> prompt_token_ids,
                                                      SamplingParams params);
  void abort_request(const std::string& request_id);

  // Pausing holds the engine thread between steps: requests can still be added and aborted
  // (they queue), nothing is scheduled until resume(). Used to drain or inspect a quiescent
  // engine, as vLLM's pause/resume generation.
  void pause();
  void resume();

  // Several requests whose outputs share one stream, e.g. the children of a request with
  // n > 1 or the prompts of one batched API call. All are validated before any is queued:
  // either all are added or none.
  struct RequestSpec {
    std::string request_id;
    std::vector<int32_t> prompt_token_ids;
    SamplingParams params;
  };
  Expected<std::shared_ptr<OutputStream>> add_requests(std::vector<RequestSpec> requests);

  // The longest prompt + output the engine accepts (resolved from the model when 0 was asked).
  int64_t max_model_len() const { return max_model_len_; }

  EngineStats stats() const;
  const ModelConfig& model_config() const { return model_config_; }

  // True once a step has failed and the engine thread has stopped for good; death_status()
  // says why.
  bool dead() const { return dead_.load(std::memory_order_acquire); }
  Status death_status() const;

  // What one step produced, counted as vLLM's IterationStats counts it: the prompt tokens of
  // requests whose first output token came in this step, and the output tokens.
  struct StepStats {
    int64_t num_prompt_tokens = 0;
    int64_t num_generation_tokens = 0;
  };
  // Called on the engine thread after every step that produced output tokens; null clears
  // (and waits for a call in progress to return).
  void set_step_observer(std::function<void(const StepStats&)> observer);

  // Test hook: the engine's `n`-th step from now (n >= 1) fails as if the model had
  // errored, which kills the engine.
  void fail_after_steps(int64_t n);

 private:
  struct NewRequest {
    std::string request_id;
    std::vector<int32_t> prompt;
    SamplingParams params;
  };
  struct StreamEntry {
    std::shared_ptr<OutputStream> stream;
    int64_t num_prompt_tokens = 0;
    bool has_output_tokens = false;
  };

  void loop();
  Expected<std::vector<EngineCoreOutput>> run_step();
  void die(const Status& status);  // engine thread, mutex_ held

  std::unique_ptr<EngineCore> core_;
  ModelConfig model_config_;
  int64_t max_model_len_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<NewRequest> new_requests_;
  std::vector<std::string> aborts_;
  std::unordered_map<std::string, StreamEntry> streams_;
  EngineStats stats_;
  bool stop_ = false;
  bool paused_ = false;
  Status failure_;  // a tensor-parallel worker failed (guarded by mutex_)
  std::atomic<bool> dead_{false};
  Status death_status_;
  std::atomic<int64_t> fail_in_steps_{0};
  std::mutex observer_mutex_;  // held while step_observer_ runs
  std::function<void(const StepStats&)> step_observer_;
  std::thread thread_;
};

}  // namespace vllm::engine
