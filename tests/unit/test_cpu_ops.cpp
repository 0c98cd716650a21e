// CPU ops (embedding, norms, activation, softmax, top_k) against naive double-precision
// references on random inputs of odd sizes, every weight dtype and aliasing where the API
// allows it, plus the error cases. linear is in test_cpu_linear.cpp, rotary in test_rope.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "base/float_convert.h"
#include "op_test_util.h"

namespace vllm {
namespace test_cpu_ops {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)

// ---------------------------------------------------------------- embedding

TEST(CpuEmbedding, CopiesDecodedRows) {
  struct Case {
    int64_t vocab, hidden, tokens;
  };
  for (Case c : {Case{1, 1, 1}, Case{7, 33, 5}, Case{129, 7, 33}, Case{1000, 129, 1000}}) {
    for (DType dtype : kWeightDTypes) {
      for (DType id_dtype : {DType::kI32, DType::kI64}) {
        Tensor table = cast_to(random_f32({c.vocab, c.hidden}, 3), dtype);
        Tensor ids = Tensor::empty({c.tokens}, id_dtype);
        std::mt19937 rng(7);
        std::vector<int64_t> id_values(static_cast<size_t>(c.tokens));
        for (int64_t t = 0; t < c.tokens; ++t) {
          id_values[t] = static_cast<int64_t>(rng() % c.vocab);
          if (id_dtype == DType::kI32)
            ids.data<int32_t>()[t] = static_cast<int32_t>(id_values[t]);
          else
            ids.data<int64_t>()[t] = id_values[t];
        }
        Tensor out = Tensor::empty({c.tokens, c.hidden}, DType::kF32);
        ASSERT_TRUE(cpu::embedding(ids, table, out).is_ok());
        std::vector<double> table_values = values_of(table);
        for (int64_t t = 0; t < c.tokens; ++t) {
          for (int64_t h = 0; h < c.hidden; ++h) {
            ASSERT_EQ(out.data<float>()[t * c.hidden + h],
                      table_values[static_cast<size_t>(id_values[t] * c.hidden + h)]);
          }
        }
      }
    }
  }
}

TEST(CpuEmbedding, RejectsBadInput) {
  Tensor table = random_f32({10, 4}, 1);
  Tensor ids = Tensor::empty({3}, DType::kI64);
  ids.data<int64_t>()[0] = 1;
  ids.data<int64_t>()[1] = 10;  // out of range
  ids.data<int64_t>()[2] = 2;
  Tensor out = Tensor::zeros({3, 4}, DType::kF32);
  expect_error(cpu::embedding(ids, table, out), ErrorCode::kOutOfRange,
               "token id 10 at position 1");
  EXPECT_EQ(out.data<float>()[0], 0.0f);  // nothing written
  ids.data<int64_t>()[1] = -1;
  expect_error(cpu::embedding(ids, table, out), ErrorCode::kOutOfRange, "token id -1");

  ids.data<int64_t>()[1] = 0;
  Tensor bad_out = Tensor::empty({3, 5}, DType::kF32);
  expect_error(cpu::embedding(ids, table, bad_out), ErrorCode::kInvalidArgument,
               "embedding: out has shape [3, 5], expected [3, 4]");
  Tensor float_ids = Tensor::empty({3}, DType::kF32);
  expect_error(cpu::embedding(float_ids, table, out), ErrorCode::kInvalidArgument,
               "token_ids has dtype F32, expected I32 or I64");
  Tensor int_table = Tensor::zeros({10, 4}, DType::kI32);
  expect_error(cpu::embedding(ids, int_table, out), ErrorCode::kInvalidArgument,
               "table has dtype I32, expected F32 or BF16 or F16");
  Tensor gpu_table =
      Tensor::borrow(table.data_ptr(), {10, 4}, DType::kF32, Device::cuda(0), nullptr);
  expect_error(cpu::embedding(ids, gpu_table, out), ErrorCode::kInvalidArgument, "cuda:0");
  expect_error(cpu::embedding(ids, Tensor(), out), ErrorCode::kInvalidArgument,
               "table is undefined");
}

// ---------------------------------------------------------------- rms_norm

std::vector<double> rms_norm_reference(const std::vector<double>& x, const std::vector<double>& w,
                                       int64_t rows, int64_t hidden, double eps, bool unit_offset) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < hidden; ++i) ss += x[r * hidden + i] * x[r * hidden + i];
    double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) {
      double wi = unit_offset ? 1.0 + w[i] : w[i];
      out[r * hidden + i] = x[r * hidden + i] * inv * wi;
    }
  }
  return out;
}

