#include "engine/engine_client.h"

#include <exception>
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
  call_notify();
}

void OutputStream::call_notify() {
  std::lock_guard<std::mutex> lock(notify_mutex_);
  if (notify_) notify_();
}

void OutputStream::set_notify(std::function<void()> notify) {
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(notify_mutex_);
    notify_ = std::move(notify);
    if (notify_) {
      std::lock_guard<std::mutex> queue_lock(mutex_);
      pending = !queue_.empty() || finished_read_;
    }
  }
  if (pending) call_notify();
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
  core_->set_failure_callback([this](const Status& failure) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = failure;
    }
    cv_.notify_all();
  });
  thread_ = std::thread([this] { loop(); });
}

EngineClient::~EngineClient() {
  core_->set_failure_callback(nullptr);
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
  if (dead()) return death_status();
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
      streams_.emplace(r.request_id,
                       StreamEntry{stream, static_cast<int64_t>(r.prompt_token_ids.size()), false});
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

Status EngineClient::death_status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return death_status_;
}

void EngineClient::set_step_observer(std::function<void(const StepStats&)> observer) {
  std::lock_guard<std::mutex> lock(observer_mutex_);
  step_observer_ = std::move(observer);
}

void EngineClient::fail_after_steps(int64_t n) {
  fail_in_steps_.store(std::max<int64_t>(n, 1));
}

Expected<std::vector<EngineCoreOutput>> EngineClient::run_step() {
  const int64_t left = fail_in_steps_.load();
  if (left > 0 && fail_in_steps_.fetch_sub(1) == 1) {
    return make_error(ErrorCode::kInternal, "engine step failed on purpose (test hook)");
  }
  try {
    return core_->step();
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInternal, "engine step threw: {}", e.what());
  } catch (...) {
    return make_error(ErrorCode::kInternal, "engine step threw");
  }
}

void EngineClient::die(const Status& status) {
  VLLM_LOG_ERROR("the engine died: {}", status.to_string());
  death_status_ = make_error(ErrorCode::kInternal,
                             "the engine has stopped after an internal error ({}); see the "
                             "server log",
                             status.message());
  dead_.store(true, std::memory_order_release);
  for (auto& [id, entry] : streams_) {
    EngineCoreOutput out;
    out.request_id = id;
    out.status = RequestStatus::kFinishedAborted;
    entry.stream->push(std::move(out));
  }
  streams_.clear();
  new_requests_.clear();
  aborts_.clear();
}

void EngineClient::loop() {
  while (true) {
    std::deque<NewRequest> added;
    std::vector<std::string> aborted;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] {
        return stop_ || !failure_.is_ok() ||
               (!paused_ &&
                (!new_requests_.empty() || !aborts_.empty() || core_->has_unfinished_requests()));
      });
      if (stop_) break;
      if (!failure_.is_ok()) {
        // A tensor-parallel worker died between steps: the engine cannot step again.
        die(failure_);
        return;
      }
      added.swap(new_requests_);
      aborted.swap(aborts_);
    }
    for (NewRequest& r : added) {
      Status s = core_->add_request(r.request_id, std::move(r.prompt), std::move(r.params));
      if (!s.is_ok()) {
        std::shared_ptr<OutputStream> stream;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          auto it = streams_.find(r.request_id);
          if (it != streams_.end()) {
            stream = it->second.stream;
            streams_.erase(it);
          }
        }
        if (stream) stream->fail(r.request_id, s);
      }
    }
    if (!aborted.empty()) core_->abort_requests(aborted);
    auto outputs = run_step();
    StepStats step;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_ = core_->stats();
      if (!outputs.has_value()) {
        // A failed step leaves the engine in an unknown state: it is dead, as in vLLM.
        die(outputs.status());
        return;
      }
      for (EngineCoreOutput& o : *outputs) {
        auto it = streams_.find(o.request_id);
        if (it == streams_.end()) continue;
        StreamEntry& entry = it->second;
        if (!o.new_token_ids.empty()) {
          step.num_generation_tokens += static_cast<int64_t>(o.new_token_ids.size());
          if (!entry.has_output_tokens) step.num_prompt_tokens += entry.num_prompt_tokens;
          entry.has_output_tokens = true;
        }
        const bool finished = o.finished();
        entry.stream->push(std::move(o));
        if (finished) streams_.erase(it);
      }
    }
    // Outside the engine lock: an observer may take its time without holding up callers.
    if (step.num_generation_tokens > 0) {
      std::lock_guard<std::mutex> lock(observer_mutex_);
      if (step_observer_) step_observer_(step);
    }
  }
  // Shutdown: whoever still waits gets an abort.
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, entry] : streams_) {
    EngineCoreOutput out;
    out.request_id = id;
    out.status = RequestStatus::kFinishedAborted;
    entry.stream->push(std::move(out));
  }
  streams_.clear();
}

}  // namespace vllm::engine
