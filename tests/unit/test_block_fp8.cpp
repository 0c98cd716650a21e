// Block-scaled FP8 weights (tensor/block_fp8.h, tensor/linear_weight.h): e4m3 codes survive a
// round trip through f32, and the quantizer follows vLLM's per-block rule exactly -- checked
// element by element against the rule written out here -- on all-zero blocks, blocks at the
// e4m3 maximum, partial edge blocks, negative values, e4m3 subnormals and expert stacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/float_convert.h"
#include "tensor/block_fp8.h"

namespace vllm {
namespace test_block_fp8 {
namespace {

Tensor f32_tensor(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor random_f32(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// The rule, written out independently of the quantizer: for the block holding element
// (n, k) of a [N, K] matrix, amax over the block's real elements.
float block_amax(const float* x, int64_t rows, int64_t cols, WeightBlock b, int64_t n, int64_t k) {
  float amax = 0.0f;
  const int64_t n0 = n / b.n * b.n, k0 = k / b.k * b.k;
  for (int64_t i = n0; i < std::min(rows, n0 + b.n); ++i) {
    for (int64_t j = k0; j < std::min(cols, k0 + b.k); ++j) {
      amax = std::max(amax, std::fabs(x[i * cols + j]));
    }
  }
  return amax;
}

void expect_follows_rule(const Tensor& x, const LinearWeight& q) {
  ASSERT_TRUE(check_linear_weight("q", q).is_ok()) << check_linear_weight("q", q).to_string();
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t col_blocks = q.scale_inv.size(1);
  const float* xs = x.data<float>();
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < cols; ++k) {
      const float amax = block_amax(xs, rows, cols, q.block, n, k);
      const float want_scale = std::max(amax, 1e-4f) / 448.0f;
      const float scale = q.scale_inv.data<float>()[(n / q.block.n) * col_blocks + k / q.block.k];
      ASSERT_EQ(scale, want_scale) << "block of (" << n << ", " << k << ")";
      const uint8_t code = q.weight.data<uint8_t>()[n * cols + k];
      ASSERT_EQ(code, f32_to_fp8e4m3(xs[n * cols + k] * (1.0f / want_scale)))
          << "(" << n << ", " << k << ")";
      ASSERT_FALSE(std::isnan(fp8e4m3_to_f32(code)));
    }
  }
}

TEST(BlockFp8, E4M3CodesRoundTripThroughF32) {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<uint8_t>(c);
    const float f = fp8e4m3_to_f32(code);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    ++finite;
    EXPECT_EQ(f32_to_fp8e4m3(f), code) << c;
    EXPECT_LE(std::fabs(f), 448.0f);
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(fp8e4m3_to_f32(0x7E), kFp8E4M3Max);
}

TEST(BlockFp8, AllZeroBlockDequantizesToExactZeros) {
  // [130, 70] in 128x32 blocks: the second block row holds 2 rows, the third column block 6
  // columns. Block (0, 1) is all zeros (negative zeros included); the rest is random.
  Tensor x = random_f32({130, 70}, 1);
  for (int64_t n = 0; n < 128; ++n) {
    for (int64_t k = 32; k < 64; ++k) x.data<float>()[n * 70 + k] = (n + k) % 2 ? -0.0f : 0.0f;
  }
  auto q = quantize_fp8_blocks(x, {128, 32}, "w");
  ASSERT_TRUE(q.has_value()) << q.status().to_string();
  EXPECT_EQ(q->scale_inv.shape(), (Shape{2, 3}));
  EXPECT_EQ(q->scale_inv.data<float>()[1], 1e-4f / 448.0f);
  expect_follows_rule(x, *q);
  auto d = dequantize_fp8_blocks(*q);
  ASSERT_TRUE(d.has_value());
  for (int64_t n = 0; n < 128; ++n) {
    for (int64_t k = 32; k < 64; ++k) ASSERT_EQ(d->data<float>()[n * 70 + k], 0.0f);
  }
  for (int64_t i = 0; i < d->numel(); ++i) ASSERT_FALSE(std::isnan(d->data<float>()[i]));

  // A whole tensor of zeros: every scale is the clamped one.
  auto z = quantize_fp8_blocks(Tensor::zeros({3, 5}, DType::kF32), {2, 2}, "z");
  ASSERT_TRUE(z.has_value());
  for (int64_t i = 0; i < z->scale_inv.numel(); ++i) {
    EXPECT_EQ(z->scale_inv.data<float>()[i], kFp8MinAmax / kFp8E4M3Max);
  }
  auto zd = dequantize_fp8_blocks(*z);
  for (int64_t i = 0; i < zd->numel(); ++i) EXPECT_EQ(zd->data<float>()[i], 0.0f);
}

TEST(BlockFp8, BlockAtTheE4M3MaximumIsExact) {
  // amax 448: scale 1, and e4m3 values are kept as they are, +-448 included.
  std::vector<float> v = {448.0f, -448.0f, 1.0f, -0.5f, 240.0f, -3.25f, 0.0f, 0.125f};
  Tensor x = f32_tensor({2, 4}, v);
  auto q = quantize_fp8_blocks(x, {2, 4}, "w");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->scale_inv.data<float>()[0], 1.0f);
  EXPECT_EQ(q->weight.data<uint8_t>()[0], 0x7E);
  EXPECT_EQ(q->weight.data<uint8_t>()[1], 0xFE);
  auto d = dequantize_fp8_blocks(*q);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d->data<float>()[i], v[i]) << i;

