// Backend parity for cuda::linear_fp8 (backend/cuda/gemm.cuh: block-scaled FP8 weights, W8A16)
// against cpu::linear on the same weight: the GEMVs for M <= kFp8GemvMaxRows (the batched
// GEMV's tensor-core kernel where gemv_fp8_fits, also held against the FP8 GEMV) and the
// dequantized weight through cuBLASLt above, on 128 x 128 blocks (Qwen's FP8 releases) and
// smaller grids, one scale row per weight row, K and block sizes off multiples of 16 (the
// element-wise path), bias, BF16 and F32 activations and outputs, and column slices of x and
// out. The weights hold an all-zero block and a block reaching the e4m3 maximum.
//
// Tolerances: BF16 output 1e-2; F32 output from BF16 activations 5e-3 (the dequantized path
// and the CUDA-core FP8 GEMV multiply the weights rounded to BF16; the tensor-core GEMV the f32
// dequantized weights, held to 2e-5 below); F32 1e-5 up to K = 1024,
// growing as sqrt(K) past it (the GEMV scales each 16-product chunk sum once where the CPU
// scales each weight). The products above the GEMV's rows follow the dequantization kernel that
// writes their weight: a product that read it early (the batched BF16 GEMV loads weights before its
// pdl_wait) would read the previous weight, which M = 9 against a narrow N catches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/fp8_quant.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_fp8.cuh"
#include "backend/cuda/runtime.h"
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
using cuda_test::to_host;

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
    return fmt::format("[{} x {}] x fp8[{} x {}]^T in {}x{} blocks {} -> {} bias={} x {} out {}", m,
                       k, n, k, block.n, block.k, dtype_name(x_dtype), dtype_name(out_dtype), bias,
                       x_layout.name(), out_layout.name());
  }
  double tolerance() const {
    if (out_dtype == kBF16) return 1e-2;
    // BF16 activations meet the weights rounded to BF16 on the dequantized cuBLASLt path and
    // the CUDA-core FP8 GEMV: each weight rounded once more, 2^-9 relative at most, ~1e-3 RMS
    // on short rows (measured 1.2e-4 over K = 4096 on the dequantized path).
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
      {1, 33, 160, {16, 32}},
      {5, 70, 1040, {1, 128}},
      {2, 17, 77, {16, 32}},
      {7, 30, 48, {7, 24}},
      {20, 45, 200, {16, 40}},
      {1, 64, 96, {128, 128}, kF32, kF32},
      {9, 64, 96, {16, 32}, kF32, kF32},
      {4, 40, 128, {16, 32}, kBF16, kBF16, true},
      {12, 40, 128, {16, 32}, kBF16, kF32, true},
  };
  for (const Fp8Case& c : cases) run_case(c);
}

TEST_F(GemmFp8Cuda, StridedOperandsMatchCpu) {
  run_case({3, 96, 256, {128, 128}, kBF16, kBF16, false, kAligned, kAligned});
  run_case({3, 96, 256, {128, 128}, kBF16, kBF16, false, cuda_test::kUnaligned, kAligned});
  run_case({40, 96, 256, {128, 128}, kBF16, kF32, true, kAligned, cuda_test::kUnaligned});
}

