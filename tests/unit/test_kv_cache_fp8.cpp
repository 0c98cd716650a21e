// The FP8 KV cache on the CPU (tensor/kv_cache.h, cpu/attention.h): the scaled e4m3
// conversion (round trip of every code, saturation at 448 * scale, signs, zeros, subnormals,
// ties to even), --kv-cache-dtype's names, the cache write, attention over an FP8 cache
// against attention over an F32 cache holding the dequantized values (bit for bit: decode,
// prefill continuing from cached KV, GQA, odd lengths, scales other than 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "base/float_convert.h"
#include "tensor/kv_cache.h"

namespace vllm {
namespace test_kv_cache_fp8 {
namespace {

// ---- The scaled conversion ----------------------------------------------------------------

constexpr float kScales[] = {1.0f, 0.5f, 0.037f, 3.0f, 1.0f / 448.0f};

TEST(Fp8KvConversion, EveryCodeRoundTripsUnderEveryScale) {
  for (float scale : kScales) {
    for (int code = 0; code < 256; ++code) {
      if ((code & 0x7F) == 0x7F) continue;  // NaN
      const auto q = static_cast<uint8_t>(code);
      const float x = fp8_kv_dequantize(q, scale);
      EXPECT_EQ(x, fp8e4m3_to_f32(q) * scale);
      EXPECT_EQ(fp8_kv_quantize(x, scale), q) << "code " << code << " scale " << scale;
    }
  }
}

TEST(Fp8KvConversion, SaturatesAbove448TimesTheScale) {
  for (float scale : kScales) {
    SCOPED_TRACE(scale);
    EXPECT_EQ(fp8_kv_quantize(448.0f * scale, scale), 0x7E);
    EXPECT_EQ(fp8_kv_quantize(470.0f * scale, scale), 0x7E);  // f32_to_fp8e4m3: NaN
    EXPECT_EQ(fp8_kv_quantize(1e6f * scale, scale), 0x7E);
    EXPECT_EQ(fp8_kv_quantize(-1e6f * scale, scale), 0xFE);
    EXPECT_EQ(fp8_kv_quantize(std::numeric_limits<float>::max(), scale), 0x7E);
    EXPECT_EQ(fp8_kv_quantize(std::numeric_limits<float>::infinity(), scale), 0x7E);
    EXPECT_EQ(fp8_kv_quantize(-std::numeric_limits<float>::infinity(), scale), 0xFE);
    EXPECT_EQ(fp8_kv_dequantize(0x7E, scale), 448.0f * scale);
  }
  EXPECT_EQ(f32_to_fp8e4m3(470.0f), 0x7F);  // the unsaturated cast makes NaN there
  EXPECT_EQ(fp8_kv_quantize(std::nanf(""), 1.0f), 0x7F);
  EXPECT_EQ(fp8_kv_quantize(-std::nanf(""), 1.0f), 0x7F);
  EXPECT_TRUE(std::isnan(fp8_kv_dequantize(0x7F, 2.0f)));
}

TEST(Fp8KvConversion, NegativesMirrorPositives) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(0.0f, 600.0f);
  for (float scale : kScales) {
    for (int i = 0; i < 2000; ++i) {
      const float x = dist(rng) * scale;
      EXPECT_EQ(fp8_kv_quantize(-x, scale), fp8_kv_quantize(x, scale) | 0x80);
    }
  }
}

TEST(Fp8KvConversion, ZerosKeepTheirSign) {
  EXPECT_EQ(fp8_kv_quantize(0.0f, 0.25f), 0x00);
  EXPECT_EQ(fp8_kv_quantize(-0.0f, 0.25f), 0x80);
  EXPECT_EQ(fp8_kv_dequantize(0x00, 0.25f), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_kv_dequantize(0x80, 0.25f)));
}

TEST(Fp8KvConversion, SubnormalsAndTiesRoundToNearestEven) {
  for (float scale : {1.0f, 0.5f, 4.0f}) {  // powers of two: x / scale is exact
    SCOPED_TRACE(scale);
    const float tiny = std::ldexp(1.0f, -9);  // the smallest e4m3 subnormal
    EXPECT_EQ(fp8_kv_quantize(tiny * scale, scale), 0x01);
    EXPECT_EQ(fp8_kv_quantize(0.5f * tiny * scale, scale), 0x00);   // a tie: to even (zero)
    EXPECT_EQ(fp8_kv_quantize(0.51f * tiny * scale, scale), 0x01);  // above the tie
    EXPECT_EQ(fp8_kv_quantize(1.5f * tiny * scale, scale), 0x02);   // a tie: to even (2)
    EXPECT_EQ(fp8_kv_quantize(7.0f * tiny * scale, scale), 0x07);   // the largest subnormal
    EXPECT_EQ(fp8_kv_dequantize(0x07, scale), 7.0f * tiny * scale);
    EXPECT_EQ(fp8_kv_quantize(1.0625f * scale, scale), 0x38);  // 1 + 1/16: tie to 1.0
    EXPECT_EQ(fp8_kv_quantize(1.1875f * scale, scale), 0x3A);  // 1 + 3/16: tie to 1.25
    EXPECT_EQ(fp8_kv_quantize(1.07f * scale, scale), 0x39);    // nearer 1.125
  }
}

TEST(Fp8KvConversion, ScalesMustBeFiniteAndPositive) {
  EXPECT_TRUE(check_kv_cache_scales({}).is_ok());
  EXPECT_TRUE(check_kv_cache_scales({0.01f, 20.0f}).is_ok());
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    EXPECT_FALSE(check_kv_cache_scales({bad, 1.0f}).is_ok());
    Status s = check_kv_cache_scales({1.0f, bad});
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.message().find("v_scale"), std::string::npos) << s.message();
  }
}

