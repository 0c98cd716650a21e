#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "base/logging.h"
#include "base/profile.h"
#include "engine/kv_cache_utils.h"
#include "engine/memory_budget.h"
#include "model/mamba_dtype.h"

namespace vllm::engine {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// How many GDN state snapshots the hybrid model's prefix cache gets (0: prefix caching off),
// with the start-up log line saying so.
Expected<int32_t> size_state_snapshots(const Model& model, const EngineConfig& config,
                                       int64_t kv_cache_bytes) {
  const int64_t interval = config.scheduler.state_snapshot_interval;
  if (interval < 0 || interval % config.block_size != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--mamba-cache-interval {} must be a multiple of the block size {} (0: "
                      "no interval snapshots)",
                      interval, config.block_size);
  }
  const double fraction = config.mamba_cache_memory_fraction;
  if (!(fraction >= 0.0 && fraction < 1.0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--mamba-cache-memory-fraction {} must be in [0, 1)", fraction);
  }
  const int64_t bytes = model.state_bytes_per_slot();
  int64_t count =
      config.num_mamba_snapshots_override.has_value()
          ? *config.num_mamba_snapshots_override
          : static_cast<int64_t>(fraction * static_cast<double>(kv_cache_bytes)) / bytes;
  if (count < 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "--num-mamba-snapshots-override {} must not be negative", count);
  }
  count = std::min<int64_t>(count, std::numeric_limits<int32_t>::max() / 2);
  if (!config.num_gpu_blocks_override.has_value() && count * bytes >= kv_cache_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} GDN state snapshots of {} bytes leave nothing of the {}-byte KV cache "
                      "budget",
                      count, bytes, kv_cache_bytes);
  }
  if (count == 0) {
    VLLM_LOG_INFO(
        "Prefix caching is off: no GDN state snapshot ({:.2f} MiB) fits in its share "
        "of the cache budget",
        bytes / kMiB);
    return 0;
  }
  VLLM_LOG_INFO(
      "Prefix caching for the hybrid model: {} GDN state snapshots of {:.2f} MiB "
      "({:.1f} MiB); snapshots at prompt ends, shared-prefix junctions, output block "
      "boundaries{}",
      count, bytes / kMiB, count * bytes / kMiB,
      interval > 0 ? fmt::format(" and every {} prompt tokens", interval) : "");
  return static_cast<int32_t>(count);
}

}  // namespace

