// The engine core on CUDA (BF16) on the golden checkpoints: chunked prefill next to
// decodes, batches of mixed requests, preemption and resumption give each request the greedy
// tokens it gets alone -- up to the first step where the alone run's top-2 log-prob margin is
// below 0.05, 0.25 for the hybrids (BF16 rounding may flip a near-tie) -- and every KV block
// and GDN state slot is free at the end. Seeded sampling is reproducible whatever the batch
// (in F32). Decode steps replayed from CUDA graphs give the eager steps' tokens. Prefix caching
// on the hybrids (GDN state snapshots) gives the uncached run's tokens (margin 0.5 for the MoE
// hybrids), with hits where the CPU tests have them. The demo model's greedy continuation on
// CUDA follows the CPU's. Skipped without a GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/runtime.h"
#include "engine/engine_core.h"
#include "ops/exec_context.h"
#include "tokenizer/tokenizer.h"

namespace vllm::engine {
namespace {

namespace fs = std::filesystem;

// The margin rule of the golden tests (test_models_cuda.cpp): 0.05 for attention-only models,
// 0.25 for the hybrids, whose Gated DeltaNet layers amplify BF16 rounding -- there a request
// alone (GEMV-sized products) and in a batch (GEMM-sized) may part at a near-tie.
float margin_for(const std::string& model) {
  return model == "llama" || model == "qwen3" ? 0.05f : 0.25f;
}

// Prefix caching runs a prompt in other pieces than the uncached run: the delta rule takes its
// chunked form for whole prompts and long pieces and goes token by token for short ones (a
// suffix after a cached prefix), two BF16 roundings. In the MoE hybrids that rounding also
// flips router decisions, and a flipped expert moves a position's logits further (the golden
// tests allow 1.0 at a single position): a hit on qwen3_5_moe took another token at a
// reference margin of 0.38. Those are compared while the margin is at least 0.5.
float prefix_margin_for(const std::string& model) {
  return model == "qwen3_5_moe" || model == "qwen3_next" ? 0.5f : margin_for(model);
}

std::unique_ptr<EngineCore> make_engine(const std::string& name, EngineConfig config,
                                        DType dtype = DType::kBF16) {
  LoadOptions options;
  options.device = Device::cuda();
  options.dtype = dtype;
  auto model = load_model(fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name, options);
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  if (!model.has_value()) return nullptr;
  config.scheduler.max_model_len = 256;
  if (config.kv_cache_memory_bytes == 0) config.kv_cache_memory_bytes = 8 << 20;
  if (config.scheduler.max_num_seqs == 256) config.scheduler.max_num_seqs = 32;
  auto core = EngineCore::create(std::move(*model), config, {});
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
  std::vector<float> margins;  // top-1 minus top-2 logprob per generated token
  RequestStatus status = RequestStatus::kRunning;
  int64_t num_cached_tokens = -1;
};

std::map<std::string, Result> run(EngineCore& core, const std::vector<Job>& jobs) {
  for (const Job& job : jobs) {
    Status s = core.add_request(job.id, job.prompt, job.params);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, Result> results;
  for (int step = 0; core.has_unfinished_requests() && step < 10000; ++step) {
    auto outputs = core.step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs.has_value()) break;
    for (const EngineCoreOutput& o : *outputs) {
      Result& r = results[o.request_id];
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      for (const TokenLogprobs& lp : o.new_logprobs) {
        r.margins.push_back(lp.top_logprobs.size() >= 2 ? lp.top_logprobs[0] - lp.top_logprobs[1]
                                                        : 1e9f);
      }
      if (o.finished()) r.status = o.status;
      r.num_cached_tokens = o.num_cached_tokens;
    }
  }
  const EngineStats stats = core.stats();
  EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks) << "blocks leaked";
  EXPECT_EQ(stats.num_free_state_slots, stats.num_state_slots) << "state slots leaked";
  EXPECT_EQ(stats.num_reserved_state_snapshots, 0) << "a state snapshot left half written";
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0u);
  return results;
}

