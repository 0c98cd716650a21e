// RoPE: cpu::rotary_embedding (neox and GPT-J pairing, partial rotary, strided q/k views,
// bad input) and the cos/sin cache of model/layers/rope (inv_freq of default, linear,
// llama3 and yarn against the formulas evaluated here in double, hand-checked values).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "model/layers/rope.h"
#include "op_test_util.h"

namespace vllm {
namespace test_rope {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)

constexpr double kPi = 3.14159265358979323846;

// A cache with arbitrary (not unit-norm) cos/sin values, so a swapped cos/sin or a wrong pair
// cannot pass by symmetry.
Tensor random_cache(int64_t max_position, int64_t rot_dim) {
  return random_f32({max_position, rot_dim}, 101);
}

// Rotation of one [T, heads * head_size] block in double, from the cache.
std::vector<double> rotate_reference(const std::vector<double>& x, const std::vector<int64_t>& pos,
                                     const Tensor& cache, int64_t heads, int64_t head_size,
                                     bool is_neox) {
  const int64_t rot = cache.size(1), half = rot / 2;
  std::vector<double> out = x;
  for (size_t t = 0; t < pos.size(); ++t) {
    const float* c = cache.data<float>() + pos[t] * rot;
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = (t * heads + h) * head_size;
      for (int64_t i = 0; i < half; ++i) {
        size_t i1 = base + (is_neox ? i : 2 * i), i2 = base + (is_neox ? i + half : 2 * i + 1);
        out[i1] = x[i1] * c[i] - x[i2] * c[half + i];
        out[i2] = x[i2] * c[i] + x[i1] * c[half + i];
      }
    }
  }
  return out;
}

Tensor positions_tensor(const std::vector<int64_t>& pos) {
  Tensor t = Tensor::empty({static_cast<int64_t>(pos.size())}, DType::kI64);
  std::copy(pos.begin(), pos.end(), t.data<int64_t>());
  return t;
}

TEST(CpuRotary, NeoxAndGptjWithFullAndPartialRotation) {
  struct Case {
    int64_t tokens, q_heads, k_heads, head_size, rot_dim;
  };
  for (Case c : {Case{1, 1, 1, 2, 2}, Case{7, 4, 2, 64, 64}, Case{33, 3, 1, 128, 32},
                 Case{1000, 2, 1, 64, 48}}) {
    for (bool is_neox : {true, false}) {
      Tensor cache = random_cache(50, c.rot_dim);
      std::vector<int64_t> pos(static_cast<size_t>(c.tokens));
      for (int64_t t = 0; t < c.tokens; ++t) pos[t] = (t * 37 + 5) % 50;
      Tensor q = random_f32({c.tokens, c.q_heads * c.head_size}, 102);
      Tensor k = random_f32({c.tokens, c.k_heads, c.head_size}, 103);  // 3-D form
      std::vector<double> q_expected =
          rotate_reference(values_of(q), pos, cache, c.q_heads, c.head_size, is_neox);
      std::vector<double> k_expected =
          rotate_reference(values_of(k), pos, cache, c.k_heads, c.head_size, is_neox);
      std::vector<double> q_before = values_of(q);
      ASSERT_TRUE(
          cpu::rotary_embedding(positions_tensor(pos), q, k, c.head_size, cache, is_neox).is_ok());
      EXPECT_LT(rel_l2(q, q_expected), 1e-6);
      EXPECT_LT(rel_l2(k, k_expected), 1e-6);
      // Dims past rot_dim pass through bit for bit.
      for (int64_t t = 0; t < c.tokens; ++t) {
        for (int64_t d = c.rot_dim; d < c.head_size; ++d) {
          size_t i = static_cast<size_t>(t * c.q_heads * c.head_size + d);
          ASSERT_EQ(q.data<float>()[i], q_before[i]);
        }
      }
    }
  }
}

TEST(CpuRotary, RotatesStridedViewsOfAFusedQkvAndSkipsUndefinedKey) {
  const int64_t T = 5, H = 2, D = 8;
  Tensor qkv = random_f32({T, 3 * H * D}, 111);
  std::vector<double> before = values_of(qkv);
  Tensor q = qkv.slice(1, 0, H * D);
  Tensor k = qkv.slice(1, H * D, 2 * H * D);
  Tensor cache = random_cache(10, D);
  std::vector<int64_t> pos = {0, 3, 9, 3, 1};
  std::vector<double> q_expected = rotate_reference(values_of(q.clone()), pos, cache, H, D, true);
  Tensor no_key;
  ASSERT_TRUE(cpu::rotary_embedding(positions_tensor(pos), q, no_key, D, cache, true).is_ok());
  EXPECT_LT(rel_l2(q, q_expected), 1e-6);
  Tensor after = qkv.clone();
  for (int64_t t = 0; t < T; ++t) {  // k and v columns untouched
    for (int64_t j = H * D; j < 3 * H * D; ++j) {
      ASSERT_EQ(after.data<float>()[t * 3 * H * D + j], before[t * 3 * H * D + j]);
    }
  }
  ASSERT_TRUE(cpu::rotary_embedding(positions_tensor(pos), q, k, D, cache, true).is_ok());
}

