// The GDN state dtypes of the hybrid models (vLLM's --mamba-cache-dtype and
// --mamba-ssm-cache-dtype; model/mamba_dtype.h), on the CPU:
//   - the flags' values and vLLM's resolution (model dtype, config.json's mamba_ssm_dtype, an
//     explicit flag winning), bad values refused naming the value and the choices;
//   - the caches a model allocates and the bytes a request's state takes (Qwen3.5-35B-A3B's
//     real config: 62.8 MiB per request in float32, half of it in bfloat16);
//   - a model run with 16-bit states equals, bit for bit, the float32 run whose states are
//     rounded to that dtype after every step (the ops round once per step: cpu/gdn.h), stays
//     within 16-bit tolerance of the float32 run, and continues a prefix-cache snapshot of
//     its 16-bit state (copy_state_slots) exactly as the request that computed the prefix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "base/float_convert.h"
#include "hybrid_checkpoint.h"
#include "model/mamba_dtype.h"
#include "model/model.h"
#include "model/models/registry.h"
#include "model/state_copy.h"
#include "model/weights.h"
#include "unit/model_harness.h"
#include "unit/temp_dir.h"

namespace vllm {
namespace test_mamba_dtype {
namespace {

namespace fs = std::filesystem;
using testing::HybridCheckpointWriter;
using testing::HybridSpec;
using testing::Seq;
using testing::step;
using Family = HybridSpec::Family;

ModelConfig qwen3_5_config() {
  ModelConfig c;
  c.mamba_ssm_dtype = "float32";  // as every Qwen3.5 / 3.6 config.json
  return c;
}

TEST(MambaDtype, ParsesVllmChoicesAndRefusesOthers) {
  EXPECT_EQ(parse_mamba_dtype("--mamba-cache-dtype", "auto").value(), std::nullopt);
  EXPECT_EQ(parse_mamba_dtype("--mamba-cache-dtype", "float32").value(), DType::kF32);
  EXPECT_EQ(parse_mamba_dtype("--mamba-cache-dtype", "bfloat16").value(), DType::kBF16);
  EXPECT_EQ(parse_mamba_dtype("--mamba-cache-dtype", "float16").value(), DType::kF16);
  for (const char* bad : {"bf16", "fp8", "float64", "", "BFLOAT16"}) {
    auto parsed = parse_mamba_dtype("--mamba-ssm-cache-dtype", bad);
    ASSERT_FALSE(parsed.has_value()) << bad;
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument);
    const std::string& m = parsed.status().message();
    EXPECT_NE(m.find("--mamba-ssm-cache-dtype"), std::string::npos) << m;
    EXPECT_NE(m.find("'" + std::string(bad) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("auto, float32, float16, bfloat16"), std::string::npos) << m;
  }
}

TEST(MambaDtype, ResolvesAsVllm) {
  struct Case {
    bool qwen3_5;  // config.json has mamba_ssm_dtype: float32 (else: Qwen3-Next, none)
    DType model;
    const char* cache;
    const char* ssm;
    DType want_conv, want_ssm;
  };
  const Case cases[] = {
      // Qwen3.5: the recurrent state is float32 unless asked otherwise; the conv state is
      // the model dtype (bfloat16 on CUDA).
      {true, DType::kBF16, "auto", "auto", DType::kBF16, DType::kF32},
      {true, DType::kF32, "auto", "auto", DType::kF32, DType::kF32},
      {true, DType::kBF16, "auto", "bfloat16", DType::kBF16, DType::kBF16},
      {true, DType::kF32, "auto", "bfloat16", DType::kF32, DType::kBF16},
      {true, DType::kF32, "bfloat16", "auto", DType::kBF16, DType::kF32},
      {true, DType::kF32, "float16", "float16", DType::kF16, DType::kF16},
      // Qwen3-Next (no mamba_ssm_dtype): both follow --mamba-cache-dtype, else the model dtype.
      {false, DType::kBF16, "auto", "auto", DType::kBF16, DType::kBF16},
      {false, DType::kF32, "auto", "auto", DType::kF32, DType::kF32},
      {false, DType::kBF16, "auto", "float32", DType::kBF16, DType::kF32},
      {false, DType::kF32, "bfloat16", "auto", DType::kBF16, DType::kBF16},
  };
  for (const Case& c : cases) {
    const ModelConfig config = c.qwen3_5 ? qwen3_5_config() : ModelConfig{};
    auto got = resolve_mamba_state_dtypes(config, c.model, c.cache, c.ssm);
    ASSERT_TRUE(got.has_value()) << got.status().to_string();
    EXPECT_EQ(got->conv, c.want_conv) << c.qwen3_5 << " " << c.cache << " " << c.ssm;
    EXPECT_EQ(got->ssm, c.want_ssm) << c.qwen3_5 << " " << c.cache << " " << c.ssm;
  }
  auto bad_flag = resolve_mamba_state_dtypes(ModelConfig{}, DType::kF32, "auto", "half");
  ASSERT_FALSE(bad_flag.has_value());
  EXPECT_NE(bad_flag.status().message().find("--mamba-ssm-cache-dtype: invalid choice 'half'"),
            std::string::npos)
      << bad_flag.status().message();
  ModelConfig odd;
  odd.mamba_ssm_dtype = "float64";
  auto bad_config = resolve_mamba_state_dtypes(odd, DType::kF32, "auto", "auto");
  ASSERT_FALSE(bad_config.has_value());
  EXPECT_NE(bad_config.status().message().find("mamba_ssm_dtype 'float64'"), std::string::npos);
}

// Qwen3.5-35B-A3B's real config on the meta device: 30 GDN layers of conv [8192, 3] and
// recurrent [32, 128, 128] state per request.
TEST(MambaDtype, StateBytesOfQwen35_35B) {
  const fs::path path = fs::path(VLLM_SOURCE_DIR) / "configs" / "Qwen3.5-35B-A3B" / "config.json";
  auto config = load_model_config(path);
  ASSERT_TRUE(config.has_value()) << config.status().to_string();
  EXPECT_EQ(config->mamba_ssm_dtype, "float32");
  auto bytes = [&](const char* cache, const char* ssm) -> int64_t {
    DummyWeights weights(DType::kBF16, Device::meta());
    LoadOptions options;
    options.max_model_len = 256;
    options.mamba_cache_dtype = cache;
    options.mamba_ssm_cache_dtype = ssm;
    auto model = create_model(*config, weights, options);
    EXPECT_TRUE(model.has_value()) << model.status().to_string();
    return model.has_value() ? (*model)->state_bytes_per_slot() : 0;
  };
  const int64_t conv = 8192 * 3, ssm = 32 * 128 * 128, layers = 30;
  EXPECT_EQ(bytes("auto", "auto"), layers * (conv + ssm) * 4);  // the CPU's default: 62.8 MiB
  // The CUDA default (conv in the bfloat16 model dtype, recurrent float32 from config.json)
  // and --mamba-ssm-cache-dtype bfloat16 there: 1.95x the requests in the same memory.
  EXPECT_EQ(bytes("bfloat16", "auto"), layers * (conv * 2 + ssm * 4));
  EXPECT_EQ(bytes("bfloat16", "bfloat16"), layers * (conv + ssm) * 2);
  EXPECT_EQ(bytes("auto", "bfloat16"), layers * (conv * 4 + ssm * 2));
}

std::unique_ptr<Model> load(const fs::path& dir, const char* cache, const char* ssm) {
  LoadOptions options;
  options.mamba_cache_dtype = cache;
  options.mamba_ssm_cache_dtype = ssm;
  auto model = load_model(dir, options);
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return model.has_value() ? std::move(*model) : nullptr;
}

ModelCache new_cache(Model& model) {
  auto cache = model.create_cache(CacheConfig{48, testing::kBlockSize, 6});
  EXPECT_TRUE(cache.has_value()) << cache.status().to_string();
  return std::move(*cache);
}

// Every state tensor of `cache` rounded to `conv` / `ssm` in place (f32 tensors).
void round_states(ModelCache& cache, DType conv, DType ssm) {
  for (auto* states : {&cache.conv_state, &cache.ssm_state}) {
    const DType dtype = states == &cache.conv_state ? conv : ssm;
    if (dtype == DType::kF32) continue;
    for (Tensor& t : *states) {
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        p[i] =
            dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(p[i])) : f16_to_f32(f32_to_f16(p[i]));
      }
    }
  }
}

std::vector<int64_t> prompt(int64_t n, int64_t salt) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + salt * 53 + 5) % 96;
  return t;
}

