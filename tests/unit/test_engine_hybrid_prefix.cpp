// Prefix caching on the hybrid (Gated DeltaNet) golden checkpoints and the demo model, end to
// end through the engine core on the CPU: shared-prefix batches, multi-turn replays, hits that
// end mid-prompt, eviction pressure with preemption, and a snapshot evicted while its blocks
// stay cached. Every run is compared with the same requests on an engine without prefix
// caching: the same greedy tokens, and each step's logprobs (the chosen token's and the top
// 20) within a relative L2 error of 1e-5 -- the noise of f32 prefill chunked differently,
// which the snapshot positions do even without a hit.
// After each run every block and state slot is free and no snapshot is half written; a
// prefix-cache reset then leaves no snapshot behind.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace vllm::engine {
namespace test_engine_hybrid_prefix {
namespace {

namespace fs = std::filesystem;

constexpr double kLogprobTolerance = 1e-5;

fs::path model_dir(const std::string& name) {
  if (name == "demo") return fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo";
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name;
}

std::unique_ptr<EngineCore> make_engine(const std::string& name, EngineConfig config) {
  auto model = load_model(model_dir(name), LoadOptions{});
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  if (!model.has_value()) return nullptr;
  config.scheduler.max_model_len = 512;
  config.kv_cache_memory_bytes = 64 << 20;  // the demo model's snapshots are 0.4 MiB each
  auto core = EngineCore::create(std::move(*model), config, {});
  EXPECT_TRUE(core.has_value()) << core.status().to_string();
  return core.has_value() ? std::move(*core) : nullptr;
}

EngineConfig uncached(EngineConfig config) {
  config.enable_prefix_caching = false;
  return config;
}

struct Job {
  std::string id;
  std::vector<int32_t> prompt;
  int32_t max_tokens = 8;
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  int64_t num_cached_tokens = -1;
};

// Greedy, EOS ignored, top-20 logprobs; runs until all finish, then checks nothing is held.
std::map<std::string, Result> run(EngineCore& core, const std::vector<Job>& jobs) {
  for (const Job& job : jobs) {
    SamplingParams params;
    params.temperature = 0.0;
    params.max_tokens = job.max_tokens;
    params.ignore_eos = true;
    params.logprobs = 20;
    Status s = core.add_request(job.id, job.prompt, params);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, Result> results;
  for (int step = 0; core.has_unfinished_requests() && step < 100000; ++step) {
    auto outputs = core.step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs.has_value()) break;
    for (const EngineCoreOutput& o : *outputs) {
      Result& r = results[o.request_id];
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      r.logprobs.insert(r.logprobs.end(), o.new_logprobs.begin(), o.new_logprobs.end());
      r.num_cached_tokens = o.num_cached_tokens;
    }
  }
  const EngineStats stats = core.stats();
  EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks) << "blocks leaked";
  EXPECT_EQ(stats.num_free_state_slots, stats.num_state_slots) << "state slots leaked";
  EXPECT_EQ(stats.num_reserved_state_snapshots, 0);
  EXPECT_LE(stats.num_state_snapshots, stats.state_snapshot_capacity);
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0u);
  return results;
}

void expect_same(const std::map<std::string, Result>& cached,
                 const std::map<std::string, Result>& reference, const std::string& what) {
  ASSERT_EQ(cached.size(), reference.size()) << what;
  for (const auto& [id, want] : reference) {
    const Result& got = cached.at(id);
    ASSERT_EQ(got.tokens, want.tokens) << what << " " << id;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t t = 0; t < want.logprobs.size(); ++t) {
      const TokenLogprobs &g = got.logprobs[t], &w = want.logprobs[t];
      ASSERT_EQ(g.top_logprobs.size(), w.top_logprobs.size());
      // The chosen token's and the top 20 logprobs (sorted values: near-equal tokens may swap
      // ranks), as one vector, by relative L2 error (docs/design.md, Numerics).
      double err = (double(g.logprob) - w.logprob) * (double(g.logprob) - w.logprob);
      double norm = double(w.logprob) * w.logprob;
      for (size_t k = 0; k < w.top_logprobs.size(); ++k) {
        err += (double(g.top_logprobs[k]) - w.top_logprobs[k]) *
               (double(g.top_logprobs[k]) - w.top_logprobs[k]);
        norm += double(w.top_logprobs[k]) * w.top_logprobs[k];
      }
      EXPECT_LE(std::sqrt(err / norm), kLogprobTolerance) << what << " " << id << " step " << t;
    }
  }
}

