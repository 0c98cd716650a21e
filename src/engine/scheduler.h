// The V1 scheduler: which requests get how many tokens in the next step.
//
// There is no prefill phase and no decode phase. Every request has tokens (prompt, then its
// outputs) and a num_computed_tokens that trails them; each step, under one token budget
// (max_num_batched_tokens) and a cap on running requests (max_num_seqs), the scheduler lets
// each request's num_computed_tokens catch up as far as the budget allows -- a whole prompt,
// a chunk of one (chunked prefill), or the one new token of a decoding request. Running
// requests go first, in order, then waiting ones, first come first served. When a running
// request cannot get a KV block, the most recently admitted running request is preempted
// (its blocks freed, its progress dropped: it is recomputed later); no waiting request is
// admitted in a step that preempted.
//
// Hybrid models with prefix caching: a prefill chunk also ends at each GDN state snapshot
// position (state_snapshot_policy.h); the step then saves the request's state into a snapshot
// slot, and a request admitted on a prefix-cache hit first gets the hit's snapshot copied into
// its state slot (SchedulerOutput::state_restores / state_saves).
//
// The scheduler owns the requests; the KV cache manager and state slots are borrowed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/state_slot_pool.h"

namespace vllm::engine {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 0;
  int64_t long_prefill_token_threshold = 0;  // 0: a prefill chunk may take the whole budget
  // Hybrid models with prefix caching: tokens between prompt state snapshots (a multiple of
  // the block size; 0: only prompt ends, junctions and outputs).
  int64_t state_snapshot_interval = 0;
};

// GDN state slot copies: src_slots[i] -> dst_slots[i] (model/state_copy.h).
struct StateSlotCopies {
  std::vector<int32_t> src_slots;
  std::vector<int32_t> dst_slots;

  bool empty() const { return src_slots.empty(); }
  void add(int32_t src, int32_t dst) {
    src_slots.push_back(src);
    dst_slots.push_back(dst);
  }
};

struct ScheduledRequest {
  Request* request = nullptr;
  int64_t num_computed_tokens = 0;   // before this step: position of the first token
  int64_t num_scheduled_tokens = 0;
  std::vector<int32_t> block_ids;    // the request's whole block table
  int32_t state_slot = 0;            // hybrid models
  bool samples = false;              // this step reaches its last token: sample the next one
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> requests;
  int64_t total_num_scheduled_tokens = 0;
  std::vector<std::string> preempted_request_ids;
  // Hybrid models: snapshots restored into admitted requests' slots before the forward pass,
  // and states saved into reserved snapshot slots after it (committed by update_from_output).
  StateSlotCopies state_restores;
  StateSlotCopies state_saves;
  std::vector<BlockHash> saved_state_snapshots;  // one per state_saves pair

  bool empty() const { return requests.empty(); }
};

// What one step produced for one request (vLLM's EngineCoreOutput).
struct EngineCoreOutput {
  std::string request_id;
  std::vector<int32_t> new_token_ids;
  std::vector<TokenLogprobs> new_logprobs;     // when logprobs were asked for
  std::vector<TokenLogprobs> prompt_logprobs;  // once, when the prompt is computed
  RequestStatus status = RequestStatus::kRunning;
  std::optional<int32_t> stop_token;  // the stop / EOS token that finished it
  int64_t num_cached_tokens = 0;
  std::vector<EngineCoreEvent> events;  // since the request's previous output

  bool finished() const { return is_finished(status); }
};

class Scheduler {
 public:
  // `state_slots` is null for models without GDN layers.
  Scheduler(const SchedulerConfig& config, KVCacheManager* kv_cache_manager,
            StateSlotPool* state_slots);

  void add_request(std::unique_ptr<Request> request);
  Request* find(std::string_view request_id);

  SchedulerOutput schedule();

  // Appends the sampled tokens (one per scheduled request that samples, in order), checks
  // the stop conditions, frees finished requests. prompt_logprobs[i] belongs to
  // output.requests[i] (may be empty).
  std::vector<EngineCoreOutput> update_from_output(
      const SchedulerOutput& output, std::span<const TokenLogprobs> sampled,
      std::span<const std::vector<TokenLogprobs>> prompt_logprobs);

  // Finishes the requests (aborts, stop strings found by the output processor): frees their
  // blocks and slots. Unknown or already finished ids are ignored.
  std::vector<EngineCoreOutput> finish_requests(std::span<const std::string> request_ids,
                                                RequestStatus status);

  bool has_unfinished_requests() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  void preempt(Request* request);
  void free_request(Request* request);
  bool check_stop(Request* request);
  // Hybrid models: notes where the cached KV of the request's prefix ends ahead of it (a
  // junction, state_snapshot_policy.h); shortens a chunk to the next snapshot position;
  // reserves the snapshot when the chunk ends at one.
  void update_junction(Request* request, int64_t num_computed_tokens);
  int64_t clip_to_snapshot(const Request* request, int64_t num_computed_tokens,
                           int64_t num_new_tokens) const;
  void maybe_save_snapshot(Request* request, const ScheduledRequest& scheduled,
                           SchedulerOutput* out);

  SchedulerConfig config_;
  KVCacheManager* kv_;
  StateSlotPool* state_slots_;
  bool snapshots_ = false;  // the KV cache manager keeps GDN state snapshots
  StateSnapshotPolicy snapshot_policy_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  int64_t num_preemptions_ = 0;
};

}  // namespace vllm::engine