  // amax 896 = 2 * 448: scale 2, e4m3 values times 2 are exact too.
  for (float& f : v) f *= 2.0f;
  auto q2 = quantize_fp8_blocks(f32_tensor({2, 4}, v), {2, 4}, "w");
  EXPECT_EQ(q2->scale_inv.data<float>()[0], 2.0f);
  auto d2 = dequantize_fp8_blocks(*q2);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d2->data<float>()[i], v[i]) << i;
}

TEST(BlockFp8, RoundsToNearestEvenAndFlushesBelowHalfTheSmallestSubnormal) {
  // Scale 1 (448 in the block), so the codes are e4m3's own rounding of the values.
  const float sub = std::ldexp(1.0f, -9);  // the smallest e4m3 subnormal
  std::vector<float> v = {448.0f,
                          sub,          // 0x01
                          1.5f * sub,   // tie between 1 and 2 subnormal steps: 2 (even)
                          2.5f * sub,   // tie between 2 and 3: 2
                          0.5f * sub,   // tie with zero: 0 (even)
                          0.51f * sub,  // just above: the smallest subnormal
                          -7.0f * sub,  // the largest subnormal, negative
                          1.0625f,      // tie between 1.0 and 1.125: 1.0
                          1.1875f,      // tie between 1.125 and 1.25: 1.25
                          -232.0f};     // between 224 and 240: 224 (even)
  Tensor x = f32_tensor({1, static_cast<int64_t>(v.size())}, v);
  auto q = quantize_fp8_blocks(x, {1, 64}, "w");
  ASSERT_TRUE(q.has_value());
  ASSERT_EQ(q->scale_inv.data<float>()[0], 1.0f);
  const uint8_t* c = q->weight.data<uint8_t>();
  EXPECT_EQ(c[1], 0x01);
  EXPECT_EQ(c[2], 0x02);
  EXPECT_EQ(c[3], 0x02);
  EXPECT_EQ(c[4], 0x00);
  EXPECT_EQ(c[5], 0x01);
  EXPECT_EQ(c[6], 0x87);
  EXPECT_EQ(fp8e4m3_to_f32(c[7]), 1.0f);
  EXPECT_EQ(fp8e4m3_to_f32(c[8]), 1.25f);
  EXPECT_EQ(fp8e4m3_to_f32(c[9]), -224.0f);  // 232 lies between 224 and 240: ties to even 224
  expect_follows_rule(x, *q);
}

TEST(BlockFp8, NegationFlipsSignsAndKeepsScales) {
  Tensor x = random_f32({37, 53}, 2, 0.05f);
  Tensor neg = x.clone();
  for (int64_t i = 0; i < neg.numel(); ++i) neg.data<float>()[i] = -neg.data<float>()[i];
  auto q = quantize_fp8_blocks(x, {16, 8}, "w");
  auto qn = quantize_fp8_blocks(neg, {16, 8}, "w");
  ASSERT_TRUE(q.has_value() && qn.has_value());
  for (int64_t i = 0; i < q->scale_inv.numel(); ++i) {
    EXPECT_EQ(q->scale_inv.data<float>()[i], qn->scale_inv.data<float>()[i]);
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    const uint8_t a = q->weight.data<uint8_t>()[i], b = qn->weight.data<uint8_t>()[i];
    ASSERT_EQ(a ^ b, 0x80) << i;
  }
  expect_follows_rule(neg, *qn);
}

