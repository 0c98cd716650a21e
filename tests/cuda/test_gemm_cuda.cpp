// Backend parity for cuda::linear (backend/cuda/gemm.cuh) against cpu::linear on random
// inputs, through cuBLASLt and (M <= kGemvCrossoverRows) the batched GEMV: M from 1 (decode)
// to 2048 (prefill), N and K from real models (2560, 9216-9728, 151936-wide logits with a
// short K to keep the test fast), odd sizes, bias in each dtype, x and out as column slices
// (aligned and not), BF16 inputs with BF16 or F32 output, and F32.
//
// Tolerances: BF16 output 1e-2 (its rounding alone is ~2e-3). F32 output from BF16 inputs:
// the products are exact in f32, only the summation order differs from the CPU's, 1e-4.
// F32: each side's f32 sum carries a relative error of about eps * sqrt(K / 2) on random
// data (2.7e-6 at K = 4096), so the bound is 1e-5 up to K = 1024 and grows as sqrt(K) past it
// (2e-5 at K = 4096).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.cuh"
#include "cuda_device_util.h"
#include "cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::kContiguous;
using cuda_test::Layout;
using cuda_test::nan_operand;
using cuda_test::Operand;
using cuda_test::random_operand;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_device;
using cuda_test::to_host_f32;

constexpr int kNoBias = -1;

struct GemmCase {
  int64_t m, n, k;
  DType x_dtype;
  DType out_dtype;
  int bias = kNoBias;  // a DType, or kNoBias
  Layout x_layout = kContiguous;
  Layout out_layout = kContiguous;

  std::string name() const {
    return fmt::format("[{} x {}] x [{} x {}]^T {} -> {} bias={} x {} out {}", m, k, n, k,
                       dtype_name(x_dtype), dtype_name(out_dtype),
                       bias == kNoBias ? "none" : dtype_name(static_cast<DType>(bias)),
                       x_layout.name(), out_layout.name());
  }
};

double tolerance(const GemmCase& c) {
  if (c.out_dtype == DType::kBF16) return 1e-2;
  if (c.x_dtype == DType::kBF16) return 1e-4;
  return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(c.k) / 1024.0));
}

class GemmCuda : public cuda_test::CudaTest {
 protected:
  void SetUp() override {
    cuda_test::CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto blas = cuda::BlasContext::create(Device::cuda());
    ASSERT_TRUE(blas) << blas.status().to_string();
    blas_ = std::move(*blas);
  }

