// Gated DeltaNet CPU ops with their state kept in BF16 or F16 (vLLM's --mamba-cache-dtype and
// --mamba-ssm-cache-dtype; gdn.h): the arithmetic stays f32 and the state is rounded once per
// call and request when it is stored. So a run with a 16-bit state must equal, bit for bit, the
// f32 op run on an f32 state that the test rounds to the 16-bit dtype after every call, and it
// must stay within 16-bit tolerance of the all-f32 run.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/gates.h"
#include "backend/cpu/gdn.h"
#include "op_test_util.h"

namespace vllm {
namespace test_gdn_state_dtype {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)

constexpr DType kStateDTypes[] = {DType::kBF16, DType::kF16};

struct Batch {
  std::vector<int32_t> loc;
  std::vector<int32_t> slots;
  cpu::GdnBatch view() const { return {loc, slots}; }
  int64_t tokens() const { return loc.back(); }
};

Batch make_batch(const std::vector<int32_t>& lens, const std::vector<int32_t>& slots) {
  Batch b;
  b.loc = {0};
  for (int32_t n : lens) b.loc.push_back(b.loc.back() + n);
  b.slots = slots;
  return b;
}

// An f32 tensor holding exactly the values of `t` (F32/BF16/F16).
Tensor widened(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::kF32);
  const std::vector<double> v = values_of(t);
  for (size_t i = 0; i < v.size(); ++i) out.data<float>()[i] = static_cast<float>(v[i]);
  return out;
}

// t's values rounded to `dtype` and widened back: what storing them in `dtype` keeps.
Tensor rounded(const Tensor& t, DType dtype) {
  return widened(cast_to(t, dtype));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values_of(a), y = values_of(b);
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != y[i]) return false;
  }
  return true;
}

struct Rule {
  int64_t hk = 2, hv = 4, dk = 16, dv = 12;
  Tensor q, k, v, g, beta;  // for `tokens` rows
};

Rule make_rule(int64_t tokens, uint32_t seed) {
  Rule r;
  r.q = random_f32({tokens, r.hk * r.dk}, seed, -1.5, 1.5);
  r.k = random_f32({tokens, r.hk * r.dk}, seed + 1, -1.5, 1.5);
  r.v = random_f32({tokens, r.hv * r.dv}, seed + 2, -1.5, 1.5);
  Tensor ab = random_f32({tokens, 2 * r.hv}, seed + 3, -3, 3);
  Tensor a_log = random_f32({r.hv}, seed + 4, -2, 1), dt = random_f32({r.hv}, seed + 5);
  r.g = Tensor::empty({tokens, r.hv}, DType::kF32);
  r.beta = Tensor::empty({tokens, r.hv}, DType::kF32);
  EXPECT_TRUE(
      cpu::gdn_gating(ab.slice(1, 0, r.hv), ab.slice(1, r.hv, 2 * r.hv), a_log, dt, r.g, r.beta)
          .is_ok());
  return r;
}

// Rows [t0, t0 + b.tokens()) of the rule's inputs through the op.
Status run_rule(const Rule& r, int64_t t0, const Batch& b, Tensor& state, Tensor& out) {
  const int64_t t1 = t0 + b.tokens();
  return cpu::gated_delta_rule(r.q.slice(0, t0, t1), r.k.slice(0, t0, t1), r.v.slice(0, t0, t1),
                               r.g.slice(0, t0, t1), r.beta.slice(0, t0, t1), b.view(),
                               cpu::GatedDeltaRuleParams{}, state, out);
}

// Steps of a varlen batch: two prefills in pieces, then decode rows, then more prefill.
std::vector<Batch> steps() {
  return {make_batch({5, 9}, {3, 0}), make_batch({1, 7, 0}, {3, 0, 1}), make_batch({1, 1}, {0, 3}),
          make_batch({1, 1}, {3, 0}), make_batch({12, 1}, {1, 3})};
}

