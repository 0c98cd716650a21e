// Backend parity for the batched GEMV (cuda::gemv, and cuda::linear's small-batch path) against
// cpu::linear and against cuBLASLt (cuda::linear with the GEMV turned off) on random shapes:
// M = 1 to the capacity, odd N and K, K not a multiple of 8 (the element-wise path), bias in
// each dtype, x and out as column slices (aligned and not), BF16 -> BF16, BF16 -> F32 logits
// and F32, outputs poisoned with NaN. Also: larger M is refused, linear() dispatches by M, and
// a row's result does not depend on the other rows of its batch. The fused residual add and
// RMSNorm (add_rms_norm_linear) with BF16 and block-scaled FP8 weights.
//
// Tolerances, as test_gemm_cuda.cpp's: BF16 output 1e-2 (its rounding alone is ~2e-3). F32
// output from BF16 inputs: the products are exact in f32, only the summation order differs
// from the CPU's, 1e-4. F32: each side's f32 sum carries a relative error of about
// eps * sqrt(K / 2), so 1e-5 up to K = 1024, growing as sqrt(K) past it. Against cuBLASLt the
// same bounds (each side is within them of the exact result).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/runtime.h"
#include "cuda_device_util.h"
#include "cuda_test_util.h"
#include "tensor/block_fp8.h"

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

constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;
constexpr int kNoBias = -1;

struct GemvCase {
  int64_t m, n, k;
  DType x_dtype = kBF16;
  DType out_dtype = kBF16;
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

double tolerance(const GemvCase& c) {
  if (c.out_dtype == kBF16) return 1e-2;
  if (c.x_dtype == kBF16) return 1e-4;
  return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(c.k) / 1024.0));
}

class GemvCuda : public cuda_test::CudaTest {
 protected:
  void SetUp() override {
    cuda_test::CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto blas = cuda::BlasContext::create(Device::cuda());
    ASSERT_TRUE(blas) << blas.status().to_string();
    blas_ = std::move(*blas);
  }

  // cuda::linear through cuBLASLt alone.
  Status cublas_linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& out) {
    const int64_t rows = blas_->gemv_max_rows();
    VLLM_RETURN_IF_ERROR(blas_->set_gemv_max_rows(0));
    blas_->set_gemv_narrow(false);
    Status s = cuda::linear(*blas_, x, w, b, out, nullptr);
    blas_->set_gemv_narrow(true);
    VLLM_RETURN_IF_ERROR(blas_->set_gemv_max_rows(rows));
    return s;
  }

  // The GEMV against the CPU op, and against cuBLASLt on the same device operands.
  void run_case(const GemvCase& c) {
    SCOPED_TRACE(c.name());
    Operand x = random_operand(c.m, c.k, c.x_dtype, c.x_layout, rng_, 0.0f, 1.0f);
    Tensor weight = random_tensor({c.n, c.k}, c.x_dtype, rng_, 0.0f, 0.05f);
    Tensor bias;
    if (c.bias != kNoBias) bias = random_tensor({c.n}, static_cast<DType>(c.bias), rng_, 0, 1);
    Tensor ref = Tensor::empty({c.m, c.n}, kF32);
    Status s = cpu::linear(x.input_f32(), weight, bias, ref);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor weight_gpu = to_device(weight);
    Tensor bias_gpu = bias.defined() ? to_device(bias) : Tensor();
    Operand out = nan_operand(c.m, c.n, c.out_dtype, c.out_layout);
    s = cuda::gemv(x.view, weight_gpu, bias_gpu, out.view, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    Tensor got = out.result_f32();
    EXPECT_TRUE(relative_l2(got, ref, tolerance(c))) << "against the CPU";
    EXPECT_TRUE(out.outside_untouched());

    Operand blas_out = nan_operand(c.m, c.n, c.out_dtype, c.out_layout);
    s = cublas_linear(x.view, weight_gpu, bias_gpu, blas_out.view);
    if (s.code() == ErrorCode::kUnsupported) {  // the reference, not the op under test
      std::printf("cuBLASLt has no algorithm for %s: compared with the CPU only\n",
                  c.name().c_str());
      return;
    }
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(relative_l2(got, blas_out.result_f32(), tolerance(c))) << "against cuBLASLt";
  }

  std::unique_ptr<cuda::BlasContext> blas_;
  std::mt19937 rng_{8675309};
};