Expected<std::unique_ptr<EngineCore>> EngineCore::create(
    std::unique_ptr<Model> model, const EngineConfig& config, std::vector<int32_t> eos_token_ids,
    std::shared_ptr<const structured::TokenVocabulary> vocab,
    std::unique_ptr<WorkerGroup> workers) {
  std::unique_ptr<EngineCore> core(new EngineCore());
  core->workers_ = std::move(workers);
  if (vocab) core->structured_ = std::make_unique<StructuredOutputManager>(std::move(vocab));
  core->config_ = config;
  core->eos_token_ids_ = std::move(eos_token_ids);
  const ModelConfig& mc = model->config();
  SchedulerConfig& sc = core->config_.scheduler;
  if (sc.max_model_len <= 0) sc.max_model_len = mc.max_position_embeddings;
  if (sc.max_model_len > mc.max_position_embeddings) {
    return make_error(ErrorCode::kInvalidArgument,
                      "max_model_len {} is larger than the model's max_position_embeddings {}",
                      sc.max_model_len, mc.max_position_embeddings);
  }

  const auto attention_layers = static_cast<int32_t>(
      std::count(mc.layer_types.begin(), mc.layer_types.end(), LayerType::kFullAttention));
  const bool hybrid = mc.is_hybrid();
  // This rank's cache shapes: with tensor parallelism its share of the KV heads.
  const CacheShapes shapes = model->cache_shapes();
  KVCacheSpec spec;
  spec.block_size = config.block_size;
  spec.num_kv_heads = static_cast<int32_t>(shapes.num_kv_heads);
  spec.head_dim = static_cast<int32_t>(shapes.head_dim);
  spec.dtype_size = static_cast<int32_t>(dtype_size(model->kv_cache_dtype()));
  spec.dtype = model->kv_cache_dtype();
  spec.num_attention_layers = std::max(attention_layers, 1);
  const int64_t num_state_slots = hybrid ? sc.max_num_seqs : 0;
  VLLM_ASSIGN_OR_RETURN(MemoryBudget budget,
                        determine_memory_budget(*model, core->config_, num_state_slots));
  KVCacheSizingConfig sizing;
  sizing.available_memory_bytes = budget.kv_cache_bytes;
  sizing.num_gpu_blocks_override = config.num_gpu_blocks_override;
  sizing.max_model_len = sc.max_model_len;

  bool caching = config.enable_prefix_caching;
  StateSnapshotConfig snapshots;
  if (hybrid && caching) {
    const int64_t block = config.block_size;
    sc.state_snapshot_interval = config.mamba_cache_interval.value_or(
        (kDefaultMambaCacheInterval + block - 1) / block * block);
    VLLM_ASSIGN_OR_RETURN(snapshots.num_snapshots,
                          size_state_snapshots(*model, core->config_, budget.kv_cache_bytes));
    snapshots.first_slot = sc.max_num_seqs;  // slots below belong to running requests
    caching = snapshots.num_snapshots > 0;
    sizing.available_memory_bytes -=
        static_cast<int64_t>(snapshots.num_snapshots) * model->state_bytes_per_slot();
  }
  VLLM_ASSIGN_OR_RETURN(int32_t num_blocks, determine_num_gpu_blocks(spec, sizing));
  if (hybrid) {
    const int64_t state_bytes = model->state_bytes_per_slot();
    VLLM_LOG_INFO(
        "GDN state: conv {}, recurrent (ssm) {} (--mamba-cache-dtype, --mamba-ssm-cache-dtype); "
        "{:.2f} MiB per request, {:.2f} GiB for {} running requests",
        mamba_dtype_name(shapes.conv_state_dtype), mamba_dtype_name(shapes.ssm_state_dtype),
        state_bytes / kMiB, static_cast<double>(state_bytes * sc.max_num_seqs) / (kMiB * 1024),
        sc.max_num_seqs);
  }

  core->kv_ = std::make_unique<KVCacheManager>(num_blocks, config.block_size, caching,
                                               sc.max_model_len, snapshots);
  if (hybrid) core->state_slots_ = std::make_unique<StateSlotPool>(sc.max_num_seqs);
  CacheConfig cache_config;
  cache_config.num_blocks = num_blocks;
  cache_config.block_size = config.block_size;
  cache_config.num_state_slots = hybrid ? sc.max_num_seqs + snapshots.num_snapshots : 0;
  // Every rank's shard has the same cache shapes, so rank 0's sizing holds for all of them.
  if (core->workers_) VLLM_RETURN_IF_ERROR(core->workers_->init_cache(cache_config));
  VLLM_ASSIGN_OR_RETURN(ModelCache cache, model->create_cache(cache_config));
  core->model_ = std::move(model);
  core->scheduler_ = std::make_unique<Scheduler>(sc, core->kv_.get(), core->state_slots_.get());
  core->runner_ = std::make_unique<ModelRunner>(core->model_.get(), std::move(cache), config.seed,
                                                core->workers_.get());
  if (core->model_->context().is_cuda() && !config.enforce_eager) {
    std::vector<int64_t> sizes = config.cuda_graph_sizes;
    if (sizes.size() <= 1) {
      const int64_t largest =
          std::min<int64_t>(sizes.empty() ? sc.max_num_seqs : sizes.front(), sc.max_num_seqs);
      sizes = default_graph_batch_sizes(largest);
    }
    if (Status s = core->runner_->capture_graphs(sizes, sc.max_model_len); !s.is_ok()) {
      return s.with_context("capturing CUDA graphs (--enforce-eager runs without them)");
    }
    const DecodeGraphs& g = *core->runner_->graphs();
    VLLM_LOG_INFO(
        "CUDA graphs: {} decode batch sizes from {} to {} captured in {:.2f} s, {:.1f} "
        "MiB of device memory",
        g.sizes().size(), g.sizes().front(), g.sizes().back(), g.capture_seconds(),
        static_cast<double>(g.memory_bytes()) / (1 << 20));
  }
  return core;
}

void EngineCore::set_failure_callback(std::function<void(const Status&)> callback) {
  if (workers_) workers_->set_failure_callback(std::move(callback));
}

Status EngineCore::validate_request(const std::vector<int32_t>& prompt,
                                    SamplingParams& params) const {
  const ModelConfig& mc = model_->config();
  const int64_t max_len = config_.scheduler.max_model_len;
  if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  if (static_cast<int64_t>(prompt.size()) >= max_len) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the prompt (length {}) is longer than the maximum model length of {}",
                      prompt.size(), max_len);
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= mc.vocab_size) {
      return make_error(ErrorCode::kInvalidArgument,
                        "prompt token {} (at {}) is outside the vocabulary [0, {})", prompt[i], i,
                        mc.vocab_size);
    }
  }
  params.normalize();
  VLLM_RETURN_IF_ERROR(params.validate(static_cast<int32_t>(mc.vocab_size)));
  if (params.structured_outputs) {
    if (structured_ == nullptr) {
      return make_error(ErrorCode::kInvalidArgument,
                        "structured outputs need the model's tokenizer (tokenizer.json), which "
                        "this engine was started without");
    }
    VLLM_RETURN_IF_ERROR(structured_->validate(*params.structured_outputs));
  }
  // A request the whole cache cannot hold would wait forever: refuse it now.
  const auto prompt_len = static_cast<int64_t>(prompt.size());
  const int64_t max_tokens =
      params.max_tokens.has_value() ? *params.max_tokens : max_len - prompt_len;
  const int64_t needed_tokens = std::min<int64_t>(prompt_len + max_tokens, max_len);
  const int64_t needed_blocks = (needed_tokens + config_.block_size - 1) / config_.block_size;
  if (needed_blocks > kv_->num_usable_blocks()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} tokens need {} KV cache blocks but the cache has {}", needed_tokens,
                      needed_blocks, kv_->num_usable_blocks());
  }
  return Status::ok();
}