TEST(KvCacheDtype, NamesAsVllm) {
  EXPECT_EQ(*kv_cache_dtype_from_name("auto", DType::kF32), DType::kF32);
  EXPECT_EQ(*kv_cache_dtype_from_name("auto", DType::kBF16), DType::kBF16);
  EXPECT_EQ(*kv_cache_dtype_from_name("fp8", DType::kBF16), DType::kF8E4M3);
  EXPECT_EQ(*kv_cache_dtype_from_name("fp8_e4m3", DType::kF32), DType::kF8E4M3);
  for (const char* other :
       {"fp8_e5m2", "fp8_inc", "fp8_ds_mla", "bfloat16", "float16", "int8", "", "FP8"}) {
    auto r = kv_cache_dtype_from_name(other, DType::kBF16);
    ASSERT_FALSE(r.has_value()) << other;
    EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(r.status().message().find("'" + std::string(other) + "'"), std::string::npos);
    EXPECT_NE(r.status().message().find("auto, fp8 and fp8_e4m3"), std::string::npos)
        << r.status().message();
  }
}

// ---- The cache write --------------------------------------------------------------------------

Tensor random_rows(int64_t rows, int64_t width, float amplitude, std::mt19937& rng) {
  Tensor t = Tensor::empty({rows, width}, DType::kF32);
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

TEST(Fp8KvCacheWrite, StoresScaledE4m3AtEachSlot) {
  std::mt19937 rng(11);
  const int64_t blocks = 5, bs = 4, heads = 2, dim = 6, row = heads * dim;
  const KvCacheScales scales{0.02f, 0.3f};
  // Keys reach past 448 * k_scale: those saturate.
  Tensor k = random_rows(4, row, 12.0f, rng), v = random_rows(4, row, 40.0f, rng);
  Tensor slots = Tensor::empty({4}, DType::kI64);
  const int64_t slot_ids[] = {9, -1, 0, 19};  // -1: padding, skipped
  std::copy(std::begin(slot_ids), std::end(slot_ids), slots.data<int64_t>());
  Tensor cache = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kF8E4M3);
  ASSERT_TRUE(cpu::reshape_and_cache(k, v, cache, slots, scales).is_ok());
  std::vector<uint8_t> expected(static_cast<size_t>(cache.numel()), 0);
  int saturated = 0;
  for (int64_t t = 0; t < 4; ++t) {
    if (slot_ids[t] < 0) continue;
    const int64_t block = slot_ids[t] / bs, offset = slot_ids[t] % bs;
    for (int64_t i = 0; i < row; ++i) {
      const float kx = k.data<float>()[t * row + i];
      saturated += std::abs(kx) > 448.0f * scales.k_scale;
      expected[static_cast<size_t>(((block * 2) * bs + offset) * row + i)] =
          fp8_kv_quantize(kx, scales.k_scale);
      expected[static_cast<size_t>(((block * 2 + 1) * bs + offset) * row + i)] =
          fp8_kv_quantize(v.data<float>()[t * row + i], scales.v_scale);
    }
  }
  EXPECT_GT(saturated, 0);
  EXPECT_EQ(std::memcmp(cache.data_ptr(), expected.data(), expected.size()), 0);

  // An F32 cache ignores the scales.
  Tensor f32 = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kF32);
  ASSERT_TRUE(cpu::reshape_and_cache(k, v, f32, slots, scales).is_ok());
  EXPECT_EQ(f32.data<float>()[((2 * 2) * bs + 1) * row + 3], k.data<float>()[3]);

  // Bad scales, and a slot past the cache, are refused before anything is written.
  Tensor untouched = Tensor::zeros({blocks, 2, bs, heads, dim}, DType::kF8E4M3);
  EXPECT_EQ(cpu::reshape_and_cache(k, v, untouched, slots, {0.0f, 1.0f}).code(),
            ErrorCode::kInvalidArgument);
  slots.data<int64_t>()[3] = blocks * bs;
  EXPECT_EQ(cpu::reshape_and_cache(k, v, untouched, slots, scales).code(), ErrorCode::kOutOfRange);
  const auto* bytes = untouched.data<uint8_t>();
  EXPECT_TRUE(std::all_of(bytes, bytes + untouched.numel(), [](uint8_t b) { return b == 0; }));
}

