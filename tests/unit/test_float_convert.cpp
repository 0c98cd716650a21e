// Exhaustive tests of the f32 <-> bf16 / f16 / fp8 conversions against independent
// references: decoding by an ldexp formula in double, encoding by searching the table of
// representable values for the nearest one (ties to the even code), then applying
// PyTorch's overflow and NaN rules. Every 16- and 8-bit pattern is decoded and re-encoded,
// and every midpoint between neighbouring values is probed on and either side of the tie.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/float_convert.h"

namespace vllm {
namespace test_float_convert {
namespace {

uint32_t bits_of(float f) {
  return std::bit_cast<uint32_t>(f);
}
float float_of(uint32_t b) {
  return std::bit_cast<float>(b);
}

// A format as the references see it: layout plus the two encoder / decoder functions.
struct Format {
  std::string name;
  int exp_bits;
  int mant_bits;
  bool has_inf;  // false: e4m3fn (only S.1111.111 is NaN; the overflow code is NaN)
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
  uint32_t (*nan_of)(uint32_t sign_bit);  // canonical NaN code PyTorch's encoder gives

  int width() const { return 1 + exp_bits + mant_bits; }
  uint32_t sign_bit() const { return 1u << (width() - 1); }
  uint32_t code_count() const { return 1u << width(); }
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t inf_code() const { return ((1u << exp_bits) - 1) << mant_bits; }
  // The first positive code past the largest finite value.
  uint32_t overflow_code() const { return has_inf ? inf_code() : sign_bit() - 1; }
};

const Format kBF16{"bf16",
                   8,
                   7,
                   true,
                   [](uint32_t c) { return bf16_to_f32(static_cast<uint16_t>(c)); },
                   [](float f) -> uint32_t { return f32_to_bf16(f); },
                   [](uint32_t) -> uint32_t { return 0x7FC0; }};
const Format kF16{"f16",
                  5,
                  10,
                  true,
                  [](uint32_t c) { return f16_to_f32(static_cast<uint16_t>(c)); },
                  [](float f) -> uint32_t { return f32_to_f16(f); },
                  [](uint32_t s) -> uint32_t { return s | 0x7E00; }};
const Format kE4M3{"fp8e4m3fn",
                   4,
                   3,
                   false,
                   [](uint32_t c) { return fp8e4m3_to_f32(static_cast<uint8_t>(c)); },
                   [](float f) -> uint32_t { return f32_to_fp8e4m3(f); },
                   [](uint32_t s) -> uint32_t { return s | 0x7F; }};
const Format kE5M2{"fp8e5m2",
                   5,
                   2,
                   true,
                   [](uint32_t c) { return fp8e5m2_to_f32(static_cast<uint8_t>(c)); },
                   [](float f) -> uint32_t { return f32_to_fp8e5m2(f); },
                   [](uint32_t s) -> uint32_t { return s | 0x7F; }};
const Format* const kFormats[] = {&kBF16, &kF16, &kE4M3, &kE5M2};

// Value of a code by the textbook formula, in double. NaN for NaN codes.
double ref_decode(const Format& f, uint32_t code) {
  bool negative = (code & f.sign_bit()) != 0;
  uint32_t exp = (code >> f.mant_bits) & ((1u << f.exp_bits) - 1);
  uint32_t mant = code & ((1u << f.mant_bits) - 1);
  double value;
  if (f.has_inf && exp == (1u << f.exp_bits) - 1) {
    value = mant == 0 ? std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.has_inf && (code & ~f.sign_bit()) == f.overflow_code()) {
    value = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    value = std::ldexp(static_cast<double>(mant), 1 - f.bias() - f.mant_bits);
  } else {
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(mant), -f.mant_bits),
                       static_cast<int>(exp) - f.bias());
  }
  return negative ? -value : value;
}

// Magnitudes of the positive codes 0 .. overflow_code(); the last entry is the value the
// overflow code would have if the format continued (2^(emax+1), or 480 for e4m3fn).
std::vector<double> magnitude_table(const Format& f) {
  std::vector<double> table;
  for (uint32_t c = 0; c < f.overflow_code(); ++c) table.push_back(ref_decode(f, c));
  uint32_t exp = f.overflow_code() >> f.mant_bits;
  uint32_t mant = f.overflow_code() & ((1u << f.mant_bits) - 1);
  table.push_back(std::ldexp(1.0 + std::ldexp(double(mant), -f.mant_bits), int(exp) - f.bias()));
  return table;
}

// Slow reference encoder: nearest entry of the table, ties to the even code; the overflow
// code becomes Inf (or NaN for e4m3fn, which has no Inf).
uint32_t ref_encode(const Format& f, const std::vector<double>& table, float x) {
  uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  if (std::isnan(x)) return f.nan_of(sign);
  double a = std::fabs(static_cast<double>(x));
  uint32_t code;
  if (std::isinf(x) || a >= table.back()) {
    code = f.overflow_code();
  } else {
    // lo: last entry <= a.
    auto it = std::upper_bound(table.begin(), table.end(), a);
    uint32_t lo = static_cast<uint32_t>(it - table.begin()) - 1;
    double mid = (table[lo] + table[lo + 1]) / 2;  // exact: few significant bits
    if (a < mid)
      code = lo;
    else if (a > mid)
      code = lo + 1;
    else
      code = (lo % 2 == 0) ? lo : lo + 1;
  }
  if (code == f.overflow_code()) {
    code = f.has_inf ? f.inf_code() : f.nan_of(0);
  }
  return sign | code;
}

// The bits PyTorch's decoder gives a NaN code (see float_convert.h).
uint32_t expected_nan_bits(const Format& f, uint32_t code) {
  uint32_t sign = (code & f.sign_bit()) ? 0x80000000u : 0u;
  if (&f == &kBF16) return code << 16;
  if (&f == &kE4M3) return sign | 0x7FF00000u;
  uint32_t mant = code & ((1u << f.mant_bits) - 1);
  return sign | 0x7FC00000u | (mant << (23 - f.mant_bits));
}

TEST(FloatConvert, DecodeEveryPattern) {
  for (const Format* f : kFormats) {
    int nan_count = 0;
    for (uint32_t code = 0; code < f->code_count(); ++code) {
      float got = f->decode(code);
      double want = ref_decode(*f, code);
      if (std::isnan(want)) {
        ++nan_count;
        ASSERT_EQ(bits_of(got), expected_nan_bits(*f, code)) << f->name << " code " << code;
        continue;
      }
      ASSERT_EQ(static_cast<double>(got), want) << f->name << " code " << code;
      ASSERT_EQ(std::signbit(got), (code & f->sign_bit()) != 0) << f->name << " code " << code;
    }
    // bf16 and f16: 2 * (2^M - 1) NaNs; e4m3fn: 2; e5m2: 6.
    int want_nans = f->has_inf ? 2 * ((1 << f->mant_bits) - 1) : 2;
    EXPECT_EQ(nan_count, want_nans) << f->name;
  }
}

TEST(FloatConvert, KnownValues) {
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in e4m3fn
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(fp8e5m2_to_f32(0x3C), 1.0f);
  EXPECT_EQ(fp8e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(fp8e5m2_to_f32(0x7C)));
  EXPECT_TRUE(std::isinf(fp8e5m2_to_f32(0xFC)) && fp8e5m2_to_f32(0xFC) < 0);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(0xFF)));
}

