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
//
// The FP8 weights of the batched GEMV's tensor-core kernel (gemv.cu, launch_gemv with scales):
// every row count, Qwen3.5's hidden sizes as K (2048, 2560, 5120) with N off the 16-row tile,
// K with a partial last step, blocks from 16 x 64 to 128 x 128, every block shape and warp
// count, the fused residual-add + RMSNorm. Each output is held against cpu::linear on the FP8
// weight (the f32 dequantized weight, which the kernel multiplies: the codes' exact products
// summed a step at a time, then times the step's block scale) to 2e-5, and against the
// dequantized weight rounded to BF16 (the cuBLASLt path's) to 5e-3, both relative to
// |w_n| |x_m| (the scale of the sum's terms; a block at the e4m3 maximum would drown the other
// outputs in a norm over all of them); bit for bit: one-hot columns equal the dequantized
// weight, every code under every scale too, a row's result does not depend on M, and the fused
// norm's product equals the plain one on its normed rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_fp8.cuh"
#include "base/float_convert.h"
#include "cuda/cuda_test_util.h"
#include "tensor/block_fp8.h"

namespace vllm::cuda::emulated {
void widen_e4m3x4(uint32_t w, uint32_t plain[2], uint32_t kept[2]);  // gemv_fp8_emulated.cpp
}

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
    return fmt::format(
        "[{} x {}] x fp8[{} x {}]^T in {}x{} blocks, x {} -> {} bias={} x +{}/{} "
        "out +{}",
        m, k, n, k, block.n, block.k, dtype_name(x_dtype), dtype_name(out_dtype),
        bias < 0 ? "none" : dtype_name(static_cast<DType>(bias)), x_offset, x_pad, out_pad);
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
  Status s = cpu::linear(cuda_test::to_f32(x_all).slice(1, c.x_offset, c.x_offset + c.k).clone(), w,
                         bias, ref);
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
      {1, 40, 256, {128, 128}}, {2, 33, 160, {16, 32}}, {3, 17, 1056, {128, 128}},
      {4, 64, 96, {1, 32}},     {5, 9, 48, {16, 16}},   {8, 31, 512, {128, 128}},
      {7, 3, 2064, {16, 48}},   {1, 1, 16, {128, 128}},
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
      {1, 21, 77, {16, 32}},
      {6, 18, 40, {7, 24}},
      {8, 5, 100, {128, 128}},
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
    ASSERT_TRUE(cuda::detail::launch_fp8_dequantize(matrix_of(w), kBF16, dense.data_ptr(), nullptr)
                    .is_ok());
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

// ---- The tensor-core GEMV on FP8 weights (gemv.cu) ------------------------------------------

using cuda::detail::GemvLaunch;
using cuda::detail::GemvProblem;

// The dequantized weight rounded to BF16, as F32: what the dequantized cuBLASLt path and the
// CUDA-core FP8 GEMV multiply BF16 x by.
Tensor bf16_weight_of(const LinearWeight& w) {
  auto deq = dequantize_fp8_blocks(w);
  EXPECT_TRUE(deq.has_value()) << deq.status().to_string();
  Tensor out = deq->clone();
  float* v = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) v[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return out;
}

struct MmaCase {
  int64_t m, n, k;
  WeightBlock block{128, 128};
  DType out_dtype = kF32;
  bool bias = false;
};

GemvProblem mma_problem(const LinearWeight& w, const Tensor& x, const Tensor& bias, Tensor& out) {
  GemvProblem p;
  p.dtype = kBF16;
  p.out_dtype = out.dtype();
  p.x = x.data_ptr();
  p.ldx = x.size(1);
  p.weight = w.weight.data_ptr();
  p.scales = w.scale_inv.data<float>();
  p.scale_cols = w.scale_inv.size(1);
  p.block_n = w.block.n;
  p.block_k = w.block.k;
  p.bias = bias.defined() ? bias.data_ptr() : nullptr;
  p.bias_dtype = bias.defined() ? bias.dtype() : kF32;
  p.out = out.data_ptr();
  p.ldo = out.size(1);
  p.m = x.size(0);
  p.n = w.size(0);
  p.k = w.size(1);
  return p;
}