// ---- Attention over an FP8 cache ----------------------------------------------------------

struct AttnCase {
  const char* name;
  std::vector<int32_t> q_lens, seq_lens;
  int64_t kv_heads, group, head_dim, block_size;
  KvCacheScales scales;
};

// Runs `c` over an FP8 cache written by reshape_and_cache and over an F32 cache holding the
// FP8 cache's dequantized values; the outputs must be identical.
void check_against_dequantized(const AttnCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  std::mt19937 rng(seed);
  const auto num_req = static_cast<int64_t>(c.seq_lens.size());
  int64_t total_blocks = 0, max_blocks = 0;
  for (int32_t len : c.seq_lens) {
    const int64_t b = (len + c.block_size - 1) / c.block_size;
    total_blocks += b;
    max_blocks = std::max(max_blocks, b);
  }
  const int64_t num_blocks = total_blocks + 2;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t row = c.kv_heads * c.head_dim;
  Tensor cache =
      Tensor::zeros({num_blocks, 2, c.block_size, c.kv_heads, c.head_dim}, DType::kF8E4M3);
  Tensor tables = Tensor::zeros({num_req, max_blocks}, DType::kI32);
  size_t next = 0;
  for (int64_t r = 0; r < num_req; ++r) {
    const int64_t len = c.seq_lens[static_cast<size_t>(r)];
    int32_t* table = tables.data<int32_t>() + r * max_blocks;
    for (int64_t b = 0; b < (len + c.block_size - 1) / c.block_size; ++b) table[b] = ids[next++];
    // The request's whole context written as one step would (values up to 2.5x the
    // saturation point of k_scale, so some keys saturate).
    Tensor k = random_rows(len, row, 2.5f * 448.0f * c.scales.k_scale, rng);
    Tensor v = random_rows(len, row, 300.0f * c.scales.v_scale, rng);
    Tensor slots = Tensor::empty({len}, DType::kI64);
    for (int64_t i = 0; i < len; ++i) {
      slots.data<int64_t>()[i] = table[i / c.block_size] * c.block_size + i % c.block_size;
    }
    ASSERT_TRUE(cpu::reshape_and_cache(k, v, cache, slots, c.scales).is_ok());
  }
  Tensor dequantized = Tensor::empty(cache.shape(), DType::kF32);
  const int64_t half = c.block_size * row;  // elements of one block's K (or V)
  for (int64_t i = 0; i < cache.numel(); ++i) {
    const bool value = (i / half) % 2 == 1;
    dequantized.data<float>()[i] =
        fp8_kv_dequantize(cache.data<uint8_t>()[i], value ? c.scales.v_scale : c.scales.k_scale);
  }
  std::vector<int32_t> starts{0};
  for (int32_t q : c.q_lens) starts.push_back(starts.back() + q);
  const int64_t q_heads = c.kv_heads * c.group;
  Tensor query = random_rows(starts.back(), q_heads * c.head_dim, 1.0f, rng);
  cpu::PagedAttentionParams p;
  p.query_start_loc = starts;
  p.seq_lens = c.seq_lens;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.kv_scales = c.scales;
  Tensor got = Tensor::empty(query.shape(), DType::kF32);
  Tensor want = Tensor::empty(query.shape(), DType::kF32);
  ASSERT_TRUE(cpu::paged_attention(query, cache, tables, p, got).is_ok());
  p.kv_scales = {};  // an F32 cache ignores them anyway
  ASSERT_TRUE(cpu::paged_attention(query, dequantized, tables, p, want).is_ok());
  int64_t differ = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    differ += std::memcmp(got.data<float>() + i, want.data<float>() + i, sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0) << "of " << got.numel();
  EXPECT_TRUE(std::all_of(got.data<float>(), got.data<float>() + got.numel(),
                          [](float x) { return std::isfinite(x); }));
}

