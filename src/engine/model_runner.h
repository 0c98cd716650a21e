// The model runner: turns a SchedulerOutput into the model's flat batch (prepare_inputs),
// runs the forward pass, and samples the rows that produce a token.
//
// Inputs are built once per step: token ids, positions, slot_mapping and block tables for
// the attention layers, state-slot indices for the GDN layers, and the logits rows wanted
// (each sampling request's last row, plus prompt rows of requests that asked for prompt
// logprobs). Hybrid models' GDN state snapshots are copied around the forward pass
// (SchedulerOutput::state_restores before it, state_saves after it). Under tensor
// parallelism the step's inputs go to the workers first (worker_group.h), every rank runs
// the same forward step on its shard, and only rank 0 -- this runner -- samples.
#pragma once

#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/forward_step.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/structured_output_manager.h"
#include "model/decode_graphs.h"
#include "model/model.h"

namespace vllm::engine {

class WorkerGroup;

struct StepResult {
  std::vector<TokenLogprobs> sampled;                       // one per request that samples
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs;  // per scheduled request
};

class ModelRunner {
 public:
  // `workers` (null: one rank) receive every step's inputs before this rank runs it.
  ModelRunner(Model* model, ModelCache cache, uint64_t seed, WorkerGroup* workers = nullptr);

  // `grammar_masks` (may be null): the step's structured-output bitmasks, waited for after
  // the forward pass and applied by the sampler.
  Expected<StepResult> execute(const SchedulerOutput& output, BitmaskJob* grammar_masks = nullptr);

  // Captures CUDA graphs for decode steps of up to the largest of `sizes` requests
  // (decode_graphs.h); later decode steps they cover replay them.
  Status capture_graphs(const std::vector<int64_t>& sizes, int64_t max_model_len);
  const DecodeGraphs* graphs() const { return graphs_.get(); }

  const ModelCache& cache() const { return cache_; }

 private:
  Expected<StepResult> run_step(const SchedulerOutput& output, StepResult result,
                                BitmaskJob* grammar_masks);
  Expected<Tensor> forward(const ForwardStep& step);
  ForwardBatch prepare_inputs(const SchedulerOutput& output,
                              std::vector<std::vector<int64_t>>* prompt_rows) const;
  // The logits rows that sample, in order (a view when they are all the rows).
  Expected<Tensor> gather_sample_rows(const Tensor& logits, const std::vector<int64_t>& rows) const;

  Model* model_;
  ModelCache cache_;
  WorkerGroup* workers_ = nullptr;
  Sampler sampler_;
  std::unique_ptr<DecodeGraphs> graphs_;
  // VLLM_CUDA_PROFILE_STEP=N: step N (from 0) runs between device_profiler_start / stop.
  int64_t profile_step_ = -1;
  int64_t steps_ = 0;
};

}  // namespace vllm::engine
