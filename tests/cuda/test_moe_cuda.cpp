// Backend parity for the MoE ops (backend/cuda/moe.cuh): cuda::moe_route against
// cpu::moe_route, and cuda::moe_experts on each of its paths (gather GEMV, grouped GEMM with 32-
// and 128-row tiles, and the automatic choice) against cpu::moe_experts plus the shared
// expert's cpu::add_sigmoid_gated, on random inputs.
//
// Shapes: Qwen3.5-35B-A3B (hidden 2048, 256 experts of 512, top-8) from one token to a
// prefill of 1100, Qwen3-Next-80B (512 experts, top-10), 122B-A10B's expert shapes (hidden
// 3072, intermediate 1024), the golden checkpoints' odd ones (hidden 56 / 60, intermediate 40,
// 10 / 6 experts), the demo model's, and top-k 1..10.
// Routings: random, a few experts for the whole batch (most get no token), one expert in
// every token. Outputs start as NaN and the scratch as 0x7F bytes (huge values), so an
// unwritten output or a read of an unwritten intermediate fails; sliced operands check row
// strides and that columns outside the output stay untouched.
//
// Block-scaled FP8 experts (W8A16) run every path against cpu::moe_experts_stacked on the same
// FP8 stacks (quantised from random weights, so every block holds a weight at the e4m3
// maximum; expert 0 starts with an all-zero block): Qwen's 128 x 128 blocks on the real
// expert shapes, 16 x 32 blocks and one scale row per weight row on odd shapes (the
// element-wise kernels), BF16 and F32 activations.
//
// BF16 runs compare with the CPU ops in f32 on the same (bf16) values: relative L2 <= 1e-2
// (the SiLU product and each expert output are rounded to bf16 once). F32: 1e-5. Router ids
// must be equal: logits are multiples of 1/64, so ties are exact (the lower id wins on both
// backends) and distinct values are never within rounding of each other. Without a GPU every
// test is skipped.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/gates.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/runtime.h"
#include "base/float_convert.h"
#include "cuda_device_util.h"
#include "cuda_test_util.h"
#include "ops/exec_context.h"
#include "ops/ops.h"
#include "tensor/block_fp8.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::kAligned;
using cuda_test::kContiguous;
using cuda_test::kUnaligned;
using cuda_test::Layout;
using cuda_test::nan_operand;
using cuda_test::Operand;
using cuda_test::random_operand;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_device;
using cuda_test::to_f32;
using cuda_test::to_host;
using cuda_test::to_host_f32;

constexpr cudaStream_t kStream = nullptr;

#define ASSERT_OK(expr)                                  \
  do {                                                   \
    ::vllm::Status status_ = (expr);                     \
    ASSERT_TRUE(status_.is_ok()) << status_.to_string(); \
  } while (0)

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 1e-5 : 1e-2;
}

class MoeCuda : public cuda_test::CudaTest {
 protected:
  std::mt19937 rng_{20250414};
};

// Multiples of 1/64 in [-8, 8): exact ties are common, distinct values far apart.
Tensor quantised_logits(int64_t rows, int64_t cols, std::mt19937& rng) {
  Tensor t = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = static_cast<float>(static_cast<int>(rng() % 1024) - 512) / 64.0f;
  }
  return t;
}