TEST(CpuRotary, RejectsBadInput) {
  Tensor cache = random_cache(16, 8);
  Tensor q = random_f32({2, 16}, 1);
  Tensor k = random_f32({2, 8}, 2);
  Tensor q_copy = q.clone();
  expect_error(cpu::rotary_embedding(positions_tensor({3, 16}), q, k, 8, cache, true),
               ErrorCode::kOutOfRange,
               "position 16 of token 1 is outside the cos/sin cache [0, 16)");
  for (int64_t i = 0; i < 32; ++i) ASSERT_EQ(q.data<float>()[i], q_copy.data<float>()[i]);
  expect_error(cpu::rotary_embedding(positions_tensor({-1, 0}), q, k, 8, cache, true),
               ErrorCode::kOutOfRange, "position -1");
  expect_error(cpu::rotary_embedding(positions_tensor({0, 1, 2}), q, k, 8, cache, true),
               ErrorCode::kInvalidArgument, "query has shape [2, 16], expected 3 rows");
  expect_error(cpu::rotary_embedding(positions_tensor({0, 1}), q, k, 6, cache, true),
               ErrorCode::kInvalidArgument,
               "rot_dim 8 must be even, positive and at most head_size 6");
  Tensor k_bad = random_f32({2, 12}, 3);
  expect_error(cpu::rotary_embedding(positions_tensor({0, 1}), q, k_bad, 8, cache, true),
               ErrorCode::kInvalidArgument, "does not split into heads of head_size 8");
  Tensor odd_cache = random_cache(16, 7);
  expect_error(cpu::rotary_embedding(positions_tensor({0, 1}), q, k, 8, odd_cache, true),
               ErrorCode::kInvalidArgument, "rot_dim 7");
  Tensor f_pos = Tensor::empty({2}, DType::kF32);
  expect_error(cpu::rotary_embedding(f_pos, q, k, 8, cache, true), ErrorCode::kInvalidArgument,
               "positions has dtype F32");
}

// ---------------------------------------------------------------- cos/sin cache

RopeConfig rope_of(const std::string& type, double theta) {
  RopeConfig r;
  r.rope_type = type;
  r.rope_theta = theta;
  return r;
}

void expect_inv_freq_near(const std::vector<float>& actual, const std::vector<double>& expected,
                          double rel_tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], rel_tol * std::abs(expected[i])) << "i=" << i;
  }
}

TEST(RopeCache, RotaryDimFromPartialFactor) {
  RopeConfig r = rope_of("default", 10000);
  EXPECT_EQ(*rotary_dim(r, 128), 128);
  r.partial_rotary_factor = 0.25;
  EXPECT_EQ(*rotary_dim(r, 256), 64);
  r.partial_rotary_factor = 0.5;
  expect_error(rotary_dim(r, 6).status(), ErrorCode::kInvalidArgument, "gives 3 rotated dims");
  r.partial_rotary_factor = 1.5;
  expect_error(rotary_dim(r, 8).status(), ErrorCode::kInvalidArgument, "gives 12 rotated dims");
  r.partial_rotary_factor = 0.0;
  EXPECT_FALSE(rotary_dim(r, 8).has_value());
}

TEST(RopeCache, DefaultAndLinearInvFreq) {
  auto freqs = compute_rope_frequencies(rope_of("default", 10000), 128, 4096);
  ASSERT_TRUE(freqs.has_value());
  std::vector<double> expected(64);
  for (int i = 0; i < 64; ++i) expected[i] = std::pow(10000.0, -2.0 * i / 128);
  expect_inv_freq_near(freqs->inv_freq, expected, 2e-7);
  EXPECT_NEAR(freqs->inv_freq[1], 0.8659643233600653, 1e-7);  // 10000^(-1/64)
  EXPECT_NEAR(freqs->inv_freq[63], 1.1547819846894582e-4, 1e-11);
  EXPECT_EQ(freqs->attention_factor, 1.0);

  RopeConfig linear = rope_of("linear", 10000);
  linear.factor = 4.0;
  auto scaled = compute_rope_frequencies(linear, 128, 4096);
  ASSERT_TRUE(scaled.has_value());
  for (double& v : expected) v /= 4.0;
  expect_inv_freq_near(scaled->inv_freq, expected, 2e-7);
}