TEST(Fp8KvCacheAttention, EqualsAttentionOverTheDequantizedCache) {
  const AttnCase cases[] = {
      {"decode batch GQA", {1, 1, 1}, {1, 37, 130}, 2, 4, 64, 16, {0.05f, 0.02f}},
      {"decode scale 1", {1, 1}, {17, 64}, 1, 1, 32, 8, {}},
      {"prefill", {23}, {23}, 2, 2, 16, 4, {0.01f, 0.5f}},
      {"prefill from a cached prefix", {9, 40}, {50, 71}, 2, 3, 128, 16, {0.02f, 0.04f}},
      {"mixed, odd lengths", {1, 33, 1}, {99, 33, 5}, 4, 2, 24, 4, {1.5f, 0.003f}},
      {"head dim 256, G=8", {3, 1}, {19, 300}, 1, 8, 256, 32, {0.2f, 0.2f}},
  };
  uint32_t seed = 1;
  for (const AttnCase& c : cases) check_against_dequantized(c, seed++);
}

TEST(Fp8KvCacheAttention, RefusesBadScales) {
  Tensor cache = Tensor::zeros({2, 2, 4, 1, 8}, DType::kF8E4M3);
  Tensor tables = Tensor::zeros({1, 1}, DType::kI32);
  Tensor q = Tensor::zeros({1, 8}, DType::kF32), out = Tensor::zeros({1, 8}, DType::kF32);
  const std::vector<int32_t> starts{0, 1}, lens{1};
  cpu::PagedAttentionParams p;
  p.query_start_loc = starts;
  p.seq_lens = lens;
  p.kv_scales = {1.0f, -2.0f};
  EXPECT_EQ(cpu::paged_attention(q, cache, tables, p, out).code(), ErrorCode::kInvalidArgument);
  Tensor bf16 = Tensor::zeros({2, 2, 4, 1, 8}, DType::kBF16);
  p.kv_scales = {};
  EXPECT_EQ(cpu::paged_attention(q, bf16, tables, p, out).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace test_kv_cache_fp8
}  // namespace vllm
