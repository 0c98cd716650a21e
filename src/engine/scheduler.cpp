#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "base/logging.h"
#include "base/status.h"

namespace vllm::engine {

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager* kv_cache_manager,
                     StateSlotPool* state_slots)
    : config_(config), kv_(kv_cache_manager), state_slots_(state_slots) {
  VLLM_CHECK(kv_ != nullptr);
  VLLM_CHECK(config_.max_model_len > 0 && config_.max_num_seqs > 0 &&
             config_.max_num_batched_tokens > 0);
  snapshots_ = kv_->state_snapshots() != nullptr;
  VLLM_CHECK_MSG(!snapshots_ || state_slots_ != nullptr, "state snapshots without state slots");
  snapshot_policy_.block_size = kv_->block_size();
  snapshot_policy_.interval = config_.state_snapshot_interval;
  VLLM_CHECK_MSG(!snapshots_ || (snapshot_policy_.interval >= 0 &&
                                 snapshot_policy_.interval % snapshot_policy_.block_size == 0),
                 "state snapshot interval {} is not a multiple of the block size {}",
                 snapshot_policy_.interval, snapshot_policy_.block_size);
}

void Scheduler::add_request(std::unique_ptr<Request> request) {
  Request* raw = request.get();
  VLLM_CHECK_MSG(requests_.count(raw->request_id()) == 0, "duplicate request id {}",
                 raw->request_id());
  requests_.emplace(raw->request_id(), std::move(request));
  waiting_.push_back(raw);
  raw->record_event(EngineCoreEventType::kQueued);
}

