#include "server/generation.h"

#include <algorithm>
#include <utility>

namespace vllm::server {
namespace {

double seconds(Generation::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

std::string Generation::engine_id(size_t prompt, int sample) const {
  const std::string parent = request_id_ + "-" + std::to_string(prompt);
  // The output processor names children "<i>_<parent>" when n > 1.
  return n_ == 1 ? parent : std::to_string(sample) + "_" + parent;
}

Expected<std::unique_ptr<Generation>> Generation::start(
    engine::EngineClient* client, const Tokenizer* tokenizer, ServerMetrics* metrics,
    const RequestLogger* logger, const std::string& request_id,
    const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params,
    Clock::time_point arrival) {
  // The engine validates each of the n children (n = 1 each); n itself is checked here.
  SamplingParams checked = params;
  checked.normalize();
  VLLM_RETURN_IF_ERROR(checked.validate(static_cast<int32_t>(client->model_config().vocab_size)));
  std::unique_ptr<Generation> g(new Generation());
  g->client_ = client;
  g->metrics_ = metrics;
  g->logger_ = logger;
  g->max_tokens_ = params.max_tokens;
  g->processor_ = std::make_unique<engine::OutputProcessor>(tokenizer);
  g->request_id_ = request_id;
  g->n_ = std::max(params.n, 1);
  g->prompt_count_ = prompts.size();
  g->arrival_ = arrival;
  std::vector<engine::EngineClient::RequestSpec> specs;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::string parent = request_id + "-" + std::to_string(p);
    VLLM_ASSIGN_OR_RETURN(auto children, g->processor_->add_request(parent, prompts[p], params));
    g->prompt_of_parent_[parent] = p;
    for (auto& child : children) {
      EngineRequest& r = g->engine_requests_[child.request_id];
      r.num_prompt_tokens = static_cast<int64_t>(prompts[p].size());
      specs.push_back({child.request_id, prompts[p], std::move(child.params)});
    }
  }
  VLLM_ASSIGN_OR_RETURN(g->stream_, client->add_requests(std::move(specs)));
  if (logger != nullptr) {
    for (const auto& [parent, p] : g->prompt_of_parent_) logger->log_added(parent);
  }
  return g;
}

Generation::~Generation() {
  if (stream_) stream_->set_notify(nullptr);
  abort();
}

void Generation::set_wake(std::function<void()> wake) {
  stream_->set_notify(std::move(wake));
}

void Generation::observe(const engine::EngineCoreOutput& out, Clock::time_point now) {
  auto it = engine_requests_.find(out.request_id);
  if (it == engine_requests_.end()) return;
  EngineRequest& r = it->second;
  for (const engine::EngineCoreEvent& event : out.events) {
    if (event.type == engine::EngineCoreEventType::kQueued && r.queued_ts < 0)
      r.queued_ts = event.timestamp;
    if (event.type == engine::EngineCoreEventType::kScheduled && r.scheduled_ts < 0)
      r.scheduled_ts = event.timestamp;
  }
  if (out.finished()) {
    r.engine_finished = true;
    if (out.status == engine::RequestStatus::kFinishedAborted && !aborted_ && client_->dead())
      engine_died_ = true;
  }
  if (out.new_token_ids.empty()) return;
  const auto count = static_cast<int64_t>(out.new_token_ids.size());
  const double now_ts = engine::monotonic_seconds();
  if (r.num_tokens == 0) {
    r.first_token = now;
    r.first_token_ts = now_ts;
    if (metrics_) {
      metrics_->record_first_token(seconds(now - arrival_), r.num_prompt_tokens);
      metrics_->record_tokens(count, -1.0);
    }
  } else if (metrics_) {
    metrics_->record_tokens(count, seconds(now - r.last_token));
  }
  r.num_tokens += count;
  r.last_token = now;
  r.last_token_ts = now_ts;
}

void Generation::record_finished(EngineRequest& r, const std::string& reason,
                                 Clock::time_point now) {
  if (r.recorded) return;
  r.recorded = true;
  if (!metrics_) return;
  FinishedRequestStats stats;
  stats.finish_reason = reason;
  stats.e2e_seconds = seconds(now - arrival_);
  stats.num_prompt_tokens = r.num_prompt_tokens;
  stats.num_generation_tokens = r.num_tokens;
  stats.max_tokens_param = max_tokens_;
  if (r.num_tokens > 0) {
    stats.first_token_seconds = seconds(r.first_token - arrival_);
    stats.last_token_seconds = seconds(r.last_token - arrival_);
  }
  // vLLM's intervals: queued until first scheduled, prefill until the first token, decode
  // from the first to the last token, inference from first scheduled to the last token.
  if (r.queued_ts >= 0 && r.scheduled_ts >= 0) stats.queued_seconds = r.scheduled_ts - r.queued_ts;
  if (r.scheduled_ts >= 0 && r.num_tokens > 0) {
    stats.prefill_seconds = r.first_token_ts - r.scheduled_ts;
    stats.decode_seconds = r.last_token_ts - r.first_token_ts;
    stats.inference_seconds = r.last_token_ts - r.scheduled_ts;
  }
  metrics_->record_finished(stats);
}

std::vector<Generation::Update> Generation::next(std::chrono::milliseconds timeout) {
  std::vector<Update> updates;
  if (finished()) return updates;
  std::vector<engine::EngineCoreOutput> batch;
  if (auto first = stream_->next(timeout)) {
    batch.push_back(std::move(*first));
    while (auto more = stream_->next(std::chrono::milliseconds(0)))
      batch.push_back(std::move(*more));
  }
  if (batch.empty()) {
    if (stream_->done()) num_finished_ = prompt_count_;  // nothing more can come
    return updates;
  }
  const Clock::time_point now = Clock::now();
  for (const auto& out : batch) observe(out, now);
  std::vector<std::string> to_abort;
  for (engine::RequestOutput& r : processor_->process(batch, &to_abort)) {
    const size_t p = prompt_of_parent_.at(r.request_id);
    for (const engine::CompletionOutput& c : r.outputs) {
      if (!c.finished()) continue;
      const std::string id = engine_id(p, c.index);
      record_finished(engine_requests_[id], c.finish_reason, now);
      if (logger_ != nullptr) logger_->log_outputs(id, c.text, c.token_ids, c.finish_reason);
    }
    if (r.finished) {
      ++num_finished_;
      if (metrics_) {
        int64_t most = 0;
        for (const engine::CompletionOutput& c : r.outputs)
          most = std::max<int64_t>(most, static_cast<int64_t>(c.token_ids.size()));
        metrics_->record_parent_finished(n_, most);
      }
    }
    updates.push_back({p, std::move(r)});
  }
  for (const std::string& id : to_abort) client_->abort_request(id);
  return updates;
}

void Generation::abort() {
  const Clock::time_point now = Clock::now();
  aborted_ = true;
  for (auto& [id, r] : engine_requests_) {
    if (!r.engine_finished) {
      client_->abort_request(id);
      r.engine_finished = true;
      if (logger_ != nullptr) logger_->log_aborted(id);
    }
    record_finished(r, "abort", now);
  }
}

}  // namespace vllm::server
