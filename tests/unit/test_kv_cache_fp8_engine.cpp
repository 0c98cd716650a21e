// `--kv-cache-dtype fp8` through the model and the engine on the CPU: every golden model
// keeps transformers' greedy tokens where the reference's top-2 margin leaves room for the
// e4m3 rounding of K and V, its logits stay near the reference, the cache holds four times
// the f32 cache's blocks in the same memory, checkpoint k_scale / v_scale reach the cache,
// and prefix caching (hybrids: GDN snapshots beside FP8 blocks) and tensor parallelism (the
// worker ranks get the cache dtype) give the tokens the plain FP8 engine gives; the scale
// tensors are found under each of vLLM's checkpoint names.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_args.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "model/layers/attention.h"
#include "model/model.h"
#include "tensor/kv_cache.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"
#include "unit/tp_harness.h"

namespace vllm {
namespace test_kv_cache_fp8_engine {
namespace {

namespace fs = std::filesystem;

fs::path golden(const std::string& name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name;
}

struct Rule {
  double logits;  // relative L2 of prefill logits against transformers' f32, worst prompt
  float margin;   // greedy tokens must agree while the reference's top-2 margin is at least this
  int64_t min_steps;  // greedy steps that must be compared
};

// Measured (see the printouts) and set with headroom. e4m3 keeps 4 significant bits, so every
// cached K and V element is up to 2^-4 (about 2.6% RMS) off; through four layers that is a
// few percent of the logits (measured 5.2e-2 llama, 6.2e-2 qwen3, 2.7e-2 qwen3_5_dense,
// 2.8e-2 qwen3_5_moe, 9.1e-2 qwen3_next at the worst prompt), and a greedy token may flip
// where the reference's top-2 margin is small: the FP8 runs first left the reference at
// margins up to 0.149 (qwen3; llama 0.092, the hybrids 0.032 and less), so tokens must agree
// while the margin is at least 0.25.
constexpr float kMargin = 0.25f;
const std::map<std::string, Rule> kRules = {
    {"llama", {0.08, kMargin, 4}},         {"qwen3", {0.10, kMargin, 8}},
    {"qwen3_5_dense", {0.05, kMargin, 8}}, {"qwen3_5_moe", {0.05, kMargin, 8}},
    {"qwen3_next", {0.15, kMargin, 8}},
};

engine::EngineArgs engine_args(const std::string& name, const std::string& kv_cache_dtype) {
  engine::EngineArgs args;
  args.model = golden(name).string();
  args.device = "cpu";
  args.max_model_len = 256;
  args.kv_cache_dtype = kv_cache_dtype;
  args.engine.kv_cache_memory_bytes = 4 << 20;
  args.engine.scheduler.max_num_seqs = 8;
  return args;
}

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Runs the prompts to completion on `core`: each request's output tokens, by index.
std::vector<std::vector<int32_t>> run(engine::EngineCore& core,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      int64_t max_tokens, const std::string& tag = "r") {
  for (size_t i = 0; i < prompts.size(); ++i) {
    Status s = core.add_request(tag + std::to_string(i), prompts[i], greedy(max_tokens));
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  std::map<std::string, std::vector<int32_t>> tokens;
  for (int step = 0; core.has_unfinished_requests() && step < 5000; ++step) {
    auto outputs = core.step();
    EXPECT_TRUE(outputs.has_value()) << outputs.status().to_string();
    if (!outputs) break;
    for (const engine::EngineCoreOutput& o : *outputs) {
      auto& t = tokens[o.request_id];
      t.insert(t.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(tokens[tag + std::to_string(i)]);
  return out;
}

class Fp8KvCacheGolden : public ::testing::TestWithParam<std::string> {};

// The golden prompts through the engine with an FP8 cache, greedy, against transformers'
// greedy tokens (which the f32 cache reproduces: test_golden.cpp) under the margin rule; and
// the engine's block count against the f32 cache's in the same memory.
TEST_P(Fp8KvCacheGolden, EngineKeepsTheReferenceGreedyTokensAndHoldsFourTimesTheBlocks) {
  const Rule rule = kRules.at(GetParam());
  auto reference = SafetensorsFile::open(golden(GetParam()) / "reference.safetensors");
  ASSERT_TRUE(reference.has_value());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Tensor> ref_tokens, ref_margins;
  for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    const std::string key = "prompt." + std::to_string(p) + ".";
    Tensor ids = *reference->tensor(key + "token_ids");
    prompts.emplace_back(ids.data<int64_t>(), ids.data<int64_t>() + ids.size(0));
    ref_tokens.push_back(*reference->tensor(key + "greedy_token_ids"));
    ref_margins.push_back(*reference->tensor(key + "greedy_margins"));
  }
  auto fp8 = engine::build_engine(engine_args(GetParam(), "fp8"));
  ASSERT_TRUE(fp8.has_value()) << fp8.status().to_string();
  auto f32 = engine::build_engine(engine_args(GetParam(), "auto"));
  ASSERT_TRUE(f32.has_value()) << f32.status().to_string();
  const int32_t fp8_blocks = fp8->core->stats().num_usable_blocks + 1;
  const int32_t f32_blocks = f32->core->stats().num_usable_blocks + 1;
  EXPECT_EQ(fp8_blocks / 4, f32_blocks) << "1-byte elements instead of 4 in the same budget";

  const auto steps = ref_tokens[0].size(0);
  const auto got = run(*fp8->core, prompts, steps);
  int64_t compared = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    ASSERT_EQ(static_cast<int64_t>(got[p].size()), steps);
    for (int64_t s = 0; s < steps; ++s) {
      if (ref_margins[p].data<float>()[s] < rule.margin) break;  // from here it may differ
      ASSERT_EQ(got[p][static_cast<size_t>(s)], ref_tokens[p].data<int64_t>()[s])
          << GetParam() << " prompt " << p << " greedy step " << s;
      ++compared;
    }
    // The smallest reference margin up to where the FP8 run first leaves the reference: the
    // margin rule must stop before it (for the printout).
    float lowest = 1e9f;
    for (int64_t s = 0; s < steps; ++s) {
      lowest = std::min(lowest, ref_margins[p].data<float>()[s]);
      if (got[p][static_cast<size_t>(s)] != ref_tokens[p].data<int64_t>()[s]) {
        std::printf(
            "  prompt %zu leaves the reference at step %lld (lowest margin to there %.3f)\n", p,
            static_cast<long long>(s), lowest);
        break;
      }
    }
  }
  EXPECT_GE(compared, rule.min_steps) << "the margin rule left too few steps to compare";
  std::printf(
      "%-14s fp8 KV cache: %d blocks (f32: %d), %lld greedy steps compared at margin "
      ">= %.2f\n",
      GetParam().c_str(), fp8_blocks, f32_blocks, static_cast<long long>(compared), rule.margin);
}

// Prefill logits of every golden prompt with an FP8 cache against transformers' f32 ones.
TEST_P(Fp8KvCacheGolden, PrefillLogitsStayNearTheReference) {
  const Rule rule = kRules.at(GetParam());
  LoadOptions options;
  options.kv_cache_dtype = "fp8";
  auto model = load_model(golden(GetParam()), options);
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  EXPECT_EQ((*model)->kv_cache_dtype(), DType::kF8E4M3);
  auto reference = SafetensorsFile::open(golden(GetParam()) / "reference.safetensors");
  ASSERT_TRUE(reference.has_value());
  const int64_t vocab = (*model)->config().vocab_size;
  double worst = 0;
  for (int p = 0; reference->contains("prompt." + std::to_string(p) + ".token_ids"); ++p) {
    const std::string key = "prompt." + std::to_string(p) + ".";
    Tensor ids = *reference->tensor(key + "token_ids");
    Tensor ref = *reference->tensor(key + "logits");
    const int64_t n = ids.size(0);
    auto cache =
        (*model)->create_cache(CacheConfig{n / testing::kBlockSize + 2, testing::kBlockSize, 2});
    ASSERT_TRUE(cache.has_value());
    ASSERT_EQ(cache->kv[0].dtype(), DType::kF8E4M3);
    testing::Seq seq;
    seq.slot = 1;
    seq.tokens.assign(ids.data<int64_t>(), ids.data<int64_t>() + n);
    seq.blocks.resize(static_cast<size_t>(cache->config.num_blocks));
    std::iota(seq.blocks.begin(), seq.blocks.end(), 0);
    Tensor logits = testing::step(**model, *cache, {{&seq, n}});
    ASSERT_TRUE(logits.defined());
    worst = std::max(worst, testing::rel_l2(logits.data<float>(), ref.data<float>(), n * vocab));
  }
  EXPECT_GT(worst, 1e-4) << "the FP8 cache changed nothing: was it used?";
  EXPECT_LE(worst, rule.logits);
  std::printf("%-14s fp8 KV cache: worst prompt's prefill logits rel L2 %.3e\n", GetParam().c_str(),
              worst);
}

INSTANTIATE_TEST_SUITE_P(Golden, Fp8KvCacheGolden,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next"));

// A golden checkpoint rewritten with per-layer k_scale / v_scale tensors: the first attention
// layer's cache (whose K and V depend on the embeddings only) holds e4m3(x / scale) of the
// values the f32 cache holds, for that layer's own scales.
TEST(Fp8KvCacheGolden, CheckpointScalesReachTheCache) {
  testing::TempDir dir("kv_scales");
  for (const char* f : {"config.json", "generation_config.json"}) {
    if (fs::exists(golden("llama") / f)) fs::copy_file(golden("llama") / f, dir / f);
  }
  auto source = SafetensorsFile::open(golden("llama") / "model.safetensors");
  ASSERT_TRUE(source.has_value()) << source.status().to_string();
  NamedTensors tensors;
  for (const std::string& name : source->names()) tensors.emplace_back(name, *source->tensor(name));
  auto scalar = [](float v) {
    Tensor t = Tensor::empty({}, DType::kF32);
    t.data<float>()[0] = v;
    return t;
  };
  const float k_scale = 0.0078125f, v_scale = 0.03f;
  tensors.emplace_back("model.layers.0.self_attn.k_scale", scalar(k_scale));
  tensors.emplace_back("model.layers.0.self_attn.v_scale", scalar(v_scale));
  tensors.emplace_back("model.layers.1.self_attn.kv_scale", scalar(0.5f));
  ASSERT_TRUE(write_safetensors(dir / "model.safetensors", tensors).is_ok());

  std::vector<int64_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  auto prefill = [&](const std::string& kv_dtype, const fs::path& folder) {
    LoadOptions options;
    options.kv_cache_dtype = kv_dtype;
    auto model = load_model(folder, options);
    EXPECT_TRUE(model.has_value()) << model.status().to_string();
    auto cache = (*model)->create_cache(CacheConfig{6, testing::kBlockSize, 2});
    EXPECT_TRUE(cache.has_value());
    testing::Seq seq;
    seq.tokens = prompt;
    seq.blocks = {1, 2, 3};
    testing::step(**model, *cache, {{&seq, static_cast<int64_t>(prompt.size())}});
    return cache->kv[0];
  };
  Tensor f32 = prefill("auto", golden("llama"));
  Tensor fp8 = prefill("fp8_e4m3", dir.path());
  ASSERT_EQ(fp8.dtype(), DType::kF8E4M3);
  const int64_t half = f32.size(2) * f32.size(3) * f32.size(4);  // one block's K (or V)
  int64_t mismatches = 0, nonzero = 0;
  for (int64_t i = 0; i < f32.numel(); ++i) {
    const bool value = (i / half) % 2 == 1;
    const uint8_t want = fp8_kv_quantize(f32.data<float>()[i], value ? v_scale : k_scale);
    mismatches += fp8.data<uint8_t>()[i] != want;
    nonzero += want != 0;
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(nonzero, f32.numel() / 4);
}

// Prefix caching with an FP8 cache: a second wave sharing a prefix with the first hits the
// cache (hybrids restore GDN snapshots next to FP8 blocks) and gets the tokens of the same
// engine without prefix caching.
TEST(Fp8KvCacheEngine, PrefixCachingKeepsTheTokens) {
  for (const char* name : {"qwen3", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    std::mt19937 rng(3);
    std::vector<int32_t> prefix;
    for (int t = 0; t < 24; ++t) prefix.push_back(static_cast<int32_t>(rng() % 200));
    std::vector<std::vector<int32_t>> first = {prefix}, second;
    first[0].push_back(7);
    for (int i = 0; i < 3; ++i) {
      second.push_back(prefix);
      for (int t = 0; t <= i; ++t) second.back().push_back(static_cast<int32_t>(rng() % 200));
    }
    std::vector<std::vector<int32_t>> outs[2];
    int64_t hits[2] = {0, 0};
    for (int caching = 0; caching < 2; ++caching) {
      engine::EngineArgs args = engine_args(name, "fp8");
      args.enable_prefix_caching = caching == 1;
      args.engine.block_size = 4;
      auto loaded = engine::build_engine(args);
      ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
      outs[caching] = run(*loaded->core, first, 8, "a");
      for (auto& t : run(*loaded->core, second, 8, "b")) outs[caching].push_back(t);
      hits[caching] = loaded->core->stats().prefix_cache_hits;
    }
    EXPECT_EQ(hits[0], 0);
    EXPECT_GT(hits[1], 0);
    EXPECT_EQ(outs[1], outs[0]);
  }
}

// Tensor parallelism: the worker rank allocates an FP8 cache too (the spec carries the cache
// dtype), and the two ranks' tokens are one rank's.
TEST(Fp8KvCacheEngine, TensorParallelMatchesOneRank) {
  for (const char* name : {"llama", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    std::vector<std::vector<int32_t>> prompts = {{3, 1, 4, 1, 5, 9, 2, 6}, {2, 7, 1, 8, 2, 8, 1}};
    std::vector<std::vector<int32_t>> outs[2];
    for (int tp : {1, 2}) {
      engine::EngineArgs args = engine_args(name, "fp8");
      if (tp > 1) args.parallel = testing::tp_config(tp);
      auto loaded = engine::build_engine(args);
      ASSERT_TRUE(loaded.has_value()) << loaded.status().to_string();
      outs[tp - 1] = run(*loaded->core, prompts, 12);
    }
    EXPECT_EQ(outs[1], outs[0]);
  }
}

// The scales each attention layer reads from a checkpoint, under vLLM's names.
// A WeightSource over named host tensors.
class MapWeights final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  Expected<Tensor> get(const std::string& name, const Shape& shape) override {
    auto it = tensors.find(name);
    if (it == tensors.end()) return make_error(ErrorCode::kNotFound, "no {}", name);
    if (it->second.shape() != shape) {
      return make_error(ErrorCode::kInvalidFormat, "{} is {}", name, it->second.to_string());
    }
    return it->second;
  }
  bool contains(const std::string& name) const override { return tensors.count(name) != 0; }
};

Tensor scalar(float value, const Shape& shape = {}, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, dtype);
  if (dtype == DType::kF32) {
    t.data<float>()[0] = value;
  } else {
    t.data<uint16_t>()[0] = dtype == DType::kBF16 ? f32_to_bf16(value) : f32_to_f16(value);
  }
  return t;
}

TEST(Fp8KvCacheScales, ReadsVllmsCheckpointNames) {
  const ExecContext ctx;
  const std::string p = "model.layers.3.self_attn.";
  auto load = [&](MapWeights& w) {
    auto s = load_kv_cache_scales(w, p, ctx);
    EXPECT_TRUE(s.has_value()) << s.status().to_string();
    return s.has_value() ? *s : KvCacheScales{-1.0f, -1.0f};
  };
  {
    MapWeights w;  // none: 1.0
    const KvCacheScales s = load(w);
    EXPECT_EQ(s.k_scale, 1.0f);
    EXPECT_EQ(s.v_scale, 1.0f);
  }
  {
    MapWeights w;  // llm-compressor / AutoFP8: self_attn.k_scale, shape []
    w.tensors[p + "k_scale"] = scalar(0.25f);
    w.tensors[p + "v_scale"] = scalar(0.5f, {1});
    w.tensors["model.layers.4.self_attn.k_scale"] = scalar(9.0f);  // another layer's
    const KvCacheScales s = load(w);
    EXPECT_EQ(s.k_scale, 0.25f);
    EXPECT_EQ(s.v_scale, 0.5f);
  }
  {
    MapWeights w;  // ModelOpt
    w.tensors[p + "k_proj.k_scale"] = scalar(0.125f, {1}, DType::kBF16);
    w.tensors[p + "v_proj.v_scale"] = scalar(2.0f, {}, DType::kF16);
    const KvCacheScales s = load(w);
    EXPECT_EQ(s.k_scale, 0.125f);
    EXPECT_EQ(s.v_scale, 2.0f);
  }
  {
    MapWeights w;  // compressed-tensors' output scales
    w.tensors[p + "k_proj.output_scale"] = scalar(0.75f);
    w.tensors[p + "v_proj.output_scale"] = scalar(1.5f);
    const KvCacheScales s = load(w);
    EXPECT_EQ(s.k_scale, 0.75f);
    EXPECT_EQ(s.v_scale, 1.5f);
  }
  {
    MapWeights w;  // the deprecated single kv_scale: both
    w.tensors[p + "kv_scale"] = scalar(0.3f);
    const KvCacheScales s = load(w);
    EXPECT_EQ(s.k_scale, 0.3f);
    EXPECT_EQ(s.v_scale, 0.3f);
  }
  {
    MapWeights w;  // one of the two: vLLM duplicates it
    w.tensors[p + "v_scale"] = scalar(0.6f);
    const KvCacheScales s = load(w);
    EXPECT_EQ(s.k_scale, 0.6f);
    EXPECT_EQ(s.v_scale, 0.6f);
  }
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    MapWeights w;
    w.tensors[p + "k_scale"] = scalar(bad);
    auto s = load_kv_cache_scales(w, p, ctx);
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.status().message().find(p + "k_scale"), std::string::npos) << s.status().message();
  }
  {
    MapWeights w;  // not a scalar
    w.tensors[p + "k_scale"] = Tensor::zeros({2}, DType::kF32);
    EXPECT_FALSE(load_kv_cache_scales(w, p, ctx).has_value());
  }
}

// Unsupported values are refused before anything loads, naming the value.
TEST(Fp8KvCacheEngine, RefusesOtherCacheDtypesAndCalculatedScales) {
  for (const char* bad : {"fp8_e5m2", "fp8_inc", "int8"}) {
    auto loaded = engine::build_engine(engine_args("llama", bad));
    ASSERT_FALSE(loaded.has_value()) << bad;
    EXPECT_EQ(loaded.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(loaded.status().message().find(bad), std::string::npos) << loaded.status().message();
  }
  engine::EngineArgs args = engine_args("llama", "fp8");
  args.calculate_kv_scales = true;
  auto loaded = engine::build_engine(args);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_NE(loaded.status().message().find("--calculate-kv-scales"), std::string::npos);
  LoadOptions options;
  options.kv_cache_dtype = "fp8_e5m2";
  auto model = load_model(golden("llama"), options);
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find("fp8_e5m2"), std::string::npos);
}

// The flag through the `vllm` command (serve, generate, chat and bench share its engine
// flags): what it prints (stdout and stderr) and its exit code.
struct CliRun {
  int exit_code = -1;
  std::string output;
};

CliRun run_vllm(const std::string& args) {
  testing::TempDir tmp("kv_fp8_cli");
  const fs::path out = tmp / "out.txt";
  const std::string cmd =
      "'" + std::string(VLLM_CLI_PATH) + "' " + args + " > '" + out.string() + "' 2>&1 < /dev/null";
  CliRun r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(out);
  r.output.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return r;
}

TEST(KvCacheDtypeCli, GenerateAndBenchTakeFp8AndEveryCommandRefusesOtherValues) {
  const std::string model = golden("qwen3").string();
  const std::string common = " --device cpu --kv-cache-memory-bytes 4194304 --max-model-len 128";
  CliRun gen = run_vllm("generate --model '" + model + "'" + common +
                        " --prompt-ids 1,2,3 --max-tokens 4 --json --kv-cache-dtype fp8");
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  EXPECT_NE(gen.output.find("F8_E4M3"), std::string::npos) << "the cache-size log line";
  EXPECT_NE(gen.output.find("token_ids"), std::string::npos) << gen.output;
  CliRun bench = run_vllm("bench latency --model '" + model + "'" + common +
                          " --kv-cache-dtype fp8_e4m3 --input-len 8 --output-len 4 "
                          "--batch-size 2 --num-iters-warmup 0 --num-iters 1 --disable-tqdm");
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("F8_E4M3"), std::string::npos) << bench.output;
  for (const std::string sub : {"generate --prompt-ids 1,2", "serve", "bench throughput"}) {
    for (const char* bad : {"fp8_e5m2", "fp8_inc", "bfloat16"}) {
      CliRun r = run_vllm(sub + " --model '" + model + "'" + common + " --kv-cache-dtype " + bad);
      EXPECT_NE(r.exit_code, 0) << sub << " " << bad;
      EXPECT_NE(r.output.find(std::string("'") + bad + "'"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("auto, fp8 and fp8_e4m3"), std::string::npos) << r.output;
    }
  }
  CliRun calc = run_vllm("generate --model '" + model + "'" + common +
                         " --prompt-ids 1,2 --kv-cache-dtype fp8 --calculate-kv-scales");
  EXPECT_NE(calc.exit_code, 0);
  EXPECT_NE(calc.output.find("--calculate-kv-scales is not supported"), std::string::npos)
      << calc.output;
}

}  // namespace
}  // namespace test_kv_cache_fp8_engine
}  // namespace vllm