TEST(GdnStateDtype, RuleEqualsF32RoundedAtEveryStore) {
  for (DType dtype : kStateDTypes) {
    std::vector<Batch> plan = steps();
    int64_t total = 0;
    for (const Batch& b : plan) total += b.tokens();
    Rule r = make_rule(total, 11);
    Tensor state = cast_to(random_f32({5, r.hv, r.dk, r.dv}, 12, -0.3, 0.3), dtype);
    Tensor reference = widened(state);
    int64_t t0 = 0;
    for (const Batch& b : plan) {
      Tensor out = Tensor::empty({b.tokens(), r.hv * r.dv}, DType::kF32);
      Tensor ref_out = Tensor::empty({b.tokens(), r.hv * r.dv}, DType::kF32);
      ASSERT_TRUE(run_rule(r, t0, b, state, out).is_ok());
      ASSERT_TRUE(run_rule(r, t0, b, reference, ref_out).is_ok());
      reference = rounded(reference, dtype);  // the reference's store
      EXPECT_TRUE(same_bits(out, ref_out)) << dtype_name(dtype) << " rows from " << t0;
      EXPECT_TRUE(same_bits(state, reference)) << dtype_name(dtype) << " rows from " << t0;
      t0 += b.tokens();
    }
    EXPECT_EQ(state.dtype(), dtype);
  }
}

TEST(GdnStateDtype, RuleStaysWithinSixteenBitToleranceOfF32) {
  // A 40-token prompt in two pieces, then 60 decode steps: the state is rounded at each.
  const int64_t prompt = 40, decode = 60;
  Rule r = make_rule(prompt + decode, 21);
  for (DType dtype : kStateDTypes) {
    Tensor f32_state = Tensor::zeros({2, r.hv, r.dk, r.dv}, DType::kF32);
    Tensor state = Tensor::zeros({2, r.hv, r.dk, r.dv}, dtype);
    Tensor f32_out = Tensor::empty({prompt + decode, r.hv * r.dv}, DType::kF32);
    Tensor out = Tensor::empty({prompt + decode, r.hv * r.dv}, DType::kF32);
    std::vector<std::pair<int64_t, int64_t>> calls = {{0, 17}, {17, prompt}};
    for (int64_t t = prompt; t < prompt + decode; ++t) calls.emplace_back(t, t + 1);
    for (auto [t0, t1] : calls) {
      Batch b = make_batch({static_cast<int32_t>(t1 - t0)}, {1});
      Tensor o = out.slice(0, t0, t1), fo = f32_out.slice(0, t0, t1);
      ASSERT_TRUE(run_rule(r, t0, b, state, o).is_ok());
      ASSERT_TRUE(run_rule(r, t0, b, f32_state, fo).is_ok());
    }
    const double out_err = rel_l2(out, values_of(f32_out));
    const double state_err = rel_l2(widened(state), values_of(f32_state));
    // One rounding per step of a relative 2^-9 (BF16) or 2^-12 (F16), decayed by the gates.
    const double bound = dtype == DType::kBF16 ? 1e-2 : 2e-3;
    EXPECT_LT(out_err, bound) << dtype_name(dtype);
    EXPECT_LT(state_err, bound) << dtype_name(dtype);
    EXPECT_GT(out_err, 0.0) << "the 16-bit state must actually be rounded";
  }
}

TEST(GdnStateDtype, ConvEqualsF32RoundedAtEveryStore) {
  const int64_t channels = 70, width = 4;  // two channel blocks of the op
  std::vector<Batch> plan = steps();
  int64_t total = 0;
  for (const Batch& b : plan) total += b.tokens();
  Tensor x = random_f32({total, channels}, 31, -2, 2);
  Tensor w = random_f32({channels, width}, 32);
  for (DType dtype : kStateDTypes) {
    Tensor state = cast_to(random_f32({5, channels, width - 1}, 33), dtype);
    Tensor reference = widened(state);
    int64_t t0 = 0;
    for (const Batch& b : plan) {
      Tensor in = x.slice(0, t0, t0 + b.tokens());
      Tensor out = Tensor::empty({b.tokens(), channels}, DType::kF32);
      Tensor ref_out = Tensor::empty({b.tokens(), channels}, DType::kF32);
      ASSERT_TRUE(cpu::causal_conv1d(in, w, Tensor(), b.view(), state, out).is_ok());
      ASSERT_TRUE(cpu::causal_conv1d(in, w, Tensor(), b.view(), reference, ref_out).is_ok());
      reference = rounded(reference, dtype);
      EXPECT_TRUE(same_bits(out, ref_out)) << dtype_name(dtype) << " rows from " << t0;
      EXPECT_TRUE(same_bits(state, reference)) << dtype_name(dtype) << " rows from " << t0;
      t0 += b.tokens();
    }
  }
}