TEST(CpuRmsNorm, MatchesReference) {
  struct Case {
    int64_t rows, hidden;
  };
  for (Case c : {Case{1, 1}, Case{7, 33}, Case{33, 7}, Case{1000, 129}, Case{3, 1000}}) {
    for (DType dtype : kWeightDTypes) {
      for (bool unit_offset : {false, true}) {
        Tensor x = random_f32({c.rows, c.hidden}, 11, -3.0f, 3.0f);
        Tensor w = cast_to(random_f32({c.hidden}, 12, 0.5f, 1.5f), dtype);
        std::vector<double> expected =
            rms_norm_reference(values_of(x), values_of(w), c.rows, c.hidden, 1e-6, unit_offset);
        Tensor out = Tensor::empty({c.rows, c.hidden}, DType::kF32);
        ASSERT_TRUE(cpu::rms_norm(x, w, 1e-6f, unit_offset, out).is_ok());
        EXPECT_LT(rel_l2(out, expected), 1e-6) << c.rows << "x" << c.hidden;
        // In place (out aliases x).
        ASSERT_TRUE(cpu::rms_norm(x, w, 1e-6f, unit_offset, x).is_ok());
        EXPECT_LT(rel_l2(x, expected), 1e-6);
      }
    }
  }
}

TEST(CpuRmsNorm, FusedAddMatchesReference) {
  for (int64_t rows : {1, 7, 300}) {
    const int64_t hidden = 129;
    for (DType dtype : kWeightDTypes) {
      Tensor x = random_f32({rows, hidden}, 21);
      Tensor residual = random_f32({rows, hidden}, 22);
      Tensor w = cast_to(random_f32({hidden}, 23), dtype);
      std::vector<double> sum = values_of(x);
      std::vector<double> r = values_of(residual);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += r[i];
      std::vector<double> expected =
          rms_norm_reference(sum, values_of(w), rows, hidden, 1e-5, true);
      ASSERT_TRUE(cpu::fused_add_rms_norm(x, residual, w, 1e-5f, true).is_ok());
      EXPECT_LT(rel_l2(residual, sum), 1e-7);
      EXPECT_LT(rel_l2(x, expected), 1e-6);
    }
  }
}

TEST(CpuRmsNorm, RejectsBadInput) {
  Tensor x = random_f32({4, 8}, 1);
  Tensor out = Tensor::empty({4, 8}, DType::kF32);
  expect_error(cpu::rms_norm(x, random_f32({7}, 2), 1e-6f, false, out), ErrorCode::kInvalidArgument,
               "rms_norm: weight has shape [7], expected [8]");
  expect_error(cpu::rms_norm(cast_to(x, DType::kBF16), random_f32({8}, 2), 1e-6f, false, out),
               ErrorCode::kInvalidArgument, "rms_norm: x has dtype BF16, expected F32");
  Tensor bad_out = Tensor::empty({4, 9}, DType::kF32);
  expect_error(cpu::rms_norm(x, random_f32({8}, 2), 1e-6f, false, bad_out),
               ErrorCode::kInvalidArgument, "out has shape [4, 9], expected [4, 8]");
  Tensor residual = Tensor::empty({3, 8}, DType::kF32);
  expect_error(cpu::fused_add_rms_norm(x, residual, random_f32({8}, 2), 1e-6f, false),
               ErrorCode::kInvalidArgument, "residual has shape [3, 8], expected [4, 8]");
}

// ---------------------------------------------------------------- silu_and_mul

TEST(CpuSiluAndMul, MatchesReference) {
  struct Case {
    int64_t rows, inter;
  };
  for (Case c : {Case{1, 1}, Case{7, 33}, Case{1000, 129}, Case{2, 1000}}) {
    Tensor x = random_f32({c.rows, 2 * c.inter}, 31, -8.0f, 8.0f);
    std::vector<double> xv = values_of(x);
    std::vector<double> expected(static_cast<size_t>(c.rows * c.inter));
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int64_t i = 0; i < c.inter; ++i) {
        double g = xv[t * 2 * c.inter + i], u = xv[t * 2 * c.inter + c.inter + i];
        expected[t * c.inter + i] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    Tensor out = Tensor::empty({c.rows, c.inter}, DType::kF32);
    ASSERT_TRUE(cpu::silu_and_mul(x, out).is_ok());
    EXPECT_LT(rel_l2(out, expected), 1e-6);
  }
  Tensor odd = random_f32({2, 7}, 1);
  Tensor out = Tensor::empty({2, 3}, DType::kF32);
  expect_error(cpu::silu_and_mul(odd, out), ErrorCode::kInvalidArgument, "an even last dim");
  Tensor x = random_f32({2, 8}, 1);
  expect_error(cpu::silu_and_mul(x, out), ErrorCode::kInvalidArgument,
               "out has shape [2, 3], expected [2, 4]");
}

TEST(CpuAddInplace, AddsElementwiseAndChecksShapes) {
  for (int64_t rows : {1, 7, 300}) {
    Tensor dst = random_f32({rows, 129}, 5);
    Tensor src = random_f32({rows, 129}, 6);
    std::vector<double> expected = values_of(dst);
    std::vector<double> sv = values_of(src);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += sv[i];
    ASSERT_TRUE(cpu::add_inplace(dst, src).is_ok());
    EXPECT_LT(rel_l2(dst, expected), 1e-7);
  }
  Tensor dst = random_f32({2, 4}, 1);
  Tensor src = random_f32({2, 5}, 2);
  expect_error(cpu::add_inplace(dst, src), ErrorCode::kInvalidArgument,
               "src has shape [2, 5], expected [2, 4]");
}

