// The MoE expert kernels over block-scaled FP8 experts (W8A16) run on the CPU (emulator.h)
// against cpu::moe_experts_stacked on the same FP8 stacks, on every CI run: the per-pair
// gate/up and down kernels (the down product fused with the weighted combine) and the gather
// GEMV over a grouping built here as the device's grouping kernel would, in BF16 and F32
// activations, on the vector path (H, I and the block widths multiples of 16) and the
// element-wise one (odd H or I, 7 x 24 blocks, x rows off 16-byte boundaries), with blocks of
// 16 x 32, one scale row per weight row, an all-zero block and blocks at the e4m3 maximum
// (every block's largest weight quantises to it).
//
// Tolerances: BF16 1e-2 (the gather GEMV rounds each weight to BF16, and every kernel the SiLU
// product and each expert output once); F32 1e-5 (the same f32 weights, another summation
// order, the per-pair kernels scaling each 16-weight chunk's sum once).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cuda/moe_plan.cuh"
#include "cuda/cuda_test_util.h"
#include "tensor/block_fp8.h"

namespace vllm {
namespace {

using cuda::detail::MoeFp8Scales;
using cuda::detail::MoePairArgs;
using cuda::detail::MoePlan;
using cuda::detail::MoeProblem;

constexpr DType kBF16 = DType::kBF16;
constexpr DType kF32 = DType::kF32;

struct Case {
  int64_t tokens, hidden, inter, experts, top_k;
  WeightBlock block;
  int64_t x_offset = 0;  // x: columns [x_offset, x_offset + hidden) of rows of
  int64_t pad = 1;       // x_offset + hidden + pad (8: 16-byte rows, which the vector paths need)

  std::string name() const {
    return fmt::format(
        "{} tokens, hidden {}, intermediate {}, {} experts, top-{}, {}x{} blocks, "
        "x at +{}",
        tokens, hidden, inter, experts, top_k, block.n, block.k, x_offset);
  }
};

// [E, rows, cols] random weights quantised to block FP8; expert 0's first block all zeros.
LinearWeight fp8_stack(int64_t experts, int64_t rows, int64_t cols, WeightBlock block,
                       std::mt19937& rng) {
  Tensor w = cuda_test::random_tensor({experts, rows, cols}, kF32, rng, 0.0f,
                                      1.0f / std::sqrt(static_cast<float>(cols)));
  float* v = w.data<float>();
  for (int64_t r = 0; r < std::min(rows, block.n); ++r) {
    for (int64_t c = 0; c < std::min(cols, block.k); ++c) v[r * cols + c] = 0.0f;
  }
  auto q = quantize_fp8_blocks(w, block, "expert stack");
  EXPECT_TRUE(q.has_value()) << q.status().to_string();
  return *q;
}

MoeFp8Scales scales_of(const LinearWeight& w) {
  MoeFp8Scales s;
  s.at = w.scale_inv.data<float>();
  s.expert_stride = w.scale_inv.size(1) * w.scale_inv.size(2);
  s.cols_grid = w.scale_inv.size(2);
  s.block_n = static_cast<int>(w.block.n);
  s.block_k = static_cast<int>(w.block.k);
  return s;
}

// Distinct experts per token, positive weights summing to 1.
void make_routing(int64_t tokens, int64_t experts, int64_t k, std::mt19937& rng, Tensor& ids,
                  Tensor& weights) {
  ids = Tensor::empty({tokens, k}, DType::kI64);
  weights = Tensor::empty({tokens, k}, kF32);
  std::vector<int64_t> pool(static_cast<size_t>(experts));
  std::iota(pool.begin(), pool.end(), 0);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      ids.data<int64_t>()[t * k + i] = pool[static_cast<size_t>(i)];
      sum += weights.data<float>()[t * k + i] = u(rng);
    }
    for (int64_t i = 0; i < k; ++i) weights.data<float>()[t * k + i] /= sum;
  }
}

struct Inputs {
  LinearWeight gate_up, down;  // FP8 stacks
  Tensor x_all;                // [T, x_offset + H + 1] in the activation dtype
  Tensor ids, weights;
  Tensor ref;  // [T, H] F32: the CPU op
};