::testing::AssertionResult same_ids(const Tensor& got, const Tensor& ref) {
  if (!got.defined() || got.shape() != ref.shape()) return ::testing::AssertionFailure() << "shape";
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (got.data<int64_t>()[i] != ref.data<int64_t>()[i]) {
      return ::testing::AssertionFailure()
             << "id " << i << " (token " << i / ref.size(1) << ", slot " << i % ref.size(1)
             << ") is " << got.data<int64_t>()[i] << ", expected " << ref.data<int64_t>()[i];
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor i64_filled(const Shape& shape, int64_t value) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  std::fill_n(t.data<int64_t>(), t.numel(), value);
  return t;
}

// ---- moe_route -----------------------------------------------------------------------------

struct RouteCase {
  std::string name;
  int64_t tokens, experts, top_k;
};

const RouteCase kRouteCases[] = {
    {"golden qwen3_5_moe", 37, 10, 3}, {"golden qwen3_next", 37, 6, 2},
    {"demo model", 50, 8, 2},          {"Qwen3.5-35B-A3B", 300, 256, 8},
    {"Qwen3-Next-80B", 300, 512, 10},  {"top-1 of 64", 20, 64, 1},
    {"top-32 of 1024", 40, 1024, 32},  {"one expert", 5, 1, 1},
    {"odd: top-5 of 33", 77, 33, 5},   {"all experts: top-8 of 8", 9, 8, 8},
};

TEST_F(MoeCuda, RouteMatchesCpu) {
  for (const RouteCase& c : kRouteCases) {
    for (bool renormalize : {false, true}) {
      SCOPED_TRACE(c.name + (renormalize ? ", renormalised" : ""));
      const int64_t t = c.tokens, e = c.experts, k = c.top_k;
      // The router's E columns of a [T, E + 1] GEMM output, as the model passes them.
      Tensor logits = quantised_logits(t, e + 1, rng_);
      Tensor ref_w = Tensor::empty({t, k}, DType::kF32);
      Tensor ref_ids = Tensor::empty({t, k}, DType::kI64);
      ASSERT_OK(cpu::moe_route(logits.slice(1, 0, e), k, renormalize, ref_w, ref_ids));
      Tensor logits_gpu = to_device(logits);
      Tensor w = to_device(fill_nan({t, k}, DType::kF32));
      Tensor ids = to_device(i64_filled({t, k}, -7));
      ASSERT_OK(cuda::moe_route(logits_gpu.slice(1, 0, e), k, renormalize, w, ids, kStream));
      EXPECT_TRUE(same_ids(to_host(ids), ref_ids));
      EXPECT_TRUE(relative_l2(to_host_f32(w), ref_w, 1e-5));
    }
  }
}

// With the shared expert's slot: slot k is expert E with weight sigmoid(column E); slots
// 0..k-1 are the plain routing of columns 0..E-1 (the op layer's CPU path is the reference).
TEST_F(MoeCuda, RouteWithSharedSlotMatchesCpu) {
  auto cpu_rt = DeviceRuntime::create(Device::cpu(), DType::kF32);
  ASSERT_TRUE(cpu_rt.has_value());
  for (const RouteCase& c : kRouteCases) {
    if (c.top_k + 1 > cuda::kMoeMaxTopK) continue;
    SCOPED_TRACE(c.name);
    const int64_t t = c.tokens, e = c.experts, k = c.top_k;
    Tensor logits = quantised_logits(t, e + 1, rng_);
    Tensor ref_w = Tensor::empty({t, k + 1}, DType::kF32);
    Tensor ref_ids = Tensor::empty({t, k + 1}, DType::kI64);
    ASSERT_OK(ops::moe_route((*cpu_rt)->context(), logits, k, true, ref_w, ref_ids, true));
    for (int64_t r = 0; r < t; ++r) {
      ASSERT_EQ(ref_ids.data<int64_t>()[r * (k + 1) + k], e);
    }
    Tensor w = to_device(fill_nan({t, k + 1}, DType::kF32));
    Tensor ids = to_device(i64_filled({t, k + 1}, -7));
    ASSERT_OK(cuda::moe_route(to_device(logits), k, true, w, ids, kStream, true));
    EXPECT_TRUE(same_ids(to_host(ids), ref_ids));
    EXPECT_TRUE(relative_l2(to_host_f32(w), ref_w, 1e-5));
  }
}

// NaN or +inf anywhere, or -inf everywhere, gives NaN probabilities (ids 0..k-1, NaN
// weights) on both backends; a -inf among finite logits is a zero probability.
TEST_F(MoeCuda, RouteNonFiniteRowsMatchCpu) {
  const int64_t tokens = 6, experts = 12, k = 4;
  Tensor logits = quantised_logits(tokens, experts, rng_);
  float* l = logits.data<float>();
  l[0 * experts + 3] = NAN;
  l[1 * experts + 2] = INFINITY;
  for (int64_t e = 0; e < experts; ++e) l[2 * experts + e] = -INFINITY;
  l[3 * experts + 5] = -INFINITY;
  l[5 * experts + 1] = INFINITY;
  l[5 * experts + 9] = INFINITY;
  for (bool renormalize : {false, true}) {
    Tensor ref_w = Tensor::empty({tokens, k}, DType::kF32);
    Tensor ref_ids = Tensor::empty({tokens, k}, DType::kI64);
    ASSERT_OK(cpu::moe_route(logits, k, renormalize, ref_w, ref_ids));
    Tensor w = to_device(fill_nan({tokens, k}, DType::kF32));
    Tensor ids = to_device(i64_filled({tokens, k}, -7));
    ASSERT_OK(cuda::moe_route(to_device(logits), k, renormalize, w, ids, kStream));
    EXPECT_TRUE(same_ids(to_host(ids), ref_ids));
    Tensor got = to_host_f32(w);
    for (int64_t i = 0; i < ref_w.numel(); ++i) {
      const float g = got.data<float>()[i], r = ref_w.data<float>()[i];
      EXPECT_TRUE((std::isnan(g) && std::isnan(r)) || std::abs(g - r) <= 1e-6f)
          << "weight " << i << ": " << g << " vs " << r;
    }
  }
}

TEST_F(MoeCuda, RouteRejectsBadArguments) {
  Tensor logits = to_device(quantised_logits(4, 8, rng_));
  Tensor w = to_device(fill_nan({4, 9}, DType::kF32));
  Tensor ids = to_device(i64_filled({4, 9}, 0));
  EXPECT_FALSE(cuda::moe_route(logits, 9, true, w, ids, kStream).is_ok());  // k > E
  Tensor big = to_device(quantised_logits(2, 1025, rng_));
  Tensor w2 = to_device(fill_nan({2, 2}, DType::kF32));
  Tensor ids2 = to_device(i64_filled({2, 2}, 0));
  EXPECT_EQ(cuda::moe_route(big, 2, true, w2, ids2, kStream).code(), ErrorCode::kUnsupported);
}

// ---- moe_experts ---------------------------------------------------------------------------

enum class Dist {
  kRandom,        // each token: k distinct experts drawn from all E
  kFewExperts,    // the batch draws from k + 1 experts: most experts get no token
  kOneExpertAll,  // expert E - 1 in every token (at a random slot)
};

// Random routing: ids I64 [T, k] (distinct per token) and positive weights summing to 1.
std::pair<Tensor, Tensor> make_routing(int64_t tokens, int64_t experts, int64_t k, Dist dist,
                                       std::mt19937& rng) {
  Tensor ids = Tensor::empty({tokens, k}, DType::kI64);
  Tensor weights = Tensor::empty({tokens, k}, DType::kF32);
  std::vector<int64_t> all(static_cast<size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> pool = all;
  if (dist == Dist::kFewExperts) pool.resize(static_cast<size_t>(std::min(experts, k + 1)));
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int64_t> pick(pool.begin(), pool.begin() + k);
    if (dist == Dist::kOneExpertAll &&
        std::find(pick.begin(), pick.end(), experts - 1) == pick.end()) {
      pick[rng() % static_cast<size_t>(k)] = experts - 1;
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      ids.data<int64_t>()[t * k + i] = pick[static_cast<size_t>(i)];
      sum += weights.data<float>()[t * k + i] = u(rng);
    }
    for (int64_t i = 0; i < k; ++i) weights.data<float>()[t * k + i] /= sum;
  }
  return {weights, ids};
}

// Stacked experts on the device (uniform, variance-preserving scales) and a host copy for
// the CPU op. Kept across tests: the 512-expert set is 3 GiB.
struct ExpertSet {
  Tensor gate_up, down;            // device
  Tensor host_gate_up, host_down;  // host, same dtype
};

const ExpertSet& expert_set(int64_t experts, int64_t hidden, int64_t inter, DType dtype) {
  static std::map<std::tuple<int64_t, int64_t, int64_t, DType>, ExpertSet> cache;
  const auto key = std::make_tuple(experts, hidden, inter, dtype);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  ExpertSet s;
  s.gate_up = Tensor::try_empty({experts, 2 * inter, hidden}, dtype, Device::cuda()).value();
  s.down = Tensor::try_empty({experts, hidden, inter}, dtype, Device::cuda()).value();
  const float a_gu = std::sqrt(3.0f / static_cast<float>(hidden));
  const float a_dn = std::sqrt(3.0f / static_cast<float>(inter));
  const uint64_t seed = static_cast<uint64_t>(experts * 1000003 + hidden * 1009 + inter);
  VLLM_CHECK(cuda::fill_uniform(s.gate_up, -a_gu, a_gu, seed, kStream).is_ok());
  VLLM_CHECK(cuda::fill_uniform(s.down, -a_dn, a_dn, seed + 1, kStream).is_ok());
  s.host_gate_up = cuda::copy_to_host(s.gate_up).value();
  s.host_down = cuda::copy_to_host(s.down).value();
  return cache.emplace(key, std::move(s)).first->second;
}

struct ExpertsCase {
  std::string name;
  int64_t tokens, hidden, inter, experts, top_k;
  Dist dist = Dist::kRandom;
  bool shared = true;
  Layout x_layout = kContiguous;
  Layout out_layout = kContiguous;
};

std::string path_name(cuda::MoePath path) {
  switch (path) {
    case cuda::MoePath::kPairGemv:
      return "per-pair GEMV";
    case cuda::MoePath::kGatherGemv:
      return "gather GEMV";
    case cuda::MoePath::kGroupedGemm:
      return "grouped GEMM";
    case cuda::MoePath::kGroupedGemmW8A8:
      return "grouped GEMM, W8A8";
    default:
      return "auto";
  }
}

// The case on every path its shapes allow, against one CPU reference.
void check_experts(const ExpertsCase& c, DType dtype, std::mt19937& rng) {
  SCOPED_TRACE(c.name + " " + std::string(dtype_name(dtype)));
  const int64_t t = c.tokens, h = c.hidden, e = c.experts, k = c.top_k;
  const ExpertSet& w = expert_set(e, h, c.inter, dtype);
  const Operand x = random_operand(t, h, dtype, c.x_layout, rng);
  auto [weights, ids] = make_routing(t, e, k, c.dist, rng);
  // The shared expert: its output, and its gate logit as the model has it (column E of the
  // F32 router output) or, for odd cases, in the activation dtype.
  const Tensor shared_out = random_tensor({t, h}, dtype, rng, 0.0f, 1.0f);
  const DType gate_dtype = c.x_layout.offset == 0 ? DType::kF32 : dtype;
  const Tensor router_out = random_tensor({t, e + 1}, gate_dtype, rng, 0.0f, 2.0f);

  Tensor ref = Tensor::empty({t, h}, DType::kF32);
  ASSERT_OK(cpu::moe_experts(x.input_f32(), cpu::experts_from_stacked(w.host_gate_up, w.host_down),
                             weights, ids, ref));
  if (c.shared) {
    ASSERT_OK(cpu::add_sigmoid_gated(ref, to_f32(shared_out),
                                     to_f32(router_out).slice(1, e, e + 1).clone()));
  }

  const Tensor weights_gpu = to_device(weights), ids_gpu = to_device(ids);
  const Tensor shared_gpu = to_device(shared_out), router_gpu = to_device(router_out);
  std::vector<cuda::MoePath> paths = {cuda::MoePath::kGatherGemv, cuda::MoePath::kAuto};
  const bool grouped = dtype == DType::kBF16 && h % 8 == 0 && c.inter % 8 == 0 &&
                       c.x_layout.offset % 8 == 0 && c.x_layout.pad % 8 == 0;
  if (grouped) paths.push_back(cuda::MoePath::kGroupedGemm);
  // The per-pair path is the default only for a few tokens, but is right for any batch.
  if (h * static_cast<int64_t>(dtype_size(dtype)) <= 48 * 1024) {
    paths.push_back(cuda::MoePath::kPairGemv);
  }
  for (cuda::MoePath path : paths) {
    SCOPED_TRACE(path_name(path));
    cuda::MoeExpertsArgs args;
    args.gate_up = w.gate_up;
    args.down = w.down;
    if (c.shared) {
      args.shared_out = shared_gpu;
      args.shared_gate = router_gpu.slice(1, e, e + 1);
    }
    args.path = path;
    Operand out = nan_operand(t, h, dtype, c.out_layout);
    auto bytes = cuda::moe_experts_scratch_bytes(x.view, ids_gpu, args);
    ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
    Tensor scratch =
        Tensor::try_empty({static_cast<int64_t>(*bytes)}, DType::kU8, Device::cuda()).value();
    ASSERT_EQ(cudaMemset(scratch.data_ptr(), 0x7F, *bytes), cudaSuccess);
    ASSERT_OK(cuda::moe_experts(x.view, weights_gpu, ids_gpu, args, scratch, out.view, kStream));
    EXPECT_TRUE(relative_l2(out.result_f32(), ref, tolerance(dtype)));
    EXPECT_TRUE(out.outside_untouched());
  }
}

// Qwen3.5-35B-A3B: hidden 2048, 256 experts, moe_intermediate 512, top-8.
constexpr int64_t kH35 = 2048, kI35 = 512, kE35 = 256;

TEST_F(MoeCuda, ExpertsMatchCpuOnModelShapes) {
  const ExpertsCase cases[] = {
      {"35B-A3B, 1 token", 1, kH35, kI35, kE35, 8},
      {"35B-A3B, 8 tokens", 8, kH35, kI35, kE35, 8},
      {"35B-A3B, 64 tokens, strided out", 64, kH35, kI35, kE35, 8, Dist::kRandom, true, kContiguous,
       kAligned},
      {"35B-A3B, 200 tokens (32-row tiles)", 200, kH35, kI35, kE35, 8},
      {"35B-A3B, 1100 tokens (64-row tiles on sm_90, else 128)", 1100, kH35, kI35, kE35, 8},
      {"35B-A3B, 4200 tokens (128-row tiles)", 4200, kH35, kI35, kE35, 8},
      // 9,600 pairs on 9 experts: the multi-block grouping, each expert's rows from 3 blocks.
      {"35B-A3B, 1200 tokens on 9 experts", 1200, kH35, kI35, kE35, 8, Dist::kFewExperts},
      {"35B-A3B, 96 tokens on 9 experts", 96, kH35, kI35, kE35, 8, Dist::kFewExperts},
      {"35B-A3B, one expert in all 300 tokens", 300, kH35, kI35, kE35, 8, Dist::kOneExpertAll},
      {"35B-A3B, one expert in all 8 tokens", 8, kH35, kI35, kE35, 8, Dist::kOneExpertAll},
      {"35B-A3B, 5 tokens on 9 experts", 5, kH35, kI35, kE35, 8, Dist::kFewExperts},
      {"35B-A3B, 3 tokens, no shared expert", 3, kH35, kI35, kE35, 8, Dist::kRandom, false},
      {"Qwen3-Next-80B, 4 tokens", 4, 2048, 512, 512, 10},
      // 122B-A10B's expert shapes (hidden 3072, intermediate 1024) on 16 experts.
      {"122B-A10B shapes, 2 tokens", 2, 3072, 1024, 16, 8},
      {"122B-A10B shapes, 8 tokens", 8, 3072, 1024, 16, 8},
      {"Qwen3-Next-80B, 16 tokens", 16, 2048, 512, 512, 10},
      {"Qwen3-Next-80B, 130 tokens", 130, 2048, 512, 512, 10},
  };
  for (const ExpertsCase& c : cases) check_experts(c, DType::kBF16, rng_);
}

TEST_F(MoeCuda, ExpertsMatchCpuOnSmallAndOddShapes) {
  const ExpertsCase cases[] = {
      {"golden qwen3_5_moe", 7, 56, 40, 10, 3},
      {"golden qwen3_5_moe, strided x", 70, 56, 40, 10, 3, Dist::kRandom, true, kAligned},
      {"golden qwen3_5_moe, unaligned x", 9, 56, 40, 10, 3, Dist::kRandom, true, kUnaligned},
      {"golden qwen3_next (hidden 60)", 9, 60, 40, 6, 2},
      {"golden qwen3_next, 150 tokens", 150, 60, 40, 6, 2, Dist::kRandom, true, kContiguous,
       kAligned},
      {"golden, one expert in every token", 40, 56, 40, 10, 3, Dist::kOneExpertAll},
      {"demo model", 100, 256, 64, 8, 2},
      {"demo model, one expert in all 300 tokens", 300, 256, 64, 8, 2, Dist::kOneExpertAll},
      {"64 experts, few used", 50, 128, 64, 64, 4, Dist::kFewExperts},
      {"no shared expert", 20, 64, 32, 12, 2, Dist::kRandom, false},
      {"wide intermediate, partial column tiles", 90, 96, 200, 40, 7},
      {"wide intermediate, 64-row tiles on sm_90", 400, 96, 200, 40, 7},
      {"wide intermediate, 128-row tiles", 800, 96, 200, 40, 7},
  };
  for (const ExpertsCase& c : cases) {
    for (DType dtype : {DType::kBF16, DType::kF32}) check_experts(c, dtype, rng_);
  }
}

TEST_F(MoeCuda, ExpertsMatchCpuForTopK1To10) {
  for (int64_t k = 1; k <= 10; ++k) {
    for (int64_t tokens : {int64_t{3}, int64_t{120}}) {
      const ExpertsCase c{"top-" + std::to_string(k) + ", " + std::to_string(tokens) + " tokens",
                          tokens,
                          64,
                          32,
                          12,
                          k};
      check_experts(c, DType::kBF16, rng_);
    }
  }
}

// An id outside [0, E), which the device cannot report, contributes nothing: the result
// equals the CPU op's with that pair's weight set to zero.
void check_out_of_range_ids(int64_t t, std::mt19937& rng) {
  const int64_t h = 64, inter = 32, e = 8, k = 3;
  const ExpertSet& w = expert_set(e, h, inter, DType::kBF16);
  auto [weights, ids] = make_routing(t, e, k, Dist::kRandom, rng);
  Tensor x = random_tensor({t, h}, DType::kBF16, rng, 0.0f, 1.0f);
  Tensor bad_ids = ids.clone();
  bad_ids.data<int64_t>()[0] = -1;
  bad_ids.data<int64_t>()[5] = e;
  bad_ids.data<int64_t>()[t * k - 1] = 1000;
  Tensor zeroed = weights.clone();
  for (int64_t i : {int64_t{0}, int64_t{5}, t * k - 1}) zeroed.data<float>()[i] = 0.0f;
  Tensor ref = Tensor::empty({t, h}, DType::kF32);
  ASSERT_OK(cpu::moe_experts(to_f32(x), cpu::experts_from_stacked(w.host_gate_up, w.host_down),
                             zeroed, ids, ref));
  for (cuda::MoePath path :
       {cuda::MoePath::kGatherGemv, cuda::MoePath::kGroupedGemm, cuda::MoePath::kPairGemv}) {
    SCOPED_TRACE(path_name(path));
    cuda::MoeExpertsArgs args;
    args.gate_up = w.gate_up;
    args.down = w.down;
    args.path = path;
    Tensor x_gpu = to_device(x), ids_gpu = to_device(bad_ids);
    Tensor out = to_device(fill_nan({t, h}, DType::kBF16));
    const size_t bytes = cuda::moe_experts_scratch_bytes(x_gpu, ids_gpu, args).value();
    Tensor scratch =
        Tensor::try_empty({static_cast<int64_t>(bytes)}, DType::kU8, Device::cuda()).value();
    ASSERT_OK(cuda::moe_experts(x_gpu, to_device(weights), ids_gpu, args, scratch, out, kStream));
    EXPECT_TRUE(relative_l2(to_host_f32(out), ref, 1e-2));
  }
}

TEST_F(MoeCuda, ExpertsSkipOutOfRangeIds) {
  // 12 tokens, and 5: a batch the automatic choice gives the per-pair path.
  for (const int64_t t : {int64_t{12}, int64_t{5}}) {
    SCOPED_TRACE(std::to_string(t) + " tokens");
    check_out_of_range_ids(t, rng_);
  }
}

// The shared expert as the stack's last expert in every token's last slot, which the per-pair
// kernels start before the routing is known (MoeExpertsArgs::shared_last_slot): the same bits
// as without the hint, and the CPU op's result. 35B-A3B's expert shapes (the BF16 kernels
// that use the hint) on 16 experts + the shared one, and odd shapes that take the others.
TEST_F(MoeCuda, ExpertsWithTheSharedExpertInTheLastSlot) {
  struct Shape {
    int64_t hidden, inter, experts, top_k;  // experts and top_k: routed ones
  };
  for (const Shape sh : {Shape{kH35, kI35, 16, 8}, Shape{56, 40, 10, 3}}) {
    for (const int64_t t : {int64_t{1}, int64_t{3}, int64_t{8}}) {
      SCOPED_TRACE("hidden " + std::to_string(sh.hidden) + ", " + std::to_string(t) + " tokens");
      const int64_t e = sh.experts + 1, k = sh.top_k + 1;
      const ExpertSet& w = expert_set(e, sh.hidden, sh.inter, DType::kBF16);
      auto [routed_weights, routed_ids] =
          make_routing(t, sh.experts, sh.top_k, Dist::kRandom, rng_);
      Tensor ids = Tensor::empty({t, k}, DType::kI64);
      Tensor weights = Tensor::empty({t, k}, DType::kF32);
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < sh.top_k; ++j) {
          ids.data<int64_t>()[i * k + j] = routed_ids.data<int64_t>()[i * sh.top_k + j];
          weights.data<float>()[i * k + j] = routed_weights.data<float>()[i * sh.top_k + j];
        }
        ids.data<int64_t>()[i * k + sh.top_k] = e - 1;
        weights.data<float>()[i * k + sh.top_k] = 0.25f + 0.1f * static_cast<float>(i);
      }
      const Tensor x = random_tensor({t, sh.hidden}, DType::kBF16, rng_, 0.0f, 1.0f);
      Tensor ref = Tensor::empty({t, sh.hidden}, DType::kF32);
      ASSERT_OK(cpu::moe_experts(to_f32(x), cpu::experts_from_stacked(w.host_gate_up, w.host_down),
                                 weights, ids, ref));
      const Tensor x_gpu = to_device(x), ids_gpu = to_device(ids), weights_gpu = to_device(weights);
      Tensor results[2];
      for (int hint = 0; hint < 2; ++hint) {
        cuda::MoeExpertsArgs args;
        args.gate_up = w.gate_up;
        args.down = w.down;
        args.path = cuda::MoePath::kPairGemv;
        args.shared_last_slot = hint == 1;
        Tensor out = to_device(fill_nan({t, sh.hidden}, DType::kBF16));
        const size_t bytes = cuda::moe_experts_scratch_bytes(x_gpu, ids_gpu, args).value();
        Tensor scratch =
            Tensor::try_empty({static_cast<int64_t>(bytes)}, DType::kU8, Device::cuda()).value();
        ASSERT_EQ(cudaMemset(scratch.data_ptr(), 0x7F, bytes), cudaSuccess);
        ASSERT_OK(cuda::moe_experts(x_gpu, weights_gpu, ids_gpu, args, scratch, out, kStream));
        results[hint] = cuda::copy_to_host(out).value();
        EXPECT_TRUE(relative_l2(to_f32(results[hint]), ref, 1e-2));
      }
      EXPECT_EQ(std::memcmp(results[0].data_ptr(), results[1].data_ptr(), results[0].nbytes()), 0);
    }
  }
}