struct Flavour {
  const char* name;
  Family family;
};
void PrintTo(const Flavour& f, std::ostream* os) {
  *os << f.name;
}

class MambaDtypeModelTest : public ::testing::TestWithParam<Flavour> {
 protected:
  void SetUp() override {
    HybridSpec spec;
    spec.family = GetParam().family;
    spec.moe = spec.family == Family::kQwen3Next;
    spec.seed = static_cast<uint64_t>(GetParam().family) + 1;
    ASSERT_TRUE(HybridCheckpointWriter(spec).write(dir_.path()).is_ok());
  }
  testing::TempDir dir_{"vllm_mamba_dtype"};
};

// Two requests in a batch: prefills in chunks, then decode steps. Every step's logits of the
// 16-bit-state model equal those of the f32-state model whose states the test rounds after
// each step, and stay near the plain f32 run's.
TEST_P(MambaDtypeModelTest, SixteenBitStateEqualsF32RoundedAfterEveryStep) {
  struct Variant {
    const char* cache;
    const char* ssm;
    DType conv, rec;
    double tolerance;  // of the plain f32 run
  };
  for (const Variant& v : {Variant{"auto", "bfloat16", DType::kF32, DType::kBF16, 3e-2},
                           Variant{"bfloat16", "bfloat16", DType::kBF16, DType::kBF16, 3e-2},
                           Variant{"float16", "float16", DType::kF16, DType::kF16, 4e-3}}) {
    SCOPED_TRACE(std::string(v.cache) + " / " + v.ssm);
    auto narrow = load(dir_.path(), v.cache, v.ssm);
    auto wide = load(dir_.path(), "float32", "float32");
    ASSERT_TRUE(narrow && wide);
    ModelCache narrow_cache = new_cache(*narrow), rounded_cache = new_cache(*wide),
               f32_cache = new_cache(*wide);
    ASSERT_EQ(narrow_cache.conv_state[0].dtype(), v.conv);
    ASSERT_EQ(narrow_cache.ssm_state[0].dtype(), v.rec);
    ASSERT_EQ(rounded_cache.ssm_state[0].dtype(), DType::kF32);
    Seq a[3], b[3];
    for (int i = 0; i < 3; ++i) {
      a[i] = Seq{prompt(40, 1), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1, 0};
      b[i] = Seq{prompt(40, 2), {20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30}, 4, 0};
    }
    const std::vector<std::pair<int64_t, int64_t>> steps = {{7, 12}, {9, 1}, {1, 1}, {1, 1},
                                                            {1, 1},  {1, 1}, {1, 1}, {1, 1}};
    double worst = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      Tensor got = step(*narrow, narrow_cache, {{&a[0], steps[s].first}, {&b[0], steps[s].second}});
      Tensor want = step(*wide, rounded_cache, {{&a[1], steps[s].first}, {&b[1], steps[s].second}});
      Tensor f32 = step(*wide, f32_cache, {{&a[2], steps[s].first}, {&b[2], steps[s].second}});
      ASSERT_TRUE(got.defined() && want.defined() && f32.defined());
      round_states(rounded_cache, v.conv, v.rec);
      ASSERT_EQ(got.numel(), want.numel());
      for (int64_t i = 0; i < got.numel(); ++i) {
        ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << "step " << s << " element " << i;
      }
      worst = std::max(worst, testing::rel_l2(got.data<float>(), f32.data<float>(), f32.numel()));
    }
    EXPECT_LT(worst, v.tolerance);
    EXPECT_GT(worst, 0.0) << "the states must actually be rounded";
    std::printf("%-12s %s / %s: worst step rel L2 from the f32 run %.2e\n", GetParam().name,
                v.cache, v.ssm, worst);
  }
}

