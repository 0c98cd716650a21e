// The FP8 (W8A16) GEMV and dequantization kernels run on the CPU (emulator.h) against
// cpu::linear on the same block-scaled weight, on every CI run: every row-count instantiation
// (1, 2, 4, 8 sums a lane), rows past N in the last warp, K tails of a warp's chunks, block
// grids of 128 x 128, 16 x 32, one scale row per weight row (block_n 1) and blocks that are
// not multiples of 16 (the element-wise path), all-zero blocks and blocks at the e4m3 maximum,
// bias, BF16 and F32 activations and outputs, row-strided x and out.
//
// Tolerances: BF16 outputs 1e-2 (their rounding alone is ~2e-3). F32 outputs from BF16
// activations 5e-3: the kernel multiplies them by the weights rounded to BF16 (2^-9 relative
// at most each, ~1e-3 RMS on short rows), as the dequantized cuBLASLt path does. F32
// activations: the kernel scales each 16-product chunk sum once where the CPU scales each
// weight, and sums in another order: 1e-5.
// Dequantization: F32 bit for bit the CPU's dequantized weight; BF16 that rounded once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemv_fp8.cuh"
#include "base/float_convert.h"
#include "cuda/cuda_test_util.h"
#include "tensor/block_fp8.h"

namespace vllm {
namespace {

using cuda::detail::Fp8GemvProblem;
using cuda::detail::Fp8Matrix;

constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;

struct Case {
  int64_t m, n, k;
  WeightBlock block{128, 128};
  DType x_dtype = kBF16;
  DType out_dtype = kBF16;
  int bias = -1;         // a DType, or -1
  int64_t x_offset = 0;  // x: columns [x_offset, x_offset + k) of [m, k + x_pad]
  int64_t x_pad = 0;
  int64_t out_pad = 0;  // out: columns [0, n) of [m, n + out_pad]

  std::string name() const {
    return fmt::format("[{} x {}] x fp8[{} x {}]^T in {}x{} blocks, x {} -> {} bias={} x +{}/{} "
                       "out +{}",
                       m, k, n, k, block.n, block.k, dtype_name(x_dtype), dtype_name(out_dtype),
                       bias < 0 ? "none" : dtype_name(static_cast<DType>(bias)), x_offset, x_pad,
                       out_pad);
  }
};

// A float weight with a zero block and a block scaled up to the e4m3 maximum, quantized.
LinearWeight random_fp8_weight(int64_t n, int64_t k, WeightBlock block, std::mt19937& rng) {
  Tensor w = cuda_test::random_tensor({n, k}, kF32, rng, 0.0f, 0.05f);
  float* v = w.data<float>();
  for (int64_t r = 0; r < std::min(n, block.n); ++r) {
    for (int64_t c = 0; c < std::min(k, block.k); ++c) v[r * k + c] = 0.0f;  // all-zero block
  }
  if (n > block.n && k > block.k) {  // a block whose values reach 448 after scaling
    v[block.n * k + block.k] = 448.0f * 3.0f;
  }
  auto q = quantize_fp8_blocks(w, block, "test weight");
  EXPECT_TRUE(q.has_value()) << q.status().to_string();
  return *q;
}

Fp8Matrix matrix_of(const LinearWeight& w) {
  Fp8Matrix m;
  m.data = static_cast<const uint8_t*>(w.weight.data_ptr());
  m.scales = w.scale_inv.data<float>();
  m.n = w.size(0);
  m.k = w.size(1);
  m.scale_cols = w.scale_inv.size(1);
  m.block_n = w.block.n;
  m.block_k = w.block.k;
  return m;
}

void run_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.name());
  const LinearWeight w = random_fp8_weight(c.n, c.k, c.block, rng);
  Tensor x_all = cuda_test::random_tensor({c.m, c.k + c.x_pad}, c.x_dtype, rng, 0.0f, 1.0f);
  Tensor bias;
  if (c.bias >= 0) bias = cuda_test::random_tensor({c.n}, static_cast<DType>(c.bias), rng, 0, 1);
  Tensor x = x_all.slice(1, c.x_offset, c.x_offset + c.k);
  Tensor ref = Tensor::empty({c.m, c.n}, kF32);
  Status s = cpu::linear(cuda_test::to_f32(x_all).slice(1, c.x_offset, c.x_offset + c.k).clone(),
                         w, bias, ref);
  ASSERT_TRUE(s.is_ok()) << s.to_string();

