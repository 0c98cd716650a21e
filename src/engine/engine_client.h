// The engine client: runs the EngineCore loop on its own thread and gives callers
// (the CLI, the server, the C ABI) a thread-safe way in and out.
//
// Callers add and abort requests through a queue; the engine thread drains it between steps,
// steps while any request is unfinished and sleeps when there is nothing to do. Each request's
// outputs go to its own OutputStream, which the caller reads (blocking, or with a timeout).
// All mutable engine state stays on the engine thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/engine_core.h"

namespace vllm::engine {

// One request's outputs, in order. The last one has finished() true.
class OutputStream {
 public:
  // The next output; nullopt if none arrived within `timeout` or the stream is done.
  std::optional<EngineCoreOutput> next(std::chrono::milliseconds timeout);
  // Blocks until the next output; nullopt once the finished output has been read.
  std::optional<EngineCoreOutput> next();
  bool done() const;

 private:
  friend class EngineClient;
  void push(EngineCoreOutput output);
  void fail(const Status& status);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<EngineCoreOutput> queue_;
  bool finished_pushed_ = false;
  bool finished_read_ = false;
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

  EngineStats stats() const;
  const ModelConfig& model_config() const { return model_config_; }

 private:
  struct NewRequest {
    std::string request_id;
    std::vector<int32_t> prompt;
    SamplingParams params;
  };

  void loop();

  std::unique_ptr<EngineCore> core_;
  ModelConfig model_config_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<NewRequest> new_requests_;
  std::vector<std::string> aborts_;
  std::unordered_map<std::string, std::shared_ptr<OutputStream>> streams_;
  EngineStats stats_;
  bool stop_ = false;
  bool paused_ = false;
  std::thread thread_;
};

}  // namespace vllm::engine