// Decode projections of Qwen3.5-4B / 27B (fused qkv, GDN in_proj, gate_up, o / out, down;
// 27B's down as 2560 x 17408 to keep the host reference quick) at a few batch sizes: both
// block shapes, long K splits.
TEST_F(GemvCuda, DecodeShapesMatchCpuAndCublas) {
  const GemvCase cases[] = {
      {1, 10240, 2560}, {4, 2560, 9216},  {16, 12352, 2560}, {2, 5120, 6144},
      {8, 18432, 2560}, {13, 2560, 4096}, {1, 2560, 17408},  {9, 16480, 2560},
  };
  for (const GemvCase& c : cases) run_case(c);
}

// Random shapes: M anywhere in [1, capacity], N and K odd or even, K often not a multiple of 8
// (the element-wise path), bias and output dtypes drawn too.
TEST_F(GemvCuda, RandomShapesMatchCpuAndCublas) {
  std::mt19937 pick(4242);
  for (int i = 0; i < 40; ++i) {
    GemvCase c;
    c.m = std::uniform_int_distribution<int64_t>(1, cuda::kGemvMaxRows)(pick);
    c.n = std::uniform_int_distribution<int64_t>(1, 3000)(pick);
    c.k = std::uniform_int_distribution<int64_t>(1, 3000)(pick);
    if (i % 3 == 0) c.k = (c.k + 7) / 8 * 8;  // also the 16-byte path with K tails
    c.x_dtype = i % 4 == 3 ? kF32 : kBF16;
    c.out_dtype = c.x_dtype == kBF16 && i % 2 == 1 ? kF32 : c.x_dtype;
    const int bias_pick = static_cast<int>(pick() % 3);
    c.bias = bias_pick == 0 ? kNoBias : static_cast<int>(bias_pick == 1 ? c.x_dtype : kF32);
    run_case(c);
  }
}

TEST_F(GemvCuda, EveryRowCountUpToCapacity) {
  for (int64_t m = 1; m <= cuda::kGemvMaxRows; ++m) {
    run_case({m, 1000, 520});
    run_case({m, 333, 260, kF32, kF32});
  }
}

// The lm_head: BF16 hidden states and weights, F32 logits (a short K keeps the test fast).
TEST_F(GemvCuda, Bf16ToF32LogitsMatchCpuAndCublas) {
  const GemvCase cases[] = {
      {1, 248320, 256, kBF16, kF32},
      {5, 151936, 128, kBF16, kF32, static_cast<int>(kF32)},
      {16, 4099, 2560, kBF16, kF32},
  };
  for (const GemvCase& c : cases) run_case(c);
}

// x and out as column slices: 16-byte aligned with a row stride, and shifted by elements so
// that only the element-wise loads may touch them; bias and F32 logits on strided outputs.
TEST_F(GemvCuda, StridedAndUnalignedOperandsMatchCpu) {
  const Layout aligned_x{8, 24}, aligned_out{8, 16}, odd_x{1, 3}, odd_out{3, 5};
  const int bf16 = static_cast<int>(kBF16), f32 = static_cast<int>(kF32);
  const GemvCase cases[] = {
      {16, 1024, 2560, kBF16, kBF16, kNoBias, aligned_x, aligned_out},
      {7, 512, 1024, kBF16, kBF16, kNoBias, odd_x, odd_out},
      {1, 512, 1024, kBF16, kBF16, bf16, odd_x, odd_out},
      {12, 300, 640, kF32, kF32, kNoBias, odd_x, Layout{2, 2}},
      {9, 2048, 256, kBF16, kF32, f32, aligned_x, Layout{4, 8}},
      {3, 777, 333, kBF16, kF32, bf16, odd_x, Layout{1, 1}},
      {16, 96, 4100, kF32, kF32, f32, aligned_x, aligned_out},
  };
  for (const GemvCase& c : cases) run_case(c);
}