Inputs make_inputs(const Case& c, DType dtype, std::mt19937& rng) {
  Inputs in;
  in.gate_up = fp8_stack(c.experts, 2 * c.inter, c.hidden, c.block, rng);
  in.down = fp8_stack(c.experts, c.hidden, c.inter, c.block, rng);
  in.x_all =
      cuda_test::random_tensor({c.tokens, c.x_offset + c.hidden + c.pad}, dtype, rng, 0.0f, 1.0f);
  make_routing(c.tokens, c.experts, c.top_k, rng, in.ids, in.weights);
  const Tensor x = cuda_test::to_f32(in.x_all).slice(1, c.x_offset, c.x_offset + c.hidden).clone();
  in.ref = Tensor::empty({c.tokens, c.hidden}, kF32);
  Tensor scratch = Tensor::empty({static_cast<int64_t>(cpu::moe_experts_scratch_bytes(
                                     c.tokens, c.top_k, c.hidden, c.inter, c.experts))},
                                 DType::kU8);
  const Status s =
      cpu::moe_experts_stacked(x, in.gate_up, in.down, in.weights, in.ids, scratch, in.ref);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return in;
}

MoeProblem problem_of(const Case& c, DType dtype, const Inputs& in, void* act, void* y) {
  MoeProblem p;
  p.dtype = dtype;
  p.fp8 = true;
  p.gate_up_scales = scales_of(in.gate_up);
  p.down_scales = scales_of(in.down);
  p.x = static_cast<const char*>(in.x_all.data_ptr()) +
        c.x_offset * static_cast<int64_t>(dtype_size(dtype));
  p.ldx = c.x_offset + c.hidden + c.pad;
  p.gate_up = in.gate_up.weight.data_ptr();
  p.down = in.down.weight.data_ptr();
  p.act = act;
  p.y = y;
  p.tokens = c.tokens;
  p.hidden = c.hidden;
  p.inter = c.inter;
  return p;
}

double tolerance(DType dtype) {
  return dtype == kF32 ? 1e-5 : 1e-2;
}

void run_pair(const Case& c, DType dtype, std::mt19937& rng) {
  SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)) + " per-pair");
  const Inputs in = make_inputs(c, dtype, rng);
  Tensor act = cuda_test::fill_nan({c.tokens * c.top_k, c.inter}, dtype);
  Tensor out = cuda_test::fill_nan({c.tokens, c.hidden}, dtype);
  const MoeProblem p = problem_of(c, dtype, in, act.data_ptr(), nullptr);
  MoePairArgs a;
  a.ids = in.ids.data<int64_t>();
  a.weights = in.weights.data<float>();
  a.out = out.data_ptr();
  a.out_stride = c.hidden;
  a.experts = static_cast<int>(c.experts);
  a.top_k = static_cast<int>(c.top_k);
  const Status s = cuda::detail::launch_moe_pair_gemv(p, a, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(cuda_test::relative_l2(cuda_test::to_f32(out), in.ref, tolerance(dtype)));
}

// The grouping the device's plan kernel makes (moe.cu), without padding: each expert's pairs
// in pair order.
struct HostPlan {
  std::vector<int32_t> offsets, sorted_pairs, pair_row, active;
  int32_t num_active = 0;
};

HostPlan group(const Tensor& ids, int64_t experts) {
  HostPlan h;
  const int64_t pairs = ids.numel();
  h.offsets.assign(static_cast<size_t>(experts + 1), 0);
  h.pair_row.assign(static_cast<size_t>(pairs), -1);
  for (int64_t p = 0; p < pairs; ++p) ++h.offsets[static_cast<size_t>(ids.data<int64_t>()[p] + 1)];
  for (int64_t e = 0; e < experts; ++e) {
    if (h.offsets[static_cast<size_t>(e + 1)] > 0) h.active.push_back(static_cast<int32_t>(e));
    h.offsets[static_cast<size_t>(e + 1)] += h.offsets[static_cast<size_t>(e)];
  }
  h.num_active = static_cast<int32_t>(h.active.size());
  h.sorted_pairs.assign(static_cast<size_t>(pairs), -1);
  std::vector<int32_t> next(h.offsets.begin(), h.offsets.end() - 1);
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t row = next[static_cast<size_t>(ids.data<int64_t>()[p])]++;
    h.sorted_pairs[static_cast<size_t>(row)] = static_cast<int32_t>(p);
    h.pair_row[static_cast<size_t>(p)] = row;
  }
  return h;
}