std::vector<Job> greedy_jobs(int count, int64_t vocab, uint32_t seed, int max_tokens) {
  std::mt19937 rng(seed);
  std::vector<Job> jobs;
  for (int i = 0; i < count; ++i) {
    Job job;
    job.id = "req-" + std::to_string(i);
    const int len = 3 + static_cast<int>(rng() % 60);
    for (int t = 0; t < len; ++t) job.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    job.params.temperature = 0.0;
    job.params.max_tokens = max_tokens;
    job.params.ignore_eos = true;
    job.params.logprobs = 2;
    jobs.push_back(job);
  }
  return jobs;
}

// Tokens equal to the alone run's before its first near-tie (a step whose top-2 margin is
// below `margin`: its token may go either way, as in the golden tests); returns how many were
// compared.
int64_t expect_same_up_to_margin(const Result& got, const Result& alone, const std::string& what,
                                 float margin) {
  int64_t compared = 0;
  for (size_t i = 0; i < alone.tokens.size(); ++i) {
    if (i < alone.margins.size() && alone.margins[i] < margin) break;
    if (i >= got.tokens.size()) {
      ADD_FAILURE() << what << ": only " << got.tokens.size() << " tokens";
      break;
    }
    EXPECT_EQ(got.tokens[i], alone.tokens[i])
        << what << " token " << i << " (reference margin "
        << (i < alone.margins.size() ? alone.margins[i] : -1.0f) << ")";
    if (got.tokens[i] != alone.tokens[i]) break;
    ++compared;
  }
  return compared;
}

class EngineCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA engine tests skipped";
  }
};

TEST_P(EngineCuda, MixedBatchWithChunkedPrefillMatchesAlone) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 8;
  config.scheduler.max_num_batched_tokens = 64;  // chunked prefills next to decodes
  auto core = make_engine(GetParam(), config);
  ASSERT_TRUE(core);
  const auto jobs = greedy_jobs(24, core->model_config().vocab_size, 11, 10);
  auto together = run(*core, jobs);
  int64_t compared = 0;
  for (const Job& job : jobs) {
    auto alone_core = make_engine(GetParam(), EngineConfig{});
    auto alone = run(*alone_core, {job});
    EXPECT_EQ(together[job.id].tokens.size(), 10u);
    EXPECT_EQ(together[job.id].status, RequestStatus::kFinishedLengthCapped);
    compared += expect_same_up_to_margin(together[job.id], alone[job.id], GetParam() + " " + job.id,
                                         margin_for(GetParam()));
  }
  EXPECT_GE(compared, 24) << "the margin rule left too few tokens to compare";
  std::printf("%s: %lld greedy tokens compared\n", GetParam().c_str(),
              static_cast<long long>(compared));
}

TEST_P(EngineCuda, PreemptionKeepsOutputs) {
  EngineConfig small;
  small.block_size = 4;
  small.num_gpu_blocks_override = 24;
  small.scheduler.max_num_seqs = 8;
  auto core = make_engine(GetParam(), small);
  ASSERT_TRUE(core);
  const auto jobs = greedy_jobs(8, core->model_config().vocab_size, 5, 12);
  auto results = run(*core, jobs);
  EXPECT_GT(core->stats().num_preemptions, 0);
  for (const Job& job : jobs) {
    auto alone_core = make_engine(GetParam(), EngineConfig{});
    auto alone = run(*alone_core, {job});
    expect_same_up_to_margin(results[job.id], alone[job.id], GetParam() + " " + job.id,
                             margin_for(GetParam()));
  }
}

