// The CPU reference FP8 linear and MoE experts (backend/cpu): block-scaled FP8 weights give
// x @ dequantize(w)^T, checked against a double-precision product with the dequantized
// weights written out element by element, and bit for bit against the same kernel fed the
// dequantized weights as F32; odd N and K that are no multiples of the block, decode (direct
// kernel) and prefill (BLAS) batch sizes, strided views, expert stacks, and bad scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "base/float_convert.h"
#include "tensor/block_fp8.h"

namespace vllm {
namespace test_fp8_linear {
namespace {

Tensor random_f32(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// An FP8 weight with varied block scales: rows and columns of different magnitudes, and an
// all-zero block when the shape has more than one block.
LinearWeight random_fp8(int64_t n, int64_t k, WeightBlock block, uint64_t seed) {
  Tensor w = random_f32({n, k}, seed, 1.0f / std::sqrt(static_cast<float>(k)));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      w.data<float>()[r * k + c] *= 1.0f + static_cast<float>((r * 7 + c * 3) % 11);
      if (r < block.n && c >= block.k && c < 2 * block.k) w.data<float>()[r * k + c] = 0.0f;
    }
  }
  auto q = quantize_fp8_blocks(w, block, "w");
  EXPECT_TRUE(q.has_value()) << q.status().to_string();
  return *q;
}

// out[m][j] in double from the weight's definition (linear_weight.h), written out here.
std::vector<double> reference(const Tensor& x, const LinearWeight& w, const Tensor& bias) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  const int64_t cols = w.scale_inv.size(1);
  std::vector<double> out(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = bias.defined() ? bias.data<float>()[j] : 0.0;
      for (int64_t c = 0; c < K; ++c) {
        const float s = w.scale_inv.data<float>()[(j / w.block.n) * cols + c / w.block.k];
        const float wv = fp8e4m3_to_f32(w.weight.data<uint8_t>()[j * K + c]) * s;
        sum += static_cast<double>(x.data<float>()[m * K + c]) * wv;
      }
      out[static_cast<size_t>(m * N + j)] = sum;
    }
  }
  return out;
}

// Every element within f32 summation error of the exact product.
void expect_close(const Tensor& out, const std::vector<double>& want, const Tensor& x, int64_t K) {
  const int64_t M = out.size(0), N = out.size(1);
  double scale = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    scale = std::max(scale, static_cast<double>(std::fabs(x.data<float>()[i])));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < N; ++j) {
      const double got = out.data<float>()[m * out.stride(0) + j];
      const double w = want[static_cast<size_t>(m * N + j)];
      ASSERT_NEAR(got, w, 1e-5 * (std::fabs(w) + scale * std::sqrt(static_cast<double>(K))))
          << "row " << m << ", column " << j;
    }
  }
}

struct Case {
  int64_t M, N, K;
  WeightBlock block;
};

TEST(Fp8Linear, MatchesTheDequantizedProduct) {
  const Case cases[] = {
      {1, 131, 77, {128, 128}},   // one partial block in each direction
      {3, 257, 200, {128, 128}},  // full and partial blocks
      {8, 45, 130, {16, 32}},     // the direct kernel's largest batch, small blocks
      {9, 131, 77, {32, 16}},     // BLAS from here
      {33, 300, 129, {128, 128}},
      {5, 40, 64, {1, 32}},  // one scale row per weight row (fused unaligned parts)
  };
  uint64_t seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "M " << c.M << " N " << c.N << " K " << c.K << " block "
                                      << c.block.n << "x" << c.block.k);
    LinearWeight w = random_fp8(c.N, c.K, c.block, ++seed);
    Tensor x = random_f32({c.M, c.K}, ++seed);
    Tensor bias = random_f32({c.N}, ++seed);
    for (bool with_bias : {false, true}) {
      Tensor out = Tensor::empty({c.M, c.N}, DType::kF32);
      Tensor b = with_bias ? bias : Tensor();
      Status s = cpu::linear(x, w, b, out);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      expect_close(out, reference(x, w, b), x, c.K);
    }
  }
}

TEST(Fp8Linear, DirectKernelEqualsItselfOnTheDequantizedF32Weight) {
  // Same kernel (the portable reference), same summation order: the FP8 path only changes
  // where each f32 weight value comes from, so the sums must be identical bit for bit.
  for (int64_t M : {1, 2, 5, 8}) {
    LinearWeight w = random_fp8(70, 300, {32, 128}, 100 + M);
    auto wd = dequantize_fp8_blocks(w);
    ASSERT_TRUE(wd.has_value());
    Tensor x = random_f32({M, 300}, 200 + M);
    Tensor a = Tensor::empty({M, 70}, DType::kF32), b = Tensor::empty({M, 70}, DType::kF32);
    cpu::detail::LinearArgs args;
    args.x = x.data<float>();
    args.ldx = 300;
    args.M = M;
    args.N = 70;
    args.K = 300;
    args.ldo = 70;
    args.w = w.weight.data_ptr();
    args.w_dtype = DType::kF8E4M3;
    cpu::detail::set_weight_scales(w, &args);
    args.out = a.data<float>();
    cpu::detail::linear_direct(args, 0, 70);
    cpu::detail::LinearArgs f32 = args;
    f32.w = wd->data_ptr();
    f32.w_dtype = DType::kF32;
    f32.w_scale = nullptr;
    f32.out = b.data<float>();
    cpu::detail::linear_direct(f32, 0, 70);
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "M " << M;
  }
}

