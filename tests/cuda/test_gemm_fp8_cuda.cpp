// Backend parity for cuda::linear_fp8 (backend/cuda/gemm.cuh: block-scaled FP8 weights, W8A16)
// against cpu::linear on the same weight: the FP8 GEMV for M <= kFp8GemvMaxRows and the
// dequantized weight through cuBLASLt above, on 128 x 128 blocks (Qwen's FP8 releases) and
// smaller grids, one scale row per weight row, K and block sizes off multiples of 16 (the
// element-wise path), bias, BF16 and F32 activations and outputs, and column slices of x and
// out. The weights hold an all-zero block and a block reaching the e4m3 maximum.
//
// Tolerances: BF16 output 1e-2; F32 output from BF16 activations 5e-3 (they multiply the
// weights rounded to BF16, on the GEMV as on the dequantized path); F32 1e-5 up to K = 1024,
// growing as sqrt(K) past it (the GEMV scales each 16-product chunk sum once where the CPU
// scales each weight). The products above the GEMV's rows follow the dequantization kernel that writes their
// weight: a product that read it early (the batched BF16 GEMV loads weights before its
// pdl_wait) would read the previous weight, which M = 9 against a narrow N catches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv_fp8.cuh"
#include "cuda_device_util.h"
#include "cuda_test_util.h"
#include "tensor/block_fp8.h"

namespace vllm {
namespace {

using cuda_test::kAligned;
using cuda_test::kContiguous;
using cuda_test::Layout;
using cuda_test::nan_operand;
using cuda_test::Operand;
using cuda_test::random_operand;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_device;

constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;

struct Fp8Case {
  int64_t m, n, k;
  WeightBlock block{128, 128};
  DType x_dtype = kBF16;
  DType out_dtype = kBF16;
  bool bias = false;
  Layout x_layout = kContiguous;
  Layout out_layout = kContiguous;

  std::string name() const {
    return fmt::format("[{} x {}] x fp8[{} x {}]^T in {}x{} blocks {} -> {} bias={} x {} out {}",
                       m, k, n, k, block.n, block.k, dtype_name(x_dtype), dtype_name(out_dtype),
                       bias, x_layout.name(), out_layout.name());
  }
  double tolerance() const {
    if (out_dtype == kBF16) return 1e-2;
    // BF16 activations meet the weights rounded to BF16 (the GEMV and the dequantized cuBLASLt
    // path alike): each weight rounded once more, 2^-9 relative at most, ~1e-3 RMS on short
    // rows (measured 1.2e-4 over K = 4096 on the dequantized path).
    if (x_dtype == kBF16) return 5e-3;
    return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(k) / 1024.0));
  }
};

class GemmFp8Cuda : public cuda_test::CudaTest {
 protected:
  void SetUp() override {
    cuda_test::CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto blas = cuda::BlasContext::create(Device::cuda());
    ASSERT_TRUE(blas) << blas.status().to_string();
    blas_ = std::move(*blas);
  }

  LinearWeight fp8_weight(int64_t n, int64_t k, WeightBlock block) {
    Tensor w = random_tensor({n, k}, kF32, rng_, 0.0f, 0.05f);
    float* v = w.data<float>();
    for (int64_t r = 0; r < std::min(n, block.n); ++r) {
      for (int64_t c = 0; c < std::min(k, block.k); ++c) v[r * k + c] = 0.0f;
    }
    if (n > block.n && k > block.k) v[block.n * k + block.k] = 1344.0f;
    auto q = quantize_fp8_blocks(w, block, "test weight");
    EXPECT_TRUE(q.has_value()) << q.status().to_string();
    return *q;
  }

