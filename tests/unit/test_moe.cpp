// MoE CPU ops (moe.h): routing (softmax, top-k, optional renormalisation) and expert
// dispatch against naive double-precision references, for every weight dtype and for expert
// weights that are views into one fused [E, 2I, H] tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cpu/moe.h"
#include "op_test_util.h"

namespace vllm {
namespace test_moe {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)

TEST(MoeRoute, SoftmaxTopKAndRenormalisation) {
  const int64_t tokens = 7, experts = 9, k = 3;
  Tensor logits = random_f32({tokens, experts}, 3, -4, 4);
  logits.data<float>()[0] = logits.data<float>()[1];  // a tie: the lower id comes first
  for (bool renormalize : {false, true}) {
    Tensor w = Tensor::empty({tokens, k}, DType::kF32);
    Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
    ASSERT_TRUE(cpu::moe_route(logits, k, renormalize, w, ids).is_ok());
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = logits.data<float>() + t * experts;
      std::vector<double> p(row, row + experts);
      const double mx = *std::max_element(p.begin(), p.end());
      double sum = 0;
      for (double& v : p) sum += (v = std::exp(v - mx));
      for (double& v : p) v /= sum;
      std::vector<int64_t> order(static_cast<size_t>(experts));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return p[a] > p[b]; });
      double kept = 0;
      for (int64_t i = 0; i < k; ++i) kept += p[order[i]];
      for (int64_t i = 0; i < k; ++i) {
        EXPECT_EQ(ids.data<int64_t>()[t * k + i], order[i]) << t << " " << i;
        const double expected = renormalize ? p[order[i]] / kept : p[order[i]];
        EXPECT_NEAR(w.data<float>()[t * k + i], expected, 1e-6);
      }
    }
  }
}

// Naive expert MLPs in double: sum_i w_i * down(silu(gate x) * up x).
std::vector<double> experts_reference(const Tensor& x, const std::vector<std::vector<double>>& gate,
                                      const std::vector<std::vector<double>>& up,
                                      const std::vector<std::vector<double>>& down, const Tensor& w,
                                      const Tensor& ids, int64_t inter) {
  const int64_t tokens = x.size(0), hidden = x.size(1), k = w.size(1);
  std::vector<double> xv = values_of(x.is_contiguous() ? x : x.clone());
  std::vector<double> out(static_cast<size_t>(tokens * hidden), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t e = ids.data<int64_t>()[t * k + s];
      std::vector<double> act(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          g += gate[e][i * hidden + c] * xv[t * hidden + c];
          u += up[e][i * hidden + c] * xv[t * hidden + c];
        }
        act[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < hidden; ++c) {
        double y = 0;
        for (int64_t i = 0; i < inter; ++i) y += down[e][c * inter + i] * act[i];
        out[t * hidden + c] += w.data<float>()[t * k + s] * y;
      }
    }
  }
  return out;
}

TEST(MoeExperts, MatchesReferenceForEveryDtypeAndFusedViews) {
  const int64_t tokens = 11, hidden = 24, inter = 10, experts = 5, k = 2;
  Tensor wide = random_f32({tokens, hidden + 5}, 9);
  Tensor x = wide.slice(1, 2, 2 + hidden);  // strided rows
  Tensor logits = random_f32({tokens, experts}, 10, -3, 3);
  Tensor w = Tensor::empty({tokens, k}, DType::kF32);
  Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
  ASSERT_TRUE(cpu::moe_route(logits, k, true, w, ids).is_ok());
  for (DType dtype : kWeightDTypes) {
    for (bool fused : {false, true}) {
      cpu::MoeExpertWeights ew;
      std::vector<std::vector<double>> gate, up, down;
      Tensor gate_up_all = cast_to(random_f32({experts, 2 * inter, hidden}, 20, -0.5, 0.5), dtype);
      Tensor down_all = cast_to(random_f32({experts, hidden, inter}, 21, -0.5, 0.5), dtype);
      for (int64_t e = 0; e < experts; ++e) {
        Tensor gu = gate_up_all.slice(0, e, e + 1).view({2 * inter, hidden});
        Tensor g = gu.slice(0, 0, inter), u = gu.slice(0, inter, 2 * inter);
        Tensor d = down_all.slice(0, e, e + 1).view({hidden, inter});
        if (!fused) {
          g = g.clone();
          u = u.clone();
          d = d.clone();
        }
        gate.push_back(values_of(g.clone()));
        up.push_back(values_of(u.clone()));
        down.push_back(values_of(d.clone()));
        ew.gate_proj.push_back(g);
        ew.up_proj.push_back(u);
        ew.down_proj.push_back(d);
      }
      Tensor out = Tensor::empty({tokens, hidden}, DType::kF32);
      ASSERT_TRUE(cpu::moe_experts(x, ew, w, ids, out).is_ok());
      EXPECT_LT(rel_l2(out, experts_reference(x, gate, up, down, w, ids, inter)), 1e-5)
          << dtype_name(dtype) << (fused ? " fused" : "");
    }
  }
}