#if defined(__FLT16_MANT_DIG__)
// The compiler's own _Float16 is a third, independent implementation of f16.
TEST(FloatConvert, F16MatchesCompilerFloat16) {
  for (uint32_t code = 0; code < 65536; ++code) {
    uint16_t h = static_cast<uint16_t>(code);
    _Float16 native = std::bit_cast<_Float16>(h);
    float want = static_cast<float>(native);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(h)));
      continue;
    }
    ASSERT_EQ(bits_of(f16_to_f32(h)), bits_of(want)) << code;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Exponents around f16's range, so most values round to something interesting.
    uint32_t b = (rng() & 0x807FFFFFu) | ((100u + rng() % 50u) << 23);
    float x = float_of(b);
    ASSERT_EQ(f32_to_f16(x), std::bit_cast<uint16_t>(static_cast<_Float16>(x))) << b;
  }
}
#endif

TEST(FloatConvert, EncodeDecodeRoundTripsEveryPattern) {
  for (const Format* f : kFormats) {
    for (uint32_t code = 0; code < f->code_count(); ++code) {
      float x = f->decode(code);
      uint32_t back = f->encode(x);
      if (std::isnan(x)) {
        uint32_t sign = code & f->sign_bit();
        ASSERT_EQ(back, f->nan_of(sign)) << f->name << " NaN code " << code;
      } else {
        ASSERT_EQ(back, code) << f->name << " code " << code;
      }
    }
  }
}