  void run_case(const Fp8Case& c) {
    SCOPED_TRACE(c.name());
    const LinearWeight w = fp8_weight(c.n, c.k, c.block);
    Operand x = random_operand(c.m, c.k, c.x_dtype, c.x_layout, rng_, 0.0f, 1.0f);
    Tensor bias = c.bias ? random_tensor({c.n}, kF32, rng_, 0.0f, 1.0f) : Tensor();
    Tensor ref = Tensor::empty({c.m, c.n}, kF32);
    Status s = cpu::linear(x.input_f32(), w, bias, ref);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
    const Tensor bias_gpu = bias.defined() ? to_device(bias) : Tensor();
    Operand out = nan_operand(c.m, c.n, c.out_dtype, c.out_layout);
    s = cuda::linear_fp8(*blas_, x.view, w_gpu, bias_gpu, out.view, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(relative_l2(out.result_f32(), ref, c.tolerance()));
    EXPECT_TRUE(out.outside_untouched());
  }

  std::unique_ptr<cuda::BlasContext> blas_;
  std::mt19937 rng_{4242};
};

// Real shapes at decode and prefill sizes, both sides of kFp8GemvMaxRows.
TEST_F(GemmFp8Cuda, QwenBlocksMatchCpu) {
  for (int64_t m : {int64_t{1}, int64_t{3}, cuda::detail::kFp8GemvMaxRows,
                    cuda::detail::kFp8GemvMaxRows + 1, int64_t{64}, int64_t{300}}) {
    run_case({m, 2560, 2048});
    run_case({m, 1024, 4096, {128, 128}, kBF16, kF32});
  }
  run_case({1, 248320, 256, {128, 128}, kBF16, kF32});  // a logits-wide output
}

TEST_F(GemmFp8Cuda, SmallBlocksOddShapesAndF32) {
  const Fp8Case cases[] = {
      {1, 33, 160, {16, 32}},          {5, 70, 1040, {1, 128}},
      {2, 17, 77, {16, 32}},           {7, 30, 48, {7, 24}},
      {20, 45, 200, {16, 40}},         {1, 64, 96, {128, 128}, kF32, kF32},
      {9, 64, 96, {16, 32}, kF32, kF32}, {4, 40, 128, {16, 32}, kBF16, kBF16, true},
      {12, 40, 128, {16, 32}, kBF16, kF32, true},
  };
  for (const Fp8Case& c : cases) run_case(c);
}

TEST_F(GemmFp8Cuda, StridedOperandsMatchCpu) {
  run_case({3, 96, 256, {128, 128}, kBF16, kBF16, false, kAligned, kAligned});
  run_case({3, 96, 256, {128, 128}, kBF16, kBF16, false, cuda_test::kUnaligned, kAligned});
  run_case({40, 96, 256, {128, 128}, kBF16, kF32, true, kAligned, cuda_test::kUnaligned});
}

TEST_F(GemmFp8Cuda, RejectsBadArguments) {
  const LinearWeight w = fp8_weight(32, 64, {16, 32});
  const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
  Tensor x = to_device(random_tensor({4, 64}, kBF16, rng_, 0.0f, 1.0f));
  Tensor x_short = to_device(random_tensor({4, 63}, kBF16, rng_, 0.0f, 1.0f));
  Tensor out = to_device(Tensor::empty({4, 32}, kBF16));
  Tensor out_wrong = to_device(Tensor::empty({4, 33}, kBF16));
  Status s = cuda::linear_fp8(*blas_, x_short, w_gpu, Tensor(), out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("weight"), std::string::npos) << s.message();
  s = cuda::linear_fp8(*blas_, x, w_gpu, Tensor(), out_wrong, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  // Scales left on the host, and a float weight, are refused by name.
  const LinearWeight host_scales(to_device(w.weight), w.scale_inv, w.block);
  s = cuda::linear_fp8(*blas_, x, host_scales, Tensor(), out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  s = cuda::linear_fp8(*blas_, x, LinearWeight(to_device(random_tensor({32, 64}, kBF16, rng_, 0, 1))),
                       Tensor(), out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("F8_E4M3"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm
