// The batched GEMV's CUDA kernels run on the CPU (emulator.h) against cpu::linear: the
// fragment layout and k permutation of the tensor-core kernel, the split of K over warps and
// its reduction, rows of x and weight past M and N, K tails, the element-wise path (K not a
// multiple of 8, rows off 16-byte boundaries), bias, F32 logits, row-strided x and out, and
// the F32 kernel, on every CI run. Shapes are small (one OS thread per CUDA thread) but reach
// every instantiation and both block shapes, with 1 to 16 warps per block.
//
// Tolerances: BF16 outputs 1e-2 (their rounding alone is ~2e-3). F32 outputs: the emulated
// products are exact and summed in f32, as the CPU's, in another order: 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemv.cuh"
#include "cuda/cuda_test_util.h"

namespace vllm {
namespace {

using cuda::detail::GemvLaunch;
using cuda::detail::GemvProblem;

struct Case {
  int64_t m, n, k;
  DType dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  int bias = -1;         // a DType, or -1
  int64_t x_offset = 0;  // x: columns [x_offset, x_offset + k) of [m, k + x_pad]
  int64_t x_pad = 0;
  int64_t out_offset = 0;  // out: columns [out_offset, out_offset + n) of [m, n + out_pad]
  int64_t out_pad = 0;