Status EngineCore::add_request(const std::string& request_id, std::vector<int32_t> prompt,
                               SamplingParams params, double arrival_time) {
  Status valid = validate_request(prompt, params);
  if (!valid.is_ok()) return valid.with_context("request " + request_id);
  if (scheduler_->find(request_id) != nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "request id {} is already in use", request_id);
  }
  std::unique_ptr<structured::GrammarMatcher> grammar;
  if (params.structured_outputs) {
    auto matcher = structured_->make_matcher(*params.structured_outputs);
    if (!matcher) return matcher.status().with_context("request " + request_id);
    grammar = std::move(*matcher);
  }
  auto request = std::make_unique<Request>(request_id, std::move(prompt), std::move(params),
                                           eos_token_ids_, config_.block_size, arrival_time);
  if (grammar) {
    if (auto end = structured_->reasoning_end_token()) {
      request->reasoning_end_token = *end;
      request->reasoning_ended = structured_->reasoning_ended_at(
          request->prompt_token_ids(), request->params().structured_outputs->await_reasoning_end);
    }
  }
  request->grammar = std::move(grammar);
  scheduler_->add_request(std::move(request));
  return Status::ok();
}

void EngineCore::abort_requests(std::span<const std::string> request_ids) {
  auto outputs = scheduler_->finish_requests(request_ids, RequestStatus::kFinishedAborted);
  pending_.insert(pending_.end(), std::make_move_iterator(outputs.begin()),
                  std::make_move_iterator(outputs.end()));
}

Expected<std::vector<EngineCoreOutput>> EngineCore::step() {
  // A tensor-parallel group that lost a rank cannot run another step.
  if (workers_) VLLM_RETURN_IF_ERROR(workers_->health());
  std::vector<EngineCoreOutput> outputs = std::move(pending_);
  pending_.clear();
  VLLM_PROFILE_SCOPE("step");
  SchedulerOutput scheduled;
  {
    VLLM_PROFILE_SCOPE("step.schedule");
    scheduled = scheduler_->schedule();
  }
  // Grammar masks are computed on the manager's worker while the model runs.
  std::unique_ptr<BitmaskJob> masks = structured_ ? structured_->start_bitmask(scheduled) : nullptr;
  VLLM_ASSIGN_OR_RETURN(StepResult result, runner_->execute(scheduled, masks.get()));
  masks.reset();
  std::vector<EngineCoreOutput> updates;
  {
    VLLM_PROFILE_SCOPE("step.update");
    updates = scheduler_->update_from_output(scheduled, result.sampled, result.prompt_logprobs);
  }
  outputs.insert(outputs.end(), std::make_move_iterator(updates.begin()),
                 std::make_move_iterator(updates.end()));
  PrefixCacheStats interval = kv_->make_prefix_cache_stats();
  prefix_cache_queries_ += interval.queries;
  prefix_cache_hits_ += interval.hits;
  prefix_cache_preempted_hits_ += interval.preempted_hits;
  return outputs;
}

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.kv_cache_usage = kv_->usage();
  s.num_free_blocks = kv_->num_free_blocks();
  s.num_usable_blocks = kv_->num_usable_blocks();
  s.num_preemptions = scheduler_->num_preemptions();
  s.prefix_cache_queries = prefix_cache_queries_;
  s.prefix_cache_hits = prefix_cache_hits_;
  s.prefix_cache_preempted_hits = prefix_cache_preempted_hits_;
  if (state_slots_) {
    s.num_state_slots = state_slots_->num_slots();
    s.num_free_state_slots = state_slots_->num_free_slots();
  }
  if (const StateSnapshotPool* snapshots = kv_->state_snapshots()) {
    s.state_snapshot_capacity = snapshots->capacity();
    s.num_state_snapshots = snapshots->num_snapshots();
    s.num_reserved_state_snapshots = snapshots->num_reserved();
  }
  if (const DecodeGraphs* graphs = runner_->graphs()) s.num_cuda_graph_steps = graphs->replays();
  return s;
}

}  // namespace vllm::engine
