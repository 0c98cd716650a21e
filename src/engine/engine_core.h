// The engine core: owns the model runner, the scheduler and the KV cache, and advances all
// requests by one step at a time: schedule, execute, update (vLLM's EngineCore.step()).
// Single-threaded: the engine client runs it on its own thread and talks to it through
// queues. Under tensor parallelism it is rank 0: it owns the worker group, whose ranks run
// every step on their shards (worker_group.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/state_slot_pool.h"
#include "engine/structured_output_manager.h"
#include "engine/worker_group.h"
#include "model/model.h"

namespace vllm::engine {

// Measured on the demo model (BENCHMARKS.md): a second request sharing a 2,000-token prefix
// resumes 1,536 tokens in instead of recomputing it, for no measurable prefill cost on the CPU.
inline constexpr int64_t kDefaultMambaCacheInterval = 512;

struct EngineConfig {
  SchedulerConfig scheduler;  // max_model_len 0: the model's max_position_embeddings
  int32_t block_size = 16;
  std::optional<int32_t> num_gpu_blocks_override;
  // Budget for the KV cache tensors; 0: 1 GiB on the CPU, and on CUDA what
  // gpu_memory_utilization leaves after weights, workspace and GDN state (memory_budget.h).
  int64_t kv_cache_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  bool enable_prefix_caching = true;
  // Hybrid (GDN) models with prefix caching: the share of kv_cache_memory_bytes that holds
  // GDN state snapshots (state_snapshot_pool.h), or their number outright, and the prompt
  // tokens between interval snapshots (state_snapshot_policy.h; 0: none; unset:
  // kDefaultMambaCacheInterval rounded up to a multiple of block_size).
  double mamba_cache_memory_fraction = 0.1;
  std::optional<int32_t> num_mamba_snapshots_override;
  std::optional<int64_t> mamba_cache_interval;
  uint64_t seed = 0;
  // CUDA: decode steps replay CUDA graphs (model/decode_graphs.h) unless enforce_eager.
  // cuda_graph_sizes as vLLM's --cuda-graph-sizes: empty, the default ladder up to
  // max_num_seqs; one value, the ladder up to it; several, exactly those batch sizes.
  bool enforce_eager = false;
  std::vector<int64_t> cuda_graph_sizes;
};

struct EngineStats {
  size_t num_running = 0;
  size_t num_waiting = 0;
  double kv_cache_usage = 0.0;  // 0..1
  int32_t num_free_blocks = 0;
  int32_t num_usable_blocks = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // tokens, since start
  int64_t prefix_cache_hits = 0;
  int64_t prefix_cache_preempted_hits = 0;  // resumed requests' hits, counted apart (vLLM)
  // Hybrid models: GDN state slots of running requests, and prefix-cache state snapshots.
  int32_t num_state_slots = 0;
  int32_t num_free_state_slots = 0;
  int32_t state_snapshot_capacity = 0;
  int32_t num_state_snapshots = 0;           // committed
  int32_t num_reserved_state_snapshots = 0;  // being written by a step
  int64_t num_cuda_graph_steps = 0;          // steps that replayed a CUDA graph, since start
};

class EngineCore {
 public:
  // eos_token_ids: the model's end-of-sequence ids (config.json and generation_config.json).
  // `vocab` (the tokenizer's token bytes, with the EOS ids as stop tokens) enables structured
  // outputs; without it requests with structured_outputs are refused. `workers`: the other
  // ranks of a tensor-parallel group whose rank 0 `model` is (their shards loaded).
  static Expected<std::unique_ptr<EngineCore>> create(
      std::unique_ptr<Model> model, const EngineConfig& config, std::vector<int32_t> eos_token_ids,
      std::shared_ptr<const structured::TokenVocabulary> vocab = nullptr,
      std::unique_ptr<WorkerGroup> workers = nullptr);

  // Validates and queues a request. kInvalidArgument for an empty prompt, a token id outside
  // the vocabulary, a prompt longer than max_model_len, bad sampling values, a structured
  // output constraint that does not compile, a duplicate id.
  Status add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                     SamplingParams params, double arrival_time = 0.0);
  // The checks add_request makes, without queueing anything; normalizes `params`. Reads
  // only state fixed at creation, so any thread may call it.
  Status validate_request(const std::vector<int32_t>& prompt_token_ids,
                          SamplingParams& params) const;
  // Aborts the requests; their outputs come with the next step().
  void abort_requests(std::span<const std::string> request_ids);

  // One step: schedule, run the model, update. Outputs of every request that advanced.
  Expected<std::vector<EngineCoreOutput>> step();

  // Forgets every cached prefix (and state snapshot), as vLLM's reset_prefix_cache; false, and
  // nothing done, while requests hold blocks.
  bool reset_prefix_cache() { return kv_->reset_prefix_cache(); }

  bool has_unfinished_requests() const { return scheduler_->has_unfinished_requests(); }
  EngineStats stats() const;
  // Null unless created with a vocabulary.
  StructuredOutputManager* structured_outputs() const { return structured_.get(); }
  const ModelConfig& model_config() const { return model_->config(); }
  const EngineConfig& config() const { return config_; }

  // Tensor parallelism: the worker group (null on one rank). A worker that fails between
  // steps calls `callback` (from another thread; see WorkerGroup::set_failure_callback).
  WorkerGroup* worker_group() const { return workers_.get(); }
  void set_failure_callback(std::function<void(const Status&)> callback);

 private:
  EngineCore() = default;

  EngineConfig config_;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<WorkerGroup> workers_;  // outlives the model runner's steps
  std::unique_ptr<Model> model_;
  std::unique_ptr<KVCacheManager> kv_;
  std::unique_ptr<StateSlotPool> state_slots_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<StructuredOutputManager> structured_;
  std::vector<EngineCoreOutput> pending_;  // aborts, delivered by the next step
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  int64_t prefix_cache_preempted_hits_ = 0;
};

}  // namespace vllm::engine