// At the end nothing may be cached once the prefix cache is reset.
void expect_reset_frees_everything(EngineCore& core) {
  EXPECT_TRUE(core.reset_prefix_cache());
  const EngineStats stats = core.stats();
  EXPECT_EQ(stats.num_state_snapshots, 0);
  EXPECT_EQ(stats.num_free_blocks, stats.num_usable_blocks);
}

std::vector<int32_t> tokens(std::mt19937& rng, int n, int64_t vocab) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(rng() % vocab));
  return out;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class HybridPrefixCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridPrefixCacheTest, SharedPrefixBatchesHitAtTheJunction) {
  EngineConfig config;
  config.block_size = 8;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(7);
  const std::vector<int32_t> shared = tokens(rng, 37, vocab);  // 4 full blocks + 5 tokens
  std::vector<std::vector<Job>> waves(3);
  for (int w = 0; w < 3; ++w) {
    const int count = w == 0 ? 1 : 5;
    for (int i = 0; i < count; ++i) {
      waves[w].push_back({"w" + std::to_string(w) + "-" + std::to_string(i),
                          concat(shared, tokens(rng, 3 + 2 * i, vocab)), 8});
    }
  }
  for (int w = 0; w < 3; ++w) {
    auto cached = run(*core, waves[w]);
    expect_same(cached, run(*plain, waves[w]), "wave " + std::to_string(w));
    for (const Job& job : waves[w]) {
      // Wave 1 finds wave 0's KV blocks but no state there, and saves it at the junction
      // (32 tokens); wave 2 resumes from it, mid-prompt.
      EXPECT_EQ(cached[job.id].num_cached_tokens, w == 2 ? 32 : 0) << job.id;
    }
  }
  EXPECT_EQ(core->stats().prefix_cache_hits, 5 * 32);
  expect_reset_frees_everything(*core);
}

TEST_P(HybridPrefixCacheTest, MultiTurnReplaysResumeAfterTheLastReply) {
  EngineConfig config;
  config.block_size = 8;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(11);
  const std::vector<int32_t> system = tokens(rng, 21, vocab);
  // Two conversations in flight together; each turn resends the whole history.
  std::vector<std::vector<int32_t>> history = {concat(system, tokens(rng, 6, vocab)),
                                               concat(system, tokens(rng, 9, vocab))};
  // Both first turns start in the same step, before any state snapshot exists.
  std::vector<int64_t> expected_cached = {0, 0};
  for (int turn = 0; turn < 4; ++turn) {
    std::vector<Job> jobs;
    for (size_t c = 0; c < history.size(); ++c) {
      jobs.push_back({"c" + std::to_string(c) + "-t" + std::to_string(turn), history[c],
                      7 + static_cast<int32_t>(c)});
    }
    auto cached = run(*core, jobs);
    expect_same(cached, run(*plain, jobs), "turn " + std::to_string(turn));
    for (size_t c = 0; c < history.size(); ++c) {
      const Job& job = jobs[c];
      EXPECT_EQ(cached[job.id].num_cached_tokens, expected_cached[c]) << job.id;
      // Everything but the last generated token was computed; the next turn resumes from the
      // last block boundary of that.
      history[c] = concat(history[c], cached[job.id].tokens);
      const auto computed = static_cast<int64_t>(history[c].size()) - 1;
      expected_cached[c] = computed / config.block_size * config.block_size;
      history[c] = concat(history[c], tokens(rng, 4 + turn, vocab));
    }
  }
  expect_reset_frees_everything(*core);
}

