// The engine core end to end on the golden checkpoints (CPU): batch invariance, preemption,
// prefix caching, aborts, seeded sampling -- and after every scenario the block pool is back
// to its full free count.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace vllm::engine {
namespace test_engine {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Model> golden_model(const std::string& name) {
  auto model = load_model(fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name, LoadOptions{});
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return model.has_value() ? std::move(*model) : nullptr;
}

std::unique_ptr<EngineCore> make_engine(const std::string& name, EngineConfig config) {
  auto model = golden_model(name);
  if (!model) return nullptr;
  config.scheduler.max_model_len = 256;
  config.kv_cache_memory_bytes = 8 << 20;  // hundreds of blocks of these tiny models
  if (config.scheduler.max_num_seqs == 256) config.scheduler.max_num_seqs = 32;
  auto core = EngineCore::create(std::move(model), config, {});
  EXPECT_TRUE(core.has_value()) << core.status().to_string();
  return core.has_value() ? std::move(*core) : nullptr;
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Result {
  std::vector<int32_t> tokens;
  RequestStatus status = RequestStatus::kRunning;
};

// Runs until every request finishes; `abort_after` aborts the named request after that many
// steps. Checks the block pool is whole again at the end.
std::map<std::string, Result> run(EngineCore& core, const std::vector<Job>& jobs,
                                  const std::map<std::string, int>& abort_after = {}) {
  for (const Job& job : jobs) {
    Status s = core.add_request(job.id, job.prompt, job.params);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, Result> results;
  for (int step = 0; core.has_unfinished_requests(); ++step) {
    for (const auto& [id, when] : abort_after) {
      if (when == step) core.abort_requests(std::vector<std::string>{id});
    }
    auto outputs = core.step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs.has_value() || step > 10000) break;
    for (const EngineCoreOutput& o : *outputs) {
      Result& r = results[o.request_id];
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished()) r.status = o.status;
    }
  }
  // Drain pending abort outputs.
  auto last = core.step();
  if (last.has_value()) {
    for (const EngineCoreOutput& o : *last) results[o.request_id].status = o.status;
  }
  const EngineStats stats = core.stats();
  EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks) << "blocks leaked";
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0u);
  return results;
}

std::vector<Job> mixed_jobs(int count, int64_t vocab, uint32_t seed, int max_tokens) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < count; ++i) {
    Job job;
    job.id = "req-" + std::to_string(i);
    const int len = 3 + static_cast<int>(rng() % 38);
    for (int t = 0; t < len; ++t) job.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    job.params.temperature = 0.0;
    job.params.max_tokens = max_tokens;
    job.params.ignore_eos = true;
    jobs.push_back(job);
  }
  return jobs;
}

class EngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineTest, BatchInvarianceThirtyTwoRequests) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 8;
  config.scheduler.max_num_batched_tokens = 64;  // forces chunked prefills next to decodes
  auto core = make_engine(GetParam(), config);
  ASSERT_TRUE(core);
  const auto jobs = mixed_jobs(32, core->model_config().vocab_size, 11, 8);
  auto together = run(*core, jobs);
  ASSERT_EQ(together.size(), jobs.size());
  for (const Job& job : jobs) {
    auto alone_core = make_engine(GetParam(), EngineConfig{});
    auto alone = run(*alone_core, {job});
    EXPECT_EQ(together[job.id].tokens, alone[job.id].tokens) << GetParam() << " " << job.id;
    EXPECT_EQ(together[job.id].tokens.size(), 8u);
    EXPECT_EQ(together[job.id].status, RequestStatus::kFinishedLengthCapped);
  }
}

TEST_P(EngineTest, PreemptionKeepsOutputs) {
  EngineConfig small;
  small.block_size = 4;
  small.num_gpu_blocks_override = 24;  // 23 usable blocks of 4 tokens for 8 requests
  small.scheduler.max_num_seqs = 8;
  auto core = make_engine(GetParam(), small);
  ASSERT_TRUE(core);
  const auto jobs = mixed_jobs(8, core->model_config().vocab_size, 5, 12);
  auto results = run(*core, jobs);
  EXPECT_GT(core->stats().num_preemptions, 0);
  for (const Job& job : jobs) {
    auto alone_core = make_engine(GetParam(), EngineConfig{});
    auto alone = run(*alone_core, {job});
    EXPECT_EQ(results[job.id].tokens, alone[job.id].tokens) << job.id;
  }
}