// The batched GEMV's tensor-core kernel on FP8 weights (linear_fp8's path up to
// kFp8GemvMaxRows rows where gemv_fp8_fits takes the weight) on Qwen3.5 decode shapes, N off
// the 16-row tile included: against cpu::linear on the same weight (2e-5: the same f32
// dequantized weight, sums in another order), against the FP8 GEMV's CUDA-core kernel
// (launch_fp8_gemv, which multiplies the weights rounded to BF16: 5e-3), both relative to
// |w_n| |x_m|.
TEST_F(GemmFp8Cuda, TensorCoreGemvMatchesCpuAndTheFp8Gemv) {
  struct Shape2 {
    int64_t n, k;
  };
  // 35B-A3B's out_proj / o_proj and GDN in_proj, 4B's o_proj at 2560 + 8 features, 27B's
  // o_proj and a 27B-wide input projection.
  for (const Shape2 sh : {Shape2{2048, 4096}, Shape2{12288, 2048}, Shape2{2568, 2560},
                          Shape2{5120, 6144}, Shape2{10240, 5120}}) {
    const LinearWeight w = fp8_weight(sh.n, sh.k, {128, 128});
    auto dense = dequantize_fp8_blocks(w);
    ASSERT_TRUE(dense.has_value()) << dense.status().to_string();
    const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}}) {
      SCOPED_TRACE(fmt::format("[{} x {}] x fp8[{} x {}]^T", m, sh.k, sh.n, sh.k));
      const Tensor x_host = random_tensor({m, sh.k}, kBF16, rng_, 0.0f, 1.0f);
      const Tensor x32 = cuda_test::to_f32(x_host);
      const Tensor x = to_device(x_host);
      Tensor ref = Tensor::empty({m, sh.n}, kF32);
      ASSERT_TRUE(cpu::linear(x32, w, Tensor(), ref).is_ok());
      Tensor out = to_device(cuda_test::fill_nan({m, sh.n}, kF32));
      ASSERT_TRUE(cuda::linear_fp8(*blas_, x, w_gpu, Tensor(), out, nullptr).is_ok());

      cuda::detail::Fp8GemvProblem old;
      old.x = x.data_ptr();
      old.ldx = sh.k;
      old.w.data = static_cast<const uint8_t*>(w_gpu.weight.data_ptr());
      old.w.scales = w_gpu.scale_inv.data<float>();
      old.w.n = sh.n;
      old.w.k = sh.k;
      old.w.scale_cols = w.scale_inv.size(1);
      old.w.block_n = w.block.n;
      old.w.block_k = w.block.k;
      old.out_dtype = kF32;
      Tensor old_out = to_device(cuda_test::fill_nan({m, sh.n}, kF32));
      old.out = old_out.data_ptr();
      old.ldo = sh.n;
      old.m = m;
      ASSERT_TRUE(cuda::detail::launch_fp8_gemv(old, nullptr).is_ok());

      auto problem = cuda::detail::gemv_problem(
          "test", x,
          Tensor::borrow(w_gpu.weight.data_ptr(), {sh.n, sh.k}, kBF16, x.device(), nullptr),
          Tensor(), out);
      ASSERT_TRUE(problem.has_value()) << problem.status().to_string();
      problem->scales = w_gpu.scale_inv.data<float>();
      problem->scale_cols = w.scale_inv.size(1);
      problem->block_n = w.block.n;
      problem->block_k = w.block.k;
      EXPECT_TRUE(cuda::detail::gemv_fp8_fits(*problem)) << "not the tensor-core path";

      const Tensor got = cuda_test::to_host_f32(out);
      EXPECT_TRUE(cuda_test::close_products(got, ref, *dense, x32, 2e-5)) << "against the CPU";
      EXPECT_TRUE(
          cuda_test::close_products(got, cuda_test::to_host_f32(old_out), *dense, x32, 5e-3))
          << "against the FP8 GEMV";
    }
  }
}

// A row's result does not depend on the batch: each of 8 rows alone gives the bits it has in
// the 8-row product.
TEST_F(GemmFp8Cuda, TensorCoreGemvRowsDoNotDependOnTheBatch) {
  const int64_t n = 5120, k = 6144;
  const LinearWeight w = fp8_weight(n, k, {128, 128});
  const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
  const Tensor x = to_device(random_tensor({8, k}, kBF16, rng_, 0.0f, 1.0f));
  Tensor all = to_device(Tensor::empty({8, n}, kF32));
  ASSERT_TRUE(cuda::linear_fp8(*blas_, x, w_gpu, Tensor(), all, nullptr).is_ok());
  const Tensor all_host = cuda_test::to_host_f32(all);
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{7}}) {
    Tensor part = to_device(Tensor::empty({rows, n}, kF32));
    ASSERT_TRUE(
        cuda::linear_fp8(*blas_, x.slice(0, 0, rows), w_gpu, Tensor(), part, nullptr).is_ok());
    EXPECT_TRUE(
        cuda_test::same_values(cuda_test::to_host_f32(part), all_host.slice(0, 0, rows).clone()))
        << rows << " rows";
  }
}