// In F32: the property is the sampler's (each seeded request draws from its own stream at its
// own position). In BF16 the batch's GEMM shapes and the delta rule's form change the logits'
// rounding, which the hybrids amplify, so a draw near a boundary of the distribution may go
// either way there.
TEST_P(EngineCuda, SeededSamplingIgnoresBatchComposition) {
  auto core = make_engine(GetParam(), EngineConfig{}, DType::kF32);
  ASSERT_TRUE(core);
  auto jobs = greedy_jobs(5, core->model_config().vocab_size, 8, 10);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].params.temperature = 1.0;
    jobs[i].params.top_p = 0.9;
    jobs[i].params.top_k = 50;
    jobs[i].params.seed = 1000 + static_cast<int64_t>(i);
  }
  auto together = run(*core, jobs);
  for (const Job& job : jobs) {
    auto alone_core = make_engine(GetParam(), EngineConfig{}, DType::kF32);
    auto alone = run(*alone_core, {job});
    EXPECT_EQ(together[job.id].tokens, alone[job.id].tokens) << job.id;
  }
}

// Decode steps replayed from CUDA graphs (padded to the captured sizes 1, 2, 4, 8, 16) give
// the tokens eager steps give, as requests join and leave the batch.
TEST_P(EngineCuda, CudaGraphsMatchEager) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 16;
  config.scheduler.max_num_batched_tokens = 96;
  auto graphs = make_engine(GetParam(), config);
  config.enforce_eager = true;
  auto eager = make_engine(GetParam(), config);
  ASSERT_TRUE(graphs && eager);
  // 32 requests: on the random-weight MoE hybrid a near-tie ends most comparisons within two
  // tokens, and the count below needs 40.
  auto jobs = greedy_jobs(32, graphs->model_config().vocab_size, 23, 14);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].params.max_tokens = 6 + static_cast<int>(i % 9);
  auto with_graphs = run(*graphs, jobs);
  auto without = run(*eager, jobs);
  EXPECT_GT(graphs->stats().num_cuda_graph_steps, 10);
  EXPECT_EQ(eager->stats().num_cuda_graph_steps, 0);
  int64_t compared = 0;
  for (const Job& job : jobs) {
    EXPECT_EQ(with_graphs[job.id].tokens.size(), static_cast<size_t>(*job.params.max_tokens));
    compared += expect_same_up_to_margin(with_graphs[job.id], without[job.id],
                                         GetParam() + " " + job.id, margin_for(GetParam()));
  }
  EXPECT_GE(compared, 40) << "the margin rule left too few tokens to compare";
  std::printf("%s: %lld greedy tokens compared, %lld graph steps\n", GetParam().c_str(),
              static_cast<long long>(compared),
              static_cast<long long>(graphs->stats().num_cuda_graph_steps));
}

INSTANTIATE_TEST_SUITE_P(Golden, EngineCuda,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next"));

// Prefix caching on the hybrids (GDN state snapshots, as tests/unit/test_engine_hybrid_prefix
// runs on the CPU): shared-prefix waves and multi-turn replays give the uncached engine's
// greedy tokens up to the margin rule -- a hit runs the rest of the prompt in other chunk
// shapes, so BF16 may part at a near-tie -- with the hits the CPU tests see, and a reset of
// the prefix cache leaves no snapshot behind.
class HybridPrefixCacheCuda : public EngineCuda {};

std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int64_t vocab) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(rng() % vocab));
  return out;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Job greedy_job(std::string id, std::vector<int32_t> prompt, int max_tokens) {
  Job job;
  job.id = std::move(id);
  job.prompt = std::move(prompt);
  job.params.temperature = 0.0;
  job.params.max_tokens = max_tokens;
  job.params.ignore_eos = true;
  job.params.logprobs = 2;
  return job;
}