// K not a multiple of 8, tiny K and N.
TEST_F(GemvCuda, OddInnerDimensionsMatchCpu) {
  const GemvCase cases[] = {
      {5, 129, 1},
      {16, 1, 77},
      {3, 65, 9},
      {11, 1001, 2047},
      {2, 31, 3, kF32, kF32},
      {14, 7, 1023, kF32, kF32},
      {1, 1, 1},
  };
  for (const GemvCase& c : cases) run_case(c);
}

// Row i of an M-row product is bit-identical to the same row computed alone: the launch
// shape and every row's order of summation depend on N and K only.
TEST_F(GemvCuda, RowsDoNotDependOnTheBatch) {
  for (DType dtype : {kBF16, kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t m = cuda::kGemvMaxRows, n = 2560, k = 4096;
    Tensor x = to_device(random_tensor({m, k}, dtype, rng_, 0.0f, 1.0f));
    Tensor w = to_device(random_tensor({n, k}, dtype, rng_, 0.0f, 0.05f));
    Tensor all = to_device(Tensor::empty({m, n}, dtype));
    ASSERT_TRUE(cuda::gemv(x, w, Tensor(), all, nullptr).is_ok());
    Tensor all_host = cuda_test::to_host_f32(all);
    for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9}}) {
      Tensor part = to_device(Tensor::empty({rows, n}, dtype));
      ASSERT_TRUE(cuda::gemv(x.slice(0, 0, rows), w, Tensor(), part, nullptr).is_ok());
      EXPECT_TRUE(
          cuda_test::same_values(cuda_test::to_host_f32(part), all_host.slice(0, 0, rows).clone()))
          << rows << " rows";
    }
  }
}

// With the GEMV on up to its capacity, linear() takes it up to that many rows (bit-identical
// to gemv()) and cuBLASLt above (bit-identical to linear() with the GEMV off).
TEST_F(GemvCuda, LinearDispatchesByBatchSize) {
  const int64_t n = 1536, k = 2048;
  Tensor w = to_device(random_tensor({n, k}, kBF16, rng_, 0.0f, 0.05f));
  ASSERT_TRUE(blas_->set_gemv_max_rows(cuda::kGemvMaxRows).is_ok());
  for (int64_t m : {int64_t{1}, cuda::kGemvMaxRows, cuda::kGemvMaxRows + 1}) {
    SCOPED_TRACE(fmt::format("M = {}", m));
    Tensor x = to_device(random_tensor({m, k}, kBF16, rng_, 0.0f, 1.0f));
    Tensor via_linear = to_device(Tensor::empty({m, n}, kF32));
    Tensor expected = to_device(Tensor::empty({m, n}, kF32));
    ASSERT_TRUE(cuda::linear(*blas_, x, w, Tensor(), via_linear, nullptr).is_ok());
    const bool gemv = m <= cuda::kGemvMaxRows;
    const size_t plans = blas_->cached_plans();
    Status s = gemv ? cuda::gemv(x, w, Tensor(), expected, nullptr)
                    : cublas_linear(x, w, Tensor(), expected);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(cuda_test::same_values(cuda_test::to_host_f32(via_linear),
                                       cuda_test::to_host_f32(expected)));
    EXPECT_EQ(plans, gemv ? 0u : 1u) << "cuBLASLt plans made";
  }
}

