// Rank 0 of a tensor-parallel group for the model tests: starts ranks 1..N-1 as `vllm worker`
// processes (the binary this test build made), loads rank 0's shard, and runs every step on
// all ranks the way the engine's model runner does (the step to the workers, then rank 0's
// own forward step), so a test compares a sharded model with the single-rank one step by step.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/forward_step.h"
#include "engine/worker_group.h"
#include "model/model.h"
#include "unit/model_harness.h"

namespace vllm::testing {

inline engine::ParallelConfig tp_config(int tp, const std::string& step_channel = "") {
  engine::ParallelConfig p;
  p.tensor_parallel_size = tp;
  p.worker_executable = VLLM_CLI_PATH;
  p.step_channel = step_channel;
  p.startup_timeout_s = 120;
  return p;
}

class TpModel {
 public:
  // Null (with a test failure) if the group or rank 0's shard cannot start.
  static std::unique_ptr<TpModel> start(const std::filesystem::path& dir, int tp,
                                        const std::string& load_format = "auto",
                                        const std::string& step_channel = "",
                                        bool expert_parallel = false,
                                        const std::string& quantization = "") {
    auto out = std::unique_ptr<TpModel>(new TpModel());
    engine::WorkerLoadSpec spec;
    spec.model = dir.string();
    spec.load_format = load_format;
    spec.enable_expert_parallel = expert_parallel;
    spec.quantization = quantization;
    auto group = engine::WorkerGroup::start(tp_config(tp, step_channel), spec);
    EXPECT_TRUE(group.has_value()) << group.status().to_string();
    if (!group) return nullptr;
    out->workers_ = std::move(*group);
    LoadOptions load;
    load.load_format = load_format;
    load.comm = out->workers_->communicator();
    load.enable_expert_parallel = expert_parallel;
    load.quantization = quantization;
    auto model = load_model(dir, load);
    EXPECT_TRUE(model.has_value()) << model.status().to_string();
    if (!model) return nullptr;
    out->model_ = std::move(*model);
    Status ready = out->workers_->wait_ready();
    EXPECT_TRUE(ready.is_ok()) << ready.to_string();
    if (!ready.is_ok()) return nullptr;
    return out;
  }

  Model& model() { return *model_; }
  engine::WorkerGroup& workers() { return *workers_; }

  // Rank 0's cache (every rank allocates its own of the same config).
  ModelCache* init_cache(const CacheConfig& config) {
    Status sent = workers_->init_cache(config);
    EXPECT_TRUE(sent.is_ok()) << sent.to_string();
    auto cache = model_->create_cache(config);
    EXPECT_TRUE(cache.has_value()) << cache.status().to_string();
    if (!sent.is_ok() || !cache) return nullptr;
    cache_ = std::move(*cache);
    return &cache_;
  }

  // One step on every rank: the logits of every row.
  Expected<Tensor> step(const std::vector<std::pair<Seq*, int64_t>>& work) {
    engine::ForwardStep s;
    s.batch = make_batch(work);
    VLLM_RETURN_IF_ERROR(workers_->forward(s));
    return engine::run_forward_step(*model_, cache_, s, nullptr);
  }

 private:
  TpModel() = default;
  std::unique_ptr<engine::WorkerGroup> workers_;  // destroyed after the model
  std::unique_ptr<Model> model_;
  ModelCache cache_;
};

}  // namespace vllm::testing