TEST_P(HybridPrefixCacheCuda, SharedPrefixAndMultiTurnMatchUncached) {
  EngineConfig config;
  config.block_size = 8;
  config.kv_cache_memory_bytes = 64 << 20;  // as the CPU tests: no snapshot evicted here
  auto core = make_engine(GetParam(), config);
  EngineConfig off = config;
  off.enable_prefix_caching = false;
  auto plain = make_engine(GetParam(), off);
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  const float margin = prefix_margin_for(GetParam());
  std::mt19937 rng(7);
  int64_t compared = 0;

  // Wave 0 caches the prefix's KV blocks; wave 1 finds no state there and snapshots it at the
  // junction (32 tokens: 4 blocks); wave 2 resumes from that snapshot, mid-prompt.
  const std::vector<int32_t> shared = random_tokens(rng, 37, vocab);
  for (int w = 0; w < 3; ++w) {
    std::vector<Job> wave;
    for (int i = 0; i < (w == 0 ? 1 : 5); ++i) {
      wave.push_back(greedy_job("w" + std::to_string(w) + "-" + std::to_string(i),
                                concat(shared, random_tokens(rng, 3 + 2 * i, vocab)), 8));
    }
    auto cached = run(*core, wave);
    auto reference = run(*plain, wave);
    for (const Job& job : wave) {
      EXPECT_EQ(cached[job.id].num_cached_tokens, w == 2 ? 32 : 0) << job.id;
      compared += expect_same_up_to_margin(cached[job.id], reference[job.id],
                                           GetParam() + " " + job.id, margin);
    }
  }
  EXPECT_EQ(core->stats().prefix_cache_hits, 5 * 32);

  // A conversation resent each turn with its replies: from turn 1 on, the prompt resumes at
  // the last block boundary of what the previous turn computed.
  std::vector<int32_t> history = concat(shared, random_tokens(rng, 6, vocab));
  int64_t expected_cached = -1;
  for (int turn = 0; turn < 3; ++turn) {
    const Job job = greedy_job("turn-" + std::to_string(turn), history, 7);
    auto cached = run(*core, {job});
    auto reference = run(*plain, {job});
    if (expected_cached >= 0) {
      EXPECT_EQ(cached[job.id].num_cached_tokens, expected_cached) << job.id;
    }
    EXPECT_GT(cached[job.id].num_cached_tokens, 0) << job.id;  // the shared prefix at least
    compared += expect_same_up_to_margin(cached[job.id], reference[job.id],
                                         GetParam() + " " + job.id, margin);
    history = concat(history, cached[job.id].tokens);
    expected_cached = (static_cast<int64_t>(history.size()) - 1) / 8 * 8;
    history = concat(history, random_tokens(rng, 4 + turn, vocab));
  }
  // The MoE hybrids' wider margin leaves fewer steps to compare (18 of qwen3_5_moe's, measured).
  EXPECT_GE(compared, margin > 0.25f ? 12 : 20) << "the margin rule left too few tokens to compare";
  EXPECT_TRUE(core->reset_prefix_cache());
  EXPECT_EQ(core->stats().num_state_snapshots, 0);
  std::printf("%s: %lld greedy tokens compared with prefix caching on and off\n",
              GetParam().c_str(), static_cast<long long>(compared));
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridPrefixCacheCuda,
                         ::testing::Values("qwen3_5_dense", "qwen3_5_moe", "qwen3_next"));

