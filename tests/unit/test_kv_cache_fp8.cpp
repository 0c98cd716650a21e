// The FP8 KV cache's format (tensor/kv_cache.h): the scaled e4m3 conversion (round trip of
// every code, saturation at 448 * scale, signs, zeros, subnormals, ties to even) and
// --kv-cache-dtype's names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/float_convert.h"
#include "tensor/kv_cache.h"

namespace vllm {
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

}  // namespace
}  // namespace vllm