// A snapshot of a 16-bit state (copy_state_slots) restored into another slot continues the
// prefix exactly as the request that computed it continues from its own slot.
TEST_P(MambaDtypeModelTest, SixteenBitSnapshotRoundTrip) {
  auto model = load(dir_.path(), "bfloat16", "bfloat16");
  ASSERT_TRUE(model);
  ModelCache cache = new_cache(*model);
  const int64_t n = 23, prefix = 8;
  Seq a{prompt(n, 1), {2, 30, 11, 5, 17, 40}, 0, 0};
  ASSERT_TRUE(step(*model, cache, {{&a, prefix}}).defined());
  const std::vector<int32_t> a_slot = {0}, snapshot_slot = {4}, b_slot = {3};
  ASSERT_TRUE(copy_state_slots(cache, a_slot, snapshot_slot).is_ok());
  Tensor a_rest = step(*model, cache, {{&a, n - prefix}});
  ASSERT_TRUE(a_rest.defined());
  Seq b{prompt(n, 1), {2, 30, 7, 9, 13, 21}, 3, prefix};  // a's first two blocks
  ASSERT_TRUE(copy_state_slots(cache, snapshot_slot, b_slot).is_ok());
  Tensor b_rest = step(*model, cache, {{&b, n - prefix}});
  ASSERT_TRUE(b_rest.defined());
  ASSERT_EQ(a_rest.numel(), b_rest.numel());
  for (int64_t i = 0; i < a_rest.numel(); ++i) {
    ASSERT_EQ(a_rest.data<float>()[i], b_rest.data<float>()[i]) << i;
  }
  // And the two slots now hold the same 16-bit states.
  for (size_t l = 0; l < cache.ssm_state.size(); ++l) {
    const Tensor& s = cache.ssm_state[l];
    const size_t slot_bytes = s.nbytes() / static_cast<size_t>(s.size(0));
    const auto* base = static_cast<const char*>(s.data_ptr());
    EXPECT_EQ(std::memcmp(base + 0 * slot_bytes, base + 3 * slot_bytes, slot_bytes), 0) << l;
  }
}

INSTANTIATE_TEST_SUITE_P(Flavours, MambaDtypeModelTest,
                         ::testing::Values(Flavour{"qwen3_5", Family::kQwen3_5},
                                           Flavour{"qwen3_5_moe", Family::kQwen3_5Moe},
                                           Flavour{"qwen3_next", Family::kQwen3Next}),
                         [](const ::testing::TestParamInfo<Flavour>& info) {
                           return std::string(info.param.name);
                         });

TEST(MambaDtypeModel, BadFlagFailsTheLoadNamingIt) {
  testing::TempDir dir("vllm_mamba_dtype_bad");
  ASSERT_TRUE(HybridCheckpointWriter(HybridSpec{}).write(dir.path()).is_ok());
  LoadOptions options;
  options.mamba_ssm_cache_dtype = "bf16";
  auto model = load_model(dir.path(), options);
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find("--mamba-ssm-cache-dtype: invalid choice 'bf16'"),
            std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace test_mamba_dtype
}  // namespace vllm