TEST_P(EngineTest, AbortMidGenerationFreesEverything) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 4;
  auto core = make_engine(GetParam(), config);
  ASSERT_TRUE(core);
  auto jobs = mixed_jobs(6, core->model_config().vocab_size, 3, 20);
  auto results = run(*core, jobs, {{"req-1", 3}, {"req-4", 0}, {"req-5", 9}});
  EXPECT_EQ(results["req-1"].status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(results["req-4"].status, RequestStatus::kFinishedAborted);
  EXPECT_EQ(results["req-5"].status, RequestStatus::kFinishedAborted);
  EXPECT_LT(results["req-1"].tokens.size(), 20u);
  EXPECT_EQ(results["req-0"].tokens.size(), 20u);
  EXPECT_EQ(results["req-0"].status, RequestStatus::kFinishedLengthCapped);
}

TEST_P(EngineTest, SeededSamplingIgnoresBatchComposition) {
  auto core = make_engine(GetParam(), EngineConfig{});
  ASSERT_TRUE(core);
  auto jobs = mixed_jobs(5, core->model_config().vocab_size, 8, 10);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].params.temperature = 1.0;
    jobs[i].params.top_p = 0.9;
    jobs[i].params.seed = 1000 + static_cast<int64_t>(i);
  }
  auto together = run(*core, jobs);
  for (const Job& job : jobs) {
    auto alone_core = make_engine(GetParam(), EngineConfig{});
    auto alone = run(*alone_core, {job});
    EXPECT_EQ(together[job.id].tokens, alone[job.id].tokens) << job.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, EngineTest, ::testing::Values("llama", "qwen3_5_moe"));

TEST(EnginePrefixCache, SharedThreeBlockPrefixHitsExactlyThreeBlocks) {
  EngineConfig config;
  config.block_size = 4;
  auto core = make_engine("qwen3", config);
  ASSERT_TRUE(core);
  std::vector<int32_t> prefix;
  for (int i = 0; i < 12; ++i) prefix.push_back(17 + 5 * i);  // 3 full blocks
  Job a{"a", prefix, {}}, b{"b", prefix, {}};
  a.prompt.insert(a.prompt.end(), {200, 201});
  b.prompt.insert(b.prompt.end(), {300, 301, 302});
  a.params.temperature = b.params.temperature = 0.0;
  a.params.max_tokens = b.params.max_tokens = 6;
  run(*core, {a});
  const int64_t hits_before = core->stats().prefix_cache_hits;
  auto with_cache = run(*core, {b});
  EXPECT_EQ(core->stats().prefix_cache_hits - hits_before, 12);  // exactly 3 blocks of 4

  auto fresh = make_engine("qwen3", config);
  auto without = run(*fresh, {b});
  EXPECT_EQ(with_cache["b"].tokens, without["b"].tokens);

  // Pressure: a small cache cycles many other prompts through, evicting cached blocks; the
  // shared-prefix request still gives the same tokens.
  EngineConfig tight = config;
  tight.num_gpu_blocks_override = 16;
  auto pressured = make_engine("qwen3", tight);
  run(*pressured, {a});
  run(*pressured, mixed_jobs(6, pressured->model_config().vocab_size, 21, 4));
  auto after = run(*pressured, {b});
  EXPECT_EQ(after["b"].tokens, without["b"].tokens);
}

TEST(EngineValidation, BadRequestsAreErrors) {
  auto core = make_engine("llama", EngineConfig{});
  ASSERT_TRUE(core);
  SamplingParams p;
  EXPECT_EQ(core->add_request("x", {}, p).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(core->add_request("x", {1, 100000}, p).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(core->add_request("x", std::vector<int32_t>(300, 1), p).code(),
            ErrorCode::kInvalidArgument);
  p.temperature = -1;
  EXPECT_EQ(core->add_request("x", {1, 2}, p).code(), ErrorCode::kInvalidArgument);
  p.temperature = 0;
  EXPECT_TRUE(core->add_request("x", {1, 2}, p).is_ok());
  EXPECT_EQ(core->add_request("x", {1, 2}, p).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace test_engine
}  // namespace vllm::engine
