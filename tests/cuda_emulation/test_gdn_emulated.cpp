// The gated delta rule's CUDA kernels run on the CPU (emulator.h) against cpu::gated_delta_rule
// on every CI run: above all the chunked tensor-core form (gdn_chunk.cuh) -- its fragment
// layouts, the triangular solve, the masks of partial chunks, key dims under its 128-row
// capacity, value slices past Dv, state carried across chunks and across calls -- and the
// split of one batch between it and the token-by-token kernel.
//
// BF16 activations against the CPU op in f32 on the same (bf16-rounded) inputs. The chunked
// form rounds its intermediate products' operands to BF16 (T, W, U, the state's copy, k, q),
// so outputs and states are held to relative L2 1e-2, the BF16 bound of the GPU tests.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "cuda/cuda_test_util.h"
#include "gdn_emulated_util.h"

namespace vllm {
namespace {

using gdn_emu::as_cuda;
using gdn_emu::i32_tensor;
using gdn_emu::random_gating;
using gdn_emu::run_emulated;

constexpr double kTolerance = 1e-2;

struct Case {
  std::string name;
  int64_t hk, hv, dk, dv;
  std::vector<int32_t> lens;
  int chunked_min_rows = 1;  // 1: every request takes the chunked kernel
  bool l2norm = true;
  float scale = 0.0f;
  int64_t extra_cols = 0;        // q | k | v are column slices of a row this much wider
  std::vector<int32_t> slots{};  // default: request r on slot r + 1 (slot 0 untouched)
  int32_t max_len = 0;           // the batch's max_query_len when larger than its longest
};

void run_case(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.name);
  std::vector<int32_t> loc{0};
  for (int32_t len : c.lens) loc.push_back(loc.back() + len);
  std::vector<int32_t> slots = c.slots;
  if (slots.empty()) {
    for (size_t r = 0; r < c.lens.size(); ++r) slots.push_back(static_cast<int32_t>(r + 1));
  }
  int32_t max_len = c.max_len;
  for (int32_t len : c.lens) max_len = std::max(max_len, len);
  const int64_t num_slots = static_cast<int64_t>(c.lens.size()) + 2;
  const int64_t tokens = loc.back(), key_dim = c.hk * c.dk, value_dim = c.hv * c.dv;
  const int64_t width = 2 * key_dim + value_dim + c.extra_cols;
  const float qk_stddev = c.l2norm ? 1.0f : 0.1f;  // unnormalised k must stay small
  Tensor qkv = cuda_test::random_tensor({tokens, width}, DType::kBF16, rng, 0.0f, qk_stddev);
  Tensor g, beta;
  random_gating(tokens, c.hv, rng, g, beta);
  Tensor state =
      cuda_test::random_tensor({num_slots, c.hv, c.dk, c.dv}, DType::kF32, rng, 0.0f, 0.3f);
  const int64_t q0 = c.extra_cols;  // q starts after the extra columns
  auto cols = [&](const Tensor& t, int64_t begin, int64_t n) {
    return t.slice(1, q0 + begin, q0 + begin + n);
  };

  Tensor qkv_f32 = cuda_test::to_f32(qkv);
  Tensor state_ref = state.clone();
  Tensor out_ref = Tensor::empty({tokens, value_dim}, DType::kF32);
  cpu::GatedDeltaRuleParams cpu_params;
  cpu_params.use_qk_l2norm = c.l2norm;
  cpu_params.scale = c.scale;
  ASSERT_TRUE(cpu::gated_delta_rule(cols(qkv_f32, 0, key_dim), cols(qkv_f32, key_dim, key_dim),
                                    cols(qkv_f32, 2 * key_dim, value_dim), g, beta,
                                    cpu::GdnBatch{loc, slots}, cpu_params, state_ref, out_ref)
                  .is_ok());