// ---- W8A8 (linear_fp8_w8a8) ----------------------------------------------------------------
//
// The activations' quantization must equal the CPU's byte for byte (the same IEEE division and
// round-to-nearest-even conversion), scales included; the product then equals the CPU's
// linear over the dequantized activations and weights up to summation order (cuBLASLt's FP8
// kernels add each 128-wide block's products at the tensor cores' own precision before
// scaling them in f32): 1e-2 for BF16 outputs, 2e-3 for F32 ones.

struct W8A8Case {
  int64_t m, n, k;
  DType x_dtype = kBF16;
  DType out_dtype = kBF16;
  bool bias = false;
  Layout x_layout = kContiguous;
  Layout out_layout = kContiguous;
  std::string name() const {
    return fmt::format("W8A8 [{} x {}] {} x fp8[{} x {}]^T -> {} bias={} x {} out {}", m, k,
                       dtype_name(x_dtype), n, k, dtype_name(out_dtype), bias, x_layout.name(),
                       out_layout.name());
  }
};

class GemmFp8W8A8Cuda : public GemmFp8Cuda {
 protected:
  void SetUp() override {
    GemmFp8Cuda::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!cuda::runs_sm90a(0)) GTEST_SKIP() << "W8A8 block scaling needs compute capability 9.0";
  }

  // Scratch for the quantized activations of an [m, k] x (rows padded to a multiple of 4).
  std::pair<Tensor, Tensor> scratch(int64_t m, int64_t k) {
    const int64_t rows = cuda::fp8_w8a8_rows(m);
    return {to_device(Tensor::empty({rows, k}, DType::kF8E4M3)),
            to_device(Tensor::empty({k / 128, rows}, kF32))};
  }
  // The padded product's rows when m is not a multiple of 4, else undefined.
  Tensor out_pad(int64_t m, int64_t n, DType dtype) {
    const int64_t rows = cuda::fp8_w8a8_rows(m);
    return rows == m ? Tensor() : to_device(Tensor::empty({rows, n}, dtype));
  }

  void run_case(const W8A8Case& c) {
    SCOPED_TRACE(c.name());
    const LinearWeight w = fp8_weight(c.n, c.k, {128, 128});
    Operand x = random_operand(c.m, c.k, c.x_dtype, c.x_layout, rng_, 0.0f, 1.0f);
    Tensor bias = c.bias ? random_tensor({c.n}, kF32, rng_, 0.0f, 1.0f) : Tensor();
    auto groups = quantize_fp8_token_groups(x.input_f32(), 128, "x");
    ASSERT_TRUE(groups.has_value()) << groups.status().to_string();
    auto x_deq = dequantize_fp8_token_groups(*groups);
    ASSERT_TRUE(x_deq.has_value()) << x_deq.status().to_string();
    Tensor ref = Tensor::empty({c.m, c.n}, kF32);
    Status s = cpu::linear(*x_deq, w, bias, ref);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
    ASSERT_TRUE(cuda::linear_fp8_w8a8_fits(x.view, w_gpu));
    const Tensor bias_gpu = bias.defined() ? to_device(bias) : Tensor();
    auto [x_q, x_scales] = scratch(c.m, c.k);
    Operand out = nan_operand(c.m, c.n, c.out_dtype, c.out_layout);
    Tensor pad = out_pad(c.m, c.n, c.out_dtype);
    s = cuda::linear_fp8_w8a8(*blas_, x.view, w_gpu, bias_gpu, x_q, x_scales, pad, out.view,
                              nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(relative_l2(out.result_f32(), ref, c.out_dtype == kBF16 ? 1e-2 : 2e-3));
    EXPECT_TRUE(out.outside_untouched());

    // The quantized activations the GEMM read are the CPU's, bytes and scales.
    const Tensor q = to_host(x_q), scales = to_host(x_scales);
    ASSERT_TRUE(q.defined() && scales.defined());
    EXPECT_EQ(std::memcmp(q.data_ptr(), groups->q.data_ptr(), groups->q.nbytes()), 0)
        << "quantized activations differ from quantize_fp8_token_groups";
    const float* gs = scales.data<float>();
    const float* cs = groups->scales.data<float>();
    const int64_t g = c.k / 128, rows = cuda::fp8_w8a8_rows(c.m);
    int64_t bad = 0;
    for (int64_t m = 0; m < c.m; ++m) {
      for (int64_t j = 0; j < g; ++j) bad += gs[j * rows + m] != cs[m * g + j];
    }
    // Padding rows: zero codes.
    for (int64_t i = c.m * c.k; i < rows * c.k; ++i) bad += q.data<uint8_t>()[i] != 0;
    EXPECT_EQ(bad, 0) << "activation scales differ from quantize_fp8_token_groups";
  }
};