TEST(GdnStateDtype, ConvStateOfSixteenBitInputsIsExact) {
  // The conv state holds past inputs: when they are BF16 values already (BF16 activations),
  // a BF16 conv state loses nothing, and the run equals the f32-state run bit for bit.
  const int64_t channels = 24, width = 4;
  Tensor x = rounded(random_f32({20, channels}, 41, -2, 2), DType::kBF16);
  Tensor w = random_f32({channels, width}, 42);
  Tensor state = Tensor::zeros({1, channels, width - 1}, DType::kBF16);
  Tensor f32_state = Tensor::zeros({1, channels, width - 1}, DType::kF32);
  for (int64_t t0 : {0, 7, 8, 9}) {
    const int64_t t1 = t0 == 9 ? 20 : (t0 == 0 ? 7 : t0 + 1);
    Batch b = make_batch({static_cast<int32_t>(t1 - t0)}, {0});
    Tensor in = x.slice(0, t0, t1);
    Tensor out = Tensor::empty({t1 - t0, channels}, DType::kF32);
    Tensor f32_out = Tensor::empty({t1 - t0, channels}, DType::kF32);
    ASSERT_TRUE(cpu::causal_conv1d(in, w, Tensor(), b.view(), state, out).is_ok());
    ASSERT_TRUE(cpu::causal_conv1d(in, w, Tensor(), b.view(), f32_state, f32_out).is_ok());
    EXPECT_TRUE(same_bits(out, f32_out)) << "rows from " << t0;
    EXPECT_TRUE(same_bits(state, f32_state)) << "rows from " << t0;
  }
}

TEST(GdnStateDtype, ZeroSlotsClearsSixteenBitSlotsOnly) {
  for (DType dtype : kStateDTypes) {
    Tensor state = cast_to(random_f32({4, 3, 5}, 51, 0.5, 1.0), dtype);
    const std::vector<double> before = values_of(state);
    Tensor slots = Tensor::empty({3}, DType::kI32);
    slots.data<int32_t>()[0] = 2;
    slots.data<int32_t>()[1] = -1;  // padding
    slots.data<int32_t>()[2] = 0;
    ASSERT_TRUE(cpu::zero_slots(state, slots).is_ok());
    const std::vector<double> after = values_of(state);
    for (int64_t s = 0; s < 4; ++s) {
      for (int64_t i = 0; i < 15; ++i) {
        const double want = s == 0 || s == 2 ? 0.0 : before[s * 15 + i];
        EXPECT_EQ(after[s * 15 + i], want) << dtype_name(dtype) << " slot " << s;
      }
    }
  }
}

TEST(GdnStateDtype, OtherStateDtypesAreRefused) {
  Rule r = make_rule(3, 61);
  Batch b = make_batch({3}, {0});
  Tensor out = Tensor::empty({3, r.hv * r.dv}, DType::kF32);
  Tensor fp8 = Tensor::zeros({1, r.hv, r.dk, r.dv}, DType::kF8E4M3);
  expect_error(run_rule(r, 0, b, fp8, out), ErrorCode::kInvalidArgument, "state");
  Tensor conv_state = Tensor::zeros({1, 8, 3}, DType::kI32);
  Tensor x = random_f32({3, 8}, 62), w = random_f32({8, 4}, 63);
  Tensor conv_out = Tensor::empty({3, 8}, DType::kF32);
  expect_error(cpu::causal_conv1d(x, w, Tensor(), b.view(), conv_state, conv_out),
               ErrorCode::kInvalidArgument, "conv_state");
}

}  // namespace
}  // namespace test_gdn_state_dtype
}  // namespace vllm