Request* Scheduler::find(std::string_view request_id) {
  auto it = requests_.find(std::string(request_id));
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::preempt(Request* request) {
  kv_->free(request->request_id());
  if (state_slots_ != nullptr) state_slots_->free(request->request_id());
  request->status = RequestStatus::kPreempted;
  request->num_computed_tokens = 0;
  request->num_preemptions += 1;
  request->record_event(EngineCoreEventType::kPreempted);
  ++num_preemptions_;
  waiting_.push_front(request);
}

void Scheduler::free_request(Request* request) {
  kv_->free(request->request_id());
  if (state_slots_ != nullptr) state_slots_->free(request->request_id());
}

void Scheduler::update_junction(Request* req, int64_t computed) {
  if (!snapshots_ || computed >= req->num_tokens() - 1) return;
  // Blocks of this request's prefix past `computed` that are cached already are another
  // request's (computed, or being computed); where they end, the two prefixes part (or the
  // other one has got to), and later requests sharing the prefix will look for a state.
  const int64_t frontier = kv_->cached_prefix_end(req->kv_view(), computed);
  if (frontier > computed) req->snapshot_junction = frontier;
}

int64_t Scheduler::clip_to_snapshot(const Request* req, int64_t computed, int64_t n) const {
  if (!snapshots_ || n <= 0) return n;
  const std::optional<int64_t> stop =
      next_snapshot_position(snapshot_policy_, req->snapshot_view(), computed);
  return stop.has_value() ? std::min(n, *stop - computed) : n;
}

void Scheduler::maybe_save_snapshot(Request* req, const ScheduledRequest& s, SchedulerOutput* out) {
  if (!snapshots_) return;
  const int64_t end = s.num_computed_tokens + s.num_scheduled_tokens;
  const SnapshotKind kind = snapshot_kind_at(snapshot_policy_, req->snapshot_view(), end);
  if (kind == SnapshotKind::kNone) return;
  const std::optional<StateSnapshotReservation> reserved =
      kv_->reserve_state_snapshot(req->kv_view(), end);
  if (!reserved.has_value()) return;  // that prefix has one already, or no slot is free
  out->state_saves.add(s.state_slot, reserved->slot);
  out->saved_state_snapshots.push_back(reserved->block_hash);
  if (kind == SnapshotKind::kOutput) {
    if (req->output_snapshot.has_value()) kv_->demote_state_snapshot(*req->output_snapshot);
    req->output_snapshot = reserved->block_hash;
  }
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  auto cap = [&](const Request* req, int64_t computed) {
    int64_t n = req->num_tokens() - computed;
    if (config_.long_prefill_token_threshold > 0) {
      n = std::min(n, config_.long_prefill_token_threshold);
    }
    n = std::min(n, budget);
    // Never compute past max_model_len - 1: the token at max_model_len is never needed.
    n = std::min(n, config_.max_model_len - 1 - computed);
    return clip_to_snapshot(req, computed, n);
  };
  auto record = [&](Request* req, int64_t n) {
    ScheduledRequest s;
    s.request = req;
    s.num_computed_tokens = req->num_computed_tokens;
    s.num_scheduled_tokens = n;
    s.block_ids = kv_->get_block_ids(req->request_id());
    if (state_slots_ != nullptr) s.state_slot = *state_slots_->get_slot(req->request_id());
    maybe_save_snapshot(req, s, &out);
    out.requests.push_back(std::move(s));
    budget -= n;
  };

  // Running requests first, in order; preempt from the back when blocks run out.
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* req = running_[i];
    update_junction(req, req->num_computed_tokens);
    const int64_t n = cap(req, req->num_computed_tokens);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!kv_->allocate_slots(req->kv_view(), n).has_value()) {
      Request* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      out.preempted_request_ids.push_back(victim->request_id());
      preempted = true;
      if (victim == req) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    record(req, n);
    ++i;
  }

  // Then waiting requests, first come first served, unless this step preempted.
  while (!preempted && !waiting_.empty() && budget > 0 &&
         running_.size() < static_cast<size_t>(config_.max_num_seqs)) {
    Request* req = waiting_.front();
    if (state_slots_ != nullptr && !state_slots_->allocate(req->request_id()).has_value()) break;
    ComputedBlocks hit;
    if (req->num_computed_tokens == 0) hit = kv_->get_computed_blocks(req->kv_view());
    update_junction(req, hit.num_computed_tokens);
    const int64_t n = cap(req, hit.num_computed_tokens);
    if (n <= 0) {
      if (state_slots_ != nullptr) state_slots_->free(req->request_id());
      break;
    }
    if (!kv_->allocate_slots(req->kv_view(), n, hit.num_computed_tokens, hit.blocks).has_value()) {
      if (state_slots_ != nullptr) state_slots_->free(req->request_id());
      break;
    }
    kv_->record_prefix_cache_stats(req->kv_view(), hit.num_computed_tokens);
    waiting_.pop_front();
    running_.push_back(req);
    req->status = RequestStatus::kRunning;
    req->record_event(EngineCoreEventType::kScheduled);
    req->num_computed_tokens = hit.num_computed_tokens;
    if (req->num_cached_tokens < 0) req->num_cached_tokens = hit.num_computed_tokens;
    if (hit.state_snapshot_slot.has_value()) {
      out.state_restores.add(*hit.state_snapshot_slot, *state_slots_->get_slot(req->request_id()));
    }
    record(req, n);
  }

  // The scheduled tokens count as computed from here on (vLLM's _update_after_schedule).
  for (ScheduledRequest& s : out.requests) {
    s.request->num_computed_tokens += s.num_scheduled_tokens;
    s.samples = s.request->num_computed_tokens == s.request->num_tokens();
    out.total_num_scheduled_tokens += s.num_scheduled_tokens;
  }
  return out;
}

bool Scheduler::check_stop(Request* req) {
  const SamplingParams& params = req->params();
  const int64_t max_tokens = params.max_tokens.has_value()
                                 ? *params.max_tokens
                                 : config_.max_model_len - req->num_prompt_tokens();
  if (req->num_tokens() >= config_.max_model_len || req->num_output_tokens() >= max_tokens) {
    req->status = RequestStatus::kFinishedLengthCapped;
    return true;
  }
  if (req->grammar && req->grammar->is_terminated()) {  // its grammar accepted an EOS token
    req->status = RequestStatus::kFinishedStopped;
    return true;
  }
  if (req->num_output_tokens() < params.min_tokens) return false;
  const int32_t last = req->output_token_ids().back();
  const auto eos = req->eos_token_ids();
  if (!params.ignore_eos && std::find(eos.begin(), eos.end(), last) != eos.end()) {
    req->status = RequestStatus::kFinishedStopped;
    return true;
  }
  const auto& stops = params.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), last) != stops.end()) {
    req->status = RequestStatus::kFinishedStopped;
    req->stop_token = last;
    return true;
  }
  return false;
}