// For each pair of neighbouring positive codes (the last pair ends at the overflow code):
// the exact midpoint rounds to the even code, the floats either side of it to the nearer.
TEST(FloatConvert, MidpointsRoundToNearestEven) {
  for (const Format* f : kFormats) {
    std::vector<double> table = magnitude_table(*f);
    auto resolve = [&](uint32_t code) {
      if (code == f->overflow_code()) return f->has_inf ? f->inf_code() : f->nan_of(0);
      return code;
    };
    for (uint32_t lo = 0; lo + 1 < table.size(); ++lo) {
      double mid = (table[lo] + table[lo + 1]) / 2;
      float m = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(m), mid) << f->name << " midpoint not a float";
      float below = std::nextafter(m, 0.0f);
      float above = std::nextafter(m, std::numeric_limits<float>::infinity());
      uint32_t even = (lo % 2 == 0) ? lo : lo + 1;
      for (uint32_t sign : {0u, f->sign_bit()}) {
        float s = sign ? -1.0f : 1.0f;
        uint32_t want_mid = sign | resolve(even);
        uint32_t want_below = sign | resolve(lo);
        uint32_t want_above = sign | resolve(lo + 1);
        ASSERT_EQ(f->encode(s * m), want_mid) << f->name << " mid of " << lo;
        ASSERT_EQ(f->encode(s * below), want_below) << f->name << " below mid of " << lo;
        ASSERT_EQ(f->encode(s * above), want_above) << f->name << " above mid of " << lo;
        ASSERT_EQ(ref_encode(*f, table, s * m), want_mid) << f->name;
        ASSERT_EQ(ref_encode(*f, table, s * below), want_below) << f->name;
        ASSERT_EQ(ref_encode(*f, table, s * above), want_above) << f->name;
      }
    }
  }
}

TEST(FloatConvert, SpecialValuesAndBoundaries) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float neg_nan = -nan;
  const float payload_nan = float_of(0x7FA12345u);  // signalling, with payload
  const float f32_denorm_min = std::numeric_limits<float>::denorm_min();
  auto up = [&](float x) { return std::nextafter(x, inf); };
  auto down = [&](float x) { return std::nextafter(x, 0.0f); };

  // bf16
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(inf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xFF80);
  EXPECT_EQ(f32_to_bf16(nan), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(neg_nan), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(payload_nan), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(float_of(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(f32_to_bf16(float_of(0x7F7F8000u)), 0x7F80);  // tie, 0x7F7F odd: up to Inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xFF80);
  EXPECT_EQ(f32_to_bf16(f32_denorm_min), 0x0000);         // 2^-149 < 2^-134
  EXPECT_EQ(f32_to_bf16(float_of(0x00008000u)), 0x0000);  // tie to even 0
  EXPECT_EQ(f32_to_bf16(float_of(0x00008001u)), 0x0001);  // just above
  EXPECT_EQ(f32_to_bf16(float_of(0x00018000u)), 0x0002);  // tie, 1 odd: up
  EXPECT_EQ(f32_to_bf16(float_of(0x80010000u)), 0x8001);  // -min subnormal

  // f16
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(inf), 0x7C00);
  EXPECT_EQ(f32_to_f16(-inf), 0xFC00);
  EXPECT_EQ(f32_to_f16(nan), 0x7E00);
  EXPECT_EQ(f32_to_f16(neg_nan), 0xFE00);
  EXPECT_EQ(f32_to_f16(payload_nan), 0x7E00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(down(65520.0f)), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xFC00);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7C00);
  const float f16_min_sub = std::ldexp(1.0f, -24);
  EXPECT_EQ(f32_to_f16(f16_min_sub / 2), 0x0000);  // tie to even 0
  EXPECT_EQ(f32_to_f16(up(f16_min_sub / 2)), 0x0001);
  EXPECT_EQ(f32_to_f16(-up(f16_min_sub / 2)), 0x8001);
  EXPECT_EQ(f32_to_f16(down(f16_min_sub / 2)), 0x0000);
  EXPECT_EQ(f32_to_f16(-down(f16_min_sub / 2)), 0x8000);
  EXPECT_EQ(f32_to_f16(f32_denorm_min), 0x0000);
  EXPECT_EQ(f32_to_f16(-f32_denorm_min), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::min()), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);        // smallest normal
  EXPECT_EQ(f32_to_f16(down(std::ldexp(1.0f, -14))), 0x0400);  // rounds up into normal

  // fp8 e4m3fn: no Inf; past 464 is NaN, not saturation.
  EXPECT_EQ(f32_to_fp8e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8e4m3(464.0f), 0x7E);  // tie, 0x7E even: down
  EXPECT_EQ(f32_to_fp8e4m3(-464.0f), 0xFE);
  EXPECT_EQ(f32_to_fp8e4m3(up(464.0f)), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(-up(464.0f)), 0xFF);
  EXPECT_EQ(f32_to_fp8e4m3(down(480.0f)), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(480.0f), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(1e6f), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(-1e6f), 0xFF);
  EXPECT_EQ(f32_to_fp8e4m3(inf), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(-inf), 0xFF);
  EXPECT_EQ(f32_to_fp8e4m3(nan), 0x7F);
  EXPECT_EQ(f32_to_fp8e4m3(neg_nan), 0xFF);
  const float e4m3_min_sub = std::ldexp(1.0f, -9);
  EXPECT_EQ(f32_to_fp8e4m3(e4m3_min_sub / 2), 0x00);
  EXPECT_EQ(f32_to_fp8e4m3(up(e4m3_min_sub / 2)), 0x01);
  EXPECT_EQ(f32_to_fp8e4m3(-up(e4m3_min_sub / 2)), 0x81);
  EXPECT_EQ(f32_to_fp8e4m3(f32_denorm_min), 0x00);
  EXPECT_EQ(f32_to_fp8e4m3(-f32_denorm_min), 0x80);
  EXPECT_EQ(f32_to_fp8e4m3(1.0f), 0x38);

  // fp8 e5m2: overflow to Inf.
  EXPECT_EQ(f32_to_fp8e5m2(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8e5m2(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8e5m2(57344.0f), 0x7B);
  EXPECT_EQ(f32_to_fp8e5m2(down(61440.0f)), 0x7B);
  EXPECT_EQ(f32_to_fp8e5m2(61440.0f), 0x7C);  // tie, 0x7B odd: up to Inf
  EXPECT_EQ(f32_to_fp8e5m2(-61440.0f), 0xFC);
  EXPECT_EQ(f32_to_fp8e5m2(65536.0f), 0x7C);
  EXPECT_EQ(f32_to_fp8e5m2(1e30f), 0x7C);
  EXPECT_EQ(f32_to_fp8e5m2(inf), 0x7C);
  EXPECT_EQ(f32_to_fp8e5m2(-inf), 0xFC);
  EXPECT_EQ(f32_to_fp8e5m2(nan), 0x7F);
  EXPECT_EQ(f32_to_fp8e5m2(neg_nan), 0xFF);
  const float e5m2_min_sub = std::ldexp(1.0f, -16);
  EXPECT_EQ(f32_to_fp8e5m2(e5m2_min_sub / 2), 0x00);
  EXPECT_EQ(f32_to_fp8e5m2(up(e5m2_min_sub / 2)), 0x01);
  EXPECT_EQ(f32_to_fp8e5m2(f32_denorm_min), 0x00);
  EXPECT_EQ(f32_to_fp8e5m2(-f32_denorm_min), 0x80);
}

// Every f32 subnormal (sampled densely) and a spread of tiny values through each encoder.
TEST(FloatConvert, F32SubnormalsAndTinyValues) {
  for (const Format* f : kFormats) {
    std::vector<double> table = magnitude_table(*f);
    for (uint32_t b = 1; b < 0x00800000u; b += 997) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        float x = float_of(sign | b);
        ASSERT_EQ(f->encode(x), ref_encode(*f, table, x)) << f->name << " bits " << b;
      }
    }
    // Values from 2^-40 up, in steps of a few ulps of f32, across each format's subnormals.
    for (uint32_t b = 0x2B800000u; b < 0x3F800000u; b += 4099) {
      float x = float_of(b);
      ASSERT_EQ(f->encode(x), ref_encode(*f, table, x)) << f->name << " bits " << b;
    }
  }
}