TEST_F(MoeCuda, ExpertsRejectBadArguments) {
  const int64_t t = 4, h = 64, inter = 32, e = 8, k = 2;
  const ExpertSet& w = expert_set(e, h, inter, DType::kBF16);
  auto [weights, ids] = make_routing(t, e, k, Dist::kRandom, rng_);
  Tensor x = to_device(random_tensor({t, h}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor ids_gpu = to_device(ids), weights_gpu = to_device(weights);
  Tensor out = to_device(fill_nan({t, h}, DType::kBF16));
  cuda::MoeExpertsArgs args;
  args.gate_up = w.gate_up;
  args.down = w.down;
  const size_t bytes = cuda::moe_experts_scratch_bytes(x, ids_gpu, args).value();
  Tensor small =
      Tensor::try_empty({static_cast<int64_t>(bytes) - 1}, DType::kU8, Device::cuda()).value();
  EXPECT_FALSE(cuda::moe_experts(x, weights_gpu, ids_gpu, args, small, out, kStream).is_ok());
  Tensor scratch =
      Tensor::try_empty({static_cast<int64_t>(bytes)}, DType::kU8, Device::cuda()).value();
  cuda::MoeExpertsArgs swapped = args;  // down where gate_up belongs
  swapped.gate_up = w.down;
  EXPECT_FALSE(cuda::moe_experts(x, weights_gpu, ids_gpu, swapped, scratch, out, kStream).is_ok());
  cuda::MoeExpertsArgs f32_grouped = args;  // the grouped GEMM is BF16 only
  f32_grouped.path = cuda::MoePath::kGroupedGemm;
  const ExpertSet& wf = expert_set(e, h, inter, DType::kF32);
  f32_grouped.gate_up = wf.gate_up;
  f32_grouped.down = wf.down;
  Tensor xf = to_device(random_tensor({t, h}, DType::kF32, rng_, 0.0f, 1.0f));
  EXPECT_EQ(cuda::moe_experts_scratch_bytes(xf, ids_gpu, f32_grouped).status().code(),
            ErrorCode::kUnsupported);
  EXPECT_FALSE(cuda::moe_experts(x, weights_gpu, ids_gpu, args, scratch, x, kStream).is_ok());
}

// ---- FP8 experts -----------------------------------------------------------------------------

struct Fp8ExpertSet {
  LinearWeight host_gate_up, host_down;  // CPU
  LinearWeight gate_up, down;            // device
};

// Random experts (variance-preserving scales) quantised to block FP8; expert 0's first block
// of each stack all zeros (its scale is the quantiser's floor, its codes 0).
Fp8ExpertSet fp8_expert_set(int64_t experts, int64_t hidden, int64_t inter, WeightBlock block,
                            std::mt19937& rng) {
  auto stack = [&](int64_t rows, int64_t cols, const char* name) {
    Tensor w = random_tensor({experts, rows, cols}, DType::kF32, rng, 0.0f,
                             1.0f / std::sqrt(static_cast<float>(cols)));
    float* v = w.data<float>();
    for (int64_t r = 0; r < std::min(rows, block.n); ++r) {
      for (int64_t c = 0; c < std::min(cols, block.k); ++c) v[r * cols + c] = 0.0f;
    }
    auto q = quantize_fp8_blocks(w, block, name);
    VLLM_CHECK_MSG(q.has_value(), "{}", q.status().to_string());
    return *q;
  };
  Fp8ExpertSet s;
  s.host_gate_up = stack(2 * inter, hidden, "gate_up");
  s.host_down = stack(hidden, inter, "down");
  s.gate_up =
      LinearWeight(to_device(s.host_gate_up.weight), to_device(s.host_gate_up.scale_inv), block);
  s.down = LinearWeight(to_device(s.host_down.weight), to_device(s.host_down.scale_inv), block);
  return s;
}

// W8A8's reference (cuda::MoePath::kGroupedGemmW8A8): x quantized per token group of 128 and
// dequantized (tensor/block_fp8.h), each expert's products on the dequantized f32 weights,
// the SiLU product rounded to BF16 and quantized per group as the GPU does before the down
// product, each pair's expert output rounded to BF16, then the weighted sum (f32).
Tensor w8a8_reference(const Tensor& x_f32, const Fp8ExpertSet& w, const Tensor& weights,
                      const Tensor& ids) {
  const int64_t t = x_f32.size(0), h = x_f32.size(1), k = ids.size(1);
  const int64_t e = w.host_gate_up.size(0), inter = w.host_gate_up.size(1) / 2;
  Tensor out = Tensor::zeros({t, h}, DType::kF32);
  auto xq = quantize_fp8_token_groups(x_f32, 128, "x");
  VLLM_CHECK_MSG(xq.has_value(), "{}", xq.status().to_string());
  const Tensor xd = dequantize_fp8_token_groups(*xq).value();
  const Tensor gu = dequantize_fp8_blocks(w.host_gate_up).value();
  const Tensor dn = dequantize_fp8_blocks(w.host_down).value();
  auto bf16 = [](float v) { return bf16_to_f32(f32_to_bf16(v)); };
  for (int64_t ex = 0; ex < e; ++ex) {
    std::vector<std::pair<int64_t, float>> rows;  // (token, weight) of this expert's pairs
    for (int64_t i = 0; i < t * k; ++i) {
      if (ids.data<int64_t>()[i] == ex) rows.emplace_back(i / k, weights.data<float>()[i]);
    }
    if (rows.empty()) continue;
    const auto n = static_cast<int64_t>(rows.size());
    Tensor xe = Tensor::empty({n, h}, DType::kF32);
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(xe.data<float>() + r * h, xd.data<float>() + rows[r].first * h, h * 4);
    }
    Tensor g = Tensor::empty({n, 2 * inter}, DType::kF32);
    VLLM_CHECK(cpu::linear(xe, LinearWeight(gu.slice(0, ex, ex + 1).view({2 * inter, h}).clone()),
                           Tensor(), g)
                   .is_ok());
    Tensor act = Tensor::empty({n, inter}, DType::kF32);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < inter; ++j) {
        const float gv = g.data<float>()[r * 2 * inter + j];
        const float uv = g.data<float>()[r * 2 * inter + inter + j];
        act.data<float>()[r * inter + j] = bf16(gv / (1.0f + std::exp(-gv)) * uv);
      }
    }
    const Tensor ad =
        dequantize_fp8_token_groups(quantize_fp8_token_groups(act, 128, "act").value()).value();
    Tensor y = Tensor::empty({n, h}, DType::kF32);
    VLLM_CHECK(
        cpu::linear(ad, LinearWeight(dn.slice(0, ex, ex + 1).view({h, inter}).clone()), Tensor(), y)
            .is_ok());
    for (int64_t r = 0; r < n; ++r) {
      float* o = out.data<float>() + rows[r].first * h;
      for (int64_t c = 0; c < h; ++c) o[c] += rows[r].second * bf16(y.data<float>()[r * h + c]);
    }
  }
  return out;
}