  const int64_t out_width = c.n + c.out_pad;
  Tensor out_all = cuda_test::fill_nan({c.m, out_width}, c.out_dtype);
  Fp8GemvProblem p;
  p.x_dtype = c.x_dtype;
  p.out_dtype = c.out_dtype;
  p.x = x.data_ptr();
  p.ldx = c.k + c.x_pad;
  p.w = matrix_of(w);
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.bias_dtype = bias.defined() ? bias.dtype() : kF32;
  p.out = out_all.data_ptr();
  p.ldo = out_width;
  p.m = c.m;
  s = cuda::detail::launch_fp8_gemv(p, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();

  Tensor got = cuda_test::to_f32(out_all);
  const double tolerance = c.out_dtype == kBF16 ? 1e-2 : c.x_dtype == kBF16 ? 5e-3 : 1e-5;
  EXPECT_TRUE(cuda_test::relative_l2(got.slice(1, 0, c.n).clone(), ref, tolerance));
  int64_t written_outside = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t col = c.n; col < out_width; ++col) {
      if (!std::isnan(got.data<float>()[r * out_width + col])) ++written_outside;
    }
  }
  EXPECT_EQ(written_outside, 0);
}

// Vector path (K and block_k multiples of 16): every instantiation, rows past N, chunk tails,
// square and narrow blocks, one scale row per weight row.
TEST(Fp8GemvEmulated, VectorPathMatchesCpu) {
  std::mt19937 rng(808);
  const Case cases[] = {
      {1, 40, 256, {128, 128}},  {2, 33, 160, {16, 32}},   {3, 17, 1056, {128, 128}},
      {4, 64, 96, {1, 32}},      {5, 9, 48, {16, 16}},     {8, 31, 512, {128, 128}},
      {7, 3, 2064, {16, 48}},    {1, 1, 16, {128, 128}},
  };
  for (Case c : cases) {
    run_case(c, rng);
    c.x_dtype = kF32;
    c.out_dtype = kF32;
    run_case(c, rng);
  }
}

// K or block_k not a multiple of 16, and x rows off 16-byte boundaries: the element-wise path.
TEST(Fp8GemvEmulated, ElementWisePathMatchesCpu) {
  std::mt19937 rng(909);
  const Case cases[] = {
      {1, 21, 77, {16, 32}},  {6, 18, 40, {7, 24}},  {8, 5, 100, {128, 128}},
      {2, 30, 64, {16, 32}, kBF16, kBF16, -1, 1, 3},  // x shifted by one element
  };
  for (Case c : cases) {
    run_case(c, rng);
    c.x_dtype = kF32;
    c.out_dtype = kF32;
    run_case(c, rng);
  }
}

// Bias in each dtype, F32 logits from BF16 activations, row-strided x and out.
TEST(Fp8GemvEmulated, BiasLogitsAndStridedOperands) {
  std::mt19937 rng(1010);
  const int bf16 = static_cast<int>(kBF16), f32 = static_cast<int>(kF32);
  run_case({3, 40, 128, {16, 32}, kBF16, kBF16, bf16}, rng);
  run_case({1, 40, 128, {16, 32}, kBF16, kF32, f32}, rng);
  run_case({4, 25, 256, {128, 128}, kBF16, kF32, -1, 16, 48, 7}, rng);
  run_case({2, 25, 256, {128, 128}, kF32, kF32, f32, 0, 32, 3}, rng);
}

