#include "model/step_inputs.h"

#include <algorithm>
#include <cstring>

namespace vllm {
namespace {

template <typename T>
Expected<Tensor> upload(const ExecContext& ctx, const std::vector<T>& values) {
  Tensor host = Tensor::empty({static_cast<int64_t>(values.size())}, DTypeOf<T>::value);
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  if (ctx.device.is_cpu()) return host;
  return ops::to_device(ctx, host);
}

Expected<Tensor> place(const ExecContext& ctx, const Tensor& t, const char* name) {
  if (!t.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "ForwardBatch.{} is undefined", name);
  }
  if (t.device() == ctx.device) return t;
  if (!t.device().is_cpu()) {
    return make_error(ErrorCode::kInvalidArgument, "ForwardBatch.{} is on {}, the model on {}",
                      name, t.device().to_string(), ctx.device.to_string());
  }
  return ops::to_device(ctx, t);
}

}  // namespace

Status check_state_indices(std::span<const int32_t> state_indices, int64_t requests,
                           int64_t num_state_slots) {
  if (static_cast<int64_t>(state_indices.size()) != requests) {
    return make_error(ErrorCode::kInvalidArgument,
                      "state_indices has {} entries for {} requests; hybrid models need one GDN "
                      "state slot per request",
                      state_indices.size(), requests);
  }
  for (int64_t r = 0; r < requests; ++r) {
    const int32_t slot = state_indices[static_cast<size_t>(r)];
    if (slot < 0 || slot >= num_state_slots) {
      return make_error(ErrorCode::kOutOfRange, "state_indices[{}] = {} outside the {} state slots",
                        r, slot, num_state_slots);
    }
  }
  std::vector<int32_t> sorted(state_indices.begin(), state_indices.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return make_error(ErrorCode::kInvalidArgument, "state_indices must be distinct within a batch");
  }
  return Status::ok();
}

Expected<StepInputs> prepare_step(const ExecContext& ctx, const ForwardBatch& batch,
                                  int64_t num_state_slots) {
  const int64_t tokens = batch.num_tokens(), requests = batch.num_requests();
  if (static_cast<int64_t>(batch.query_start_loc.size()) != requests + 1 ||
      batch.query_start_loc.front() != 0 || batch.query_start_loc.back() != tokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "query_start_loc must have {} entries from 0 to the {} tokens", requests + 1,
                      tokens);
  }
  StepInputs in;
  in.num_tokens = tokens;
  in.num_logits = static_cast<int64_t>(batch.logits_indices.size());
  ops::BatchLayout& l = in.layout;
  std::vector<int32_t> reset;
  for (int64_t r = 0; r < requests; ++r) {
    const int32_t q_len = batch.query_start_loc[r + 1] - batch.query_start_loc[r];
    const int32_t seq_len = batch.seq_lens[static_cast<size_t>(r)];
    if (q_len < 0 || seq_len < q_len) {
      return make_error(ErrorCode::kInvalidArgument,
                        "request {}: {} query tokens with a context of {} (seq_lens must be at "
                        "least the query length)",
                        r, q_len, seq_len);
    }
    l.max_query_len = std::max(l.max_query_len, q_len);
    l.max_seq_len = std::max(l.max_seq_len, seq_len);
  }
  for (int64_t row : batch.logits_indices) {
    if (row < 0 || row >= tokens) {
      return make_error(ErrorCode::kOutOfRange, "logits_indices entry {} outside {} tokens", row,
                        tokens);
    }
  }
  if (num_state_slots > 0) {
    VLLM_RETURN_IF_ERROR(check_state_indices(batch.state_indices, requests, num_state_slots));
    for (int64_t r = 0; r < requests; ++r) {
      const int32_t slot = batch.state_indices[static_cast<size_t>(r)];
      // A request whose first scheduled token is position 0 starts from zeroed state.
      if (batch.seq_lens[static_cast<size_t>(r)] ==
          batch.query_start_loc[r + 1] - batch.query_start_loc[r]) {
        reset.push_back(slot);
      }
    }
  }
  l.query_start_loc = batch.query_start_loc;
  l.seq_lens = batch.seq_lens;
  l.state_indices = batch.state_indices;
  VLLM_ASSIGN_OR_RETURN(in.token_ids, place(ctx, batch.token_ids, "token_ids"));
  VLLM_ASSIGN_OR_RETURN(in.positions, place(ctx, batch.positions, "positions"));
  VLLM_ASSIGN_OR_RETURN(in.slot_mapping, place(ctx, batch.slot_mapping, "slot_mapping"));
  VLLM_ASSIGN_OR_RETURN(l.block_tables, place(ctx, batch.block_tables, "block_tables"));
  VLLM_ASSIGN_OR_RETURN(in.logits_indices, upload(ctx, batch.logits_indices));
  VLLM_ASSIGN_OR_RETURN(l.query_start_loc_device, upload(ctx, batch.query_start_loc));
  VLLM_ASSIGN_OR_RETURN(l.seq_lens_device, upload(ctx, batch.seq_lens));
  if (num_state_slots > 0) {
    VLLM_ASSIGN_OR_RETURN(l.state_indices_device, upload(ctx, batch.state_indices));
    if (!reset.empty()) {
      VLLM_ASSIGN_OR_RETURN(in.reset_slots, upload(ctx, reset));
    }
  }
  return in;
}

}  // namespace vllm