// Whether kAuto runs these FP8 experts as W8A8 (moe.cu's choose_path).
bool auto_runs_w8a8(const ExpertsCase& c, WeightBlock block, DType dtype) {
  return dtype == DType::kBF16 && block == WeightBlock{128, 128} && c.hidden % 128 == 0 &&
         c.inter % 128 == 0 && c.tokens > cuda::kMoeGemvMaxTokens && cuda::runs_sm90a(0);
}

void check_fp8_experts(const ExpertsCase& c, WeightBlock block, DType dtype, std::mt19937& rng) {
  SCOPED_TRACE(fmt::format("{} {} in {} x {} blocks", c.name, dtype_name(dtype), block.n, block.k));
  const int64_t t = c.tokens, h = c.hidden, e = c.experts, k = c.top_k;
  const Fp8ExpertSet w = fp8_expert_set(e, h, c.inter, block, rng);
  const Operand x = random_operand(t, h, dtype, c.x_layout, rng);
  auto [weights, ids] = make_routing(t, e, k, c.dist, rng);
  const Tensor shared_out = random_tensor({t, h}, dtype, rng, 0.0f, 1.0f);
  const Tensor router_out = random_tensor({t, e + 1}, DType::kF32, rng, 0.0f, 2.0f);

  Tensor ref = Tensor::empty({t, h}, DType::kF32);
  Tensor cpu_scratch = Tensor::empty(
      {static_cast<int64_t>(cpu::moe_experts_scratch_bytes(t, k, h, c.inter, e))}, DType::kU8);
  ASSERT_OK(cpu::moe_experts_stacked(x.input_f32(), w.host_gate_up, w.host_down, weights, ids,
                                     cpu_scratch, ref));
  if (c.shared) {
    ASSERT_OK(
        cpu::add_sigmoid_gated(ref, to_f32(shared_out), router_out.slice(1, e, e + 1).clone()));
  }
  const Tensor weights_gpu = to_device(weights), ids_gpu = to_device(ids);
  const Tensor shared_gpu = to_device(shared_out), router_gpu = to_device(router_out);
  const bool w8a8 = dtype == DType::kBF16 && block == WeightBlock{128, 128} && h % 128 == 0 &&
                    c.inter % 128 == 0 && cuda::runs_sm90a(0);
  Tensor ref_w8a8;
  if (w8a8) {
    ref_w8a8 = w8a8_reference(x.input_f32(), w, weights, ids);
    if (c.shared) {
      ASSERT_OK(cpu::add_sigmoid_gated(ref_w8a8, to_f32(shared_out),
                                       router_out.slice(1, e, e + 1).clone()));
    }
  }
  std::vector<cuda::MoePath> paths = {cuda::MoePath::kGatherGemv, cuda::MoePath::kAuto};
  if (w8a8) paths.push_back(cuda::MoePath::kGroupedGemmW8A8);
  if (dtype == DType::kBF16 && h % 16 == 0 && c.inter % 16 == 0 && block.k % 16 == 0 &&
      c.x_layout.offset % 8 == 0 && c.x_layout.pad % 8 == 0) {
    paths.push_back(cuda::MoePath::kGroupedGemm);
  }
  if (h * static_cast<int64_t>(dtype_size(dtype)) <= 48 * 1024) {
    paths.push_back(cuda::MoePath::kPairGemv);
  }
  for (cuda::MoePath path : paths) {
    SCOPED_TRACE(path_name(path));
    cuda::MoeExpertsArgs args;
    args.gate_up = w.gate_up.weight;
    args.gate_up_scale_inv = w.gate_up.scale_inv;
    args.gate_up_block = block;
    args.down = w.down.weight;
    args.down_scale_inv = w.down.scale_inv;
    args.down_block = block;
    if (c.shared) {
      args.shared_out = shared_gpu;
      args.shared_gate = router_gpu.slice(1, e, e + 1);
    }
    args.path = path;
    Operand out = nan_operand(t, h, dtype, c.out_layout);
    auto bytes = cuda::moe_experts_scratch_bytes(x.view, ids_gpu, args);
    ASSERT_TRUE(bytes.has_value()) << bytes.status().to_string();
    Tensor scratch =
        Tensor::try_empty({static_cast<int64_t>(*bytes)}, DType::kU8, Device::cuda()).value();
    ASSERT_EQ(cudaMemset(scratch.data_ptr(), 0x7F, *bytes), cudaSuccess);
    ASSERT_OK(cuda::moe_experts(x.view, weights_gpu, ids_gpu, args, scratch, out.view, kStream));
    const bool as_w8a8 = path == cuda::MoePath::kGroupedGemmW8A8 ||
                         (path == cuda::MoePath::kAuto && auto_runs_w8a8(c, block, dtype));
    EXPECT_TRUE(relative_l2(out.result_f32(), as_w8a8 ? ref_w8a8 : ref, tolerance(dtype)));
    if (as_w8a8) {
      // W8A8 is not W8A16: the activations' e4m3 rounding moves the result by a few percent.
      EXPECT_FALSE(relative_l2(out.result_f32(), ref, 1e-3));
    }
    EXPECT_TRUE(out.outside_untouched());
  }
}