  std::string name() const {
    return fmt::format("[{} x {}] x [{} x {}]^T {} -> {} bias={} x +{}/{} out +{}/{}", m, k, n, k,
                       dtype_name(dtype), dtype_name(out_dtype),
                       bias < 0 ? "none" : dtype_name(static_cast<DType>(bias)), x_offset, x_pad,
                       out_offset, out_pad);
  }
};

double tolerance(const Case& c) {
  return c.out_dtype == DType::kBF16 ? 1e-2 : 1e-5;
}

// Runs `c` through launch_gemv (with `launch`, or the chosen shape) and checks it against
// cpu::linear, and that out's columns outside the product stay NaN.
void run_case(const Case& c, const GemvLaunch* launch, std::mt19937& rng) {
  SCOPED_TRACE(c.name() + (launch == nullptr ? std::string(" chosen launch")
                                             : fmt::format(" {} rows x {} warps",
                                                           launch->rows_per_block, launch->warps)));
  Tensor x_all = cuda_test::random_tensor({c.m, c.k + c.x_pad}, c.dtype, rng, 0.0f, 1.0f);
  Tensor weight = cuda_test::random_tensor({c.n, c.k}, c.dtype, rng, 0.0f, 0.05f);
  Tensor bias;
  if (c.bias >= 0) bias = cuda_test::random_tensor({c.n}, static_cast<DType>(c.bias), rng, 0, 1);
  Tensor x = x_all.slice(1, c.x_offset, c.x_offset + c.k);
  Tensor ref = Tensor::empty({c.m, c.n}, DType::kF32);
  Status s = cpu::linear(cuda_test::to_f32(x_all).slice(1, c.x_offset, c.x_offset + c.k).clone(),
                         weight, bias, ref);
  ASSERT_TRUE(s.is_ok()) << s.to_string();

  const int64_t out_width = c.n + c.out_pad;
  Tensor out_all = cuda_test::fill_nan({c.m, out_width}, c.out_dtype);
  GemvProblem p;
  p.dtype = c.dtype;
  p.out_dtype = c.out_dtype;
  p.x = x.data_ptr();
  p.ldx = c.m > 1 ? c.k + c.x_pad : c.k;  // as the op entry reads a one-row slice
  p.weight = weight.data_ptr();
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.bias_dtype = bias.defined() ? bias.dtype() : DType::kF32;
  p.out = out_all.slice(1, c.out_offset, c.out_offset + c.n).data_ptr();
  p.ldo = c.m > 1 ? out_width : c.n;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  s = launch != nullptr ? cuda::detail::launch_gemv(p, *launch, nullptr)
                        : cuda::detail::launch_gemv(p, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();

  Tensor got = cuda_test::to_f32(out_all);
  EXPECT_TRUE(cuda_test::relative_l2(got.slice(1, c.out_offset, c.out_offset + c.n).clone(), ref,
                                     tolerance(c)));
  int64_t written_outside = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t col = 0; col < out_width; ++col) {
      const bool inside = col >= c.out_offset && col < c.out_offset + c.n;
      if (!inside && !std::isnan(got.data<float>()[r * out_width + col])) ++written_outside;
    }
  }
  EXPECT_EQ(written_outside, 0);
}

constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;

// 16-byte rows: every instantiation of the tensor-core kernel (M <= 8 and <= 16, 16- and
// 32-row blocks), odd N (rows past N in the last block), K with a partial last step (200,
// 264), K shorter than one step per warp, and warps that get no step at all.
TEST(GemvEmulated, TensorCoreKernelMatchesCpu) {
  std::mt19937 rng(2024);
  const Case cases[] = {
      {1, 40, 256},  {3, 33, 200}, {8, 48, 64}, {9, 70, 264},
      {16, 19, 512}, {12, 64, 40}, {5, 100, 8}, {16, 1, 136},
  };
  for (const Case& c : cases) {
    for (GemvLaunch launch :
         {GemvLaunch{16, 8}, GemvLaunch{32, 3}, GemvLaunch{32, 1}, GemvLaunch{16, 2},
          GemvLaunch{16, 16}, GemvLaunch{32, 11}, GemvLaunch{16, 12}}) {
      run_case(c, &launch, rng);
    }
  }
}

// Every row count up to the capacity, through the chosen launch shape (32-row blocks here:
// the emulated GPU has 2 SMs).
TEST(GemvEmulated, EveryRowCountUpToCapacity) {
  std::mt19937 rng(7);
  for (int64_t m = 1; m <= cuda::kGemvMaxRows; ++m) run_case({m, 130, 96}, nullptr, rng);
}

// K not a multiple of 8 and rows off 16-byte boundaries: the element-wise loads.
TEST(GemvEmulated, ElementWisePathMatchesCpu) {
  std::mt19937 rng(11);
  const Case cases[] = {
      {1, 21, 77},   {7, 50, 3},
      {13, 37, 101}, {4, 30, 64, kBF16, kBF16, -1, 1, 3},  // x shifted by one element
      {10, 18, 1},
  };
  for (const Case& c : cases) {
    for (GemvLaunch launch : {GemvLaunch{16, 8}, GemvLaunch{32, 4}}) run_case(c, &launch, rng);
  }
}

// Bias (BF16 and F32), F32 logits from BF16 inputs, row-strided x and out.
TEST(GemvEmulated, BiasLogitsAndStridedOperands) {
  std::mt19937 rng(5);
  const int bf16 = static_cast<int>(kBF16), f32 = static_cast<int>(kF32);
  const Case cases[] = {
      {6, 45, 128, kBF16, kBF16, bf16},
      {11, 45, 128, kBF16, kBF16, f32, 8, 24, 3, 5},
      {2, 300, 64, kBF16, kF32},
      {16, 77, 96, kBF16, kF32, bf16, 8, 8, 1, 2},
      {3, 20, 40, kBF16, kF32, f32, 1, 1, 0, 7},
  };
  for (const Case& c : cases) run_case(c, nullptr, rng);
}

// The F32 kernel: 16-byte chunks and single elements, bias, strided operands, tails.
TEST(GemvEmulated, F32KernelMatchesCpu) {
  std::mt19937 rng(3);
  const int f32 = static_cast<int>(kF32);
  const Case cases[] = {
      {1, 17, 300, kF32, kF32}, {16, 33, 132, kF32, kF32, f32},
      {9, 20, 77, kF32, kF32},  {5, 10, 64, kF32, kF32, f32, 1, 2, 3, 3},
      {4, 3, 1, kF32, kF32},
  };
  for (const Case& c : cases) run_case(c, nullptr, rng);
}

TEST(GemvEmulated, RefusesMoreRowsThanCapacityAndBadLaunches) {
  std::mt19937 rng(1);
  Tensor x = cuda_test::random_tensor({cuda::kGemvMaxRows + 1, 64}, kBF16, rng, 0, 1);
  Tensor w = cuda_test::random_tensor({16, 64}, kBF16, rng, 0, 1);
  Tensor out = cuda_test::fill_nan({cuda::kGemvMaxRows + 1, 16}, kBF16);
  GemvProblem p;
  p.x = x.data_ptr();
  p.ldx = 64;
  p.weight = w.data_ptr();
  p.out = out.data_ptr();
  p.ldo = 16;
  p.m = cuda::kGemvMaxRows + 1;
  p.n = 16;
  p.k = 64;
  Status s = cuda::detail::launch_gemv(p, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("1 to 16"), std::string::npos) << s.message();
  Tensor untouched = cuda_test::to_f32(out);  // nothing was written
  for (int64_t i = 0; i < untouched.numel(); ++i)
    ASSERT_TRUE(std::isnan(untouched.data<float>()[i]));
  p.m = 4;
  for (GemvLaunch bad : {GemvLaunch{8, 8}, GemvLaunch{16, 0}, GemvLaunch{32, 17}}) {
    s = cuda::detail::launch_gemv(p, bad, nullptr);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  }
}

TEST(GemvEmulated, LaunchShapeDependsOnTheFeatureCountOnly) {
  // 32-row blocks once they give every SM two blocks.
  EXPECT_EQ(cuda::detail::choose_gemv_launch(2560, 132).rows_per_block, 16);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(5120, 132).rows_per_block, 16);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(10240, 132).rows_per_block, 32);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(248320, 132).rows_per_block, 32);
  // 16 warps while the 16-row blocks are at most one per SM, 12 up to two, then 8.
  EXPECT_EQ(cuda::detail::choose_gemv_launch(2560, 132).warps, 12);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(2112, 132).warps, 16);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(2113, 132).warps, 12);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(4224, 132).warps, 12);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(4225, 132).warps, 8);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(10240, 132).warps, 8);
  EXPECT_EQ(cuda::detail::choose_gemv_launch(257, 132).warps, 16);
}