TEST(FloatConvert, RandomF32AgainstReference) {
  std::mt19937 rng(12345);
  for (const Format* f : kFormats) {
    std::vector<double> table = magnitude_table(*f);
    // Any bit pattern (NaNs, Infs, every exponent).
    for (int i = 0; i < 1000000; ++i) {
      float x = float_of(static_cast<uint32_t>(rng()));
      uint32_t got = f->encode(x);
      uint32_t want = ref_encode(*f, table, x);
      if (got != want) {
        FAIL() << f->name << ": bits 0x" << std::hex << bits_of(x) << " gave 0x" << got
               << ", want 0x" << want;
      }
    }
    // Exponents within the format's range (plus a margin), where rounding matters most.
    int lo_exp = 127 - f->bias() - f->mant_bits - 2;
    int hi_exp = std::min(254, 127 + f->bias() + 2);
    for (int i = 0; i < 200000; ++i) {
      uint32_t exp =
          static_cast<uint32_t>(lo_exp + static_cast<int>(rng() % (hi_exp - lo_exp + 1)));
      float x = float_of((rng() & 0x807FFFFFu) | (exp << 23));
      uint32_t got = f->encode(x);
      uint32_t want = ref_encode(*f, table, x);
      if (got != want) {
        FAIL() << f->name << ": bits 0x" << std::hex << bits_of(x) << " gave 0x" << got
               << ", want 0x" << want;
      }
    }
  }
}

}  // namespace
}  // namespace test_float_convert
}  // namespace vllm