TEST_F(MoeCuda, Fp8ExpertsMatchCpuOnModelShapes) {
  // 35B-A3B's expert shapes on 64 experts (the real 256 only add memory), 128 x 128 blocks.
  const ExpertsCase cases[] = {
      {"35B-A3B shapes, 1 token", 1, kH35, kI35, 64, 8},
      {"35B-A3B shapes, 8 tokens", 8, kH35, kI35, 64, 8},
      {"35B-A3B shapes, 20 tokens, strided out", 20, kH35, kI35, 64, 8, Dist::kRandom, true,
       kContiguous, kAligned},
      {"35B-A3B shapes, 64 tokens (32-row tiles)", 64, kH35, kI35, 64, 8},
      {"35B-A3B shapes, 600 tokens (128-row tiles)", 600, kH35, kI35, 64, 8},
      {"35B-A3B shapes, one expert in all 40 tokens", 40, kH35, kI35, 64, 8, Dist::kOneExpertAll},
      {"122B-A10B shapes, 2 tokens", 2, 3072, 1024, 16, 8},
      {"122B-A10B shapes, 40 tokens", 40, 3072, 1024, 16, 8},
      {"122B-A10B shapes, 300 tokens", 300, 3072, 1024, 16, 8},
      {"35B-A3B shapes, 300 tokens on 9 experts", 300, kH35, kI35, 64, 8, Dist::kFewExperts},
  };
  for (const ExpertsCase& c : cases) check_fp8_experts(c, {128, 128}, DType::kBF16, rng_);
}