TEST(RopeCache, Llama3InvFreq) {
  RopeConfig r = rope_of("llama3", 500000);
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_position_embeddings = 8192;
  auto freqs = compute_rope_frequencies(r, 128, 131072);
  ASSERT_TRUE(freqs.has_value());
  std::vector<double> expected(64);
  for (int i = 0; i < 64; ++i) {  // Llama 3.1's published formula
    double inv = std::pow(500000.0, -2.0 * i / 128), wavelen = 2 * kPi / inv;
    if (wavelen < 8192.0 / 4) {
      expected[i] = inv;
    } else if (wavelen > 8192.0 / 1) {
      expected[i] = inv / 8;
    } else {
      double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      expected[i] = (1 - smooth) * inv / 8 + smooth * inv;
    }
  }
  expect_inv_freq_near(freqs->inv_freq, expected, 1e-6);
  // Hand-checked: i=20 high frequency (kept), i=30 smoothed, i=40 low frequency (/8).
  EXPECT_NEAR(freqs->inv_freq[20], 0.016560440080994446, 1e-8);
  EXPECT_NEAR(freqs->inv_freq[30], 0.0013718935677611381, 1e-9);
  EXPECT_NEAR(freqs->inv_freq[40], 3.428102195952591e-05, 1e-11);
}

double yarn_mscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

std::vector<double> yarn_expected(double theta, int64_t dim, double factor, double original_max,
                                  bool truncate) {
  auto corr = [&](double rotations) {
    return dim * std::log(original_max / (rotations * 2 * kPi)) / (2 * std::log(theta));
  };
  double low = corr(32), high = corr(1);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  std::vector<double> out(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    double pos = std::pow(theta, 2.0 * i / dim);
    double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    out[i] = (1 / (factor * pos)) * ramp + (1 / pos) * (1 - ramp);
  }
  return out;
}

TEST(RopeCache, YarnInvFreqAndAttentionFactor) {
  RopeConfig r = rope_of("yarn", 1e6);
  r.factor = 4;
  r.original_max_position_embeddings = 32768;
  auto freqs = compute_rope_frequencies(r, 128, 131072);
  ASSERT_TRUE(freqs.has_value());
  expect_inv_freq_near(freqs->inv_freq, yarn_expected(1e6, 128, 4, 32768, true), 1e-6);
  // Hand-checked: the ramp runs over i in [23, 40] (raw bounds 23.596 and 39.651).
  EXPECT_NEAR(freqs->inv_freq[23], 0.006978305848598663, 1e-9);
  EXPECT_NEAR(freqs->inv_freq[30], 0.0010643609812470017, 1e-9);
  EXPECT_NEAR(freqs->inv_freq[63], 3.102344401879299e-07, 1e-13);
  EXPECT_NEAR(freqs->attention_factor, 1.138629436111989, 1e-12);  // 0.1 ln 4 + 1

  r.truncate = false;
  auto untruncated = compute_rope_frequencies(r, 128, 131072);
  expect_inv_freq_near(untruncated->inv_freq, yarn_expected(1e6, 128, 4, 32768, false), 1e-6);
  EXPECT_NE(untruncated->inv_freq[30], freqs->inv_freq[30]);

  r.factor = 40;
  r.mscale = 0.707;
  r.mscale_all_dim = 1.0;
  EXPECT_NEAR(compute_rope_frequencies(r, 128, 4096)->attention_factor, 0.9210423553163399, 1e-12);
  r.attention_factor = 0.5;  // an explicit factor wins
  EXPECT_EQ(compute_rope_frequencies(r, 128, 4096)->attention_factor, 0.5);
  EXPECT_NEAR(yarn_mscale(40, 0.707) / yarn_mscale(40, 1.0), 0.9210423553163399, 1e-12);
}