// Qwen3.5 projection shapes at prefill sizes, on both sides of the row crossover.
TEST_F(GemmFp8W8A8Cuda, QwenShapesMatchCpu) {
  for (int64_t m : {cuda::kFp8W8A8MinRows, int64_t{64}, int64_t{300}, int64_t{1024}}) {
    run_case({m, 2560, 2048});
    run_case({m, 1024, 4096, kBF16, kF32});
  }
  run_case({2048, 4096, 2560});
}

TEST_F(GemmFp8W8A8Cuda, SmallAndStridedOperandsMatchCpu) {
  const W8A8Case cases[] = {
      {1, 128, 512},
      {3, 128, 1024, kF32, kF32},
      {17, 384, 512, kBF16, kBF16, true},
      {40, 256, 512, kBF16, kF32, false, kAligned, kAligned},
      {33, 128, 512, kBF16, kBF16, false, cuda_test::kUnaligned, kContiguous},
      {12, 256, 512, kF32, kF32, true, cuda_test::kUnaligned, cuda_test::kAligned},
      {10, 384, 1536, kBF16, kBF16, false, kContiguous, cuda_test::kAligned},
  };
  for (const W8A8Case& c : cases) run_case(c);
}

// Groups of zeros, of values far past e4m3's range and of tiny ones quantize as the CPU does;
// a group holding a non-finite value gets a NaN scale (its outputs are NaN, never finite).
TEST_F(GemmFp8W8A8Cuda, QuantizationEdgeGroups) {
  const int64_t m = 4, k = 512;
  Tensor x = random_tensor({m, k}, kF32, rng_, 0.0f, 1.0f);
  float* v = x.data<float>();
  for (int64_t i = 0; i < 128; ++i) v[i] = 0.0f;         // row 0, group 0: zeros
  for (int64_t i = 128; i < 256; ++i) v[i] *= 1e6f;      // row 0, group 1: huge
  for (int64_t i = k; i < k + 128; ++i) v[i] *= 1e-12f;  // row 1, group 0: tiny
  v[2 * k + 300] = 448.0f * 3.0f;                        // row 2: one large value
  auto groups = quantize_fp8_token_groups(x, 128, "x");
  ASSERT_TRUE(groups.has_value()) << groups.status().to_string();
  Tensor x_gpu = to_device(x);
  auto [x_q, x_scales] = scratch(m, k);
  cuda::detail::Fp8QuantizeProblem p;
  p.x_dtype = kF32;
  p.x = x_gpu.data_ptr();
  p.ldx = k;
  p.q = static_cast<uint8_t*>(x_q.data_ptr());
  p.scales = x_scales.data<float>();
  p.m = m;
  p.k = k;
  ASSERT_TRUE(cuda::detail::launch_fp8_quantize_token_groups(p, nullptr).is_ok());
  const Tensor q = to_host(x_q), scales = to_host(x_scales);
  EXPECT_EQ(std::memcmp(q.data_ptr(), groups->q.data_ptr(), q.nbytes()), 0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t g = 0; g < k / 128; ++g) {
      EXPECT_EQ(scales.data<float>()[g * m + r], groups->scales.data<float>()[r * (k / 128) + g])
          << "row " << r << " group " << g;
    }
  }
  EXPECT_EQ(groups->scales.data<float>()[0], kFp8ActivationMinAmax / kFp8E4M3Max);

  // Non-finite: the CPU refuses it by name; the GPU's group scale is NaN.
  v[3 * k + 200] = std::numeric_limits<float>::infinity();
  auto refused = quantize_fp8_token_groups(x, 128, "x");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("[3, 200]"), std::string::npos)
      << refused.status().message();
  x_gpu = to_device(x);
  p.x = x_gpu.data_ptr();
  ASSERT_TRUE(cuda::detail::launch_fp8_quantize_token_groups(p, nullptr).is_ok());
  const Tensor nan_scales = to_host(x_scales);
  EXPECT_TRUE(std::isnan(nan_scales.data<float>()[1 * m + 3]));
  EXPECT_FALSE(std::isnan(nan_scales.data<float>()[0 * m + 3]));
}

