// Tensor parallelism on the CPU (ranks as `vllm worker` processes over shared memory) against
// one rank, model by model: the golden checkpoints and the demo model at TP=2, small hybrids
// at TP=4 (KV heads replicated, a vocabulary shard of padding only), every GDN and MoE
// layout. Each compares the logits of a prefill and of greedy decode steps with the
// single-rank model's, and the greedy tokens.
//
// Tolerance. Sharding changes only the order of the additions in the row-parallel products
// (each rank sums its slice, the all-reduce sums the ranks) and nothing else; everything
// replicated is computed from the same bits on every rank. So the difference is f32 rounding:
// a few ulps (~1e-7 relative) per reduction, carried through a few random-weight layers.
// Measured worst cases are about 2e-6 (printed by each test); kLogitsTolerance = 1e-5 leaves
// a 5x margin, while a sharding mistake is off by far more (KV heads handed to the wrong
// ranks, tried on purpose: 1e-1 to 3e-1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine_args.h"
#include "loader/safetensors.h"
#include "unit/hybrid_checkpoint.h"
#include "unit/temp_dir.h"
#include "unit/tp_harness.h"

namespace vllm {
namespace test_tensor_parallel_models {
namespace {

namespace fs = std::filesystem;
using testing::Seq;

constexpr double kLogitsTolerance = 1e-5;

int64_t argmax(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

fs::path golden(const std::string& name) {
  return fs::path(VLLM_SOURCE_DIR) / "tests" / "golden" / name;
}

std::vector<std::vector<int64_t>> reference_prompts(const fs::path& dir, int count) {
  std::vector<std::vector<int64_t>> prompts;
  auto reference = SafetensorsFile::open(dir / "reference.safetensors");
  if (!reference) {
    // Folders without a transformers reference (the small hybrids): fixed prompts.
    for (int p = 0; p < count; ++p) {
      std::vector<int64_t> ids;
      for (int i = 0; i < 9 + 4 * p; ++i) ids.push_back((7 * i + 3 * p + 1) % 90);
      prompts.push_back(ids);
    }
    return prompts;
  }
  for (int p = 0; p < count && reference->contains("prompt." + std::to_string(p) + ".token_ids");
       ++p) {
    Tensor ids = *reference->tensor("prompt." + std::to_string(p) + ".token_ids");
    prompts.emplace_back(ids.data<int64_t>(), ids.data<int64_t>() + ids.size(0));
  }
  return prompts;
}

struct Comparison {
  double worst = 0;
  int64_t tokens = 0;
};

// How a comparison loads the model (both sides) and runs the sharded one. Every member has
// an initializer, so designated initializers may leave any out (GCC 12 warns otherwise).
struct TpRun {
  int tp = 2;
  int steps = 4;        // greedy decode steps after the prefill
  std::string label{};  // printed; empty: the folder's name
  std::string load_format = "auto";
  std::string step_channel{};
  bool expert_parallel = false;
  std::string quantization{};
};

// Prefill + `steps` greedy decode steps of each prompt, two prompts batched together, on
// one rank and on `tp`; the logits of every row compared.
void compare(const fs::path& dir, const TpRun& run) {
  const int tp = run.tp, steps = run.steps;
  const std::string label = run.label.empty() ? dir.filename().string() : run.label;
  LoadOptions one;
  one.load_format = run.load_format;
  one.quantization = run.quantization;
  auto single = load_model(dir, one);
  ASSERT_TRUE(single.has_value()) << single.status().to_string();
  auto sharded = testing::TpModel::start(dir, tp, run.load_format, run.step_channel,
                                         run.expert_parallel, run.quantization);
  ASSERT_TRUE(sharded);
  const int64_t vocab = (*single)->config().vocab_size;
  const auto prompts = reference_prompts(dir, 2);
  ASSERT_EQ(prompts.size(), 2u);
  int64_t total = 0;
  for (const auto& p : prompts) total += static_cast<int64_t>(p.size()) + steps;
  const CacheConfig cache_config{total / testing::kBlockSize + 4, testing::kBlockSize, 3};
  auto cache = (*single)->create_cache(cache_config);
  ASSERT_TRUE(cache.has_value()) << cache.status().to_string();
  ASSERT_NE(sharded->init_cache(cache_config), nullptr);

  // Two sequences per model, their blocks disjoint; slots 1 and 2.
  auto make_seqs = [&] {
    std::vector<Seq> seqs(2);
    int32_t block = 0;
    for (size_t s = 0; s < 2; ++s) {
      seqs[s].tokens = prompts[s];
      seqs[s].slot = static_cast<int32_t>(s) + 1;
      const int64_t need =
          (static_cast<int64_t>(prompts[s].size()) + steps) / testing::kBlockSize + 1;
      for (int64_t b = 0; b < need; ++b) seqs[s].blocks.push_back(block++);
    }
    return seqs;
  };
  std::vector<Seq> a = make_seqs(), b = make_seqs();
  Comparison c;
  auto check_rows = [&](const Tensor& x, const Tensor& y, const char* what, int step) {
    ASSERT_EQ(x.shape(), y.shape());
    for (int64_t r = 0; r < x.size(0); ++r) {
      const float* row = x.data<float>() + r * vocab;
      const float* row_tp = y.data<float>() + r * vocab;
      const double err = testing::rel_l2(row_tp, row, vocab);
      ASSERT_LE(err, kLogitsTolerance)
          << label << " tp " << tp << " " << what << " step " << step << " row " << r;
      ASSERT_EQ(argmax(row_tp, vocab), argmax(row, vocab))
          << label << " tp " << tp << " " << what << " step " << step << " row " << r;
      c.worst = std::max(c.worst, err);
    }
  };
  const auto n0 = static_cast<int64_t>(prompts[0].size()),
             n1 = static_cast<int64_t>(prompts[1].size());
  Tensor x = testing::step(**single, *cache, {{&a[0], n0}, {&a[1], n1}});
  auto y = sharded->step({{&b[0], n0}, {&b[1], n1}});
  ASSERT_TRUE(y.has_value()) << y.status().to_string();
  check_rows(x, *y, "prefill", 0);
  for (int s = 1; s <= steps; ++s) {
    for (size_t q = 0; q < 2; ++q) {
      const int64_t last = q == 0 ? n0 - 1 : n0 + n1 - 1;
      const int64_t next = s == 1
                               ? argmax(x.data<float>() + last * vocab, vocab)
                               : argmax(x.data<float>() + static_cast<int64_t>(q) * vocab, vocab);
      a[q].tokens.push_back(next);
      b[q].tokens.push_back(next);
      ++c.tokens;
    }
    x = testing::step(**single, *cache, {{&a[0], 1}, {&a[1], 1}});
    y = sharded->step({{&b[0], 1}, {&b[1], 1}});
    ASSERT_TRUE(y.has_value()) << y.status().to_string();
    check_rows(x, *y, "decode", s);
  }
  std::printf(
      "%-16s TP=%d: worst logits rel L2 %.2e over prefill + %d decode steps, %lld greedy "
      "tokens equal\n",
      label.c_str(), tp, c.worst, steps, static_cast<long long>(c.tokens));
}

class TensorParallelGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelGolden, TwoRanksMatchOne) {
  compare(golden(GetParam()), TpRun{.tp = 2, .steps = 12});
}

INSTANTIATE_TEST_SUITE_P(Golden, TensorParallelGolden,
                         ::testing::Values("llama", "qwen3", "qwen3_5_dense", "qwen3_5_moe",
                                           "qwen3_next"));

TEST(TensorParallel, DemoModelTwoRanksMatchOne) {
  compare(fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo", TpRun{.tp = 2, .steps = 8});
}

// Dummy weights are made per shard, each rank only its own, yet every shard holds the
// elements of the single-rank tensor it covers (DummyWeights' counter-based streams).
TEST(TensorParallel, DummyWeightShardsAreSlicesOfTheSingleRankModel) {
  compare(golden("qwen3_5_moe"), TpRun{.load_format = "dummy"});
}

TEST(TensorParallel, TcpStepChannelGivesTheSameResults) {
  compare(golden("qwen3"), TpRun{.step_channel = "tcp"});
}

// Small hybrids whose every dimension divides by 4: 4 query heads over 2 KV heads (each
// replicated on two ranks), 4 GDN key heads of 2 value heads each, a 96-token vocabulary
// padded to 128 (rank 3's shard is padding only).
testing::HybridDims four_way_dims() {
  testing::HybridDims d;
  d.heads = 4;
  d.kv_heads = 2;
  d.hk = 4;
  d.hv = 8;
  d.inter = 40;
  d.moe_inter = 12;
  d.shared_inter = 20;
  return d;
}

struct FourWayCase {
  const char* name;
  testing::HybridSpec::Family family;
  bool fused_experts;
};

class TensorParallelFourRanks : public ::testing::TestWithParam<FourWayCase> {};

TEST_P(TensorParallelFourRanks, MatchOne) {
  testing::TempDir dir("tp4");
  testing::HybridSpec spec;
  spec.family = GetParam().family;
  spec.fused_experts = GetParam().fused_experts;
  spec.moe = true;  // Qwen3-Next: sparse layers
  ASSERT_TRUE(testing::HybridCheckpointWriter(spec, four_way_dims()).write(dir.path()).is_ok());
  compare(dir.path(), TpRun{.tp = 4, .label = std::string("hybrid_") + GetParam().name});
}

INSTANTIATE_TEST_SUITE_P(
    Hybrids, TensorParallelFourRanks,
    ::testing::Values(
        FourWayCase{"dense", testing::HybridSpec::Family::kQwen3_5, false},
        FourWayCase{"moe_fused_experts", testing::HybridSpec::Family::kQwen3_5Moe, true},
        FourWayCase{"next_fused_gdn", testing::HybridSpec::Family::kQwen3Next, false}),
    [](const auto& info) { return std::string(info.param.name); });

// --enable-expert-parallel: whole experts per rank (vLLM's linear placement), here also
// an uneven one (6 experts over 4 ranks: 2, 2, 1, 1).
TEST(TensorParallel, ExpertParallelMatchesOneRank) {
  compare(golden("qwen3_5_moe"),
          TpRun{.steps = 8, .label = "qwen3_5_moe EP", .expert_parallel = true});
  compare(golden("qwen3_next"),
          TpRun{.steps = 8, .label = "qwen3_next EP", .expert_parallel = true});
  compare(fs::path(VLLM_SOURCE_DIR) / "models" / "qwen35-moe-demo",
          TpRun{.label = "demo EP", .expert_parallel = true});
  testing::TempDir dir("tp4ep");
  testing::HybridSpec spec;
  spec.family = testing::HybridSpec::Family::kQwen3_5Moe;
  ASSERT_TRUE(testing::HybridCheckpointWriter(spec, four_way_dims()).write(dir.path()).is_ok());
  compare(dir.path(), TpRun{.tp = 4, .label = "hybrid_moe EP", .expert_parallel = true});
}

// Block-scaled FP8 weights (--quantization fp8: 128x128 blocks) shard with their scales:
// rows off the block grid keep one scale row per row, and every rank's input columns of the
// row-parallel projections here are whole blocks (128 of 256). Both sides hold the same
// quantized weights, so they agree as float ones do. Columns inside a block are refused, as
// vLLM refuses them.
TEST(TensorParallel, Fp8WeightsShardWithTheirScales) {
  testing::TempDir dir("tp_fp8");
  testing::HybridDims d;
  d.hidden = 256;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 64;
  d.hk = 2;
  d.hv = 4;
  d.dk = 64;
  d.dv = 64;
  d.inter = 256;
  ASSERT_TRUE(testing::HybridCheckpointWriter(testing::HybridSpec{}, d).write(dir.path()).is_ok());
  compare(dir.path(), TpRun{.label = "hybrid FP8", .quantization = "fp8"});

  engine::EngineArgs args;
  args.model = golden("qwen3_5_moe").string();
  args.device = "cpu";
  args.quantization = "fp8";
  args.parallel = testing::tp_config(2);
  auto engine = engine::build_engine(args);
  ASSERT_FALSE(engine.has_value());
  EXPECT_NE(engine.status().message().find("do not start and end on its 128-column scale blocks"),
            std::string::npos)
      << engine.status().message();
}

// Shapes that do not divide are refused before any worker starts, naming the dimension.
TEST(TensorParallel, IndivisibleShapesAreErrorsNamingTheDimension) {
  struct Case {
    const char* model;
    int tp;
    const char* names;
  };
  for (const Case& c :
       {Case{"llama", 4, "num_attention_heads (6)"}, Case{"qwen3", 3, "num_key_value_heads (2)"},
        Case{"qwen3_5_moe", 4, "linear_num_key_heads (2)"},
        Case{"qwen3_next", 8, "num_attention_heads (4)"}}) {
    engine::EngineArgs args;
    args.model = golden(c.model).string();
    args.device = "cpu";
    args.parallel = testing::tp_config(c.tp);
    auto engine = engine::build_engine(args);
    ASSERT_FALSE(engine.has_value()) << c.model;
    EXPECT_NE(engine.status().message().find(c.names), std::string::npos)
        << engine.status().message();
    EXPECT_NE(engine.status().message().find("--tensor-parallel-size " + std::to_string(c.tp)),
              std::string::npos)
        << engine.status().message();
  }
}

}  // namespace
}  // namespace test_tensor_parallel_models
}  // namespace vllm