TEST(RopeCache, CacheLayoutPartialRotaryAndAttentionFactor) {
  RopeConfig r = rope_of("yarn", 10000);
  r.factor = 4;
  r.original_max_position_embeddings = 256;
  r.partial_rotary_factor = 0.5;
  auto cache = compute_cos_sin_cache(r, 64, 300);
  ASSERT_TRUE(cache.has_value());
  EXPECT_EQ(cache->shape(), (Shape{300, 32}));
  EXPECT_EQ(cache->dtype(), DType::kF32);
  auto freqs = compute_rope_frequencies(r, 32, 300);
  const float af = static_cast<float>(freqs->attention_factor);
  const float* c = cache->data<float>();
  for (int64_t i = 0; i < 16; ++i) {  // position 0: cos = af, sin = 0
    EXPECT_EQ(c[i], af);
    EXPECT_EQ(c[16 + i], 0.0f);
  }
  for (int64_t p : {1, 7, 299}) {
    for (int64_t i = 0; i < 16; ++i) {
      double angle = p * static_cast<double>(freqs->inv_freq[i]);
      double tol = 1e-6 + angle * 1.2e-7;  // the angle is a float32 product
      EXPECT_NEAR(c[p * 32 + i], std::cos(angle) * af, tol) << p << "," << i;
      EXPECT_NEAR(c[p * 32 + 16 + i], std::sin(angle) * af, tol) << p << "," << i;
    }
  }
}

TEST(RopeCache, AngleIsTheFloat32ProductAsInTransformers) {
  auto cache = compute_cos_sin_cache(rope_of("default", 10000), 4, 30001);
  auto freqs = compute_rope_frequencies(rope_of("default", 10000), 4, 30001);
  ASSERT_TRUE(cache.has_value() && freqs.has_value());
  const float inv = freqs->inv_freq[1];  // 10000^(-1/2) = 0.01
  const int64_t p = 29989;
  const float angle_f32 = static_cast<float>(p) * inv;
  const double angle_f64 = p * static_cast<double>(inv);
  ASSERT_NE(static_cast<double>(angle_f32), angle_f64);
  EXPECT_EQ(cache->data<float>()[p * 4 + 1],
            static_cast<float>(std::cos(static_cast<double>(angle_f32))));
  EXPECT_EQ(cache->data<float>()[p * 4 + 3],
            static_cast<float>(std::sin(static_cast<double>(angle_f32))));
}

TEST(RopeCache, EndToEndNeoxRotationMatchesTheFormula) {
  // q rotated with the real cache vs cos/sin of p * theta^(-2i/d) in double (HF's layout:
  // rotate_half pairs i and i + d/2).
  const int64_t D = 16, T = 6;
  auto cache = compute_cos_sin_cache(rope_of("default", 10000), D, 64);
  ASSERT_TRUE(cache.has_value());
  std::vector<int64_t> pos = {0, 1, 2, 17, 40, 63};
  Tensor q = random_f32({T, D}, 121);
  std::vector<double> x = values_of(q), expected(x.size());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < D / 2; ++i) {
      double a = pos[t] * std::pow(10000.0, -2.0 * i / D);
      double x1 = x[t * D + i], x2 = x[t * D + i + D / 2];
      expected[t * D + i] = x1 * std::cos(a) - x2 * std::sin(a);
      expected[t * D + i + D / 2] = x2 * std::cos(a) + x1 * std::sin(a);
    }
  }
  Tensor no_key;
  ASSERT_TRUE(cpu::rotary_embedding(positions_tensor(pos), q, no_key, D, *cache, true).is_ok());
  EXPECT_LT(rel_l2(q, expected), 1e-6);
}

TEST(RopeCache, RejectsUnknownTypesAndBadParameters) {
  expect_error(compute_cos_sin_cache(rope_of("dynamic", 10000), 64, 16).status(),
               ErrorCode::kUnsupported, "rope_type 'dynamic' is not supported");
  expect_error(compute_cos_sin_cache(rope_of("longrope", 10000), 64, 16).status(),
               ErrorCode::kUnsupported, "longrope");
  expect_error(compute_cos_sin_cache(rope_of("default", 10000), 64, 0).status(),
               ErrorCode::kInvalidArgument, "max_position is 0");
  expect_error(compute_cos_sin_cache(rope_of("default", -1), 64, 16).status(),
               ErrorCode::kInvalidArgument, "rope_theta is -1");
  RopeConfig r = rope_of("llama3", 500000);
  r.factor = 8;
  r.low_freq_factor = r.high_freq_factor = 2;
  r.original_max_position_embeddings = 8192;
  expect_error(compute_cos_sin_cache(r, 64, 16).status(), ErrorCode::kInvalidArgument,
               "high_freq_factor equals low_freq_factor");
  RopeConfig linear = rope_of("linear", 10000);
  linear.factor = 0;
  expect_error(compute_cos_sin_cache(linear, 64, 16).status(), ErrorCode::kInvalidArgument,
               "factor is 0");
}

}  // namespace
}  // namespace test_rope
}  // namespace vllm