TEST_F(GemmFp8W8A8Cuda, RefusesOtherProducts) {
  Tensor x = to_device(random_tensor({16, 512}, kBF16, rng_, 0.0f, 1.0f));
  Tensor out = to_device(Tensor::empty({16, 128}, kBF16));
  auto [x_q, x_scales] = scratch(16, 512);
  // A product of 10 rows needs its padded rows somewhere.
  {
    const LinearWeight w = fp8_weight(128, 512, {128, 128});
    const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
    Tensor x10 = to_device(random_tensor({10, 512}, kBF16, rng_, 0.0f, 1.0f));
    Tensor out10 = to_device(Tensor::empty({10, 128}, kBF16));
    auto [q10, s10] = scratch(10, 512);
    Tensor none;
    Status s = cuda::linear_fp8_w8a8(*blas_, x10, w_gpu, Tensor(), q10, s10, none, out10, nullptr);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("out_pad"), std::string::npos) << s.message();
  }
  // Blocks other than 128 x 128 go to linear_fp8.
  const LinearWeight small = fp8_weight(128, 512, {16, 32});
  const LinearWeight small_gpu(to_device(small.weight), to_device(small.scale_inv), small.block);
  EXPECT_FALSE(cuda::linear_fp8_w8a8_fits(x, small_gpu));
  Tensor no_pad;
  Status s =
      cuda::linear_fp8_w8a8(*blas_, x, small_gpu, Tensor(), x_q, x_scales, no_pad, out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  // K off a multiple of 128, and K = 256 (a scale grid row of 2, which cuBLASLt reads as 4).
  const LinearWeight odd = fp8_weight(128, 200, {128, 128});
  const LinearWeight odd_gpu(to_device(odd.weight), to_device(odd.scale_inv), odd.block);
  EXPECT_FALSE(
      cuda::linear_fp8_w8a8_fits(to_device(random_tensor({16, 200}, kBF16, rng_, 0, 1)), odd_gpu));
  const LinearWeight k256 = fp8_weight(256, 256, {128, 128});
  const LinearWeight k256_gpu(to_device(k256.weight), to_device(k256.scale_inv), k256.block);
  EXPECT_FALSE(
      cuda::linear_fp8_w8a8_fits(to_device(random_tensor({16, 256}, kBF16, rng_, 0, 1)), k256_gpu));
  // Scratch of the wrong shape is refused by name.
  const LinearWeight w = fp8_weight(128, 512, {128, 128});
  const LinearWeight w_gpu(to_device(w.weight), to_device(w.scale_inv), w.block);
  Tensor wrong_scales = to_device(Tensor::empty({16, 2}, kF32));
  s = cuda::linear_fp8_w8a8(*blas_, x, w_gpu, Tensor(), x_q, wrong_scales, no_pad, out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("x_scales"), std::string::npos) << s.message();
  // Below the row crossover use_fp8_w8a8 keeps W8A16.
  Tensor x_small = to_device(random_tensor({cuda::kFp8W8A8MinRows - 1, 512}, kBF16, rng_, 0, 1));
  EXPECT_FALSE(cuda::use_fp8_w8a8(x_small, w_gpu));
  EXPECT_TRUE(cuda::use_fp8_w8a8(x, w_gpu));
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
  s = cuda::linear_fp8(*blas_, x,
                       LinearWeight(to_device(random_tensor({32, 64}, kBF16, rng_, 0, 1))),
                       Tensor(), out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("F8_E4M3"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm
