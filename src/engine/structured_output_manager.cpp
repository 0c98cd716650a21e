// StructuredOutputManager: grammar compilation, matchers, and per-step bitmasks on a worker
// thread (see structured_output_manager.h).
#include "engine/structured_output_manager.h"

#include <utility>

namespace vllm::engine {

std::span<const uint32_t> GrammarBitmask::mask_of(size_t index) const {
  if (index >= row_of_request.size() || row_of_request[index] < 0) return {};
  return {words.data() +
              static_cast<size_t>(row_of_request[index]) * static_cast<size_t>(words_per_row),
          static_cast<size_t>(words_per_row)};
}

BitmaskJob::~BitmaskJob() {
  wait();
}

const GrammarBitmask& BitmaskJob::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

StructuredOutputManager::StructuredOutputManager(
    std::shared_ptr<const structured::TokenVocabulary> vocab,
    structured::GrammarCompilerOptions options)
    : compiler_(std::move(vocab), std::move(options)) {
  worker_ = std::thread([this] { worker_loop(); });
}

StructuredOutputManager::~StructuredOutputManager() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

bool StructuredOutputManager::reasoning_ended_at(std::span<const int32_t> prompt,
                                                 bool await_reasoning_end) const {
  if (!reasoning_end_token_) return true;
  for (size_t i = prompt.size(); i-- > 0;) {
    if (prompt[i] == *reasoning_end_token_) return true;
    if (reasoning_start_token_ && prompt[i] == *reasoning_start_token_) return false;
  }
  return !await_reasoning_end;
}

Status StructuredOutputManager::validate(const structured::StructuredOutputsParams& params) {
  return compiler_.compile(params).status();
}

Expected<std::unique_ptr<structured::GrammarMatcher>> StructuredOutputManager::make_matcher(
    const structured::StructuredOutputsParams& params) {
  VLLM_ASSIGN_OR_RETURN(auto grammar, compiler_.compile(params));
  return std::make_unique<structured::GrammarMatcher>(std::move(grammar));
}

std::unique_ptr<BitmaskJob> StructuredOutputManager::start_bitmask(const SchedulerOutput& output) {
  // Rows: the scheduled requests that sample this step and carry a grammar.
  std::vector<std::pair<size_t, structured::GrammarMatcher*>> rows;
  for (size_t i = 0; i < output.requests.size(); ++i) {
    const ScheduledRequest& s = output.requests[i];
    if (s.samples && s.request->grammar && s.request->reasoning_ended) {
      rows.push_back({i, s.request->grammar.get()});
    }
  }
  if (rows.empty()) return nullptr;
  auto job = std::make_unique<BitmaskJob>();
  GrammarBitmask& mask = job->result_;
  mask.words_per_row = compiler_.vocab().bitmask_words();
  mask.words.assign(rows.size() * static_cast<size_t>(mask.words_per_row), 0);
  mask.row_of_request.assign(output.requests.size(), -1);
  for (size_t r = 0; r < rows.size(); ++r)
    mask.row_of_request[rows[r].first] = static_cast<int32_t>(r);
  BitmaskJob* raw = job.get();
  std::vector<int32_t> markers;  // reasoning markers: never part of a structured answer
  if (reasoning_start_token_) markers.push_back(*reasoning_start_token_);
  if (reasoning_end_token_) markers.push_back(*reasoning_end_token_);
  auto task = [raw, rows = std::move(rows), markers = std::move(markers)] {
    GrammarBitmask& m = raw->result_;
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::span<uint32_t> row(m.words.data() + r * static_cast<size_t>(m.words_per_row),
                                    static_cast<size_t>(m.words_per_row));
      rows[r].second->fill_next_token_bitmask(row);
      for (int32_t id : markers) {
        if (id >= 0 && static_cast<size_t>(id) / 32 < row.size())
          row[static_cast<size_t>(id) / 32] &= ~(1u << (id % 32));
      }
    }
    // Notify under the lock: the waiter may destroy the job as soon as it sees done_.
    std::lock_guard<std::mutex> lock(raw->mutex_);
    raw->done_ = true;
    raw->cv_.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(mutex_);
    VLLM_CHECK_MSG(!task_, "a grammar bitmask job is still pending");
    task_ = std::move(task);
  }
  cv_.notify_all();
  return job;
}

void StructuredOutputManager::worker_loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || task_; });
      if (!task_) return;  // stopping with nothing pending
      task = std::move(task_);
      task_ = nullptr;
    }
    task();
  }
}

}  // namespace vllm::engine