// By default, narrow products (a router's 257 outputs) at small M take the GEMV (bit-identical
// to gemv(), no cuBLASLt plan); wide ones and larger M cuBLASLt.
TEST_F(GemvCuda, NarrowProductsTakeTheGemvByDefault) {
  const int64_t k = 2048;
  for (int64_t n : {int64_t{257}, cuda::kGemvNarrowMaxN, cuda::kGemvNarrowMaxN + 1}) {
    Tensor w = to_device(random_tensor({n, k}, kBF16, rng_, 0.0f, 0.05f));
    for (int64_t m : {int64_t{1}, cuda::kGemvMaxRows, cuda::kGemvMaxRows + 1}) {
      SCOPED_TRACE(fmt::format("M = {}, N = {}", m, n));
      Tensor x = to_device(random_tensor({m, k}, kBF16, rng_, 0.0f, 1.0f));
      Tensor via_linear = to_device(Tensor::empty({m, n}, kF32));
      Tensor expected = to_device(Tensor::empty({m, n}, kF32));
      const size_t before = blas_->cached_plans();
      ASSERT_TRUE(cuda::linear(*blas_, x, w, Tensor(), via_linear, nullptr).is_ok());
      const bool gemv = m <= cuda::kGemvMaxRows && n <= cuda::kGemvNarrowMaxN;
      EXPECT_EQ(blas_->cached_plans() - before, gemv ? 0u : 1u) << "cuBLASLt plans made";
      Status s = gemv ? cuda::gemv(x, w, Tensor(), expected, nullptr)
                      : cublas_linear(x, w, Tensor(), expected);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      EXPECT_TRUE(cuda_test::same_values(cuda_test::to_host_f32(via_linear),
                                         cuda_test::to_host_f32(expected)));
    }
  }
}

