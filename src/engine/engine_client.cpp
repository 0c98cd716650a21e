#include "engine/engine_client.h"

#include <utility>

#include "base/logging.h"

namespace vllm::engine {

void OutputStream::push(EngineCoreOutput output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_pushed_.count(output.request_id) != 0) return;
    if (output.finished()) finished_pushed_.insert(output.request_id);
    queue_.push_back(std::move(output));
  }
  cv_.notify_all();
}

void OutputStream::fail(const std::string& request_id, const Status& status) {
  EngineCoreOutput out;
  out.request_id = request_id;
  out.status = RequestStatus::kFinishedAborted;
  VLLM_LOG_ERROR("request aborted by an engine error: {}", status.to_string());
  push(std::move(out));
}

std::optional<EngineCoreOutput> OutputStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || finished_read_; })) {
    return std::nullopt;
  }
  if (queue_.empty()) return std::nullopt;
  EngineCoreOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished() && ++num_finished_read_ >= num_requests_) finished_read_ = true;
  return out;
}

std::optional<EngineCoreOutput> OutputStream::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !queue_.empty() || finished_read_; });
  if (queue_.empty()) return std::nullopt;
  EngineCoreOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finished() && ++num_finished_read_ >= num_requests_) finished_read_ = true;
  return out;
}

bool OutputStream::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_read_;
}

EngineClient::EngineClient(std::unique_ptr<EngineCore> core)
    : core_(std::move(core)),
      model_config_(core_->model_config()),
      max_model_len_(core_->config().scheduler.max_model_len),
      stats_(core_->stats()) {
  thread_ = std::thread([this] { loop(); });
}

EngineClient::~EngineClient() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Expected<std::shared_ptr<OutputStream>> EngineClient::add_request(const std::string& request_id,
                                                                   std::vector<int32_t> prompt,
                                                                   SamplingParams params) {
  std::vector<RequestSpec> one;
  one.push_back({request_id, std::move(prompt), std::move(params)});
  return add_requests(std::move(one));
}

Expected<std::shared_ptr<OutputStream>> EngineClient::add_requests(
    std::vector<RequestSpec> requests) {
  if (requests.empty()) return make_error(ErrorCode::kInvalidArgument, "no requests to add");
  for (RequestSpec& r : requests) {
    Status valid = core_->validate_request(r.prompt_token_ids, r.params);
    if (!valid.is_ok()) return valid;
  }
  auto stream = std::make_shared<OutputStream>(requests.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return make_error(ErrorCode::kResourceExhausted, "the engine is shutting down");
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string& id = requests[i].request_id;
      bool taken = streams_.count(id) != 0;
      for (size_t j = 0; j < i && !taken; ++j) taken = requests[j].request_id == id;
      if (taken) {
        return make_error(ErrorCode::kInvalidArgument, "request id {} is already in use", id);
      }
    }
    for (RequestSpec& r : requests) {
      streams_.emplace(r.request_id, stream);
      new_requests_.push_back(
          {std::move(r.request_id), std::move(r.prompt_token_ids), std::move(r.params)});
    }
  }
  cv_.notify_all();
  return stream;
}

void EngineClient::abort_request(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back(request_id);
  }
  cv_.notify_all();
}

void EngineClient::pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_ = true;
}

void EngineClient::resume() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    paused_ = false;
  }
  cv_.notify_all();
}

EngineStats EngineClient::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void EngineClient::loop() {
  while (true) {
    std::deque<NewRequest> added;
    std::vector<std::string> aborted;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stop_ || (!paused_ && (!new_requests_.empty() || !aborts_.empty() ||
                                      core_->has_unfinished_requests()));
      });
      if (stop_) break;
      added.swap(new_requests_);
      aborted.swap(aborts_);
    }
    for (NewRequest& r : added) {
      Status s = core_->add_request(r.request_id, std::move(r.prompt), std::move(r.params));
      if (!s.is_ok()) {
        std::shared_ptr<OutputStream> stream;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          stream = streams_[r.request_id];
          streams_.erase(r.request_id);
        }
        if (stream) stream->fail(r.request_id, s);
      }
    }
    if (!aborted.empty()) core_->abort_requests(aborted);
    auto outputs = core_->step();
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = core_->stats();
    if (!outputs.has_value()) {
      // An engine error is a bug; fail every request rather than hang their callers.
      VLLM_LOG_ERROR("engine step failed: {}", outputs.status().to_string());
      std::vector<std::string> ids;
      for (auto& [id, stream] : streams_) {
        stream->fail(id, outputs.status());
        ids.push_back(id);
      }
      streams_.clear();
      core_->abort_requests(ids);
      continue;
    }
    for (EngineCoreOutput& o : *outputs) {
      auto it = streams_.find(o.request_id);
      if (it == streams_.end()) continue;
      const bool finished = o.finished();
      it->second->push(std::move(o));
      if (finished) streams_.erase(it);
    }
  }
  // Shutdown: whoever still waits gets an abort.
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, stream] : streams_) {
    EngineCoreOutput out;
    out.request_id = id;
    out.status = RequestStatus::kFinishedAborted;
    stream->push(std::move(out));
  }
  streams_.clear();
}

}  // namespace vllm::engine