TEST(BlockFp8, PartialEdgeBlocksFollowTheRuleAndBoundTheError) {
  // Odd sizes, a non-square block, and values spread over many binades (e4m3 subnormals
  // occur in blocks whose amax is far above the smallest values).
  Tensor x = random_f32({131, 77}, 3);
  for (int64_t i = 0; i < x.numel(); i += 7) x.data<float>()[i] *= 1e-4f;
  const WeightBlock block{32, 16};
  auto q = quantize_fp8_blocks(x, block, "w");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->scale_inv.shape(), (Shape{5, 5}));
  expect_follows_rule(x, *q);
  auto d = dequantize_fp8_blocks(*q);
  ASSERT_TRUE(d.has_value());
  for (int64_t n = 0; n < 131; ++n) {
    for (int64_t k = 0; k < 77; ++k) {
      const float v = x.data<float>()[n * 77 + k];
      const float s = q->scale_inv.data<float>()[(n / 32) * 5 + k / 16];
      // Half an e4m3 step: 2^-4 relative for normals, 2^-10 * scale in the subnormal range.
      const float bound = std::max(std::fabs(v) * 0.0625f, std::ldexp(s, -10)) * 1.0001f;
      ASSERT_LE(std::fabs(d->data<float>()[n * 77 + k] - v), bound) << n << ", " << k;
    }
  }
}

TEST(BlockFp8, ExpertStacksHaveOneGridPerExpertAndBf16MatchesItsWidening) {
  Tensor x = random_f32({3, 20, 24}, 4);
  // Expert 1 ten times larger: its scales must not leak into its neighbours'.
  for (int64_t i = 480; i < 960; ++i) x.data<float>()[i] *= 10.0f;
  Tensor bf = Tensor::empty(x.shape(), DType::kBF16);
  for (int64_t i = 0; i < x.numel(); ++i) {
    bf.data<uint16_t>()[i] = f32_to_bf16(x.data<float>()[i]);
    x.data<float>()[i] = bf16_to_f32(bf.data<uint16_t>()[i]);  // x is now bf's widening
  }
  auto q = quantize_fp8_blocks(bf, {16, 16}, "experts");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->scale_inv.shape(), (Shape{3, 2, 2}));
  for (int64_t e = 0; e < 3; ++e) {
    Tensor xe = x.slice(0, e, e + 1).view({20, 24});
    auto qe = quantize_fp8_blocks(xe, {16, 16}, "expert");
    ASSERT_TRUE(qe.has_value());
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(q->scale_inv.data<float>()[e * 4 + i], qe->scale_inv.data<float>()[i]);
    }
    for (int64_t i = 0; i < 480; ++i) {
      ASSERT_EQ(q->weight.data<uint8_t>()[e * 480 + i], qe->weight.data<uint8_t>()[i]);
    }
  }
}

TEST(BlockFp8, RefusesWhatHasNoE4M3Value) {
  Tensor x = random_f32({4, 6}, 5);
  x.data<float>()[2 * 6 + 3] = INFINITY;
  x.data<float>()[3 * 6 + 1] = NAN;
  auto q = quantize_fp8_blocks(x, {2, 2}, "model.layers.0.mlp.down_proj.weight");
  ASSERT_FALSE(q.has_value());
  EXPECT_NE(q.status().message().find("model.layers.0.mlp.down_proj.weight"), std::string::npos)
      << q.status().to_string();
  EXPECT_NE(q.status().message().find("[2, 3]"), std::string::npos) << q.status().to_string();

  EXPECT_FALSE(quantize_fp8_blocks(random_f32({4, 6}, 6), {0, 2}, "w").has_value());
  EXPECT_FALSE(quantize_fp8_blocks(Tensor::zeros({4}, DType::kF32), {2, 2}, "w").has_value());
  EXPECT_FALSE(quantize_fp8_blocks(Tensor::zeros({4, 4}, DType::kI32), {2, 2}, "w").has_value());
}

TEST(BlockFp8, CheckLinearWeightNamesWhatIsWrong) {
  auto q = quantize_fp8_blocks(random_f32({10, 12}, 7), {4, 8}, "w");
  ASSERT_TRUE(q.has_value());
  EXPECT_TRUE(check_linear_weight("w", *q).is_ok());
  EXPECT_EQ(fp8_scale_shape({10, 12}, {4, 8}), (Shape{3, 2}));
  EXPECT_EQ(fp8_scale_shape({5, 10, 12}, {4, 8}), (Shape{5, 3, 2}));

  LinearWeight wrong = *q;
  wrong.scale_inv = Tensor::zeros({3, 3}, DType::kF32);
  Status s = check_linear_weight("layer.q_proj", wrong);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("layer.q_proj"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("[3, 2]"), std::string::npos) << s.to_string();

  LinearWeight missing = *q;
  missing.scale_inv = Tensor();
  EXPECT_FALSE(check_linear_weight("w", missing).is_ok());
  LinearWeight no_block = *q;
  no_block.block = {};
  EXPECT_FALSE(check_linear_weight("w", no_block).is_ok());
  LinearWeight bf16_scales = *q;
  bf16_scales.scale_inv = Tensor::zeros({3, 2}, DType::kBF16);
  EXPECT_FALSE(check_linear_weight("w", bf16_scales).is_ok());
  LinearWeight float_with_scales(random_f32({10, 12}, 8), q->scale_inv, q->block);
  EXPECT_FALSE(check_linear_weight("w", float_with_scales).is_ok());
  EXPECT_TRUE(check_linear_weight("w", LinearWeight(random_f32({10, 12}, 9))).is_ok());
}