TEST_P(HybridPrefixCacheTest, IntervalSnapshotsGiveHitsMidPrompt) {
  EngineConfig config;
  config.block_size = 8;
  config.mamba_cache_interval = 16;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(5);
  const std::vector<int32_t> a = tokens(rng, 45, vocab);
  std::vector<Job> first = {{"a", a, 5}};
  expect_same(run(*core, first), run(*plain, first), "a");
  // b shares a's first 30 tokens: 3 cached blocks, the last snapshot among them at 16.
  std::vector<Job> second = {
      {"b", concat(std::vector<int32_t>(a.begin(), a.begin() + 30), tokens(rng, 12, vocab)), 6}};
  auto cached = run(*core, second);
  expect_same(cached, run(*plain, second), "b");
  EXPECT_EQ(cached["b"].num_cached_tokens, 16);
  // b saved the junction at 24: c resumes there.
  std::vector<Job> third = {
      {"c", concat(std::vector<int32_t>(a.begin(), a.begin() + 27), tokens(rng, 3, vocab)), 6}};
  cached = run(*core, third);
  expect_same(cached, run(*plain, third), "c");
  EXPECT_EQ(cached["c"].num_cached_tokens, 24);
  expect_reset_frees_everything(*core);
}

TEST_P(HybridPrefixCacheTest, RequestsInLockstepFindWhereTheyPart) {
  EngineConfig config;
  config.block_size = 8;
  config.mamba_cache_interval = 16;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(17);
  const std::vector<int32_t> shared = tokens(rng, 45, vocab);
  // a and b start in one step and prefill side by side, chunk by chunk; b sees a's blocks
  // run ahead of it up to token 40, where their prompts part, and saves its state there.
  std::vector<Job> pair = {{"a", concat(shared, tokens(rng, 5, vocab)), 4},
                           {"b", concat(shared, tokens(rng, 7, vocab)), 4}};
  expect_same(run(*core, pair), run(*plain, pair), "a, b");
  std::vector<Job> third = {{"c", concat(shared, tokens(rng, 9, vocab)), 4}};
  auto cached = run(*core, third);
  expect_same(cached, run(*plain, third), "c");
  EXPECT_EQ(cached["c"].num_cached_tokens, 40);
  expect_reset_frees_everything(*core);
}

TEST_P(HybridPrefixCacheTest, EvictionPressureAndPreemption) {
  EngineConfig config;
  config.block_size = 4;
  config.num_gpu_blocks_override = 40;  // 39 usable blocks of 4 tokens
  config.num_mamba_snapshots_override = 3;
  config.scheduler.max_num_seqs = 6;
  config.scheduler.max_num_batched_tokens = 48;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(3);
  const std::vector<std::vector<int32_t>> prefixes = {tokens(rng, 13, vocab),
                                                      tokens(rng, 22, vocab)};
  std::vector<Job> jobs;
  for (int i = 0; i < 14; ++i) {
    const auto& prefix = prefixes[rng() % prefixes.size()];
    jobs.push_back({"r" + std::to_string(i), concat(prefix, tokens(rng, 2 + rng() % 9, vocab)),
                    static_cast<int32_t>(6 + rng() % 10)});
  }
  // Twice through the same engine, so that the second pass meets a warm, crowded cache.
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Job> renamed = jobs;
    for (Job& job : renamed) job.id += "-p" + std::to_string(pass);
    expect_same(run(*core, renamed), run(*plain, renamed), "pass " + std::to_string(pass));
  }
  EXPECT_GT(core->stats().num_preemptions, 0);
  EXPECT_GT(core->stats().prefix_cache_hits, 0);
  expect_reset_frees_everything(*core);
}

TEST_P(HybridPrefixCacheTest, PreemptedRequestsResumeFromTheirOwnSnapshots) {
  EngineConfig config;
  config.block_size = 4;
  config.num_gpu_blocks_override = 30;
  config.scheduler.max_num_seqs = 8;
  // A snapshot at every block of the prompts: whatever head of a victim's prefix survives the
  // eviction its preemption was for can be resumed from.
  config.mamba_cache_interval = 4;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(9);
  std::vector<Job> jobs;
  for (int i = 0; i < 8; ++i) {
    jobs.push_back({"p" + std::to_string(i), tokens(rng, 9 + i, vocab), 14});
  }
  expect_same(run(*core, jobs), run(*plain, jobs), "preemption");
  EXPECT_GT(core->stats().num_preemptions, 0);
  // No two prompts share a block: every hit is a preempted request finding its own work.
  EXPECT_EQ(core->stats().prefix_cache_hits, 0);
  EXPECT_GT(core->stats().prefix_cache_preempted_hits, 0);
  expect_reset_frees_everything(*core);
}

