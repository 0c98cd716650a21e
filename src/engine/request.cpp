#include "engine/request.h"

#include <utility>

namespace vllm::engine {

bool is_finished(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped ||
         status == RequestStatus::kFinishedLengthCapped ||
         status == RequestStatus::kFinishedAborted || status == RequestStatus::kFinishedError;
}

std::string_view finish_reason(RequestStatus status) {
  switch (status) {
    case RequestStatus::kFinishedStopped: return "stop";
    case RequestStatus::kFinishedLengthCapped: return "length";
    case RequestStatus::kFinishedAborted: return "abort";
    case RequestStatus::kFinishedError: return "error";
    default: return "";
  }
}

Request::Request(std::string request_id, std::vector<int32_t> prompt_token_ids,
                 SamplingParams params, std::vector<int32_t> eos_token_ids, int32_t block_size,
                 double arrival_time)
    : request_id_(std::move(request_id)),
      params_(std::move(params)),
      eos_token_ids_(std::move(eos_token_ids)),
      num_prompt_tokens_(static_cast<int64_t>(prompt_token_ids.size())),
      all_token_ids_(std::move(prompt_token_ids)),
      block_size_(block_size),
      arrival_time_(arrival_time) {
  append_request_block_hashes(all_token_ids_, block_size_, BlockHashExtras{}, block_hashes_);
}

void Request::append_output_token(const TokenLogprobs& sampled) {
  all_token_ids_.push_back(sampled.token_id);
  output_logprobs_.push_back(sampled);
  append_request_block_hashes(all_token_ids_, block_size_, BlockHashExtras{}, block_hashes_);
}

KVCacheRequest Request::kv_view() const {
  KVCacheRequest view;
  view.request_id = request_id_;
  view.all_token_ids = all_token_ids_;
  view.num_computed_tokens = num_computed_tokens;
  view.block_hashes = block_hashes_;
  view.skip_reading_prefix_cache = params_.prompt_logprobs.has_value();
  view.num_preemptions = num_preemptions;
  return view;
}

}  // namespace vllm::engine