TEST(Fp8GemvEmulated, RefusesRowCountsPastItsCapacity) {
  std::mt19937 rng(1);
  const LinearWeight w = random_fp8_weight(8, 32, {16, 32}, rng);
  Fp8GemvProblem p;
  p.w = matrix_of(w);
  for (int64_t m : {int64_t{0}, cuda::detail::kFp8GemvMaxRows + 1}) {
    p.m = m;
    Status s = cuda::detail::launch_fp8_gemv(p, nullptr);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << m;
  }
}

// With BF16 activations the GEMV multiplies exactly the BF16 weights the dequantization kernel
// writes for cuBLASLt: a one-hot x picks one column, which must equal it bit for bit.
TEST(Fp8GemvEmulated, Bf16ActivationsMeetTheDequantizedWeights) {
  std::mt19937 rng(1212);
  for (WeightBlock block : {WeightBlock{16, 32}, WeightBlock{7, 24}}) {
    const int64_t n = 24, k = 96;
    const LinearWeight w = random_fp8_weight(n, k, block, rng);
    Tensor dense = cuda_test::fill_nan({n, k}, kBF16);
    ASSERT_TRUE(
        cuda::detail::launch_fp8_dequantize(matrix_of(w), kBF16, dense.data_ptr(), nullptr).is_ok());
    for (int64_t col : {int64_t{0}, int64_t{33}, k - 1}) {
      Tensor x = Tensor::zeros({1, k}, kBF16);
      x.data<uint16_t>()[col] = f32_to_bf16(1.0f);
      Tensor out = cuda_test::fill_nan({1, n}, kF32);
      Fp8GemvProblem p;
      p.x_dtype = kBF16;
      p.out_dtype = kF32;
      p.x = x.data_ptr();
      p.ldx = k;
      p.w = matrix_of(w);
      p.out = out.data_ptr();
      p.ldo = n;
      p.m = 1;
      ASSERT_TRUE(cuda::detail::launch_fp8_gemv(p, nullptr).is_ok());
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_EQ(out.data<float>()[r], bf16_to_f32(dense.data<uint16_t>()[r * k + col]))
            << "block " << block.n << "x" << block.k << " row " << r << " column " << col;
      }
    }
  }
}

// The dequantized weight: F32 equal to the CPU's dequantization bit for bit, BF16 that value
// rounded once; vector and element-wise paths.
TEST(Fp8DequantizeEmulated, EqualsTheCpuDequantization) {
  std::mt19937 rng(1111);
  struct Shape3 {
    int64_t n, k;
    WeightBlock block;
  };
  for (const Shape3& c : {Shape3{37, 272, {128, 128}}, Shape3{20, 64, {1, 32}},
                          Shape3{9, 50, {7, 24}}, Shape3{300, 32, {16, 16}}}) {
    SCOPED_TRACE(fmt::format("[{} x {}] in {}x{} blocks", c.n, c.k, c.block.n, c.block.k));
    const LinearWeight w = random_fp8_weight(c.n, c.k, c.block, rng);
    auto want = dequantize_fp8_blocks(w);
    ASSERT_TRUE(want.has_value()) << want.status().to_string();
    for (DType dtype : {kF32, kBF16}) {
      Tensor got = cuda_test::fill_nan({c.n, c.k}, dtype);
      ASSERT_TRUE(cuda::detail::launch_fp8_dequantize(matrix_of(w), dtype, got.data_ptr(), nullptr)
                      .is_ok());
      const Tensor got_f32 = cuda_test::to_f32(got);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < c.n * c.k; ++i) {
        const float ref = want->data<float>()[i];
        const float expect = dtype == kF32 ? ref : bf16_to_f32(f32_to_bf16(ref));
        if (std::memcmp(&expect, got_f32.data<float>() + i, sizeof(float)) != 0) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << dtype_name(dtype);
    }
  }
}

}  // namespace
}  // namespace vllm