// Runs `c` through launch_gemv with an FP8 weight (with `launch`, or the chosen shape) and
// checks it against both references.
void run_mma_case(const MmaCase& c, const GemvLaunch* launch, std::mt19937& rng) {
  SCOPED_TRACE(fmt::format("[{} x {}] x fp8[{} x {}]^T in {}x{} blocks -> {} bias={}{}", c.m, c.k,
                           c.n, c.k, c.block.n, c.block.k, dtype_name(c.out_dtype), c.bias,
                           launch == nullptr ? std::string(", chosen launch")
                                             : fmt::format(", {} rows x {} warps",
                                                           launch->rows_per_block, launch->warps)));
  const LinearWeight w = random_fp8_weight(c.n, c.k, c.block, rng);
  const Tensor x = cuda_test::random_tensor({c.m, c.k}, kBF16, rng, 0.0f, 1.0f);
  const Tensor bias = c.bias ? cuda_test::random_tensor({c.n}, kF32, rng, 0.0f, 1.0f) : Tensor();
  const Tensor x32 = cuda_test::to_f32(x), w_bf16 = bf16_weight_of(w);
  const Tensor w_f32 = dequantize_fp8_blocks(w).value();
  Tensor ref = Tensor::empty({c.m, c.n}, kF32), ref_fp8 = Tensor::empty({c.m, c.n}, kF32);
  ASSERT_TRUE(cpu::linear(x32, w_bf16, bias, ref).is_ok());
  ASSERT_TRUE(cpu::linear(x32, w, bias, ref_fp8).is_ok());
  Tensor out = cuda_test::fill_nan({c.m, c.n}, c.out_dtype);
  const GemvProblem p = mma_problem(w, x, bias, out);
  ASSERT_TRUE(cuda::detail::gemv_fp8_fits(p));
  const Status s = launch != nullptr ? cuda::detail::launch_gemv(p, *launch, nullptr)
                                     : cuda::detail::launch_gemv(p, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const Tensor got = cuda_test::to_f32(out);
  // BF16 outputs: one rounding, 2^-9 of the value at most.
  const double tolerance = c.out_dtype == kF32 ? 2e-5 : 4e-3;
  EXPECT_TRUE(cuda_test::close_products(got, ref_fp8, w_f32, x32, tolerance))
      << "against cpu::linear";
  EXPECT_TRUE(cuda_test::close_products(got, ref, w_f32, x32, 5e-3)) << "against the BF16 weight";
  if (c.out_dtype == kF32 && c.n * c.k >= 4096) {  // the difference shows: not BF16 weights
    EXPECT_FALSE(cuda_test::close_products(got, ref, w_f32, x32, 2e-5)) << "as the BF16 weight";
  }
}

// Every instantiation and block shape at Qwen3.5's hidden sizes (K 2048, 2560, 5120: 32, 40,
// 80 steps of 64), N off the tile, K with a partial last step (1056, 144), blocks of 16 to 128
// rows and 64 to 128 columns, BF16 outputs and bias. The emulated GPU has 2 SMs: the chosen shapes
// are 16-row blocks of 16 or 12 warps up to 64 features and 32-row blocks of 8 from 128.
TEST(GemvFp8MmaEmulated, MatchesCpuOverBlockAndLaunchShapes) {
  std::mt19937 rng(5150);
  const MmaCase cases[] = {
      {1, 33, 2560},
      {2, 40, 2048, {128, 128}, kBF16},
      {8, 24, 5120, {128, 128}, kF32, true},
      {3, 130, 256, {16, 64}},
      {5, 17, 1056, {32, 64}, kBF16, true},
      {4, 50, 144, {48, 64}},
      {7, 1, 16, {16, 64}},
  };
  for (const MmaCase& c : cases) {
    run_mma_case(c, nullptr, rng);
    if (c.k > 2048) continue;  // the long rows take the chosen shape only
    for (GemvLaunch launch : {GemvLaunch{16, 8}, GemvLaunch{32, 3}, GemvLaunch{32, 1},
                              GemvLaunch{16, 16}, GemvLaunch{16, 12}}) {
      run_mma_case(c, &launch, rng);
    }
  }
}

// Every row count the FP8 path takes.
TEST(GemvFp8MmaEmulated, EveryRowCount) {
  std::mt19937 rng(88);
  for (int64_t m = 1; m <= cuda::detail::kFp8GemvMaxRows; ++m) {
    run_mma_case({m, 130, 2048}, nullptr, rng);
  }
}

// A one-hot x picks one column of the weight: bit for bit the f32 dequantized weight, for
// columns in every lane's chunk, product and step position, and in a block at the e4m3
// maximum.
TEST(GemvFp8MmaEmulated, OneHotColumnsAreTheDequantizedWeights) {
  std::mt19937 rng(4096);
  for (const auto& [block, n, k] :
       {std::tuple{WeightBlock{16, 64}, int64_t{40}, int64_t{192}},
        std::tuple{WeightBlock{128, 128}, int64_t{140}, int64_t{384}}}) {
    const LinearWeight w = random_fp8_weight(n, k, block, rng);
    const Tensor dense = dequantize_fp8_blocks(w).value();
    for (int64_t col : {int64_t{0}, int64_t{5}, int64_t{18}, int64_t{47}, int64_t{63}, int64_t{77},
                        block.k, block.k + 1, k - 1}) {
      Tensor x = Tensor::zeros({1, k}, kBF16);
      x.data<uint16_t>()[col] = f32_to_bf16(1.0f);
      Tensor out = cuda_test::fill_nan({1, n}, kF32);
      const GemvProblem p = mma_problem(w, x, Tensor(), out);
      ASSERT_TRUE(cuda::detail::launch_gemv(p, nullptr).is_ok());
      int64_t mismatches = 0;
      for (int64_t r = 0; r < n; ++r) {
        if (out.data<float>()[r] != dense.data<float>()[r * k + col]) ++mismatches;
      }
      EXPECT_EQ(mismatches, 0) << "block " << block.n << "x" << block.k << " column " << col;
    }
  }
}

// Every finite e4m3 code in every byte position of a word, under scales from f32's subnormal
// range to 2^100, through one-hot rows of x: each output the f32 dequantized weight, bit for
// bit (the kernel builds the codes' values by bit moves, not conversions).
TEST(GemvFp8MmaEmulated, EveryCodeAndScaleIsTheDequantizedWeight) {
  const int64_t n = 256, k = 64;
  const WeightBlock block{16, 64};
  LinearWeight w(Tensor::empty({n, k}, DType::kF8E4M3), Tensor::empty({n / 16, k / 64}, kF32),
                 block);
  uint8_t* codes = static_cast<uint8_t*>(w.weight.data_ptr());
  for (int64_t i = 0; i < n * k; ++i) {
    const auto code = static_cast<uint8_t>((i * 5 + i / 256) & 0xff);  // each code 64 times
    codes[i] = (code & 0x7f) == 0x7f ? code - 1 : code;                // not the NaN codes
  }
  const float scales[16] = {1e-38f, 1e-30f, 0x1p-20f, 1e-4f, 3.3e-3f, 0.0f,   1.0f,   7.0f,
                            1e4f,   3e-7f,  0x1p100f, 1e30f, 2.5e-2f, 1e-10f, 123.4f, 0.5f};
  std::memcpy(w.scale_inv.data_ptr(), scales, sizeof scales);
  const Tensor dense = dequantize_fp8_blocks(w).value();
  int64_t mismatches = 0;
  for (int64_t c0 = 0; c0 < k; c0 += 8) {
    Tensor x = Tensor::zeros({8, k}, kBF16);
    for (int64_t j = 0; j < 8; ++j) x.data<uint16_t>()[j * k + c0 + j] = f32_to_bf16(1.0f);
    Tensor out = cuda_test::fill_nan({8, n}, kF32);
    ASSERT_TRUE(cuda::detail::launch_gemv(mma_problem(w, x, Tensor(), out), nullptr).is_ok());
    for (int64_t j = 0; j < 8; ++j) {
      for (int64_t r = 0; r < n; ++r) {
        const float want = dense.data<float>()[r * k + c0 + j];
        if (!(out.data<float>()[j * n + r] == want)) {
          if (mismatches++ < 5) {
            ADD_FAILURE() << "row " << r << " column " << c0 + j << " code 0x" << std::hex
                          << int{codes[r * k + c0 + j]} << std::dec << ": "
                          << out.data<float>()[j * n + r] << " against " << want;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The bit-move widening of four e4m3 codes (fp8.cuh), which the GEMV and the FP8 KV staging of
// the wgmma attention kernel use: every code in every byte position of a word, beside codes of
// all kinds, is its exact value as BF16; with e4m3x4_keep_nan the NaN codes are NaN and nothing
// else changes.
TEST(Fp8CodesEmulated, BitMovesGiveEveryCodeExactlyAndKeepNan) {
  std::mt19937 rng(5);
  int mismatches = 0;
  for (int pos = 0; pos < 4; ++pos) {
    for (int code = 0; code < 256; ++code) {
      for (int trial = 0; trial < 4; ++trial) {
        uint32_t w = static_cast<uint32_t>(rng());
        w = (w & ~(0xffu << (8 * pos))) | (static_cast<uint32_t>(code) << (8 * pos));
        uint32_t plain[2], kept[2];
        cuda::emulated::widen_e4m3x4(w, plain, kept);
        for (int b = 0; b < 4; ++b) {
          const auto byte = static_cast<uint8_t>(w >> (8 * b));
          auto half = [&](const uint32_t* v) {
            return static_cast<uint16_t>(v[b / 2] >> (16 * (b % 2)));
          };
          const float want = fp8e4m3_to_f32(byte);
          const float got = bf16_to_f32(half(kept));
          const bool ok = std::isnan(want) ? std::isnan(got) && half(plain) != half(kept)
                                           : got == want && half(plain) == half(kept);
          if (!ok && mismatches++ < 5) {
            ADD_FAILURE() << "code 0x" << std::hex << int{byte} << std::dec << " in byte " << b
                          << ": " << got << " (without keep_nan " << bf16_to_f32(half(plain))
                          << "), want " << want;
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// A row's result is the same bits whatever M (and whichever rows share its batch).
TEST(GemvFp8MmaEmulated, RowsDoNotDependOnTheBatch) {
  std::mt19937 rng(31);
  const int64_t n = 150, k = 2048;
  const LinearWeight w = random_fp8_weight(n, k, {128, 128}, rng);
  const Tensor x = cuda_test::random_tensor({8, k}, kBF16, rng, 0.0f, 1.0f);
  Tensor all = cuda_test::fill_nan({8, n}, kF32);
  ASSERT_TRUE(cuda::detail::launch_gemv(mma_problem(w, x, Tensor(), all), nullptr).is_ok());
  for (int64_t row : {int64_t{0}, int64_t{5}, int64_t{7}}) {
    const Tensor one_x = x.slice(0, row, row + 1).clone();
    Tensor one = cuda_test::fill_nan({1, n}, kF32);
    ASSERT_TRUE(cuda::detail::launch_gemv(mma_problem(w, one_x, Tensor(), one), nullptr).is_ok());
    EXPECT_EQ(std::memcmp(one.data_ptr(), all.data<float>() + row * n, n * sizeof(float)), 0)
        << "row " << row;
  }
}

// What the tensor-core path does not take stays with launch_fp8_gemv: F32 x, more than 8 rows,
// K off 16, blocks of rows off 16 or of columns not a power of two from 64, x rows off 16 bytes.
TEST(GemvFp8MmaEmulated, RefusesWhatTheFp8GemvKeeps) {
  std::mt19937 rng(3);
  const LinearWeight w = random_fp8_weight(32, 256, {128, 128}, rng);
  const Tensor x = cuda_test::random_tensor({9, 264}, kBF16, rng, 0.0f, 1.0f);
  Tensor out = cuda_test::fill_nan({9, 32}, kF32);
  const GemvProblem ok = mma_problem(w, x.slice(1, 0, 256), Tensor(), out);
  GemvProblem p = ok;
  p.m = 8;
  p.ldx = 264;
  EXPECT_TRUE(cuda::detail::gemv_fp8_fits(p));
  std::vector<GemvProblem> bad(9, p);
  bad[0].dtype = kF32;
  bad[1].m = 9;
  bad[2].k = 248;
  bad[3].block_n = 8;
  bad[4].block_k = 48;
  bad[5].block_k = 8;
  bad[6].x = x.data<uint16_t>() + 1;
  bad[7].ldx = 260;
  bad[8].block_k = 32;
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_FALSE(cuda::detail::gemv_fp8_fits(bad[i])) << i;
    const Status s = cuda::detail::launch_gemv(bad[i], nullptr);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << i << ": " << s.to_string();
  }
  const Tensor untouched = cuda_test::to_f32(out);
  for (int64_t i = 0; i < untouched.numel(); ++i) {
    ASSERT_TRUE(std::isnan(untouched.data<float>()[i]));
  }
}

// The residual add and RMSNorm in the FP8 product (launch_gemv_norm), on the emulated GPU of 2
// SMs: narrow outputs (16-warp blocks, a block a tile: K of at least 16 warps x 256) and wide
// ones (8-warp blocks walking several tiles: K 2048-2560). residual_out exact, normed against
// the CPU's fused_add_rms_norm, out bitwise the plain FP8 GEMV of the same launch shape on
// that normed x, and within the products' tolerance of cpu::linear.
TEST(GemvFp8MmaEmulated, FusedNormMatchesTheNormThenTheGemv) {
  struct NormCase {
    int64_t m, n, k;
  };
  std::mt19937 rng(12);
  for (const NormCase c : {NormCase{1, 24, 4096}, NormCase{2, 30, 5120}, NormCase{1, 200, 2048},
                           NormCase{2, 72, 2048}, NormCase{1, 40, 2560}}) {
    SCOPED_TRACE(fmt::format("m {} n {} k {}", c.m, c.n, c.k));
    ASSERT_TRUE(cuda::detail::gemv_norm_fits(c.m, c.n, c.k, 2, /*fp8_weight=*/true));
    const Tensor x = cuda_test::random_tensor({c.m, c.k}, kBF16, rng, 0.0f, 1.0f);
    const Tensor residual = cuda_test::random_tensor({c.m, c.k}, kF32, rng, 0.0f, 4.0f);
    const Tensor norm_w = cuda_test::random_tensor({c.k}, kBF16, rng, 0.0f, 0.5f);
    const LinearWeight w = random_fp8_weight(c.n, c.k, {128, 128}, rng);
    Tensor residual_out = cuda_test::fill_nan({c.m, c.k}, kF32);
    Tensor normed = cuda_test::fill_nan({c.m, c.k}, kBF16);
    Tensor out = cuda_test::fill_nan({c.m, c.n}, kF32);
    const GemvProblem p = mma_problem(w, x, Tensor(), out);
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
    GemvProblem q = mma_problem(w, normed, Tensor(), plain);
    s = cuda::detail::launch_gemv(q, cuda::detail::gemv_norm_launch(c.n, 2), nullptr);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(std::memcmp(out.data_ptr(), plain.data_ptr(), out.nbytes()), 0)
        << "the fused product differs from the GEMV on its normed rows";
    Tensor ref = Tensor::empty({c.m, c.n}, kF32);
    const Tensor normed32 = cuda_test::to_f32(normed);
    ASSERT_TRUE(cpu::linear(normed32, w, Tensor(), ref).is_ok());
    EXPECT_TRUE(
        cuda_test::close_products(cuda_test::to_f32(out), ref, bf16_weight_of(w), normed32, 5e-3));
  }
  // Every warp needs a round of 256-wide FP8 steps: 4096 for the narrow launch, 2048 for the
  // wide one (BF16 weights take half).
  EXPECT_FALSE(cuda::detail::gemv_norm_fits(1, 24, 2048, 2, true));
  EXPECT_TRUE(cuda::detail::gemv_norm_fits(1, 24, 2048, 2, false));
  EXPECT_FALSE(cuda::detail::gemv_norm_fits(1, 200, 1024, 2, true));
  EXPECT_FALSE(cuda::detail::gemv_norm_fits(1, 200, 2040, 2, true));
}

}  // namespace
}  // namespace vllm
