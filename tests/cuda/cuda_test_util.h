// Helpers shared by the CUDA backend-parity tests: random inputs in any float dtype, NaN
// poison, decoding to f32, and the normalised error check every CUDA op is held to.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/float_convert.h"
#include "tensor/tensor.h"

namespace vllm::cuda_test {

// A CPU tensor of normal(mean, stddev) values, rounded to `dtype` (F32, BF16 or F16).
inline Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng, float mean,
                            float stddev) {
  Tensor t = Tensor::empty(shape, dtype);
  std::normal_distribution<float> dist(mean, stddev);
  const int64_t n = t.numel();
  if (dtype == DType::kF32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
  } else {
    VLLM_CHECK(dtype == DType::kBF16 || dtype == DType::kF16);
    uint16_t* p = t.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      p[i] = dtype == DType::kBF16 ? f32_to_bf16(dist(rng)) : f32_to_f16(dist(rng));
    }
  }
  return t;
}

// A CPU tensor whose every element is NaN: outputs start like this so unwritten ones show.
inline Tensor fill_nan(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  if (dtype == DType::kF32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = std::nanf("");
  } else {
    VLLM_CHECK(dtype == DType::kBF16 || dtype == DType::kF16);
    const uint16_t nan_bits = dtype == DType::kBF16 ? 0x7FC0 : 0x7E00;
    uint16_t* p = t.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = nan_bits;
  }
  return t;
}

// A contiguous F32 CPU copy of a F32/BF16/F16 CPU tensor (exact).
inline Tensor to_f32(const Tensor& t) {
  Tensor src = t.is_contiguous() ? t : t.clone();
  Tensor out = Tensor::empty(src.shape(), DType::kF32);
  const int64_t n = src.numel();
  float* dst = out.data<float>();
  if (src.dtype() == DType::kF32) {
    std::memcpy(dst, src.data_ptr(), static_cast<size_t>(n) * sizeof(float));
  } else {
    VLLM_CHECK(src.dtype() == DType::kBF16 || src.dtype() == DType::kF16);
    const uint16_t* p = src.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = src.dtype() == DType::kBF16 ? bf16_to_f32(p[i]) : f16_to_f32(p[i]);
    }
  }
  return out;
}

// ||got - ref|| / ||ref|| <= tolerance, over F32 tensors of one shape. Any non-finite value
// in `got` where `ref` is finite fails, whatever the norm says.
inline ::testing::AssertionResult relative_l2(const Tensor& got, const Tensor& ref,
                                              double tolerance) {
  if (got.shape() != ref.shape() || got.dtype() != DType::kF32 || ref.dtype() != DType::kF32) {
    return ::testing::AssertionFailure()
           << "cannot compare " << got.to_string() << " with " << ref.to_string();
  }
  Tensor g = got.is_contiguous() ? got : got.clone();
  Tensor r = ref.is_contiguous() ? ref : ref.clone();
  const float* gp = g.data<float>();
  const float* rp = r.data<float>();
  double diff = 0.0;
  double norm = 0.0;
  int64_t non_finite = 0;
  int64_t first_bad = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (!std::isfinite(gp[i]) && std::isfinite(rp[i])) {
      if (non_finite++ == 0) first_bad = i;
      continue;
    }
    const double d = static_cast<double>(gp[i]) - rp[i];
    diff += d * d;
    norm += static_cast<double>(rp[i]) * rp[i];
  }
  const double error = norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (non_finite > 0) {
    return ::testing::AssertionFailure()
           << non_finite << " non-finite outputs (first at flat index " << first_bad << ": "
           << gp[first_bad] << ", reference " << rp[first_bad] << ")";
  }
  if (!(error <= tolerance)) {
    return ::testing::AssertionFailure() << "relative L2 error " << error << " > " << tolerance;
  }
  return ::testing::AssertionSuccess() << "relative L2 error " << error;
}

// Products out[m][n] = sum_k x[m][k] w[n][k] against a reference, each output's error relative
// to |w_n| |x_m| (the scale of its sum's terms, which bounds it): max over (m, n) of
// |got - ref| / (|w_n| |x_m|) <= tolerance. got, ref [M, N], w [N, K] and x [M, K], all F32.
// Unlike relative_l2 over the whole output, one large output (a weight block at the e4m3
// maximum) does not hide the errors of the others. Non-finite outputs fail.
inline ::testing::AssertionResult close_products(const Tensor& got, const Tensor& ref,
                                                 const Tensor& w, const Tensor& x,
                                                 double tolerance) {
  const int64_t m = x.size(0), n = w.size(0), k = w.size(1);
  if (got.shape() != Shape{m, n} || ref.shape() != Shape{m, n} || x.size(1) != k ||
      got.dtype() != DType::kF32 || ref.dtype() != DType::kF32 || w.dtype() != DType::kF32 ||
      x.dtype() != DType::kF32) {
    return ::testing::AssertionFailure()
           << "cannot compare " << got.to_string() << " with " << ref.to_string() << " for "
           << x.to_string() << " x " << w.to_string() << "^T";
  }
  const Tensor g = got.is_contiguous() ? got : got.clone();
  const Tensor r = ref.is_contiguous() ? ref : ref.clone();
  const Tensor wc = w.is_contiguous() ? w : w.clone();
  const Tensor xc = x.is_contiguous() ? x : x.clone();
  auto norm = [k](const float* row) {
    double sum = 0.0;
    for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(row[i]) * row[i];
    return std::sqrt(sum);
  };
  std::vector<double> x_norm(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) x_norm[i] = norm(xc.data<float>() + i * k);
  double worst = 0.0;
  int64_t worst_at = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double w_norm = norm(wc.data<float>() + j * k);
    for (int64_t i = 0; i < m; ++i) {
      const double scale = w_norm * x_norm[i] > 0.0 ? w_norm * x_norm[i] : 1.0;
      const double a = g.data<float>()[i * n + j], b = r.data<float>()[i * n + j];
      const double error = std::isfinite(a) ? std::abs(a - b) / scale : INFINITY;
      if (!(error <= worst)) {
        worst = error;
        worst_at = i * n + j;
      }
    }
  }
  if (!(worst <= tolerance)) {
    return ::testing::AssertionFailure()
           << "error " << worst << " > " << tolerance << " (relative to |w_n| |x_m|) at row "
           << worst_at / n << ", feature " << worst_at % n << ": " << g.data<float>()[worst_at]
           << " against " << r.data<float>()[worst_at];
  }
  return ::testing::AssertionSuccess() << "error " << worst << " relative to |w_n| |x_m|";
}

}  // namespace vllm::cuda_test
