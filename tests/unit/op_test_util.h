// Helpers for the CPU op tests: random tensors, dtype casts, decoded values, the relative
// L2 error (NaN never passes) and error-status checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/float_convert.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::test {

constexpr DType kWeightDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

inline Tensor random_f32(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// The same values (rounded) in `dtype`.
inline Tensor cast_to(const Tensor& src, DType dtype) {
  if (dtype == DType::kF32) return src.clone();
  Tensor t = Tensor::empty(src.shape(), dtype);
  const float* s = src.data<float>();
  uint16_t* d = t.data<uint16_t>();
  for (int64_t i = 0; i < src.numel(); ++i) {
    d[i] = dtype == DType::kBF16 ? f32_to_bf16(s[i]) : f32_to_f16(s[i]);
  }
  return t;
}

// Decoded values of a F32/BF16/F16 contiguous tensor, in double.
inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kF32:
        out[i] = t.data<float>()[i];
        break;
      case DType::kBF16:
        out[i] = bf16_to_f32(t.data<uint16_t>()[i]);
        break;
      case DType::kF16:
        out[i] = f16_to_f32(t.data<uint16_t>()[i]);
        break;
      default:
        ADD_FAILURE() << "values_of " << dtype_name(t.dtype());
    }
  }
  return out;
}

inline double rel_l2(const float* actual, const std::vector<double>& expected) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(actual[i]) || std::isnan(expected[i])) return INFINITY;
    double d = actual[i] - expected[i];
    num += d * d;
    den += expected[i] * expected[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double rel_l2(const Tensor& actual, const std::vector<double>& expected) {
  EXPECT_EQ(static_cast<size_t>(actual.numel()), expected.size());
  Tensor c = actual.is_contiguous() ? actual : actual.clone();
  return rel_l2(c.data<float>(), expected);
}

inline void expect_error(const Status& s, ErrorCode code, const std::string& fragment) {
  ASSERT_FALSE(s.is_ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.to_string();
}

}  // namespace vllm::test
