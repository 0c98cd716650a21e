// --mamba-cache-dtype / --mamba-ssm-cache-dtype (vLLM's flags; model/mamba_dtype.h) through
// the engine and the `vllm` command, on the CPU:
//   - the state pool holds twice the states in the same memory when both states are bfloat16
//     (the prefix cache's snapshot capacity out of a fixed budget);
//   - the golden hybrids with a bfloat16 recurrent state still give transformers' greedy
//     tokens under the hybrids' BF16 margin rule (docs/design.md: equal while the reference's
//     top-2 margin is at least 0.25; decode logits within 1.5e-1), prefill logits untouched;
//   - tensor-parallel workers get the flags (rank 0 and the workers' shards agree);
//   - the command line takes vLLM's values and refuses others naming the value and choices.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine_args.h"
#include "loader/safetensors.h"
#include "model/model.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"
#include "unit/tp_harness.h"

namespace vllm::engine {
namespace test_mamba_dtype_engine {
namespace {

namespace fs = std::filesystem;

fs::path golden(const std::string& name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name;
}

EngineArgs engine_args(const std::string& name, const char* cache, const char* ssm) {
  EngineArgs args;
  args.model = golden(name).string();
  args.device = "cpu";
  args.max_model_len = 256;
  args.engine.kv_cache_memory_bytes = 8 << 20;
  args.engine.scheduler.max_num_seqs = 8;
  args.mamba_cache_dtype = cache;
  args.mamba_ssm_cache_dtype = ssm;
  return args;
}

std::unique_ptr<EngineCore> start(const EngineArgs& args) {
  auto loaded = build_engine(args);
  EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
  return loaded.has_value() ? std::move(loaded->core) : nullptr;
}

TEST(MambaDtypeEngine, StatePoolHoldsTwiceTheStatesInTheSameMemory) {
  for (const char* name : {"qwen3_5_moe", "qwen3_next"}) {
    SCOPED_TRACE(name);
    auto f32 = start(engine_args(name, "float32", "float32"));
    auto bf16 = start(engine_args(name, "bfloat16", "bfloat16"));
    auto ssm_only = start(engine_args(name, "float32", "bfloat16"));
    ASSERT_TRUE(f32 && bf16 && ssm_only);
    const EngineStats a = f32->stats(), b = bf16->stats(), c = ssm_only->stats();
    ASSERT_GT(a.state_snapshot_capacity, 0);
    // floor(2x) of the same budget: twice, or one more.
    EXPECT_GE(b.state_snapshot_capacity, 2 * a.state_snapshot_capacity);
    EXPECT_LE(b.state_snapshot_capacity, 2 * a.state_snapshot_capacity + 1);
    EXPECT_GT(c.state_snapshot_capacity, a.state_snapshot_capacity);
    EXPECT_LT(c.state_snapshot_capacity, b.state_snapshot_capacity);
    // The running requests' slots are --max-num-seqs whatever their size.
    EXPECT_EQ(a.num_state_slots, 8);
    EXPECT_EQ(b.num_state_slots, 8);
    std::printf(
        "%-12s state snapshots in the same budget: f32 %d, bf16 recurrent %d, bf16 both %d\n", name,
        a.state_snapshot_capacity, c.state_snapshot_capacity, b.state_snapshot_capacity);
  }
}

int64_t argmax(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

// The hybrid goldens with a bfloat16 recurrent state (and with both states bfloat16): the
// transformers reference under the BF16 rule for hybrids. Prefill runs in one step from a zero
// state, which is rounded only when stored, so its logits stay within the f32 bound (1e-4).
TEST(MambaDtypeEngine, GoldenHybridsKeepTheirGreedyTokensWithBf16State) {
  constexpr double kDecodeTolerance = 1.5e-1;
  constexpr float kMargin = 0.25f;
  for (const char* name : {"qwen3_5_dense", "qwen3_5_moe", "qwen3_next"}) {
    for (const char* cache : {"auto", "bfloat16"}) {
      SCOPED_TRACE(std::string(name) + " --mamba-cache-dtype " + cache);
      LoadOptions options;
      options.mamba_cache_dtype = cache;
      options.mamba_ssm_cache_dtype = "bfloat16";
      auto model = load_model(golden(name), options);
      ASSERT_TRUE(model.has_value()) << model.status().to_string();
      auto reference = SafetensorsFile::open(golden(name) / "reference.safetensors");
      ASSERT_TRUE(reference.has_value()) << reference.status().to_string();
      const int64_t vocab = (*model)->config().vocab_size;
      double worst_prefill = 0, worst_decode = 0;
      int64_t compared = 0;
      for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
        const std::string key = "prompt." + std::to_string(p) + ".";
        Tensor ids = *reference->tensor(key + "token_ids");
        Tensor ref_logits = *reference->tensor(key + "logits");
        Tensor ref_greedy = *reference->tensor(key + "greedy_token_ids");
        Tensor ref_margins = *reference->tensor(key + "greedy_margins");
        Tensor ref_greedy_logits = *reference->tensor(key + "greedy_logits");
        const int64_t n = ids.size(0), steps = ref_greedy.size(0);
        auto cache_tensors = (*model)->create_cache(
            CacheConfig{(n + steps) / testing::kBlockSize + 2, testing::kBlockSize, 2});
        ASSERT_TRUE(cache_tensors.has_value()) << cache_tensors.status().to_string();
        ASSERT_EQ(cache_tensors->ssm_state[0].dtype(), DType::kBF16);
        testing::Seq seq;
        seq.slot = 1;
        seq.tokens.assign(ids.data<int64_t>(), ids.data<int64_t>() + n);
        seq.blocks.resize(static_cast<size_t>(cache_tensors->config.num_blocks));
        std::iota(seq.blocks.begin(), seq.blocks.end(), 0);
        Tensor logits = testing::step(**model, *cache_tensors, {{&seq, n}});
        ASSERT_TRUE(logits.defined());
        for (int64_t i = 0; i < n; ++i) {
          worst_prefill =
              std::max(worst_prefill, testing::rel_l2(logits.data<float>() + i * vocab,
                                                      ref_logits.data<float>() + i * vocab, vocab));
        }
        int64_t next = argmax(logits.data<float>() + (n - 1) * vocab, vocab);
        for (int64_t s = 0; s < steps; ++s) {
          if (ref_margins.data<float>()[s] < kMargin) break;
          ASSERT_EQ(next, ref_greedy.data<int64_t>()[s]) << "prompt " << p << " step " << s;
          ++compared;
          if (s + 1 == steps) break;
          seq.tokens.push_back(next);
          Tensor step_logits = testing::step(**model, *cache_tensors, {{&seq, 1}});
          ASSERT_TRUE(step_logits.defined());
          const double err = testing::rel_l2(
              step_logits.data<float>(), ref_greedy_logits.data<float>() + (s + 1) * vocab, vocab);
          EXPECT_LE(err, kDecodeTolerance) << "prompt " << p << " decode step " << s + 1;
          worst_decode = std::max(worst_decode, err);
          next = argmax(step_logits.data<float>(), vocab);
        }
      }
      EXPECT_LE(worst_prefill, 1e-4);
      EXPECT_GT(worst_decode, 1e-4) << "the bfloat16 state must show in the decode steps";
      EXPECT_GE(compared, 4) << "too few greedy steps compared";  // as the CUDA goldens
      std::printf(
          "%-14s bf16 recurrent state, conv %s: worst prefill %.2e, worst decode %.2e, "
          "%lld greedy tokens equal\n",
          name, cache, worst_prefill, worst_decode, static_cast<long long>(compared));
    }
  }
}

std::map<std::string, std::vector<int32_t>> run_greedy(EngineCore& core, int max_tokens) {
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 9, 14, 3, 8, 1, 22, 7, 19, 2, 11}, {4, 4, 6}, {30, 2, 17, 9, 1, 5, 8, 13, 21, 34, 55, 6}};
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    Status s = core.add_request("r" + std::to_string(i), prompts[i], p);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, std::vector<int32_t>> tokens;
  for (int step = 0; core.has_unfinished_requests() && step < 1000; ++step) {
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

// The flags reach the `vllm worker` ranks: two ranks with a bfloat16 recurrent state give the
// one-rank tokens; a bad value fails the start naming it.
TEST(MambaDtypeEngine, TensorParallelWorkersTakeTheFlags) {
  auto one = start(engine_args("qwen3_5_moe", "auto", "bfloat16"));
  EngineArgs args = engine_args("qwen3_5_moe", "auto", "bfloat16");
  args.parallel = testing::tp_config(2);
  auto two = start(args);
  ASSERT_TRUE(one && two);
  EXPECT_EQ(run_greedy(*two, 12), run_greedy(*one, 12));
  args.mamba_ssm_cache_dtype = "half";
  auto bad = build_engine(args);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("--mamba-ssm-cache-dtype: invalid choice 'half'"),
            std::string::npos)
      << bad.status().message();
}

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

CliRun run_cli(const std::string& args) {
  testing::TempDir tmp("vllm_mamba_dtype_cli");
  const fs::path out = tmp / "stdout.txt", err = tmp / "stderr.txt";
  const std::string cmd = "'" + std::string(VLLM_CLI_PATH) + "' " + args + " > '" + out.string() +
                          "' 2> '" + err.string() + "'";
  CliRun r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::stringstream o, e;
  o << std::ifstream(out).rdbuf();
  e << std::ifstream(err).rdbuf();
  r.out = o.str();
  r.err = e.str();
  return r;
}

TEST(MambaDtypeCli, GenerateAndBenchTakeTheFlagsAndRefuseBadValues) {
  const std::string model = " --model '" + golden("qwen3_5_moe").string() + "' --device cpu";
  const CliRun ok = run_cli("generate" + model +
                            " --prompt-ids 5,9,14,3 --max-tokens 4 --json "
                            "--mamba-cache-dtype float32 --mamba-ssm-cache-dtype bfloat16");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"token_ids\""), std::string::npos) << ok.out;
  EXPECT_NE(ok.err.find("GDN state: conv float32, recurrent (ssm) bfloat16"), std::string::npos)
      << ok.err;
  const CliRun bench = run_cli("bench latency" + model +
                               " --input-len 8 --output-len 4 --batch-size 2 --max-model-len 256 "
                               "--num-iters-warmup 1 --num-iters 1 --mamba-ssm-cache-dtype "
                               "float16 --kv-cache-memory-bytes 16777216");
  EXPECT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.err.find("recurrent (ssm) float16"), std::string::npos) << bench.err;
  for (const char* flag : {"--mamba-cache-dtype", "--mamba-ssm-cache-dtype"}) {
    const CliRun bad = run_cli("generate" + model + " --prompt-ids 5,9 --max-tokens 2 " +
                               std::string(flag) + " bf16");
    EXPECT_NE(bad.exit_code, 0) << flag;
    const std::string all = bad.out + bad.err;
    EXPECT_NE(all.find(std::string(flag) + ": invalid choice 'bf16' (choose from auto, float32, "
                                           "float16, bfloat16)"),
              std::string::npos)
        << all;
  }
}

}  // namespace
}  // namespace test_mamba_dtype_engine
}  // namespace vllm::engine