TEST_F(MoeCuda, Fp8ExpertsMatchCpuOnSmallAndOddShapes) {
  struct Fp8Case {
    ExpertsCase c;
    WeightBlock block;
  };
  const Fp8Case cases[] = {
      {{"golden qwen3_5_moe_fp8 shapes", 7, 56, 40, 10, 3}, {16, 32}},
      {{"golden shapes, 70 tokens, strided x", 70, 56, 40, 10, 3, Dist::kRandom, true, kAligned},
       {16, 32}},
      {{"hidden 64, intermediate 48", 5, 64, 48, 8, 2}, {16, 32}},
      {{"hidden 64, intermediate 48, 100 tokens", 100, 64, 48, 8, 2}, {16, 32}},
      {{"per-row scales, unaligned x", 9, 128, 64, 12, 4, Dist::kRandom, true, kUnaligned},
       {1, 128}},
      {{"per-row scales, 120 tokens", 120, 128, 64, 12, 4}, {1, 128}},
      {{"blocks of 7 x 24", 30, 96, 72, 6, 2}, {7, 24}},
      {{"no shared expert, one expert in all", 33, 256, 64, 8, 2, Dist::kOneExpertAll, false},
       {16, 32}},
  };
  for (const Fp8Case& fc : cases) {
    for (DType dtype : {DType::kBF16, DType::kF32}) check_fp8_experts(fc.c, fc.block, dtype, rng_);
  }
}