  void run_case(const GemmCase& c) {
    SCOPED_TRACE(c.name());
    Operand x = random_operand(c.m, c.k, c.x_dtype, c.x_layout, rng_, 0.0f, 1.0f);
    Tensor weight = random_tensor({c.n, c.k}, c.x_dtype, rng_, 0.0f, 0.05f);
    Tensor bias;
    if (c.bias != kNoBias)
      bias = random_tensor({c.n}, static_cast<DType>(c.bias), rng_, 0.0f, 1.0f);
    Tensor ref = Tensor::empty({c.m, c.n}, DType::kF32);
    Status s = cpu::linear(x.input_f32(), weight, bias, ref);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor weight_gpu = to_device(weight);
    Tensor bias_gpu = bias.defined() ? to_device(bias) : Tensor();
    // The default dispatch (the batched GEMV for narrow outputs at small M), then cuBLASLt.
    for (bool cublas_only : {false, true}) {
      SCOPED_TRACE(cublas_only ? "cuBLASLt" : "default dispatch");
      ASSERT_TRUE(blas_->set_gemv_max_rows(cublas_only ? 0 : cuda::kGemvCrossoverRows).is_ok());
      blas_->set_gemv_narrow(!cublas_only);
      Operand out = nan_operand(c.m, c.n, c.out_dtype, c.out_layout);
      s = cuda::linear(*blas_, x.view, weight_gpu, bias_gpu, out.view, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_TRUE(relative_l2(out.result_f32(), ref, tolerance(c)));
      EXPECT_TRUE(out.outside_untouched());
    }
    ASSERT_TRUE(blas_->set_gemv_max_rows(cuda::kGemvCrossoverRows).is_ok());
    blas_->set_gemv_narrow(true);
  }

  std::unique_ptr<cuda::BlasContext> blas_;
  std::mt19937 rng_{31337};
};

constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;

TEST_F(GemmCuda, Bf16MatchesCpu) {
  const GemmCase cases[] = {
      {1, 2560, 2560, kBF16, kBF16},    {7, 9728, 2560, kBF16, kBF16},
      {64, 2560, 9728, kBF16, kBF16},   {300, 1001, 513, kBF16, kBF16},
      {2048, 2560, 1024, kBF16, kBF16},
  };
  for (const GemmCase& c : cases) run_case(c);
}

// The lm_head: BF16 hidden states and weights, F32 logits.
TEST_F(GemmCuda, Bf16ToF32LogitsMatchCpu) {
  const GemmCase cases[] = {
      {1, 2560, 2560, kBF16, kF32},
      {7, 151936, 256, kBF16, kF32},
      {300, 4099, 2560, kBF16, kF32},
  };
  for (const GemmCase& c : cases) run_case(c);
}

TEST_F(GemmCuda, F32MatchesCpu) {
  const GemmCase cases[] = {
      {1, 512, 4096, kF32, kF32},  {7, 333, 1000, kF32, kF32},   {300, 768, 4096, kF32, kF32},
      {64, 1000, 333, kF32, kF32}, {2048, 256, 512, kF32, kF32},
  };
  for (const GemmCase& c : cases) run_case(c);
}

TEST_F(GemmCuda, BiasMatchesCpu) {
  const GemmCase cases[] = {
      {7, 1024, 2560, kBF16, kBF16, static_cast<int>(kBF16)},
      {64, 1000, 513, kBF16, kBF16, static_cast<int>(kF32)},
      {300, 768, 1024, kF32, kF32, static_cast<int>(kF32)},
      {5, 4096, 512, kBF16, kF32, static_cast<int>(kBF16)},
      {5, 4096, 512, kBF16, kF32, static_cast<int>(kF32)},
      {1, 151936, 64, kBF16, kBF16, static_cast<int>(kBF16)},
  };
  for (const GemmCase& c : cases) run_case(c);
}

// x and out as column slices: 16-byte aligned with a row stride, and shifted by elements so
// that cuBLASLt must be told the pointers are only 2- or 4-byte aligned.
TEST_F(GemmCuda, StridedOperandsMatchCpu) {
  const Layout aligned_x{8, 24}, aligned_out{8, 16}, odd_x{1, 3}, odd_out{3, 5};
  const GemmCase cases[] = {
      {64, 1024, 2560, kBF16, kBF16, kNoBias, aligned_x, aligned_out},
      {33, 512, 1024, kBF16, kBF16, kNoBias, odd_x, odd_out},
      {1, 512, 1024, kBF16, kBF16, static_cast<int>(kBF16), odd_x, odd_out},
      {17, 300, 640, kF32, kF32, kNoBias, odd_x, Layout{2, 2}},
      {9, 2048, 256, kBF16, kF32, static_cast<int>(kF32), aligned_x, Layout{4, 8}},
  };
  for (const GemmCase& c : cases) run_case(c);
}

// K = 0 is the empty sum: out = bias (or zeros), as cpu::linear.
TEST_F(GemmCuda, EmptyInnerDimensionWritesTheBias) {
  for (bool with_bias : {false, true}) {
    for (DType dtype : {kF32, kBF16}) {
      SCOPED_TRACE(fmt::format("{} bias={}", dtype_name(dtype), with_bias));
      const int64_t m = 5, n = 17;
      Tensor x = Tensor::empty({m, 0}, dtype);
      Tensor weight = Tensor::empty({n, 0}, dtype);
      Tensor bias = with_bias ? random_tensor({n}, dtype, rng_, 0.0f, 1.0f) : Tensor();
      Tensor ref = Tensor::empty({m, n}, kF32);
      ASSERT_TRUE(cpu::linear(cuda_test::to_f32(x), weight, bias, ref).is_ok());
      Operand out = nan_operand(m, n, dtype, kContiguous);
      Status s = cuda::linear(*blas_, to_device(x), to_device(weight),
                              with_bias ? to_device(bias) : Tensor(), out.view, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_TRUE(cuda_test::same_values(out.result_f32(), ref));
    }
  }
}

TEST_F(GemmCuda, EmptyBatchIsANoOp) {
  Tensor x = to_device(Tensor::empty({0, 64}, kBF16));
  Tensor weight = to_device(random_tensor({32, 64}, kBF16, rng_, 0.0f, 1.0f));
  Tensor out = to_device(Tensor::empty({0, 32}, kBF16));
  Status s = cuda::linear(*blas_, x, weight, Tensor(), out, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

// The heuristic runs once per (shape, dtypes, strides, alignment); repeats reuse the plan.
TEST_F(GemmCuda, PlansAreCachedPerShape) {
  ASSERT_TRUE(blas_->set_gemv_max_rows(0).is_ok());  // these sizes would take the GEMV
  blas_->set_gemv_narrow(false);
  Tensor weight = to_device(random_tensor({256, 128}, kBF16, rng_, 0.0f, 0.1f));
  Tensor bias = to_device(random_tensor({256}, kBF16, rng_, 0.0f, 0.1f));
  auto run = [&](int64_t m, bool with_bias) {
    Tensor x = to_device(random_tensor({m, 128}, kBF16, rng_, 0.0f, 1.0f));
    Tensor out = to_device(Tensor::empty({m, 256}, kBF16));
    Status s = cuda::linear(*blas_, x, weight, with_bias ? bias : Tensor(), out, nullptr);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return blas_->cached_plans();
  };
  EXPECT_EQ(run(8, false), 1u);
  EXPECT_EQ(run(8, false), 1u);
  EXPECT_EQ(run(16, false), 2u);
  EXPECT_EQ(run(8, false), 2u);
  EXPECT_EQ(run(8, true), 3u);
  EXPECT_EQ(run(8, true), 3u);
}

TEST_F(GemmCuda, RejectsBadArguments) {
  Tensor x = to_device(random_tensor({4, 64}, kBF16, rng_, 0.0f, 1.0f));
  Tensor x32 = to_device(random_tensor({4, 64}, kF32, rng_, 0.0f, 1.0f));
  Tensor w = to_device(random_tensor({32, 64}, kBF16, rng_, 0.0f, 1.0f));
  Tensor w_short = to_device(random_tensor({32, 63}, kBF16, rng_, 0.0f, 1.0f));
  Tensor out = to_device(Tensor::empty({4, 32}, kBF16));
  Tensor out_f16 = to_device(Tensor::empty({4, 32}, DType::kF16));
  Tensor out_wrong = to_device(Tensor::empty({4, 33}, kBF16));
  Tensor bias_wrong = to_device(Tensor::zeros({31}, kBF16));
  Status s = cuda::linear(*blas_, x, w_short, Tensor(), out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("weight"), std::string::npos) << s.message();
  s = cuda::linear(*blas_, x32, w, Tensor(), out, nullptr);  // weight dtype differs from x
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::linear(*blas_, x, w, Tensor(), out_f16, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::linear(*blas_, x, w, Tensor(), out_wrong, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::linear(*blas_, x, w, bias_wrong, out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("bias"), std::string::npos) << s.message();
  Tensor x_cpu = random_tensor({4, 64}, kBF16, rng_, 0.0f, 1.0f);
  s = cuda::linear(*blas_, x_cpu, w, Tensor(), out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

TEST(GemmCudaArgs, CreateRefusesACpuDevice) {
  auto blas = cuda::BlasContext::create(Device::cpu());
  ASSERT_FALSE(blas);
  EXPECT_EQ(blas.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace vllm
