// cpu::linear against a double-precision x @ w^T (+ bias): both kernels (direct at M <= 8,
// BLAS above), every weight and bias dtype, odd sizes, row-strided views, and bad input.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/ops.h"
#include "op_test_util.h"

namespace vllm {
namespace test_cpu_linear {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)

std::vector<double> linear_reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  Tensor xc = x.is_contiguous() ? x : x.clone();
  std::vector<double> xv = values_of(xc), wv = values_of(w);
  std::vector<double> bv = bias.defined() ? values_of(bias) : std::vector<double>();
  std::vector<double> out(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias.defined() ? bv[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += xv[m * K + k] * wv[n * K + k];
      out[m * N + n] = acc;
    }
  }
  return out;
}

struct Size {
  int64_t M, N, K;
};

// Direct kernel (M <= 8), the BLAS path (M > 8), tails of the 4-row / 8-column tiles, and
// shapes big enough to split across the pool.
constexpr Size kSizes[] = {{1, 1, 1},      {1, 7, 33},    {2, 33, 7}, {7, 129, 1000},
                           {8, 5, 129},    {4, 2050, 96}, {9, 33, 7}, {33, 7, 1000},
                           {129, 129, 33}, {64, 515, 128}};

TEST(CpuLinear, MatchesReferenceForEveryWeightDType) {
  for (Size s : kSizes) {
    for (DType dtype : kWeightDTypes) {
      Tensor x = random_f32({s.M, s.K}, 61);
      Tensor w = cast_to(random_f32({s.N, s.K}, 62), dtype);
      Tensor out = Tensor::empty({s.M, s.N}, DType::kF32);
      ASSERT_TRUE(cpu::linear(x, w, Tensor(), out).is_ok());
      EXPECT_LT(rel_l2(out, linear_reference(x, w, Tensor())), 1e-5)
          << "M=" << s.M << " N=" << s.N << " K=" << s.K << " " << dtype_name(dtype);
    }
  }
}

TEST(CpuLinear, AddsBiasOfEveryDType) {
  for (Size s : {Size{3, 37, 20}, Size{20, 37, 20}}) {
    for (DType dtype : kWeightDTypes) {
      Tensor x = random_f32({s.M, s.K}, 71);
      Tensor w = cast_to(random_f32({s.N, s.K}, 72), DType::kBF16);
      Tensor bias = cast_to(random_f32({s.N}, 73, -4.0f, 4.0f), dtype);
      Tensor out = Tensor::empty({s.M, s.N}, DType::kF32);
      ASSERT_TRUE(cpu::linear(x, w, bias, out).is_ok());
      EXPECT_LT(rel_l2(out, linear_reference(x, w, bias)), 1e-5) << dtype_name(dtype);
    }
  }
}

TEST(CpuLinear, ReadsAndWritesRowStridedViews) {
  // x and out are column slices of wider buffers (e.g. one part of a fused projection).
  for (int64_t M : {3, 20}) {
    const int64_t N = 19, K = 45;
    Tensor x_wide = random_f32({M, K + 10}, 81);
    Tensor x = x_wide.slice(1, 5, 5 + K);
    Tensor w = random_f32({N, K}, 82);
    Tensor out_wide = Tensor::zeros({M, N + 6}, DType::kF32);
    Tensor out = out_wide.slice(1, 2, 2 + N);
    ASSERT_FALSE(out.is_contiguous());
    ASSERT_TRUE(cpu::linear(x, w, Tensor(), out).is_ok());
    EXPECT_LT(rel_l2(out, linear_reference(x, w, Tensor())), 1e-5);
    for (int64_t m = 0; m < M; ++m) {  // columns outside the view stay untouched
      for (int64_t n : {int64_t{0}, int64_t{1}, 2 + N, 3 + N, 5 + N}) {
        EXPECT_EQ(out_wide.data<float>()[m * (N + 6) + n], 0.0f);
      }
    }
  }
}

TEST(CpuLinear, EmptyInnerDimGivesBias) {
  Tensor x = Tensor::empty({2, 0}, DType::kF32);
  Tensor w = Tensor::empty({3, 0}, DType::kF32);
  Tensor bias = random_f32({3}, 91);
  Tensor out = Tensor::empty({2, 3}, DType::kF32);
  ASSERT_TRUE(cpu::linear(x, w, bias, out).is_ok());
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out.data<float>()[i], bias.data<float>()[i % 3]);
}

TEST(CpuLinear, RejectsBadInput) {
  Tensor x = random_f32({2, 8}, 1);
  Tensor w = random_f32({4, 8}, 2);
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  expect_error(cpu::linear(x, random_f32({4, 7}, 2), Tensor(), out), ErrorCode::kInvalidArgument,
               "linear: weight has shape [4, 7], expected [out_features, 8]");
  expect_error(cpu::linear(x, w, random_f32({5}, 3), out), ErrorCode::kInvalidArgument,
               "linear: bias has shape [5], expected [4]");
  Tensor bad_out = Tensor::empty({2, 5}, DType::kF32);
  expect_error(cpu::linear(x, w, Tensor(), bad_out), ErrorCode::kInvalidArgument,
               "linear: out has shape [2, 5], expected [2, 4]");
  expect_error(cpu::linear(cast_to(x, DType::kF16), w, Tensor(), out), ErrorCode::kInvalidArgument,
               "linear: x has dtype F16, expected F32");
  expect_error(cpu::linear(x, Tensor::zeros({4, 8}, DType::kI8), Tensor(), out),
               ErrorCode::kInvalidArgument, "weight has dtype I8");
  Tensor gpu_w = Tensor::borrow(w.data_ptr(), {4, 8}, DType::kF32, Device::cuda(1), nullptr);
  expect_error(cpu::linear(x, gpu_w, Tensor(), out), ErrorCode::kInvalidArgument,
               "weight is on cuda:1");
  Tensor wide = random_f32({8, 16}, 4);
  expect_error(cpu::linear(x, wide.slice(1, 0, 8).slice(0, 0, 4), Tensor(), out),
               ErrorCode::kInvalidArgument,
               "weight with shape [4, 8] and strides [16, 1] is not contiguous");
}

}  // namespace
}  // namespace test_cpu_linear
}  // namespace vllm