TEST_F(MoeCuda, Fp8ExpertsRejectBadScales) {
  const int64_t t = 4, h = 64, inter = 32, e = 8, k = 2;
  const Fp8ExpertSet w = fp8_expert_set(e, h, inter, {16, 32}, rng_);
  auto [weights, ids] = make_routing(t, e, k, Dist::kRandom, rng_);
  Tensor x = to_device(random_tensor({t, h}, DType::kBF16, rng_, 0.0f, 1.0f));
  Tensor ids_gpu = to_device(ids);
  cuda::MoeExpertsArgs args;
  args.gate_up = w.gate_up.weight;
  args.gate_up_scale_inv = w.gate_up.scale_inv;
  args.gate_up_block = {16, 32};
  args.down = w.down.weight;
  args.down_scale_inv = w.down.scale_inv;
  args.down_block = {16, 32};
  ASSERT_TRUE(cuda::moe_experts_scratch_bytes(x, ids_gpu, args).has_value());
  cuda::MoeExpertsArgs no_scales = args;
  no_scales.down_scale_inv = Tensor();
  EXPECT_EQ(cuda::moe_experts_scratch_bytes(x, ids_gpu, no_scales).status().code(),
            ErrorCode::kInvalidArgument);
  cuda::MoeExpertsArgs wrong_block = args;  // the scale grid of other blocks
  wrong_block.gate_up_block = {32, 32};
  EXPECT_EQ(cuda::moe_experts_scratch_bytes(x, ids_gpu, wrong_block).status().code(),
            ErrorCode::kInvalidArgument);
  cuda::MoeExpertsArgs mixed = args;  // FP8 gate/up with a BF16 down
  mixed.down = expert_set(e, h, inter, DType::kBF16).down;
  mixed.down_scale_inv = Tensor();
  EXPECT_EQ(cuda::moe_experts_scratch_bytes(x, ids_gpu, mixed).status().code(),
            ErrorCode::kInvalidArgument);
  cuda::MoeExpertsArgs odd_grouped = args;  // a block width the grouped GEMM cannot chunk
  const Fp8ExpertSet odd = fp8_expert_set(e, h, inter, {16, 24}, rng_);
  odd_grouped.gate_up = odd.gate_up.weight;
  odd_grouped.gate_up_scale_inv = odd.gate_up.scale_inv;
  odd_grouped.gate_up_block = {16, 24};
  odd_grouped.down = odd.down.weight;
  odd_grouped.down_scale_inv = odd.down.scale_inv;
  odd_grouped.down_block = {16, 24};
  odd_grouped.path = cuda::MoePath::kGroupedGemm;
  EXPECT_EQ(cuda::moe_experts_scratch_bytes(x, ids_gpu, odd_grouped).status().code(),
            ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace vllm