TEST(MoeExperts, StackedIsBitwiseThePerExpertOp) {
  const int64_t tokens = 13, hidden = 40, inter = 24, experts = 6, k = 2;
  Tensor wide = random_f32({tokens, hidden + 3}, 31);
  Tensor x = wide.slice(1, 1, 1 + hidden);  // strided rows
  Tensor logits = random_f32({tokens, experts}, 32, -3, 3);
  Tensor w = Tensor::empty({tokens, k}, DType::kF32);
  Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
  ASSERT_TRUE(cpu::moe_route(logits, k, true, w, ids).is_ok());
  for (DType dtype : kWeightDTypes) {
    for (int64_t rows : {int64_t{1}, int64_t{3}, tokens}) {  // decode and prefill sizes
      Tensor xs = x.slice(0, 0, rows), ws = w.slice(0, 0, rows), is = ids.slice(0, 0, rows);
      Tensor gate_up = cast_to(random_f32({experts, 2 * inter, hidden}, 33, -0.5, 0.5), dtype);
      Tensor down = cast_to(random_f32({experts, hidden, inter}, 34, -0.5, 0.5), dtype);
      Tensor want = Tensor::empty({rows, hidden}, DType::kF32);
      ASSERT_TRUE(
          cpu::moe_experts(xs, cpu::experts_from_stacked(gate_up, down), ws, is, want).is_ok());
      const auto bytes =
          static_cast<int64_t>(cpu::moe_experts_scratch_bytes(rows, k, hidden, inter, experts));
      Tensor scratch = Tensor::empty({bytes}, DType::kU8);
      Tensor got = Tensor::empty({rows, hidden}, DType::kF32);
      ASSERT_TRUE(cpu::moe_experts_stacked(xs, gate_up, down, ws, is, scratch, got).is_ok());
      EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0)
          << dtype_name(dtype) << " rows=" << rows;
      Tensor small = Tensor::empty({bytes - 1}, DType::kU8);
      expect_error(cpu::moe_experts_stacked(xs, gate_up, down, ws, is, small, got),
                   ErrorCode::kInvalidArgument, "scratch has");
    }
  }
}

TEST(MoeExperts, RejectsBadIds) {
  Tensor x = random_f32({2, 4}, 1);
  cpu::MoeExpertWeights ew;
  for (int e = 0; e < 2; ++e) {
    ew.gate_proj.push_back(random_f32({3, 4}, 2));
    ew.up_proj.push_back(random_f32({3, 4}, 3));
    ew.down_proj.push_back(random_f32({4, 3}, 4));
  }
  Tensor w = random_f32({2, 1}, 5);
  Tensor ids = Tensor::empty({2, 1}, DType::kI64);
  ids.data<int64_t>()[0] = 1;
  ids.data<int64_t>()[1] = 2;
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  expect_error(cpu::moe_experts(x, ew, w, ids, out), ErrorCode::kOutOfRange, "topk_ids[1, 0] = 2");
  ew.down_proj.pop_back();
  expect_error(cpu::moe_experts(x, ew, w, ids, out), ErrorCode::kInvalidArgument, "experts have");
}

}  // namespace
}  // namespace test_moe
}  // namespace vllm
