// Gated DeltaNet on the GPU with its states kept in BF16 or F16 (vLLM's --mamba-cache-dtype and
// --mamba-ssm-cache-dtype): cuda::gated_delta_rule and cuda::causal_conv1d against the CPU ops
// on a state of the same dtype. Both read a slot into f32 once per call and round it once when
// they store it (cpu/gdn.h, cuda/gdn_state.cuh), so they round at the same points; the tests
// run sequences of calls -- decode steps continuing from a cached 16-bit state, prefills split
// at every kind of alignment to the chunked form's 64-token chunks, mixed batches -- and
// compare every call's output and the final states of all slots.
//
// Tolerances (relative L2): BF16 activations 1e-2 (the BF16 bound of test_gdn_cuda.cpp); F32
// activations 1e-3: the kernel's f32 sums differ from the CPU's by a few ulps, which can move a
// rare value across a 16-bit rounding boundary (one BF16 ulp is 2^-8 of it). The conv state
// holds copies of inputs, so it must match exactly. Skipped without a GPU.
#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/gdn.h"
#include "backend/cuda/gdn.cuh"
#include "cuda_test_util.h"
#include "gdn_cuda_test_util.h"

namespace vllm {
namespace {

using cuda_test::fill_nan;
using cuda_test::random_tensor;
using cuda_test::relative_l2;
using cuda_test::to_f32;
using gdn_test::Batch;
using gdn_test::dev;
using gdn_test::DeviceBatch;
using gdn_test::host_f32;
using gdn_test::kStream;
using gdn_test::upload;

constexpr DType kStateDTypes[] = {DType::kBF16, DType::kF16};

class GdnStateDtypeCuda : public gdn_test::CudaTest {};

double tolerance(DType act) {
  return act == DType::kF32 ? 1e-3 : 1e-2;
}

struct Dims {
  int64_t hk, hv, dk, dv;
  int64_t key_dim() const { return hk * dk; }
  int64_t value_dim() const { return hv * dv; }
};

// One call: each request's rows (consecutive in the inputs) and slot.
struct Call {
  std::vector<int32_t> lens;
  std::vector<int32_t> slots;
};

void random_gating(int64_t tokens, int64_t hv, std::mt19937& rng, Tensor& g, Tensor& beta) {
  Tensor a = random_tensor({tokens, hv}, DType::kF32, rng, 0.0f, 1.0f);
  Tensor b = random_tensor({tokens, hv}, DType::kF32, rng, 0.0f, 1.5f);
  Tensor A_log = random_tensor({hv}, DType::kF32, rng, -1.0f, 1.5f);
  Tensor dt_bias = random_tensor({hv}, DType::kF32, rng, -1.0f, 0.5f);
  g = Tensor::empty({tokens, hv}, DType::kF32);
  beta = Tensor::empty({tokens, hv}, DType::kF32);
  GDN_ASSERT_OK(cpu::gdn_gating(a, b, A_log, dt_bias, g, beta));
}

// The calls in order over consecutive rows of random inputs, on the CPU op (its own copy of
// `state`) and on the GPU; chunked_min_rows as GatedDeltaRuleParams's (INT_MAX: token by
// token, 1: every request chunked, 0: the op's split).
void check_rule_calls(const Dims& d, DType act, DType state_dtype, int chunked_min_rows,
                      int64_t num_slots, const std::vector<Call>& calls, std::mt19937& rng) {
  SCOPED_TRACE("act " + std::string(dtype_name(act)) + " state " +
               std::string(dtype_name(state_dtype)) +
               " chunked_min_rows=" + std::to_string(chunked_min_rows));
  int64_t total = 0;
  for (const Call& c : calls) {
    for (int32_t n : c.lens) total += n;
  }
  const int64_t kd = d.key_dim(), width = 2 * kd + d.value_dim();
  Tensor qkv = random_tensor({total, width}, act, rng, 0.0f, 1.0f);
  Tensor qkv_f32 = to_f32(qkv);
  Tensor g, beta;
  random_gating(total, d.hv, rng, g, beta);
  Tensor state_ref = random_tensor({num_slots, d.hv, d.dk, d.dv}, state_dtype, rng, 0.0f, 0.3f);
  Tensor state_gpu = dev(state_ref);
  int64_t t0 = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    Batch b;
    for (size_t r = 0; r < calls[i].lens.size(); ++r) b.add(calls[i].lens[r], calls[i].slots[r]);
    const int64_t t1 = t0 + b.tokens();
    Tensor x_f32 = qkv_f32.slice(0, t0, t1);
    Tensor gi = g.slice(0, t0, t1).clone(), bi = beta.slice(0, t0, t1).clone();
    Tensor out_ref = Tensor::empty({t1 - t0, d.value_dim()}, DType::kF32);
    GDN_ASSERT_OK(cpu::gated_delta_rule(x_f32.slice(1, 0, kd), x_f32.slice(1, kd, 2 * kd),
                                        x_f32.slice(1, 2 * kd, width), gi, bi, b.cpu(),
                                        cpu::GatedDeltaRuleParams{}, state_ref, out_ref));
    const DeviceBatch db = upload(b);
    Tensor x = dev(qkv.slice(0, t0, t1).clone()), g_gpu = dev(gi), beta_gpu = dev(bi);
    Tensor out_gpu = dev(fill_nan({t1 - t0, d.value_dim()}, act));
    cuda::GatedDeltaRuleParams params;
    params.chunked_min_rows = chunked_min_rows;
    params.workspace = gdn_test::rule_workspace(x.slice(1, 0, kd), state_gpu, db.view, params);
    GDN_ASSERT_OK(cuda::gated_delta_rule(x.slice(1, 0, kd), x.slice(1, kd, 2 * kd),
                                         x.slice(1, 2 * kd, width), g_gpu, beta_gpu, db.view,
                                         params, state_gpu, out_gpu, kStream));
    EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, tolerance(act))) << "out";
    t0 = t1;
  }
  EXPECT_EQ(state_gpu.dtype(), state_dtype);
  EXPECT_TRUE(relative_l2(host_f32(state_gpu), to_f32(state_ref), tolerance(act))) << "state";
}

