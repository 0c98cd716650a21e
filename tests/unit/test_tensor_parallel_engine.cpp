// The engine at --tensor-parallel-size 2 on the CPU (rank 0 here, rank 1 a `vllm worker`
// process): batching, chunked prefill, preemption and hybrid prefix caching (GDN state
// snapshots copied on every rank) give exactly the single-rank engine's tokens and schedule;
// a worker that dies, fails or cannot start makes the engine fail within seconds with an
// error naming it, never hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_args.h"
#include "engine/engine_client.h"
#include "unit/tp_harness.h"

namespace vllm::engine {
namespace test_tensor_parallel_engine {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

EngineArgs engine_args(const std::string& name, int tp) {
  EngineArgs args;
  args.model = (fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name).string();
  args.device = "cpu";
  args.max_model_len = 256;
  args.engine.kv_cache_memory_bytes = 8 << 20;
  args.engine.scheduler.max_num_seqs = 8;
  if (tp > 1) args.parallel = testing::tp_config(tp);
  return args;
}

std::unique_ptr<EngineCore> start(const EngineArgs& args) {
  auto loaded = build_engine(args);
  EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
  return loaded.has_value() ? std::move(loaded->core) : nullptr;
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
};

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Runs the jobs to completion: each request's tokens.
std::map<std::string, std::vector<int32_t>> run(EngineCore& core, const std::vector<Job>& jobs,
                                                int max_tokens) {
  for (const Job& job : jobs) {
    Status s = core.add_request(job.id, job.prompt, greedy(max_tokens));
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, std::vector<int32_t>> tokens;
  for (int step = 0; core.has_unfinished_requests() && step < 5000; ++step) {
    auto outputs = core.step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs) break;
    for (const EngineCoreOutput& o : *outputs) {
      auto& t = tokens[o.request_id];
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  return tokens;
}

// Eight prompts of 3 to 40 tokens, then (second wave) three sharing a 24-token prefix with
// the first: prefix-cache hits, and on hybrids GDN state snapshots restored.
std::vector<std::vector<Job>> waves(int64_t vocab) {
  std::mt19937 rng(5);
  std::vector<Job> first, second;
  for (int i = 0; i < 8; ++i) {
    Job job{"req-" + std::to_string(i), {}};
    const int len = 3 + static_cast<int>(rng() % 38);
    for (int t = 0; t < len; ++t) job.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    first.push_back(job);
  }
  std::vector<int32_t> prefix;
  for (int t = 0; t < 24; ++t) prefix.push_back(static_cast<int32_t>(rng() % vocab));
  first[0].prompt.insert(first[0].prompt.begin(), prefix.begin(), prefix.end());
  for (int i = 0; i < 3; ++i) {
    Job job{"shared-" + std::to_string(i), prefix};
    for (int t = 0; t < 2 + i; ++t) job.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    second.push_back(job);
  }
  return {first, second};
}

class TensorParallelEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelEngine, BatchingPreemptionAndPrefixCachingMatchOneRank) {
  std::map<std::string, std::vector<int32_t>> results[2];
  EngineStats stats[2];
  for (int tp : {1, 2}) {
    EngineArgs args = engine_args(GetParam(), tp);
    args.engine.block_size = 4;
    args.num_gpu_blocks_override = 40;  // tight: 39 usable blocks of 4 tokens for 8 requests
    args.engine.scheduler.max_num_batched_tokens = 48;  // chunked prefills beside decodes
    args.engine.mamba_cache_interval = 8;
    auto core = start(args);
    ASSERT_TRUE(core);
    auto& r = results[tp - 1];
    for (const auto& wave : waves(core->model_config().vocab_size)) {
      for (auto& [id, t] : run(*core, wave, 14)) r[id] = t;
    }
    stats[tp - 1] = core->stats();
    EXPECT_EQ(stats[tp - 1].num_free_blocks, stats[tp - 1].num_usable_blocks);
  }
  ASSERT_EQ(results[0].size(), 11u);
  for (const auto& [id, tokens] : results[0]) {
    EXPECT_EQ(tokens.size(), 14u) << id;
    EXPECT_EQ(results[1][id], tokens) << GetParam() << " " << id;
  }
  EXPECT_GT(stats[1].num_preemptions, 0);
  EXPECT_EQ(stats[1].num_preemptions, stats[0].num_preemptions);
  EXPECT_GT(stats[1].prefix_cache_hits, 0);
  EXPECT_EQ(stats[1].prefix_cache_hits, stats[0].prefix_cache_hits);
  std::printf(
      "%s TP=2: %zu requests, %lld preemptions, %lld prefix-cache hit tokens, tokens "
      "equal to TP=1\n",
      GetParam().c_str(), results[1].size(), static_cast<long long>(stats[1].num_preemptions),
      static_cast<long long>(stats[1].prefix_cache_hits));
}

INSTANTIATE_TEST_SUITE_P(Golden, TensorParallelEngine, ::testing::Values("llama", "qwen3_5_moe"));

// Kills rank 1 while a request decodes: the next steps fail within seconds, naming it.
TEST(TensorParallelFailure, KilledWorkerFailsTheEngineWithinSeconds) {
  auto core = start(engine_args("qwen3_next", 2));
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->add_request("long", {1, 2, 3, 4, 5}, greedy(200)).is_ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core->step().has_value());
  const pid_t worker = core->worker_group()->worker_pids().at(0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const auto killed = Clock::now();
  Status failure;
  while (Clock::now() - killed < 10s) {
    auto out = core->step();
    if (!out) {
      failure = out.status();
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  ASSERT_FALSE(failure.is_ok()) << "the engine kept stepping without its worker";
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(failure.message().find("worker rank 1 (pid " + std::to_string(worker) + ")"),
            std::string::npos)
      << failure.message();
  EXPECT_NE(failure.message().find("killed by signal 9"), std::string::npos) << failure.message();
  EXPECT_FALSE(core->step().has_value());  // and stays failed
  std::printf("a killed worker failed the engine after %.2f s: %s\n", seconds,
              failure.message().c_str());
}

// Between steps too: the engine client dies (the server's /health then answers 503).
TEST(TensorParallelFailure, IdleEngineClientDiesWithItsWorker) {
  auto core = start(engine_args("qwen3", 2));
  ASSERT_TRUE(core);
  const pid_t worker = core->worker_group()->worker_pids().at(0);
  EngineClient client(std::move(core));
  auto stream = client.add_request("r", {3, 5, 7}, greedy(4));
  ASSERT_TRUE(stream.has_value());
  while ((*stream)->next()) {
  }
  ASSERT_FALSE(client.dead());
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const auto killed = Clock::now();
  while (!client.dead() && Clock::now() - killed < 10s) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(client.dead());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - killed).count(), 5.0);
  EXPECT_NE(client.death_status().message().find("worker rank 1"), std::string::npos)
      << client.death_status().message();
  EXPECT_FALSE(client.add_request("late", {3}, greedy(1)).has_value());
}

// A worker's own failure (here its second step, by a test hook) reaches rank 0 with its
// message, and rank 0's step fails instead of waiting in the all-reduce.
TEST(TensorParallelFailure, WorkerErrorReachesRankZero) {
  setenv("VLLM_TEST_TP_WORKER_FAIL_AFTER_STEPS", "2", 1);
  auto core = start(engine_args("llama", 2));
  unsetenv("VLLM_TEST_TP_WORKER_FAIL_AFTER_STEPS");
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->add_request("r", {1, 2, 3}, greedy(20)).is_ok());
  ASSERT_TRUE(core->step().has_value());
  Status failure;
  for (int i = 0; i < 20 && failure.is_ok(); ++i) {
    auto out = core->step();
    if (!out) failure = out.status();
  }
  ASSERT_FALSE(failure.is_ok());
  EXPECT_NE(failure.message().find("failed on purpose"), std::string::npos) << failure.message();
}

TEST(TensorParallelFailure, WorkersThatCannotStartAreErrors) {
  EngineArgs args = engine_args("qwen3", 2);
  args.parallel.worker_executable = "/bin/false";
  const auto began = Clock::now();
  auto loaded = build_engine(args);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_NE(loaded.status().message().find("worker rank 1"), std::string::npos)
      << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("exited with status 1 before connecting"),
            std::string::npos)
      << loaded.status().message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - began).count(), 5.0);
  args.parallel.worker_executable = "/nonexistent/vllm";
  loaded = build_engine(args);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_NE(loaded.status().message().find("cannot start '/nonexistent/vllm'"), std::string::npos)
      << loaded.status().message();
  args = engine_args("qwen3", 2);
  args.device = "cuda";
  EXPECT_FALSE(build_engine(args).has_value());
  args = engine_args("qwen3", 2);
  args.parallel.nnodes = 2;
  loaded = build_engine(args);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_NE(loaded.status().message().find("--nnodes 2"), std::string::npos)
      << loaded.status().message();
}

}  // namespace
}  // namespace test_tensor_parallel_engine
}  // namespace vllm::engine