TEST_P(HybridPrefixCacheTest, SnapshotEvictedWhileItsBlocksStayCached) {
  EngineConfig config;
  config.block_size = 8;
  config.num_mamba_snapshots_override = 2;
  auto core = make_engine(GetParam(), config);
  auto plain = make_engine(GetParam(), uncached(config));
  ASSERT_TRUE(core && plain);
  const int64_t vocab = core->model_config().vocab_size;
  std::mt19937 rng(13);
  const std::vector<int32_t> a = tokens(rng, 30, vocab);
  std::vector<Job> first = {{"a", a, 3}};  // snapshots at 24 (prompt end) and 32 (output)
  expect_same(run(*core, first), run(*plain, first), "a");
  std::vector<Job> other = {{"other", tokens(rng, 20, vocab), 3}};  // evicts a's at 24
  expect_same(run(*core, other), run(*plain, other), "other");
  EXPECT_EQ(core->stats().num_state_snapshots, 2);
  // a's blocks are all still cached, but its snapshot is gone: no hit, and the same outputs.
  std::vector<Job> again = {{"a2", concat(a, tokens(rng, 5, vocab)), 4}};
  auto cached = run(*core, again);
  expect_same(cached, run(*plain, again), "a2");
  EXPECT_EQ(cached["a2"].num_cached_tokens, 0);
  // a2 found a's three cached blocks past any snapshot and saved one there (the junction).
  std::vector<Job> third = {{"a3", concat(a, tokens(rng, 2, vocab)), 4}};
  cached = run(*core, third);
  expect_same(cached, run(*plain, third), "a3");
  EXPECT_EQ(cached["a3"].num_cached_tokens, 24);
  expect_reset_frees_everything(*core);
}

INSTANTIATE_TEST_SUITE_P(Hybrids, HybridPrefixCacheTest,
                         ::testing::Values("qwen3_5_dense", "qwen3_5_moe", "qwen3_next", "demo"));

TEST(HybridPrefixCacheConfig, SnapshotSharingAndBadSettings) {
  EngineConfig config;
  config.block_size = 8;
  auto core = make_engine("qwen3_5_moe", config);
  ASSERT_TRUE(core);
  // The default share of the 64 MiB budget: 10% in snapshots of 3 GDN layers' state.
  const EngineStats stats = core->stats();
  EXPECT_GT(stats.state_snapshot_capacity, 0);
  EXPECT_EQ(stats.num_state_slots, 256);
  EXPECT_EQ(core->config().scheduler.state_snapshot_interval, 512);
  EngineConfig odd_blocks = config;
  odd_blocks.block_size = 48;  // the default interval rounds up to whole blocks
  EXPECT_EQ(make_engine("qwen3_5_moe", odd_blocks)->config().scheduler.state_snapshot_interval,
            528);

  config.mamba_cache_memory_fraction = 0.0;  // no snapshot fits: prefix caching goes off
  core = make_engine("qwen3_5_moe", config);
  ASSERT_TRUE(core);
  EXPECT_EQ(core->stats().state_snapshot_capacity, 0);

  auto bad = [&](EngineConfig c) {
    auto model = load_model(model_dir("qwen3_5_moe"), LoadOptions{});
    EXPECT_TRUE(model.has_value());
    c.scheduler.max_model_len = 512;
    c.kv_cache_memory_bytes = 64 << 20;
    auto created = EngineCore::create(std::move(*model), c, {});
    EXPECT_FALSE(created.has_value());
    return created.has_value() ? std::string() : created.status().message();
  };
  EngineConfig odd = config;
  odd.mamba_cache_interval = 12;
  EXPECT_NE(bad(odd).find("--mamba-cache-interval"), std::string::npos);
  EngineConfig share = config;
  share.mamba_cache_memory_fraction = 1.5;
  EXPECT_NE(bad(share).find("--mamba-cache-memory-fraction"), std::string::npos);
  EngineConfig too_many = config;
  too_many.num_mamba_snapshots_override = 1 << 20;
  EXPECT_NE(bad(too_many).find("snapshots"), std::string::npos);
}

}  // namespace
}  // namespace test_engine_hybrid_prefix
}  // namespace vllm::engine