// Decode: a prompt, then 64 decode steps of three requests, each continuing from the 16-bit
// state the step before stored (the CUDA-graph decode path runs this same kernel).
TEST_F(GdnStateDtypeCuda, DecodeStepsContinueFromSixteenBitState) {
  std::vector<Call> calls = {{{40, 3, 1}, {5, 0, 2}}};
  for (int step = 0; step < 64; ++step) calls.push_back({{1, 1, 1}, {2, 5, 0}});
  for (const Dims& d : {Dims{16, 32, 128, 128}, Dims{2, 4, 32, 20}}) {
    for (DType act : gdn_test::kActs) {
      for (DType dtype : kStateDTypes) check_rule_calls(d, act, dtype, INT_MAX, 6, calls, rng_);
    }
  }
}

// Chunked prefill continuing from the 16-bit state an earlier call stored, the split at every
// alignment to the 64-token chunks up to 66 rows, then in strides past two chunks.
TEST_F(GdnStateDtypeCuda, ChunkedPrefillContinuesAtEveryChunkAlignment) {
  const Dims d{2, 4, 128, 64};
  const int32_t tokens = 200;
  for (DType dtype : kStateDTypes) {
    for (int32_t a = 1; a <= 130; a += a < 66 ? 1 : 16) {
      SCOPED_TRACE("first call " + std::to_string(a) + " rows");
      check_rule_calls(d, DType::kBF16, dtype, 1, 2, {{{a}, {1}}, {{tokens - a}, {1}}}, rng_);
    }
  }
}

// The op's split over mixed batches (chunked prefills beside token-by-token rows) at the
// Qwen3.5-35B-A3B shape (16 key heads, 32 value heads of 128), continuing across calls.
TEST_F(GdnStateDtypeCuda, MixedBatchesAtQwenShape) {
  const Dims d{16, 32, 128, 128};
  const std::vector<Call> calls = {
      {{1, 300, 7, 1}, {3, 0, 6, 1}}, {{1, 64, 1, 33}, {0, 3, 1, 6}}, {{1, 1, 1, 1}, {0, 1, 3, 6}}};
  for (DType dtype : kStateDTypes) check_rule_calls(d, DType::kBF16, dtype, 0, 8, calls, rng_);
}

// The conv state keeps the last inputs: with BF16 activations a BF16 conv state is exact, and
// in every combination the GPU's state equals the CPU op's (same values, same rounding).
TEST_F(GdnStateDtypeCuda, ConvStateMatchesCpuExactly) {
  const int64_t channels = 8192 + 16, width = 4, num_slots = 6;
  const std::vector<Call> calls = {{{40, 1, 17}, {4, 0, 2}}, {{1, 1, 1}, {2, 4, 0}}};
  Tensor w = random_tensor({channels, width}, DType::kBF16, rng_, 0.0f, 0.5f);
  for (DType act : gdn_test::kActs) {
    for (DType dtype : kStateDTypes) {
      SCOPED_TRACE("act " + std::string(dtype_name(act)) + " state " +
                   std::string(dtype_name(dtype)));
      Tensor state_ref = random_tensor({num_slots, channels, width - 1}, dtype, rng_, 0.0f, 1.0f);
      Tensor state_gpu = dev(state_ref), w_gpu = dev(w);
      for (const Call& c : calls) {
        Batch b;
        for (size_t r = 0; r < c.lens.size(); ++r) b.add(c.lens[r], c.slots[r]);
        Tensor x = random_tensor({b.tokens(), channels}, act, rng_, 0.0f, 1.0f);
        Tensor out_ref = Tensor::empty({b.tokens(), channels}, DType::kF32);
        GDN_ASSERT_OK(cpu::causal_conv1d(to_f32(x), w, Tensor(), b.cpu(), state_ref, out_ref));
        const DeviceBatch db = upload(b);
        Tensor x_gpu = dev(x), out_gpu = dev(fill_nan({b.tokens(), channels}, act));
        GDN_ASSERT_OK(
            cuda::causal_conv1d(x_gpu, w_gpu, Tensor(), db.view, state_gpu, out_gpu, kStream));
        EXPECT_TRUE(relative_l2(host_f32(out_gpu), out_ref, gdn_test::tolerance(act))) << "out";
      }
      EXPECT_EQ(state_gpu.dtype(), dtype);
      EXPECT_TRUE(relative_l2(host_f32(state_gpu), to_f32(state_ref), 0.0)) << "conv_state";
    }
  }
}

}  // namespace
}  // namespace vllm