// The gather GEMV's per-pair expert outputs y, combined here in f32 as the combine kernel
// does: out[t] = sum_i weight[t, i] * y[row of (t, i)].
void run_gather(const Case& c, DType dtype, std::mt19937& rng) {
  SCOPED_TRACE(c.name() + " " + std::string(dtype_name(dtype)) + " gather GEMV");
  const Inputs in = make_inputs(c, dtype, rng);
  const int64_t pairs = c.tokens * c.top_k;
  HostPlan h = group(in.ids, c.experts);
  Tensor act = cuda_test::fill_nan({pairs, c.inter}, dtype);
  Tensor y = cuda_test::fill_nan({pairs, c.hidden}, dtype);
  const MoeProblem p = problem_of(c, dtype, in, act.data_ptr(), y.data_ptr());
  MoePlan plan;
  plan.offsets = h.offsets.data();
  plan.sorted_pairs = h.sorted_pairs.data();
  plan.pair_row = h.pair_row.data();
  plan.active = h.active.data();
  plan.num_active = &h.num_active;
  plan.pairs = pairs;
  plan.capacity = pairs;
  plan.max_active = static_cast<int>(std::min(c.experts, pairs));
  plan.row_align = 1;
  plan.num_experts = static_cast<int>(c.experts);
  plan.top_k = static_cast<int>(c.top_k);
  const Status s = cuda::detail::launch_moe_gemv(p, plan, nullptr);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  const Tensor yf = cuda_test::to_f32(y);
  Tensor out = Tensor::empty({c.tokens, c.hidden}, kF32);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t col = 0; col < c.hidden; ++col) {
      float acc = 0.0f;
      for (int64_t i = 0; i < c.top_k; ++i) {
        const int64_t row = h.pair_row[static_cast<size_t>(t * c.top_k + i)];
        acc += in.weights.data<float>()[t * c.top_k + i] * yf.data<float>()[row * c.hidden + col];
      }
      out.data<float>()[t * c.hidden + col] = acc;
    }
  }
  EXPECT_TRUE(cuda_test::relative_l2(out, in.ref, tolerance(dtype)));
}

// An emulated block costs about its threads and their warp sums, one per output (pair, row):
// two tokens are enough for every path (row strides, a token's pairs summed in slot order), so
// no case has more.
// Rows of x 16-byte aligned (pad 8): with more than one token the vector paths need that.
const Case kVectorCases[] = {
    {2, 64, 48, 6, 2, {16, 32}, 0, 8},
    {2, 128, 64, 5, 3, {1, 128}, 0, 8},  // one scale row per weight row
    {2, 96, 32, 4, 4, {16, 16}, 0, 8},   // every expert in every token
    {1, 64, 48, 6, 2, {16, 32}},         // one token: any row stride
};
const Case kElementCases[] = {
    {2, 56, 40, 10, 3, {16, 32}},    // the golden qwen3_5_moe_fp8's shapes
    {2, 96, 72, 6, 2, {7, 24}},      // block widths off multiples of 16
    {2, 64, 48, 6, 2, {16, 32}, 1},  // x rows off 16-byte boundaries
};

TEST(MoeFp8Emulated, PerPairKernelsMatchCpu) {
  std::mt19937 rng(1717);
  for (const Case& c : kVectorCases) {
    for (DType dtype : {kBF16, kF32}) run_pair(c, dtype, rng);
  }
  for (const Case& c : kElementCases) {
    for (DType dtype : {kBF16, kF32}) run_pair(c, dtype, rng);
  }
}

TEST(MoeFp8Emulated, GatherGemvMatchesCpu) {
  std::mt19937 rng(1818);
  // The first case's tokens pick every expert, so each expert has more rows (9) than the
  // kernel's 8 tokens a pass and walks its weight rows twice (the second pass partial). The
  // others have 3 tokens: an emulated warp costs about its warp sums, one per output (pair,
  // row), and the row grouping is as irregular with fewer pairs.
  const Case cases[] = {
      {9, 64, 48, 2, 2, {16, 32}},
      {3, 64, 32, 5, 3, {1, 32}},
      {3, 56, 40, 10, 3, {16, 32}},
      {3, 48, 24, 4, 2, {7, 24}, 1},
  };
  for (const Case& c : cases) {
    for (DType dtype : {kBF16, kF32}) run_gather(c, dtype, rng);
  }
}

}  // namespace
}  // namespace vllm