// Per-token-group activation quantization (W8A8's activation side), against vLLM's rule
// written out here: scale = max(amax, 1e-10) / 448, q = e4m3(clamp(x / scale, +-448)), per
// group of a row, a partial last group included; dequantization multiplies back.
TEST(BlockFp8, TokenGroupsFollowTheRule) {
  Tensor x = random_f32({5, 300}, 21, 3.0f);  // groups of 128: 128, 128, 44
  float* v = x.data<float>();
  for (int64_t k = 0; k < 128; ++k) v[k] = 0.0f;                   // row 0 group 0: zeros
  for (int64_t k = 300; k < 428; ++k) v[k] *= 1e-13f;              // row 1 group 0: tiny
  for (int64_t k = 2 * 300 + 256; k < 3 * 300; ++k) v[k] *= 1e5f;  // row 2's partial group: huge
  auto g = quantize_fp8_token_groups(x, 128, "x");
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  ASSERT_EQ(g->q.shape(), (Shape{5, 300}));
  ASSERT_EQ(g->scales.shape(), (Shape{5, 3}));
  auto deq = dequantize_fp8_token_groups(*g);
  ASSERT_TRUE(deq.has_value()) << deq.status().to_string();
  for (int64_t m = 0; m < 5; ++m) {
    for (int64_t grp = 0; grp < 3; ++grp) {
      const int64_t k0 = grp * 128, k1 = std::min<int64_t>(300, k0 + 128);
      float amax = 0.0f;
      for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(v[m * 300 + k]));
      const float scale = std::max(amax, 1e-10f) / 448.0f;
      ASSERT_EQ(g->scales.data<float>()[m * 3 + grp], scale) << m << ", " << grp;
      for (int64_t k = k0; k < k1; ++k) {
        const float t = std::min(std::max(v[m * 300 + k] / scale, -448.0f), 448.0f);
        const uint8_t code = g->q.data<uint8_t>()[m * 300 + k];
        ASSERT_EQ(code, f32_to_fp8e4m3(t)) << "(" << m << ", " << k << ")";
        ASSERT_EQ(deq->data<float>()[m * 300 + k], fp8e4m3_to_f32(code) * scale);
      }
    }
  }
  // Zeros dequantize to zeros; each group's largest magnitude lands on +-448.
  for (int64_t k = 0; k < 128; ++k) EXPECT_EQ(deq->data<float>()[k], 0.0f);
  float top = 0.0f;
  for (int64_t k = 2 * 300 + 256; k < 3 * 300; ++k) {
    top = std::max(top, std::fabs(fp8e4m3_to_f32(g->q.data<uint8_t>()[k])));
  }
  EXPECT_EQ(top, 448.0f);
  // The dequantized values are within e4m3's half-step (2^-4 relative) of x where they are
  // normal numbers.
  for (int64_t k = 300 * 3; k < 300 * 4; ++k) {
    EXPECT_LE(std::fabs(deq->data<float>()[k] - v[k]), std::fabs(v[k]) * 0.0625f + 1e-2f) << k;
  }
}

TEST(BlockFp8, TokenGroupsRefuseBadInput) {
  Tensor x = random_f32({2, 64}, 22);
  x.data<float>()[64 + 5] = std::nanf("");
  auto g = quantize_fp8_token_groups(x, 32, "layer.x");
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.status().message().find("layer.x"), std::string::npos) << g.status().to_string();
  EXPECT_NE(g.status().message().find("[1, 5]"), std::string::npos) << g.status().to_string();
  EXPECT_FALSE(quantize_fp8_token_groups(random_f32({2, 64}, 23), 0, "x").has_value());
  EXPECT_FALSE(quantize_fp8_token_groups(random_f32({2, 3, 4}, 24), 2, "x").has_value());
  // A BF16 input and a row-strided one quantize as their F32 values.
  Tensor wide = random_f32({3, 96}, 25);
  auto from_slice = quantize_fp8_token_groups(wide.slice(1, 0, 64), 32, "x");
  auto from_copy = quantize_fp8_token_groups(wide.slice(1, 0, 64).clone(), 32, "x");
  ASSERT_TRUE(from_slice.has_value() && from_copy.has_value());
  EXPECT_EQ(std::memcmp(from_slice->q.data_ptr(), from_copy->q.data_ptr(), 3 * 64), 0);
}

}  // namespace
}  // namespace test_block_fp8
}  // namespace vllm
