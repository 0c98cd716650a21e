// `vllm bench multi-turn` on the golden hybrid checkpoint: with and without prefix caching the
// conversations are the same (the output digest), every prompt token is counted, and caching
// computes fewer of them; bad settings are errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "bench/multi_turn_benchmark.h"
#include "engine/engine_args.h"

namespace vllm::bench {
namespace test_bench_multi_turn {
namespace {

namespace fs = std::filesystem;

engine::LoadedEngine engine_for(bool prefix_caching) {
  engine::EngineArgs args;
  args.model = (fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / "qwen3_5_moe").string();
  args.max_model_len = 256;
  args.engine.block_size = 8;
  args.engine.kv_cache_memory_bytes = 16 << 20;
  args.engine.scheduler.max_num_seqs = 8;
  args.enable_prefix_caching = prefix_caching;
  auto loaded = engine::build_engine(args);
  EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
  return loaded.has_value() ? std::move(*loaded) : engine::LoadedEngine{};
}

struct Quiet {
  std::FILE* file = std::fopen("/dev/null", "w");
  ~Quiet() { std::fclose(file); }
};

TEST(BenchMultiTurn, SameConversationsFewerPrefillTokensWithCaching) {
  MultiTurnOptions options;
  options.num_conversations = 3;
  options.num_turns = 3;
  options.system_prompt_len = 40;
  options.user_len = 5;
  options.output_len = 6;
  options.max_concurrency = 2;
  Quiet quiet;
  auto on = engine_for(true);
  auto off = engine_for(false);
  ASSERT_TRUE(on.core && off.core);
  auto with = run_multi_turn_benchmark(options, on, quiet.file);
  auto without = run_multi_turn_benchmark(options, off, quiet.file);
  ASSERT_TRUE(with.has_value()) << with.status().to_string();
  ASSERT_TRUE(without.has_value()) << without.status().to_string();
  EXPECT_EQ((*with)["output_digest"], (*without)["output_digest"]);
  // Per conversation, turn t sends 40 + 5t + 6(t - 1) tokens: 168 over three turns.
  EXPECT_EQ((*with)["total_prompt_tokens"], 3 * 168);
  EXPECT_EQ((*without)["total_prompt_tokens"], 3 * 168);
  EXPECT_EQ((*without)["computed_prompt_tokens"], 3 * 168);
  EXPECT_EQ((*without)["cached_prompt_tokens"], 0);
  EXPECT_GT((*with)["cached_prompt_tokens"].get<int64_t>(), 0);
  EXPECT_EQ((*with)["cached_prompt_tokens"].get<int64_t>() +
                (*with)["computed_prompt_tokens"].get<int64_t>(),
            3 * 168);
  EXPECT_EQ((*with)["num_requests"], 9);
  EXPECT_EQ((*with)["mean_ttft_ms_by_turn"].size(), 3u);
}

TEST(BenchMultiTurn, BadSettingsAreErrors) {
  Quiet quiet;
  auto loaded = engine_for(true);
  ASSERT_TRUE(loaded.core);
  MultiTurnOptions options;
  options.num_turns = 0;
  EXPECT_EQ(run_multi_turn_benchmark(options, loaded, quiet.file).status().code(),
            ErrorCode::kInvalidArgument);
  options = MultiTurnOptions{};  // 2,000-token system prompt: past max_model_len 256
  auto too_long = run_multi_turn_benchmark(options, loaded, quiet.file);
  ASSERT_FALSE(too_long.has_value());
  EXPECT_NE(too_long.status().message().find("max_model_len"), std::string::npos);
}

}  // namespace
}  // namespace test_bench_multi_turn
}  // namespace vllm::bench