// The demo model's greedy continuation of the README prompt on CUDA (BF16) equals the CPU's
// (F32, the reference) up to the first step where the CPU run's top-2 margin is below 0.05.
TEST(DemoModelCuda, GreedyContinuationMatchesCpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo";
  auto tokenizer = Tokenizer::from_file(dir);
  ASSERT_TRUE(tokenizer.has_value()) << tokenizer.status().to_string();
  auto prompt = tokenizer->encode("def fibonacci(n):", /*add_special_tokens=*/true);
  ASSERT_TRUE(prompt.has_value()) << prompt.status().to_string();
  Job job;
  job.id = "fibonacci";
  job.prompt = *prompt;
  job.params.temperature = 0.0;
  job.params.max_tokens = 64;
  job.params.ignore_eos = true;
  job.params.logprobs = 2;
  std::map<std::string, Result> results[2];
  for (int on_cuda = 0; on_cuda < 2; ++on_cuda) {
    LoadOptions options;
    options.device = on_cuda ? Device::cuda() : Device::cpu();
    options.dtype = on_cuda ? DType::kBF16 : DType::kF32;
    auto model = load_model(dir, options);
    ASSERT_TRUE(model.has_value()) << model.status().to_string();
    EngineConfig config;
    config.scheduler.max_model_len = 256;
    config.kv_cache_memory_bytes = 16 << 20;
    auto core = EngineCore::create(std::move(*model), config, {});
    ASSERT_TRUE(core.has_value()) << core.status().to_string();
    results[on_cuda] = run(**core, {job});
  }
  const Result& cpu = results[0][job.id];
  const Result& gpu = results[1][job.id];
  ASSERT_EQ(cpu.tokens.size(), 64u);
  const int64_t compared = expect_same_up_to_margin(gpu, cpu, "demo model on CUDA", 0.05f);
  EXPECT_GE(compared, 8) << "the margin rule left too few tokens to compare";
  auto text = tokenizer->decode(gpu.tokens, DecodeOptions{});
  std::printf("demo model on CUDA: %lld greedy tokens equal to the CPU's; def fibonacci(n):%s\n",
              static_cast<long long>(compared), text.has_value() ? text->c_str() : "?");
}

// --gpu-memory-utilization sizes the KV cache from the device's free memory after a
// profiling step.
TEST(EngineCudaMemory, UtilizationSizesTheCache) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  LoadOptions options;
  options.device = Device::cuda();
  options.dtype = DType::kBF16;
  auto model =
      load_model(fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "qwen3_5_dense", options);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  EngineConfig config;
  config.scheduler.max_model_len = 256;
  config.gpu_memory_utilization = 0.05;
  auto core = EngineCore::create(std::move(*model), config, {});
  ASSERT_TRUE(core.has_value()) << core.status().to_string();
  const EngineStats stats = (*core)->stats();
  EXPECT_GT(stats.num_usable_blocks, 1000);
  EXPECT_EQ(stats.num_state_slots, config.scheduler.max_num_seqs);
}

// A model larger than the device fails at load with an error that names the weight that did
// not fit and how much memory was free, and gives back what it had placed.
TEST(EngineCudaMemory, ModelLargerThanTheDeviceFailsAtLoad) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const DeviceMemory before = device_memory(Device::cuda());
  LoadOptions options;
  options.device = Device::cuda();
  options.dtype = DType::kBF16;
  options.load_format = "dummy";
  options.max_model_len = 4096;
  // 397B parameters in BF16: about 740 GiB, more than any single GPU holds.
  auto model = load_model(fs::path(VLLM_SOURCE_DIR) / "configs" / "Qwen3.5-397B-A17B", options);
  ASSERT_FALSE(model.has_value()) << "a 397B BF16 model loaded onto one device";
  const std::string message = model.status().to_string();
  std::printf("load error: %s\n", message.c_str());
  EXPECT_EQ(model.status().code(), ErrorCode::kResourceExhausted) << message;
  EXPECT_NE(message.find("cannot place the stacked expert weight 'model.language_model.layers."),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("GiB free of"), std::string::npos) << message;
  const DeviceMemory after = device_memory(Device::cuda());
  EXPECT_GT(after.free_bytes + (size_t{2} << 30), before.free_bytes)
      << "the weights placed before the failure were not freed";
  // The failed allocation is not left behind as an error for the next kernel launch.
  Tensor t = Tensor::try_empty({1024}, DType::kF32, Device::cuda()).value();
  EXPECT_TRUE(cuda::fill_uniform(t, 0.0f, 1.0f, 1, nullptr).is_ok());
}

}  // namespace
}  // namespace vllm::engine
