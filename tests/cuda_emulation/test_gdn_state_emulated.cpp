// The gated delta rule's CUDA kernels with the recurrent state kept in BF16 or F16 (vLLM's
// --mamba-ssm-cache-dtype), run in the emulator (emulator.h) against cpu::gated_delta_rule on
// a state of the same dtype. Both read the slot into f32 once per call and round it once when
// they store it (cpu/gdn.h, cuda/gdn_state.cuh), so the two runs round at the same points:
// over a prefill and decode steps (the token-by-token kernel, F32 and BF16 activations), and
// over a prefill split in two calls at several alignments of the split to the chunked form's
// 64-token chunks (the chunked kernel, which reads the first call's 16-bit state).
//
// Tolerances (relative L2): BF16 activations 1e-2 (gdn_emulated's); F32 activations 1e-3:
// the kernel's f32 sums differ from the CPU's by a few ulps, which may move a value across a
// 16-bit rounding boundary, one 16-bit ulp (2^-8 relative for BF16) on a rare element.
#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "cuda/cuda_test_util.h"
#include "gdn_emulated_util.h"

namespace vllm {
namespace {

using gdn_emu::random_gating;
using gdn_emu::run_emulated;

constexpr DType kStateDTypes[] = {DType::kBF16, DType::kF16};

struct Dims {
  int64_t hk, hv, dk, dv;
  int64_t key_dim() const { return hk * dk; }
  int64_t value_dim() const { return hv * dv; }
};

// One call's requests: rows of each (in order in the inputs) and their slots.
struct Call {
  std::vector<int32_t> lens;
  std::vector<int32_t> slots;
};

// Runs `calls` in order over consecutive rows of qkv / g / beta, on the CPU op (f32 copies of
// the activations, `cpu_state`) and on the emulated kernels (`state`); compares each call's
// output and, after the last, the states.
void run_calls(const Dims& d, DType act, int chunked_min_rows, const std::vector<Call>& calls,
               Tensor& state, Tensor& cpu_state, std::mt19937& rng) {
  int64_t total = 0;
  for (const Call& c : calls) {
    for (int32_t n : c.lens) total += n;
  }
  const int64_t width = 2 * d.key_dim() + d.value_dim();
  Tensor qkv = cuda_test::random_tensor({total, width}, act, rng, 0.0f, 1.0f);
  Tensor qkv_f32 = cuda_test::to_f32(qkv);
  Tensor g, beta;
  random_gating(total, d.hv, rng, g, beta);
  const double tol = act == DType::kF32 ? 1e-3 : 1e-2;
  int64_t t0 = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    const Call& c = calls[i];
    std::vector<int32_t> loc{0};
    int32_t max_len = 0;
    for (int32_t n : c.lens) {
      loc.push_back(loc.back() + n);
      max_len = std::max(max_len, n);
    }
    const int64_t t1 = t0 + loc.back();
    Tensor x = qkv.slice(0, t0, t1).clone(), x_f32 = qkv_f32.slice(0, t0, t1);
    Tensor gi = g.slice(0, t0, t1).clone(), bi = beta.slice(0, t0, t1).clone();
    Tensor out_ref = Tensor::empty({t1 - t0, d.value_dim()}, DType::kF32);
    ASSERT_TRUE(cpu::gated_delta_rule(
                    x_f32.slice(1, 0, d.key_dim()), x_f32.slice(1, d.key_dim(), 2 * d.key_dim()),
                    x_f32.slice(1, 2 * d.key_dim(), width), gi, bi, cpu::GdnBatch{loc, c.slots},
                    cpu::GatedDeltaRuleParams{}, cpu_state, out_ref)
                    .is_ok());
    Tensor out = cuda_test::fill_nan({t1 - t0, d.value_dim()}, act);
    cuda::GatedDeltaRuleParams params;
    params.chunked_min_rows = chunked_min_rows;
    const Status s = run_emulated(x, 0, d.key_dim(), d.value_dim(), gi, bi, loc, c.slots, max_len,
                                  params, state, out);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_TRUE(cuda_test::relative_l2(cuda_test::to_f32(out), out_ref, tol)) << "out";
    t0 = t1;
  }
  ASSERT_EQ(state.dtype(), cpu_state.dtype());
  EXPECT_TRUE(cuda_test::relative_l2(cuda_test::to_f32(state), cuda_test::to_f32(cpu_state), tol))
      << "state";
}

// A random starting state (a cached prefix) in `dtype`, and the CPU's copy of it.
std::pair<Tensor, Tensor> start_state(const Dims& d, int64_t slots, DType dtype,
                                      std::mt19937& rng) {
  Tensor state = cuda_test::random_tensor({slots, d.hv, d.dk, d.dv}, dtype, rng, 0.0f, 0.3f);
  return {state, state.clone()};
}

// Token by token: a prefill and a decode row, then decode steps of both requests continuing
// from the 16-bit state the call before stored.
TEST(GdnStateEmulated, RecurrentKernelMatchesCpuOnSixteenBitState) {
  std::mt19937 rng(23);
  for (const Dims& d : {Dims{1, 2, 32, 24}, Dims{2, 4, 128, 16}}) {
    for (DType act : {DType::kF32, DType::kBF16}) {
      for (DType dtype : kStateDTypes) {
        SCOPED_TRACE("Dk=" + std::to_string(d.dk) + " act " + std::string(dtype_name(act)) +
                     " state " + std::string(dtype_name(dtype)));
        auto [state, cpu_state] = start_state(d, 4, dtype, rng);
        const std::vector<Call> calls = {
            {{9, 1}, {2, 0}}, {{1, 1}, {0, 2}}, {{1, 1}, {2, 0}}, {{1}, {0}}};
        run_calls(d, act, INT_MAX, calls, state, cpu_state, rng);
      }
    }
  }
}

// The chunked kernel continuing a prefill from the state the first call stored, the split at
// a chunk boundary and +-1, inside the first chunk and past it.
TEST(GdnStateEmulated, ChunkedKernelContinuesFromSixteenBitStateAtChunkAlignments) {
  std::mt19937 rng(29);
  const Dims d{1, 2, 32, 40};
  const int32_t tokens = 160;
  for (DType dtype : kStateDTypes) {
    // BF16 at every kind of alignment, F16 at the two sides of a chunk boundary.
    const std::vector<int32_t> splits = dtype == DType::kBF16
                                            ? std::vector<int32_t>{1, 63, 64, 65, 100}
                                            : std::vector<int32_t>{63, 65};
    for (int32_t a : splits) {
      SCOPED_TRACE("state " + std::string(dtype_name(dtype)) + ", first call " + std::to_string(a) +
                   " rows");
      auto [state, cpu_state] = start_state(d, 3, dtype, rng);
      const std::vector<Call> calls = {{{a}, {1}}, {{tokens - a}, {1}}};
      run_calls(d, DType::kBF16, 1, calls, state, cpu_state, rng);
    }
  }
}

// The op's default split over a mixed batch on a 16-bit state: long prefills chunked, decode
// rows and short requests token by token, in one call; at Qwen's Dk = 128.
TEST(GdnStateEmulated, MixedBatchOnSixteenBitState) {
  std::mt19937 rng(31);
  const Dims d{1, 2, 128, 64};
  auto [state, cpu_state] = start_state(d, 5, DType::kBF16, rng);
  const std::vector<Call> calls = {{{1, 70, 5, 1}, {3, 0, 4, 1}}, {{1, 33, 1}, {0, 3, 1}}};
  run_calls(d, DType::kBF16, 0, calls, state, cpu_state, rng);
}

}  // namespace
}  // namespace vllm
