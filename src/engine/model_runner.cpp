#include "engine/model_runner.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "base/profile.h"
#include "engine/worker_group.h"
#include "ops/graph.h"
#include "ops/ops.h"

namespace vllm::engine {
namespace {

Tensor i64_tensor(const std::vector<int64_t>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::kI64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

}  // namespace

ModelRunner::ModelRunner(Model* model, ModelCache cache, uint64_t seed, WorkerGroup* workers)
    : model_(model), cache_(std::move(cache)), workers_(workers), sampler_(seed) {
  // Sampling of GPU logits queues after the model's work on its stream.
  sampler_.set_device_stream(model_->context().stream);
  if (const char* step = std::getenv("VLLM_CUDA_PROFILE_STEP")) profile_step_ = std::atoll(step);
}

ForwardBatch ModelRunner::prepare_inputs(const SchedulerOutput& output,
                                         std::vector<std::vector<int64_t>>* prompt_rows) const {
  const int64_t block_size = cache_.config.block_size;
  const auto num_requests = static_cast<int64_t>(output.requests.size());
  size_t max_blocks = 1;
  for (const ScheduledRequest& s : output.requests)
    max_blocks = std::max(max_blocks, s.block_ids.size());

  ForwardBatch batch;
  std::vector<int64_t> ids, positions, slots;
  ids.reserve(static_cast<size_t>(output.total_num_scheduled_tokens));
  batch.block_tables = Tensor::zeros({num_requests, static_cast<int64_t>(max_blocks)}, DType::kI32);
  batch.query_start_loc.push_back(0);
  prompt_rows->assign(output.requests.size(), {});
  for (int64_t r = 0; r < num_requests; ++r) {
    const ScheduledRequest& s = output.requests[static_cast<size_t>(r)];
    const auto tokens = s.request->all_token_ids();
    const int64_t begin = s.num_computed_tokens, end = begin + s.num_scheduled_tokens;
    for (int64_t p = begin; p < end; ++p) {
      // Prompt logprobs: the row of prompt position p predicts prompt token p + 1.
      if (s.request->params().prompt_logprobs.has_value() &&
          p + 1 < s.request->num_prompt_tokens()) {
        (*prompt_rows)[static_cast<size_t>(r)].push_back(static_cast<int64_t>(ids.size()));
      }
      ids.push_back(tokens[static_cast<size_t>(p)]);
      positions.push_back(p);
      slots.push_back(s.block_ids[static_cast<size_t>(p / block_size)] * block_size +
                      p % block_size);
    }
    std::copy(s.block_ids.begin(), s.block_ids.end(),
              batch.block_tables.data<int32_t>() + r * static_cast<int64_t>(max_blocks));
    batch.query_start_loc.push_back(static_cast<int32_t>(ids.size()));
    batch.seq_lens.push_back(static_cast<int32_t>(end));
    batch.state_indices.push_back(s.state_slot);
  }
  // Logits rows: prompt-logprob rows of each request, then its sampling row.
  for (int64_t r = 0; r < num_requests; ++r) {
    const ScheduledRequest& s = output.requests[static_cast<size_t>(r)];
    for (int64_t row : (*prompt_rows)[static_cast<size_t>(r)]) batch.logits_indices.push_back(row);
    if (s.samples)
      batch.logits_indices.push_back(batch.query_start_loc[static_cast<size_t>(r) + 1] - 1);
  }
  batch.token_ids = i64_tensor(ids);
  batch.positions = i64_tensor(positions);
  batch.slot_mapping = i64_tensor(slots);
  return batch;
}

Expected<Tensor> ModelRunner::gather_sample_rows(const Tensor& logits,
                                                 const std::vector<int64_t>& rows) const {
  const auto count = static_cast<int64_t>(rows.size());
  // Usually every logits row samples (no prompt logprobs): nothing to gather.
  bool identity = count == logits.size(0);
  for (int64_t i = 0; identity && i < count; ++i) identity = rows[static_cast<size_t>(i)] == i;
  Tensor out = logits;
  if (!identity) {
    const ExecContext& ctx = model_->context();
    VLLM_ASSIGN_OR_RETURN(Tensor index, ops::to_device(ctx, i64_tensor(rows)));
    if (logits.device().is_cpu()) {
      VLLM_ASSIGN_OR_RETURN(out, Tensor::try_empty({count, logits.size(1)}, DType::kF32));
    } else {
      VLLM_ASSIGN_OR_RETURN(out, ctx.alloc({count, logits.size(1)}, DType::kF32));
    }
    VLLM_RETURN_IF_ERROR(ops::gather_rows(ctx, logits, index, out));
  }
  return out;
}

Status ModelRunner::capture_graphs(const std::vector<int64_t>& sizes, int64_t max_model_len) {
  graphs_.reset();
  VLLM_ASSIGN_OR_RETURN(graphs_, DecodeGraphs::capture(*model_, cache_, sizes, max_model_len));
  return Status::ok();
}

Expected<StepResult> ModelRunner::execute(const SchedulerOutput& output,
                                          BitmaskJob* grammar_masks) {
  StepResult result;
  result.prompt_logprobs.resize(output.requests.size());
  if (output.empty()) return result;
  VLLM_PROFILE_SCOPE("step.execute");
  const bool profiled = steps_++ == profile_step_;
  if (profiled) device_profiler_start();
  Expected<StepResult> done = run_step(output, std::move(result), grammar_masks);
  if (profiled) device_profiler_stop();
  return done;
}

Expected<Tensor> ModelRunner::forward(const ForwardStep& step) {
  if (workers_ == nullptr) return run_forward_step(*model_, cache_, step, graphs_.get());
  VLLM_RETURN_IF_ERROR(workers_->forward(step));
  auto logits = run_forward_step(*model_, cache_, step, graphs_.get());
  // The workers are inside this step's collectives: a failure here must release them.
  if (!logits) workers_->abort(logits.status().with_context("rank 0's step"));
  return logits;
}

Expected<StepResult> ModelRunner::run_step(const SchedulerOutput& output, StepResult result,
                                           BitmaskJob* grammar_masks) {
  std::vector<std::vector<int64_t>> prompt_rows;
  ForwardStep step;
  {
    VLLM_PROFILE_SCOPE("step.prepare_inputs");
    step.batch = prepare_inputs(output, &prompt_rows);
  }
  // Hybrid prefix caching: restored snapshots in, then the step, then the snapshots it saves out.
  step.restores = output.state_restores;
  step.saves = output.state_saves;
  VLLM_ASSIGN_OR_RETURN(Tensor logits, forward(step));
  // The grammar masks were computed while the forward pass ran (on a GPU it is still queued).
  const GrammarBitmask* masks = grammar_masks != nullptr ? &grammar_masks->wait() : nullptr;

  std::vector<SamplingRequestState> states;
  std::vector<int64_t> sample_rows;
  int64_t row = 0;
  for (size_t r = 0; r < output.requests.size(); ++r) {
    const ScheduledRequest& s = output.requests[r];
    const Request& req = *s.request;
    const auto& rows = prompt_rows[r];
    if (!rows.empty()) {
      // Row k predicts prompt token (first position + k + 1).
      std::vector<int32_t> next;
      for (size_t k = 0; k < rows.size(); ++k) {
        next.push_back(req.all_token_ids()[static_cast<size_t>(s.num_computed_tokens) + k + 1]);
      }
      Tensor part = logits.slice(0, row, row + static_cast<int64_t>(rows.size()));
      if (!part.device().is_cpu()) {
        // Prompt logprobs are rare; their rows come to the host whole.
        VLLM_ASSIGN_OR_RETURN(part, ops::to_host(model_->context(), part));
      }
      result.prompt_logprobs[r] =
          compute_prompt_logprobs(part, next, *req.params().prompt_logprobs);
      row += static_cast<int64_t>(rows.size());
    }
    if (s.samples) {
      SamplingRequestState state;
      state.params = &req.params();
      state.prompt_token_ids = req.prompt_token_ids();
      state.output_token_ids = req.output_token_ids();
      state.eos_token_ids = req.eos_token_ids();
      if (masks != nullptr) state.allowed_token_bitmask = masks->mask_of(r);
      states.push_back(state);
      sample_rows.push_back(row++);
    }
  }
  if (!states.empty()) {
    VLLM_PROFILE_SCOPE("step.sample");
    VLLM_ASSIGN_OR_RETURN(Tensor rows_to_sample, gather_sample_rows(logits, sample_rows));
    result.sampled = sampler_.sample(rows_to_sample, states);
  }
  return result;
}

}  // namespace vllm::engine