  Tensor out = cuda_test::fill_nan({tokens, value_dim}, DType::kBF16);
  cuda::GatedDeltaRuleParams params;
  params.use_qk_l2norm = c.l2norm;
  params.scale = c.scale;
  params.chunked_min_rows = c.chunked_min_rows;
  const Status s =
      run_emulated(qkv, q0, key_dim, value_dim, g, beta, loc, slots, max_len, params, state, out);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(cuda_test::relative_l2(cuda_test::to_f32(out), out_ref, kTolerance)) << "out";
  EXPECT_TRUE(cuda_test::relative_l2(state, state_ref, kTolerance)) << "state";
}

// Qwen's head shape (Dk = Dv = 128: two value slices) over requests of one token (a chunk of
// one valid row), of chunk boundaries +-1, and of several chunks with a partial last one.
TEST(GdnEmulated, ChunkedRuleMatchesCpuQwenHeads) {
  std::mt19937 rng(7);
  run_case({"Dk=Dv=128 Hk=1 Hv=2", 1, 2, 128, 128, {1, 63, 64, 65, 150}}, rng);
}

// Key dims under the 128-row capacity (the golden checkpoints' 16 / 20 / 24, a partial
// 16-wide tile, one past 64), value dims that are not multiples of 8 or of the 64-column
// slice, odd element offsets (element-wise loads), no L2 norm with an explicit scale.
TEST(GdnEmulated, ChunkedRuleMatchesCpuOtherShapes) {
  std::mt19937 rng(11);
  run_case({"Dk=16 Dv=20 Hk=2 Hv=4", 2, 4, 16, 20, {3, 70, 1}}, rng);
  run_case({"Dk=20 Dv=24 Hk=2 Hv=4 offset", 2, 4, 20, 24, {40, 2}, 1, true, 0.0f, 3}, rng);
  run_case({"Dk=65 Dv=9 Hk=1 Hv=1", 1, 1, 65, 9, {66}}, rng);
  run_case({"Dk=24 Dv=72 Hk=1 Hv=2 no l2norm", 1, 2, 24, 72, {5, 64}, 1, false, 0.3f}, rng);
}

// The default split: requests of 32 rows or more chunked, shorter ones (decode rows) token by
// token, in one call; and everything token by token when the batch's bound is under 32.
TEST(GdnEmulated, ChunkedAndRecurrentRequestsShareOneCall) {
  std::mt19937 rng(13);
  run_case({"mixed", 1, 2, 32, 32, {1, 31, 32, 80, 1}, 0}, rng);
  run_case({"all short", 1, 2, 32, 32, {1, 31, 2}, 0}, rng);
  // max_query_len is a bound, not each request's length: a loose one (40 over 20 tokens) asks
  // for no chunked launch the batch cannot use.
  run_case({"loose bound", 1, 2, 32, 32, {12, 8}, 0, true, 0.0f, 0, {}, 40}, rng);
  const Tensor q = Tensor::empty({20, 32}, DType::kBF16);
  const Tensor state = Tensor::empty({4, 2, 32, 32}, DType::kF32);
  const Tensor slots = i32_tensor({1, 2});
  EXPECT_EQ(cuda::gated_delta_rule_workspace_size(q, state, cuda::GdnBatch{Tensor(), slots, 40},
                                                  cuda::GatedDeltaRuleParams{}),
            0u);
}

// A padding request (slot -1) of chunked length writes zero rows and touches no state.
TEST(GdnEmulated, ChunkedPaddingRequestWritesZeros) {
  std::mt19937 rng(17);
  const int64_t hv = 2, dk = 32, dv = 40, tokens = 40;
  std::vector<int32_t> loc{0, tokens};
  std::vector<int32_t> slots{-1};
  Tensor qkv = cuda_test::random_tensor({tokens, 2 * dk + hv * dv}, DType::kBF16, rng, 0, 1);
  Tensor g, beta;
  random_gating(tokens, hv, rng, g, beta);
  Tensor state = cuda_test::random_tensor({2, hv, dk, dv}, DType::kF32, rng, 0.0f, 0.3f);
  const Tensor before = state.clone();
  Tensor out = cuda_test::fill_nan({tokens, hv * dv}, DType::kBF16);
  bool chunked = false;
  ASSERT_TRUE(run_emulated(qkv, 0, dk, hv * dv, g, beta, loc, slots, static_cast<int32_t>(tokens),
                           cuda::GatedDeltaRuleParams{}, state, out, &chunked)
                  .is_ok());
  ASSERT_TRUE(chunked);
  const Tensor out_f32 = cuda_test::to_f32(out);
  for (int64_t i = 0; i < out_f32.numel(); ++i) ASSERT_EQ(out_f32.data<float>()[i], 0.0f) << i;
  EXPECT_TRUE(cuda_test::relative_l2(state, before, 0.0)) << "state untouched";
}

// Requests whose rows overlap (a batch no scheduler makes, but the kernels read it from device
// memory unchecked) can number more chunks than the workspace bound, which counts each token
// once: those past it are treated as padding -- zero rows, their state slots untouched -- and
// nothing is read or written outside the workspace.
TEST(GdnEmulated, ChunkedRequestsPastTheWorkspaceBoundAreRefusedOnTheDevice) {
  std::mt19937 rng(19);
  const int64_t hv = 1, dk = 32, dv = 32, tokens = 64;
  // Three requests on rows [0, 64) each: 3 chunks, where 64 tokens allow min(3, 64 / 32) = 2.
  std::vector<int32_t> loc{0, 64, 0, 64, 0, 64};
  std::vector<int32_t> slots{1, 2, 3, 4, 5};
  Tensor qkv = cuda_test::random_tensor({tokens, 2 * dk + hv * dv}, DType::kBF16, rng, 0, 1);
  Tensor g, beta;
  random_gating(tokens, hv, rng, g, beta);
  Tensor state = cuda_test::random_tensor({6, hv, dk, dv}, DType::kF32, rng, 0.0f, 0.3f);
  const Tensor before = state.clone();
  Tensor out = cuda_test::fill_nan({tokens, hv * dv}, DType::kBF16);
  bool chunked = false;
  ASSERT_TRUE(run_emulated(qkv, 0, dk, hv * dv, g, beta, loc, slots, static_cast<int32_t>(tokens),
                           cuda::GatedDeltaRuleParams{}, state, out, &chunked)
                  .is_ok());
  ASSERT_TRUE(chunked);
  // Requests 0 and 2 took the two chunks the bound allows (their slots changed); request 4
  // did not (its slot, 5, is as it was), nor did the empty requests 1 and 3 (slots 2 and 4).
  const int64_t slot_elems = hv * dk * dv;
  auto slot_changed = [&](int64_t slot) {
    return std::memcmp(state.data<float>() + slot * slot_elems,
                       before.data<float>() + slot * slot_elems, slot_elems * sizeof(float)) != 0;
  };
  EXPECT_TRUE(slot_changed(1));
  EXPECT_TRUE(slot_changed(3));
  EXPECT_FALSE(slot_changed(2));
  EXPECT_FALSE(slot_changed(4));
  EXPECT_FALSE(slot_changed(5));
  EXPECT_FALSE(slot_changed(0));
}

}  // namespace
}  // namespace vllm