std::vector<EngineCoreOutput> Scheduler::update_from_output(
    const SchedulerOutput& output, std::span<const TokenLogprobs> sampled,
    std::span<const std::vector<TokenLogprobs>> prompt_logprobs) {
  // The step ran: the states it saved are snapshots now.
  for (const BlockHash& hash : output.saved_state_snapshots) kv_->commit_state_snapshot(hash);
  std::vector<EngineCoreOutput> outputs;
  size_t next_sample = 0;
  for (size_t i = 0; i < output.requests.size(); ++i) {
    const ScheduledRequest& s = output.requests[i];
    Request* req = s.request;
    EngineCoreOutput o;
    o.request_id = req->request_id();
    o.num_cached_tokens = std::max<int64_t>(req->num_cached_tokens, 0);
    if (i < prompt_logprobs.size() && !prompt_logprobs[i].empty()) {
      o.prompt_logprobs = prompt_logprobs[i];
      req->prompt_logprobs.insert(req->prompt_logprobs.end(), prompt_logprobs[i].begin(),
                                  prompt_logprobs[i].end());
    }
    if (s.samples) {
      VLLM_CHECK(next_sample < sampled.size());
      const TokenLogprobs& token = sampled[next_sample++];
      if (req->grammar && !req->reasoning_ended) {
        // Still reasoning: the grammar starts after the token that ends it.
        req->reasoning_ended = token.token_id == req->reasoning_end_token;
      } else if (req->grammar && !req->grammar->accept_token(token.token_id)) {
        // Its grammar allowed no token at this point (the mask was empty): the request
        // cannot continue. The token is not part of the output.
        VLLM_LOG_WARNING("request {}: its structured output grammar allows no token after {} "
                      "output tokens; finishing it with finish_reason \"error\"",
                      req->request_id(), req->num_output_tokens());
        req->status = RequestStatus::kFinishedError;
        o.status = req->status;
        running_.erase(std::find(running_.begin(), running_.end(), req));
        free_request(req);
        outputs.push_back(std::move(o));
        continue;
      }
      req->append_output_token(token);
      o.new_token_ids.push_back(token.token_id);
      o.new_logprobs.push_back(token);  // the chosen token's logprob always; top-N when asked
      if (check_stop(req)) {
        o.status = req->status;
        o.stop_token = req->stop_token;
        running_.erase(std::find(running_.begin(), running_.end(), req));
        free_request(req);
      }
    }
    if (o.new_token_ids.empty() && o.prompt_logprobs.empty()) continue;
    o.events = std::move(req->events);
    req->events.clear();
    outputs.push_back(std::move(o));
  }
  VLLM_CHECK_MSG(next_sample == sampled.size(), "{} samples for {} sampling requests",
                 sampled.size(), next_sample);
  // Finished requests are gone from the queues; drop them.
  for (const EngineCoreOutput& o : outputs) {
    if (o.finished()) requests_.erase(o.request_id);
  }
  return outputs;
}

std::vector<EngineCoreOutput> Scheduler::finish_requests(std::span<const std::string> request_ids,
                                                         RequestStatus status) {
  std::vector<EngineCoreOutput> outputs;
  for (const std::string& id : request_ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request* req = it->second.get();
    if (req->status == RequestStatus::kRunning) {
      running_.erase(std::find(running_.begin(), running_.end(), req));
    } else {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), req));
    }
    free_request(req);
    req->status = status;
    EngineCoreOutput o;
    o.request_id = id;
    o.status = status;
    o.events = std::move(req->events);
    outputs.push_back(std::move(o));
    requests_.erase(it);
  }
  return outputs;
}

}  // namespace vllm::engine