// More rows than the kernels hold: refused with a message, nothing written. The crossover
// cannot be set past the capacity either.
TEST_F(GemvCuda, RefusesMoreRowsThanItsCapacity) {
  const int64_t m = cuda::kGemvMaxRows + 1, n = 64, k = 128;
  Tensor x = to_device(random_tensor({m, k}, kBF16, rng_, 0.0f, 1.0f));
  Tensor w = to_device(random_tensor({n, k}, kBF16, rng_, 0.0f, 0.05f));
  Operand out = nan_operand(m, n, kBF16, kContiguous);
  Status s = cuda::gemv(x, w, Tensor(), out.view, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("at most 16"), std::string::npos) << s.message();
  Tensor result = out.result_f32();
  for (int64_t i = 0; i < result.numel(); ++i) ASSERT_TRUE(std::isnan(result.data<float>()[i]));

  EXPECT_EQ(blas_->gemv_max_rows(), cuda::kGemvCrossoverRows);
  EXPECT_EQ(blas_->set_gemv_max_rows(cuda::kGemvMaxRows + 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(blas_->set_gemv_max_rows(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(blas_->gemv_max_rows(), cuda::kGemvCrossoverRows);
  // linear() still serves that batch, through cuBLASLt.
  s = cuda::linear(*blas_, x, w, Tensor(), out.view, nullptr);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

// K = 0 is the empty sum: out = bias (or zeros); M = 0 does nothing.
TEST_F(GemvCuda, EmptyProducts) {
  for (bool with_bias : {false, true}) {
    const int64_t m = 3, n = 17;
    Tensor bias = with_bias ? random_tensor({n}, kBF16, rng_, 0.0f, 1.0f) : Tensor();
    Tensor ref = Tensor::empty({m, n}, kF32);
    ASSERT_TRUE(
        cpu::linear(Tensor::empty({m, 0}, kF32), Tensor::empty({n, 0}, kBF16), bias, ref).is_ok());
    Operand out = nan_operand(m, n, kBF16, kContiguous);
    Status s =
        cuda::gemv(to_device(Tensor::empty({m, 0}, kBF16)), to_device(Tensor::empty({n, 0}, kBF16)),
                   with_bias ? to_device(bias) : Tensor(), out.view, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(cuda_test::same_values(out.result_f32(), ref));
  }
  Tensor out = to_device(Tensor::empty({0, 32}, kBF16));
  Status s = cuda::gemv(to_device(Tensor::empty({0, 64}, kBF16)),
                        to_device(random_tensor({32, 64}, kBF16, rng_, 0.0f, 1.0f)), Tensor(), out,
                        nullptr);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
}

TEST_F(GemvCuda, RejectsBadArguments) {
  Tensor x = to_device(random_tensor({4, 64}, kBF16, rng_, 0.0f, 1.0f));
  Tensor w = to_device(random_tensor({32, 64}, kBF16, rng_, 0.0f, 1.0f));
  Tensor w_short = to_device(random_tensor({32, 63}, kBF16, rng_, 0.0f, 1.0f));
  Tensor w32 = to_device(random_tensor({32, 64}, kF32, rng_, 0.0f, 1.0f));
  Tensor out = to_device(Tensor::empty({4, 32}, kBF16));
  Tensor out_wrong = to_device(Tensor::empty({4, 33}, kBF16));
  Tensor bias_wrong = to_device(Tensor::zeros({31}, kBF16));
  for (auto [weight, bias, o] :
       {std::tuple{w_short, Tensor(), out}, std::tuple{w32, Tensor(), out},
        std::tuple{w, Tensor(), out_wrong}, std::tuple{w, bias_wrong, out}}) {
    Status s = cuda::gemv(x, weight, bias, o, nullptr);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("cuda::gemv"), std::string::npos) << s.message();
  }
  Status s = cuda::gemv(random_tensor({4, 64}, kBF16, rng_, 0.0f, 1.0f), w, Tensor(), out,
                        nullptr);  // x on the CPU
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

// cuda::add_rms_norm_linear against the two launches it replaces (fused_add_rms_norm, then
// gemv on its output): up to hidden 8192 the norm's 256 threads add the same squares in the
// same order as the norm kernel's decode launch, so residual_out, normed and out are the same
// bits. The router's shape: 257 outputs (256 experts and the shared gate).
TEST_F(GemvCuda, AddRmsNormLinearMatchesTheNormThenTheGemv) {
  // Narrow outputs (the 257-row MoE router: 16-warp blocks, one a tile) and wide ones (the
  // 35B-A3B GDN in_proj and attention q/k/v, a partial last tile, K = 1024; Qwen3.5-4B's
  // in_proj, q/k/v and gate/up at hidden 2560: 8-warp blocks walking several tiles each; narrow
  // ones up to hidden 8192), against the norm kernel and then the GEMV of the same launch
  // shape.
  struct Case {
    int64_t m, n, k;
    bool unit_offset;
    bool bitwise;
    bool store_normed;
  };
  const int sms = cuda::multiprocessor_count(0);
  for (const Case c :
       {Case{1, 257, 2048, true, true, true}, Case{2, 257, 2048, false, true, true},
        Case{1, 257, 3072, true, true, true}, Case{2, 257, 3072, true, true, true},
        Case{1, 12352, 2048, true, true, false}, Case{2, 12352, 2048, true, true, true},
        Case{1, 9216, 2048, false, true, true}, Case{2, 4100, 1024, true, true, true},
        Case{1, 12352, 2560, true, true, false}, Case{1, 10240, 2560, true, true, true},
        Case{1, 18432, 2560, true, true, false}, Case{2, 257, 5120, true, true, true},
        Case{2, 2000, 8192, false, true, true}}) {
    SCOPED_TRACE(fmt::format("m {} n {} k {}", c.m, c.n, c.k));
    const Tensor x_host = random_tensor({c.m, c.k}, kBF16, rng_, 0.0f, 1.0f);
    const Tensor residual_host = random_tensor({c.m, c.k}, kF32, rng_, 0.0f, 4.0f);
    const Tensor x = to_device(x_host), residual = to_device(residual_host);
    const Tensor norm_w = to_device(random_tensor({c.k}, kBF16, rng_, 0.0f, 0.5f));
    const Tensor w = to_device(random_tensor({c.n, c.k}, kBF16, rng_, 0.0f, 0.05f));
    ASSERT_TRUE(cuda::add_rms_norm_linear_fits(x, w));
    Tensor residual_out = to_device(cuda_test::fill_nan({c.m, c.k}, kF32));
    Tensor normed = c.store_normed ? to_device(cuda_test::fill_nan({c.m, c.k}, kBF16)) : Tensor();
    Tensor out = to_device(cuda_test::fill_nan({c.m, c.n}, kF32));
    Status s = cuda::add_rms_norm_linear(x, residual, norm_w, 1e-6f, c.unit_offset, w, residual_out,
                                         normed, out, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor ref_x = to_device(x_host), ref_residual = to_device(residual_host);
    ASSERT_TRUE(cuda::fused_add_rms_norm(ref_x, ref_residual, norm_w, 1e-6f, c.unit_offset, nullptr)
                    .is_ok());
    Tensor ref_out = to_device(Tensor::empty({c.m, c.n}, kF32));
    auto problem = cuda::detail::gemv_problem("test", ref_x, w, Tensor(), ref_out);
    ASSERT_TRUE(problem.has_value()) << problem.status().to_string();
    ASSERT_TRUE(
        cuda::detail::launch_gemv(*problem, cuda::detail::gemv_norm_launch(c.n, sms), nullptr)
            .is_ok());
    const Tensor got_res = cuda_test::to_host_f32(residual_out);
    EXPECT_TRUE(cuda_test::same_values(got_res, cuda_test::to_host_f32(ref_residual)));
    if (c.bitwise) {
      if (c.store_normed) {
        EXPECT_TRUE(
            cuda_test::same_values(cuda_test::to_host_f32(normed), cuda_test::to_host_f32(ref_x)));
      }
      EXPECT_TRUE(
          cuda_test::same_values(cuda_test::to_host_f32(out), cuda_test::to_host_f32(ref_out)));
    } else {
      EXPECT_TRUE(relative_l2(cuda_test::to_host_f32(normed), cuda_test::to_host_f32(ref_x), 1e-2));
      EXPECT_TRUE(relative_l2(cuda_test::to_host_f32(out), cuda_test::to_host_f32(ref_out), 1e-2));
    }
  }
}

// The same with block-scaled FP8 weights (W8A16, 128 x 128 blocks): the fused launch against
// fused_add_rms_norm and then the tensor-core GEMV on its output (launch_gemv with the scales,
// the norm's launch shape), bit for bit; the product also against cpu::linear on the FP8 weight
// and the normed rows. The 35B-A3B's attention q/k/v and GDN in_proj at hidden 2048 (one and two
// rows), 4B-sized ones at 2560 (one row), and outputs narrow enough for 16-warp blocks at
// hidden 4096 and 8192.
TEST_F(GemvCuda, AddRmsNormLinearTakesFp8Weights) {
  struct Case {
    int64_t m, n, k;
  };
  const int sms = cuda::multiprocessor_count(0);
  for (const Case c : {Case{1, 9216, 2048}, Case{2, 12288, 2048}, Case{1, 10240, 2560},
                       Case{1, 1000, 4096}, Case{2, 2048, 8192}}) {
    SCOPED_TRACE(fmt::format("m {} n {} k {}", c.m, c.n, c.k));
    Tensor w_f32 = random_tensor({c.n, c.k}, kF32, rng_, 0.0f, 0.05f);
    w_f32.data<float>()[128 * c.k + 128] = 1344.0f;  // a block at the e4m3 maximum
    for (int64_t col = 0; col < 128; ++col) w_f32.data<float>()[col] = 0.0f;
    auto w = quantize_fp8_blocks(w_f32, {128, 128}, "test weight");
    ASSERT_TRUE(w.has_value()) << w.status().to_string();
    const LinearWeight w_gpu(to_device(w->weight), to_device(w->scale_inv), w->block);
    const Tensor x_host = random_tensor({c.m, c.k}, kBF16, rng_, 0.0f, 1.0f);
    const Tensor residual_host = random_tensor({c.m, c.k}, kF32, rng_, 0.0f, 4.0f);
    const Tensor x = to_device(x_host), residual = to_device(residual_host);
    const Tensor norm_w = to_device(random_tensor({c.k}, kBF16, rng_, 0.0f, 0.5f));
    ASSERT_TRUE(cuda::add_rms_norm_linear_fits(x, w_gpu));
    Tensor residual_out = to_device(cuda_test::fill_nan({c.m, c.k}, kF32));
    Tensor normed = to_device(cuda_test::fill_nan({c.m, c.k}, kBF16));
    Tensor out = to_device(cuda_test::fill_nan({c.m, c.n}, kF32));
    Status s = cuda::add_rms_norm_linear(x, residual, norm_w, 1e-6f, true, w_gpu, residual_out,
                                         normed, out, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor ref_x = to_device(x_host), ref_residual = to_device(residual_host);
    ASSERT_TRUE(
        cuda::fused_add_rms_norm(ref_x, ref_residual, norm_w, 1e-6f, true, nullptr).is_ok());
    Tensor ref_out = to_device(Tensor::empty({c.m, c.n}, kF32));
    auto problem = cuda::detail::gemv_problem(
        "test", ref_x,
        Tensor::borrow(w_gpu.weight.data_ptr(), {c.n, c.k}, kBF16, ref_x.device(), nullptr),
        Tensor(), ref_out);
    ASSERT_TRUE(problem.has_value()) << problem.status().to_string();
    problem->scales = w_gpu.scale_inv.data<float>();
    problem->scale_cols = w_gpu.scale_inv.size(1);
    problem->block_n = 128;
    problem->block_k = 128;
    ASSERT_TRUE(
        cuda::detail::launch_gemv(*problem, cuda::detail::gemv_norm_launch(c.n, sms), nullptr)
            .is_ok());
    EXPECT_TRUE(cuda_test::same_values(cuda_test::to_host_f32(residual_out),
                                       cuda_test::to_host_f32(ref_residual)));
    const Tensor normed_host = cuda_test::to_host_f32(normed);
    EXPECT_TRUE(cuda_test::same_values(normed_host, cuda_test::to_host_f32(ref_x)));
    const Tensor got = cuda_test::to_host_f32(out);
    EXPECT_TRUE(cuda_test::same_values(got, cuda_test::to_host_f32(ref_out)));
    Tensor cpu_out = Tensor::empty({c.m, c.n}, kF32);
    ASSERT_TRUE(cpu::linear(normed_host, *w, Tensor(), cpu_out).is_ok());
    auto dense = dequantize_fp8_blocks(*w);
    ASSERT_TRUE(dense.has_value()) << dense.status().to_string();
    EXPECT_TRUE(cuda_test::close_products(got, cpu_out, *dense, normed_host, 5e-3));
  }
  // FP8 steps are 64 wide: the 8-warp launches need K >= 2048 and the 16-warp ones 4096
  // (BF16: 1024 and 2048); blocks the tensor-core GEMV does not take stay apart.
  auto fp8_of = [&](int64_t n, int64_t k, WeightBlock block) {
    auto q = quantize_fp8_blocks(random_tensor({n, k}, kF32, rng_, 0.0f, 0.05f), block, "w");
    EXPECT_TRUE(q.has_value());
    return LinearWeight(to_device(q->weight), to_device(q->scale_inv), q->block);
  };
  const Tensor x1024 = to_device(random_tensor({1, 1024}, kBF16, rng_, 0.0f, 1.0f));
  const Tensor x2048 = to_device(random_tensor({1, 2048}, kBF16, rng_, 0.0f, 1.0f));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(x1024, fp8_of(4096, 1024, {128, 128})));
  EXPECT_TRUE(cuda::add_rms_norm_linear_fits(
      x1024, to_device(random_tensor({4096, 1024}, kBF16, rng_, 0.0f, 0.05f))));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(x2048, fp8_of(257, 2048, {128, 128})));
  EXPECT_TRUE(cuda::add_rms_norm_linear_fits(x2048, fp8_of(4096, 2048, {128, 128})));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(x2048, fp8_of(4096, 2048, {1, 128})));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(x2048, fp8_of(4096, 2048, {128, 96})));
}

TEST_F(GemvCuda, AddRmsNormLinearRefusesWhatItCannotRun) {
  const int64_t m = 2, k = 2048, n = 257;
  const Tensor x = to_device(random_tensor({m, k}, kBF16, rng_, 0.0f, 1.0f));
  const Tensor residual = to_device(random_tensor({m, k}, kF32, rng_, 0.0f, 1.0f));
  const Tensor norm_w = to_device(random_tensor({k}, kBF16, rng_, 0.0f, 0.5f));
  const Tensor w = to_device(random_tensor({n, k}, kBF16, rng_, 0.0f, 0.05f));
  Tensor residual_out = to_device(Tensor::empty({m, k}, kF32));
  Tensor normed = to_device(Tensor::empty({m, k}, kBF16));
  Tensor out = to_device(Tensor::empty({m, n}, kF32));
  // Three rows, rows longer than the norm threads' 4 chunks of 8 columns (hidden > 8192), and
  // rows too short for every warp to have steps are not sizes it takes.
  EXPECT_FALSE(
      cuda::add_rms_norm_linear_fits(to_device(random_tensor({3, k}, kBF16, rng_, 0.0f, 1.0f)), w));
  constexpr int64_t kLong = 8200;
  const Tensor x_long = to_device(random_tensor({m, kLong}, kBF16, rng_, 0.0f, 1.0f));
  const Tensor residual_long = to_device(random_tensor({m, kLong}, kF32, rng_, 0.0f, 1.0f));
  const Tensor norm_long = to_device(random_tensor({kLong}, kBF16, rng_, 0.0f, 0.5f));
  const Tensor wide = to_device(random_tensor({4096, kLong}, kBF16, rng_, 0.0f, 0.05f));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(x_long, wide));
  // Wide products past hidden 2560 (2048 at two rows) stay on cuBLASLt (kNormWideMaxK), narrow
  // ones do not.
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(
      to_device(random_tensor({2, 2560}, kBF16, rng_, 0.0f, 1.0f)),
      to_device(random_tensor({12352, 2560}, kBF16, rng_, 0.0f, 0.05f))));
  const Tensor x5120 = to_device(random_tensor({1, 5120}, kBF16, rng_, 0.0f, 1.0f));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(
      x5120, to_device(random_tensor({16480, 5120}, kBF16, rng_, 0.0f, 0.05f))));
  EXPECT_TRUE(cuda::add_rms_norm_linear_fits(
      x5120, to_device(random_tensor({257, 5120}, kBF16, rng_, 0.0f, 0.05f))));
  Tensor wide_out = to_device(Tensor::empty({m, 4096}, kF32));
  Tensor residual_long_out = to_device(Tensor::empty({m, kLong}, kF32));
  Tensor normed_long = to_device(Tensor::empty({m, kLong}, kBF16));
  Status s = cuda::add_rms_norm_linear(x_long, residual_long, norm_long, 1e-6f, true, wide,
                                       residual_long_out, normed_long, wide_out, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  const Tensor x_short = to_device(random_tensor({m, 1024}, kBF16, rng_, 0.0f, 1.0f));
  const Tensor w_short = to_device(random_tensor({n, 1024}, kBF16, rng_, 0.0f, 0.05f));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(x_short, w_short));
  const Tensor w_short_wide = to_device(random_tensor({4096, 512}, kBF16, rng_, 0.0f, 0.05f));
  EXPECT_FALSE(cuda::add_rms_norm_linear_fits(
      to_device(random_tensor({m, 512}, kBF16, rng_, 0.0f, 1.0f)), w_short_wide));
  // In place is refused: every block reads x and residual whole.
  Tensor residual_alias = residual;
  s = cuda::add_rms_norm_linear(x, residual, norm_w, 1e-6f, true, w, residual_alias, normed, out,
                                nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s.message();
  // Wrong dtypes and shapes are named.
  Tensor normed_f32 = to_device(Tensor::empty({m, k}, kF32));
  s = cuda::add_rms_norm_linear(x, residual, norm_w, 1e-6f, true, w, residual_out, normed_f32, out,
                                nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("normed"), std::string::npos) << s.message();
  const Tensor norm_short = to_device(random_tensor({k - 8}, kBF16, rng_, 0.0f, 0.5f));
  s = cuda::add_rms_norm_linear(x, residual, norm_short, 1e-6f, true, w, residual_out, normed, out,
                                nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("norm_weight"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace vllm