TEST(Fp8Linear, RowDecodeIsEachCodesValueTimesItsBlockScale) {
  // Every e4m3 code (NaNs and subnormals included), in blocks of 24 columns with a scale
  // each, from unaligned starting columns: bit for bit fp8e4m3_to_f32(code) * scale.
  const int64_t K = 3 * 256;
  std::vector<uint8_t> codes(static_cast<size_t>(K));
  for (int64_t i = 0; i < K; ++i) codes[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 7);
  std::vector<float> scales;
  for (int64_t b = 0; b < K / 24; ++b) scales.push_back(std::ldexp(1.0f + 0.1f * b, -20 + b));
  cpu::detail::LinearArgs a;
  a.w = codes.data();
  a.w_dtype = DType::kF8E4M3;
  a.K = K;
  a.w_scale = scales.data();
  a.scale_cols = static_cast<int64_t>(scales.size());
  a.block_n = 1;
  a.block_k = 24;
  for (int64_t k0 : {0, 5, 24, 101}) {
    std::vector<float> got(static_cast<size_t>(K - k0));
    cpu::detail::decode_fp8_row(a, 0, k0, K - k0, got.data());
    for (int64_t k = k0; k < K; ++k) {
      const float want = fp8e4m3_to_f32(codes[static_cast<size_t>(k)]) * scales[k / 24];
      ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(k - k0)], &want, sizeof(float)), 0)
          << "column " << k << " code " << int(codes[static_cast<size_t>(k)]);
    }
  }
}

TEST(Fp8Linear, WritesColumnSlicesOfAWiderOutput) {
  // The Gated DeltaNet's two-GEMM path writes q|k|v|z and b|a into one output's columns.
  LinearWeight w = random_fp8(50, 96, {32, 32}, 300);
  Tensor x = random_f32({4, 96}, 301);
  Tensor wide = Tensor::zeros({4, 80}, DType::kF32);
  Tensor view = wide.slice(1, 20, 70);
  ASSERT_TRUE(cpu::linear(x, w, Tensor(), view).is_ok());
  expect_close(view, reference(x, w, Tensor()), x, 96);
  for (int64_t m = 0; m < 4; ++m) {
    for (int64_t j : {0, 19, 70, 79}) EXPECT_EQ(wide.data<float>()[m * 80 + j], 0.0f);
  }
}

TEST(Fp8Linear, RejectsBadScales) {
  LinearWeight w = random_fp8(20, 30, {16, 16}, 400);
  Tensor x = random_f32({2, 30}, 401);
  Tensor out = Tensor::empty({2, 20}, DType::kF32);
  LinearWeight wrong = w;
  wrong.scale_inv = Tensor::zeros({1, 2}, DType::kF32);
  Status s = cpu::linear(x, wrong, Tensor(), out);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[2, 2]"), std::string::npos) << s.to_string();
  LinearWeight missing = w;
  missing.scale_inv = Tensor();
  EXPECT_FALSE(cpu::linear(x, missing, Tensor(), out).is_ok());
  LinearWeight strided = w;
  strided.scale_inv = Tensor::zeros({2, 4}, DType::kF32).slice(1, 0, 2);
  EXPECT_FALSE(cpu::linear(x, strided, Tensor(), out).is_ok());
}

// The stacked MoE experts with FP8 gate_up and down against the same op on their
// dequantized F32 stacks.
TEST(Fp8Linear, MoeExpertsMatchTheDequantizedExperts) {
  const int64_t experts = 5, hidden = 72, inter = 40, top_k = 2;
  for (WeightBlock block : {WeightBlock{128, 128}, WeightBlock{16, 32}, WeightBlock{1, 32}}) {
    SCOPED_TRACE(::testing::Message() << block.n << "x" << block.k);
    Tensor gu = random_f32({experts, 2 * inter, hidden}, 500, 0.1f);
    Tensor dn = random_f32({experts, hidden, inter}, 501, 0.1f);
    auto gu8 = quantize_fp8_blocks(gu, block, "gate_up");
    auto dn8 = quantize_fp8_blocks(dn, block, "down");
    ASSERT_TRUE(gu8.has_value() && dn8.has_value());
    auto gud = dequantize_fp8_blocks(*gu8);
    auto dnd = dequantize_fp8_blocks(*dn8);
    for (int64_t tokens : {1, 3, 20}) {
      Tensor x = random_f32({tokens, hidden}, 600 + tokens);
      Tensor w = Tensor::empty({tokens, top_k}, DType::kF32);
      Tensor ids = Tensor::empty({tokens, top_k}, DType::kI64);
      for (int64_t t = 0; t < tokens; ++t) {
        ids.data<int64_t>()[t * 2] = t % experts;
        ids.data<int64_t>()[t * 2 + 1] = (t * 3 + 1) % experts;
        w.data<float>()[t * 2] = 0.7f;
        w.data<float>()[t * 2 + 1] = 0.3f;
      }
      Tensor scratch = Tensor::empty({static_cast<int64_t>(cpu::moe_experts_scratch_bytes(
                                         tokens, top_k, hidden, inter, experts))},
                                     DType::kU8);
      Tensor got = Tensor::empty({tokens, hidden}, DType::kF32);
      Tensor want = Tensor::empty({tokens, hidden}, DType::kF32);
      Status s = cpu::moe_experts_stacked(x, *gu8, *dn8, w, ids, scratch, got);
      ASSERT_TRUE(s.is_ok()) << s.to_string();
      ASSERT_TRUE(cpu::moe_experts_stacked(x, *gud, *dnd, w, ids, scratch, want).is_ok());
      double err = 0, norm = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        const double d = got.data<float>()[i] - want.data<float>()[i];
        err += d * d;
        norm += double(want.data<float>()[i]) * want.data<float>()[i];
      }
      EXPECT_LE(std::sqrt(err / norm), 1e-6) << tokens << " tokens";
    }
  }
}

}  // namespace
}  // namespace test_fp8_linear
}  // namespace vllm