// The residual add and RMSNorm inside the product (launch_gemv_norm) on the emulated GPU of 2
// SMs: narrow outputs (at most 2 tiles: 16-warp blocks, a block a tile) and wide ones (8-warp
// blocks walking several tiles each: K of one and of two rounds of steps per warp, and of
// uneven rounds across warps, a partial last tile). residual_out exact,
// normed against the CPU's fused_add_rms_norm, out bitwise the plain GEMV of the same launch
// shape on that normed x.
TEST(GemvEmulated, FusedNormMatchesTheNormThenTheGemv) {
  struct NormCase {
    int64_t m, n, k;
  };
  std::mt19937 rng(11);
  for (const NormCase c : {NormCase{1, 24, 2048}, NormCase{2, 100, 1024}, NormCase{1, 200, 2048},
                           NormCase{2, 72, 1536}, NormCase{1, 40, 2560}, NormCase{2, 24, 5120},
                           NormCase{1, 30, 8192}}) {
    SCOPED_TRACE(fmt::format("m {} n {} k {}", c.m, c.n, c.k));
    ASSERT_TRUE(cuda::detail::gemv_norm_fits(c.m, c.n, c.k, 2));
    const Tensor x = cuda_test::random_tensor({c.m, c.k}, kBF16, rng, 0.0f, 1.0f);
    const Tensor residual = cuda_test::random_tensor({c.m, c.k}, kF32, rng, 0.0f, 4.0f);
    const Tensor norm_w = cuda_test::random_tensor({c.k}, kBF16, rng, 0.0f, 0.5f);
    const Tensor weight = cuda_test::random_tensor({c.n, c.k}, kBF16, rng, 0.0f, 0.05f);
    Tensor residual_out = cuda_test::fill_nan({c.m, c.k}, kF32);
    Tensor normed = cuda_test::fill_nan({c.m, c.k}, kBF16);
    Tensor out = cuda_test::fill_nan({c.m, c.n}, kF32);
    GemvProblem p;
    p.dtype = kBF16;
    p.out_dtype = kF32;
    p.x = x.data_ptr();
    p.ldx = c.k;
    p.weight = weight.data_ptr();
    p.out = out.data_ptr();
    p.ldo = c.n;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    cuda::detail::GemvNormProblem np;
    np.residual = residual.data<float>();
    np.ld_residual = c.k;
    np.residual_out = residual_out.data<float>();
    np.ld_residual_out = c.k;
    np.weight = norm_w.data_ptr();
    np.normed = normed.data_ptr();
    np.ld_normed = c.k;
    np.eps = 1e-6f;
    np.unit_offset = true;
    Status s = cuda::detail::launch_gemv_norm(p, np, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();

    Tensor ref_x = cuda_test::to_f32(x), ref_residual = residual.clone();
    ASSERT_TRUE(cpu::fused_add_rms_norm(ref_x, ref_residual, norm_w, 1e-6f, true).is_ok());
    EXPECT_TRUE(cuda_test::relative_l2(residual_out, ref_residual, 0.0));
    EXPECT_TRUE(cuda_test::relative_l2(cuda_test::to_f32(normed), ref_x, 1e-2));
    Tensor plain = cuda_test::fill_nan({c.m, c.n}, kF32);
    GemvProblem q = p;
    q.x = normed.data_ptr();
    q.out = plain.data_ptr();
    s = cuda::detail::launch_gemv(q, cuda::detail::gemv_norm_launch(c.n, 2), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(std::memcmp(out.data_ptr(), plain.data_ptr(), out.nbytes()), 0)
        << "the fused product differs from the GEMV on its normed rows";
  }
}

}  // namespace
}  // namespace vllm