// ---------------------------------------------------------------- softmax / top_k

TEST(CpuSoftmax, MatchesReferenceAndAliases) {
  struct Case {
    int64_t rows, n;
  };
  for (Case c : {Case{1, 1}, Case{7, 33}, Case{33, 1000}, Case{1000, 129}}) {
    Tensor x = random_f32({c.rows, c.n}, 41, -20.0f, 20.0f);
    if (c.n > 1) x.data<float>()[1] = 1000.0f;  // large values must not overflow
    std::vector<double> xv = values_of(x);
    std::vector<double> expected(xv.size());
    for (int64_t r = 0; r < c.rows; ++r) {
      double mx = -INFINITY, sum = 0.0;
      for (int64_t i = 0; i < c.n; ++i) mx = std::max(mx, xv[r * c.n + i]);
      for (int64_t i = 0; i < c.n; ++i) sum += std::exp(xv[r * c.n + i] - mx);
      for (int64_t i = 0; i < c.n; ++i)
        expected[r * c.n + i] = std::exp(xv[r * c.n + i] - mx) / sum;
    }
    Tensor out = Tensor::empty({c.rows, c.n}, DType::kF32);
    ASSERT_TRUE(cpu::softmax(x, out).is_ok());
    EXPECT_LT(rel_l2(out, expected), 1e-6);
    ASSERT_TRUE(cpu::softmax(x, x).is_ok());
    EXPECT_LT(rel_l2(x, expected), 1e-6);
  }
  Tensor x = random_f32({2, 3}, 1);
  Tensor out = Tensor::empty({3, 2}, DType::kF32);
  expect_error(cpu::softmax(x, out), ErrorCode::kInvalidArgument, "expected [2, 3]");
}

TEST(CpuTopK, OrdersDescendingWithTiesToLowerIndex) {
  Tensor x = Tensor::empty({2, 5}, DType::kF32);
  const float rows[2][5] = {{1, 3, 3, 2, 3}, {-1, -1, 5, -1, 4}};
  std::copy(&rows[0][0], &rows[0][0] + 10, x.data<float>());
  Tensor values = Tensor::empty({2, 3}, DType::kF32);
  Tensor indices = Tensor::empty({2, 3}, DType::kI64);
  ASSERT_TRUE(cpu::top_k(x, 3, values, indices).is_ok());
  const int64_t expected_idx[2][3] = {{1, 2, 4}, {2, 4, 0}};
  const float expected_val[2][3] = {{3, 3, 3}, {5, 4, -1}};
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(indices.data<int64_t>()[r * 3 + j], expected_idx[r][j]);
      EXPECT_EQ(values.data<float>()[r * 3 + j], expected_val[r][j]);
    }
  }
}

TEST(CpuTopK, MatchesStableSortOnRandomRowsWithTies) {
  struct Case {
    int64_t rows, n, k;
  };
  for (Case c : {Case{1, 1, 1}, Case{7, 33, 5}, Case{33, 1000, 33}, Case{300, 129, 129}}) {
    Tensor x = Tensor::empty({c.rows, c.n}, DType::kF32);
    std::mt19937 rng(51);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng() % 17);
    Tensor values = Tensor::empty({c.rows, c.k}, DType::kF32);
    Tensor indices = Tensor::empty({c.rows, c.k}, DType::kI64);
    ASSERT_TRUE(cpu::top_k(x, c.k, values, indices).is_ok());
    for (int64_t r = 0; r < c.rows; ++r) {
      const float* xr = x.data<float>() + r * c.n;
      std::vector<int64_t> order(static_cast<size_t>(c.n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return xr[a] > xr[b]; });
      for (int64_t j = 0; j < c.k; ++j) {
        ASSERT_EQ(indices.data<int64_t>()[r * c.k + j], order[j]) << "row " << r << " rank " << j;
        ASSERT_EQ(values.data<float>()[r * c.k + j], xr[order[j]]);
      }
    }
  }
}

TEST(CpuTopK, RejectsBadInput) {
  Tensor x = random_f32({2, 4}, 1);
  Tensor values = Tensor::empty({2, 5}, DType::kF32);
  Tensor indices = Tensor::empty({2, 5}, DType::kI64);
  expect_error(cpu::top_k(x, 5, values, indices), ErrorCode::kInvalidArgument, "1 <= k <= 4");
  expect_error(cpu::top_k(x, 0, values, indices), ErrorCode::kInvalidArgument, "k is 0");
  Tensor v2 = Tensor::empty({2, 2}, DType::kF32);
  Tensor i32 = Tensor::empty({2, 2}, DType::kI32);
  expect_error(cpu::top_k(x, 2, v2, i32), ErrorCode::kInvalidArgument,
               "indices has dtype I32, expected I64");
  expect_error(cpu::top_k(x, 2, values, indices), ErrorCode::kInvalidArgument,
               "values has shape [2, 5], expected [2, 2]");
}

}  // namespace
}  // namespace test_cpu_ops
}  // namespace vllm
