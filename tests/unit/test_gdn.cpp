// Gated DeltaNet CPU ops (gdn.h) against naive double-precision references: the causal conv1d
// and the delta rule over varlen batches that continue from per-slot state, the gating and the
// gated RMSNorm. The delta rule is also checked against transformers' chunked formulation
// (torch_chunk_gated_delta_rule, re-derived here in double), and running a sequence in
// chunks of 1, 3 and 7 tokens through the state must give the output of one call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/gdn.h"
#include "op_test_util.h"

namespace vllm {
namespace test_gdn {
namespace {

using namespace vllm::test;  // NOLINT(google-build-using-namespace)
using Mat = std::vector<std::vector<double>>;

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}

// A batch: request lengths and their slots.
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

double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

std::vector<double> values(const Tensor& t) {
  return values_of(t.is_contiguous() ? t : t.clone());
}

// ---------------------------------------------------------------- causal conv1d

// Reference: out and the new state of every request, from x [T, C], w [C, K], state.
void conv_reference(const std::vector<double>& x, const std::vector<double>& w,
                    const std::vector<double>& bias, const Batch& b, int64_t channels,
                    int64_t width, std::vector<double>& state, std::vector<double>& out) {
  const int64_t hist = width - 1;
  out.assign(static_cast<size_t>(b.tokens() * channels), 0.0);
  for (size_t r = 0; r + 1 < b.loc.size(); ++r) {
    const int64_t t0 = b.loc[r], n = b.loc[r + 1] - t0;
    double* s = state.data() + b.slots[r] * channels * hist;
    for (int64_t c = 0; c < channels; ++c) {
      std::vector<double> in(s + c * hist, s + (c + 1) * hist);
      for (int64_t t = 0; t < n; ++t) in.push_back(x[(t0 + t) * channels + c]);
      for (int64_t t = 0; t < n; ++t) {
        double acc = bias.empty() ? 0.0 : bias[c];
        for (int64_t j = 0; j < width; ++j) acc += w[c * width + j] * in[t + j];
        out[(t0 + t) * channels + c] = silu(acc);
      }
      for (int64_t j = 0; j < hist; ++j) s[c * hist + j] = in[in.size() - hist + j];
    }
  }
}

TEST(GdnConv, MatchesReferenceOverVarlenBatchWithState) {
  const int64_t channels = 70, slots = 6;  // two channel blocks of the op
  for (int64_t width : {1, 2, 4}) {
    for (DType dtype : kWeightDTypes) {
      for (bool with_bias : {false, true}) {
        Batch b = make_batch({5, 1, 0, 9}, {3, 0, 5, 1});
        // x: a column slice of a wider tensor, so its rows are strided.
        Tensor wide = random_f32({b.tokens(), channels + 11}, 5, -2, 2);
        Tensor x = wide.slice(1, 3, 3 + channels);
        Tensor w = cast_to(random_f32({channels, width}, 6), dtype);
        Tensor bias = with_bias ? cast_to(random_f32({channels}, 7), dtype) : Tensor();
        Tensor state = random_f32({slots, channels, width - 1}, 8);
        std::vector<double> ref_state = values(state), ref_out;
        conv_reference(values(x), values_of(w), with_bias ? values_of(bias) : std::vector<double>{},
                       b, channels, width, ref_state, ref_out);
        Tensor out = Tensor::empty({b.tokens(), channels}, DType::kF32);
        ASSERT_TRUE(cpu::causal_conv1d(x, w, bias, b.view(), state, out).is_ok());
        EXPECT_LT(rel_l2(out, ref_out), 1e-6) << "width " << width;
        EXPECT_LT(rel_l2(state, ref_state), 1e-7) << "width " << width;
      }
    }
  }
}

TEST(GdnConv, ChunksThroughStateMatchWholeSequence) {
  const int64_t channels = 19, width = 4, n = 23;
  Tensor x = random_f32({n, channels}, 11, -2, 2);
  Tensor w = random_f32({channels, width}, 12);
  Tensor whole_state = Tensor::zeros({2, channels, width - 1}, DType::kF32);
  Tensor whole = Tensor::empty({n, channels}, DType::kF32);
  Batch all = make_batch({static_cast<int32_t>(n)}, {1});
  ASSERT_TRUE(cpu::causal_conv1d(x, w, Tensor(), all.view(), whole_state, whole).is_ok());
  for (int64_t chunk : {1, 3, 7}) {
    Tensor state = Tensor::zeros({2, channels, width - 1}, DType::kF32);
    Tensor out = x.clone();  // converted in place: out aliases x
    for (int64_t t = 0; t < n; t += chunk) {
      const int64_t m = std::min(chunk, n - t);
      Tensor part = out.slice(0, t, t + m);
      Batch b = make_batch({static_cast<int32_t>(m)}, {1});
      ASSERT_TRUE(cpu::causal_conv1d(part, w, Tensor(), b.view(), state, part).is_ok());
    }
    EXPECT_LT(rel_l2(out, values(whole)), 1e-7) << "chunk " << chunk;
    EXPECT_LT(rel_l2(state, values(whole_state)), 1e-7) << "chunk " << chunk;
  }
}

TEST(GdnConv, RejectsBadBatchesAndShapes) {
  Tensor x = random_f32({4, 8}, 1), w = random_f32({8, 4}, 2);
  Tensor state = Tensor::zeros({3, 8, 3}, DType::kF32);
  Tensor out = Tensor::empty({4, 8}, DType::kF32);
  Batch dup = make_batch({2, 2}, {1, 1});
  expect_error(cpu::causal_conv1d(x, w, Tensor(), dup.view(), state, out),
               ErrorCode::kInvalidArgument, "used by two requests");
  Batch far = make_batch({2, 2}, {0, 3});
  expect_error(cpu::causal_conv1d(x, w, Tensor(), far.view(), state, out), ErrorCode::kOutOfRange,
               "state_indices[1] = 3");
  Batch short_batch = make_batch({2, 1}, {0, 1});
  expect_error(cpu::causal_conv1d(x, w, Tensor(), short_batch.view(), state, out),
               ErrorCode::kInvalidArgument, "query_start_loc");
  Batch ok = make_batch({4}, {0});
  Tensor bad_state = Tensor::zeros({3, 8, 2}, DType::kF32);
  expect_error(cpu::causal_conv1d(x, w, Tensor(), ok.view(), bad_state, out),
               ErrorCode::kInvalidArgument, "conv_state");
}

// ---------------------------------------------------------------- gating

TEST(GdnGating, MatchesFormulaIncludingSoftplusThreshold) {
  const int64_t tokens = 9, heads = 5;
  Tensor ab = random_f32({tokens, 2 * heads}, 21, -25, 25);  // crosses softplus' threshold
  Tensor a = ab.slice(1, heads, 2 * heads), b = ab.slice(1, 0, heads);
  Tensor a_log = random_f32({heads}, 22, -1, 2.5), dt_bias = random_f32({heads}, 23);
  Tensor g = Tensor::empty({tokens, heads}, DType::kF32);
  Tensor beta = Tensor::empty({tokens, heads}, DType::kF32);
  ASSERT_TRUE(cpu::gdn_gating(a, b, a_log, dt_bias, g, beta).is_ok());
  std::vector<double> av = values(a), bv = values(b), al = values(a_log), dt = values(dt_bias);
  std::vector<double> g_ref, beta_ref;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      g_ref.push_back(-std::exp(al[h]) * softplus(av[t * heads + h] + dt[h]));
      beta_ref.push_back(1.0 / (1.0 + std::exp(-bv[t * heads + h])));
    }
  }
  EXPECT_LT(rel_l2(g, g_ref), 1e-6);
  EXPECT_LT(rel_l2(beta, beta_ref), 1e-6);
}

// ---------------------------------------------------------------- delta rule

struct RuleDims {
  int64_t hk, hv, dk, dv;
};

// Normalised, scaled q and normalised k of one token / key head, as transformers does.
std::vector<double> l2norm(const double* x, int64_t n, double scale) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] / std::sqrt(s + 1e-6) * scale;
  return out;
}

// The per-token recurrence for one value head over tokens [t0, t1); S [Dk, Dv] in place.
void recurrent_head(const RuleDims& d, int64_t h, int64_t t0, int64_t t1,
                    const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& g,
                    const std::vector<double>& beta, double* s, std::vector<double>& out) {
  const int64_t kh = h / (d.hv / d.hk);
  for (int64_t t = t0; t < t1; ++t) {
    auto qt = l2norm(&q[(t * d.hk + kh) * d.dk], d.dk, 1.0 / std::sqrt(double(d.dk)));
    auto kt = l2norm(&k[(t * d.hk + kh) * d.dk], d.dk, 1.0);
    const double decay = std::exp(g[t * d.hv + h]);
    for (int64_t i = 0; i < d.dk * d.dv; ++i) s[i] *= decay;
    for (int64_t j = 0; j < d.dv; ++j) {
      double mem = 0;
      for (int64_t i = 0; i < d.dk; ++i) mem += s[i * d.dv + j] * kt[i];
      const double delta = (v[(t * d.hv + h) * d.dv + j] - mem) * beta[t * d.hv + h];
      for (int64_t i = 0; i < d.dk; ++i) s[i * d.dv + j] += kt[i] * delta;
    }
    for (int64_t j = 0; j < d.dv; ++j) {
      double o = 0;
      for (int64_t i = 0; i < d.dk; ++i) o += s[i * d.dv + j] * qt[i];
      out[(t * d.hv + h) * d.dv + j] = o;
    }
  }
}

// transformers' torch_chunk_gated_delta_rule for one value head and one sequence [0, T), in
// double: a unit-lower-triangular solve per chunk (the UT transform), then the scan over
// chunks. S [Dk, Dv] in place.
void chunked_head(const RuleDims& d, int64_t h, int64_t n, int64_t chunk,
                  const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& g,
                  const std::vector<double>& beta, double* s, std::vector<double>& out) {
  const int64_t kh = h / (d.hv / d.hk);
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    // Padding with zeros (q, k, v, g, beta) as transformers pads the last chunk.
    Mat qc(chunk), kc(chunk), vc(chunk);
    std::vector<double> gc(chunk, 0.0), bc(chunk, 0.0), cum(chunk);
    for (int64_t i = 0; i < chunk; ++i) {
      const int64_t t = c0 + i;
      if (t < n) {
        qc[i] = l2norm(&q[(t * d.hk + kh) * d.dk], d.dk, 1.0 / std::sqrt(double(d.dk)));
        kc[i] = l2norm(&k[(t * d.hk + kh) * d.dk], d.dk, 1.0);
        vc[i].assign(&v[(t * d.hv + h) * d.dv], &v[(t * d.hv + h) * d.dv] + d.dv);
        gc[i] = g[t * d.hv + h];
        bc[i] = beta[t * d.hv + h];
      } else {
        qc[i].assign(d.dk, 0.0);
        kc[i].assign(d.dk, 0.0);
        vc[i].assign(d.dv, 0.0);
      }
      cum[i] = (i ? cum[i - 1] : 0.0) + gc[i];
    }
    auto dot = [&](const std::vector<double>& a, const std::vector<double>& b) {
      double r = 0;
      for (size_t i = 0; i < a.size(); ++i) r += a[i] * b[i];
      return r;
    };
    // Solve (I + L) X = B with L[i][j] = beta_i k_i.k_j exp(cum_i - cum_j), j < i.
    Mat u(chunk, std::vector<double>(d.dv)), w(chunk, std::vector<double>(d.dk));
    for (int64_t i = 0; i < chunk; ++i) {
      for (int64_t j = 0; j < d.dv; ++j) u[i][j] = vc[i][j] * bc[i];
      for (int64_t j = 0; j < d.dk; ++j) w[i][j] = kc[i][j] * bc[i] * std::exp(cum[i]);
      for (int64_t m = 0; m < i; ++m) {
        const double l = bc[i] * dot(kc[i], kc[m]) * std::exp(cum[i] - cum[m]);
        for (int64_t j = 0; j < d.dv; ++j) u[i][j] -= l * u[m][j];
        for (int64_t j = 0; j < d.dk; ++j) w[i][j] -= l * w[m][j];
      }
    }
    // v_new = u - w S; out = (q exp(cum)) S + intra v_new; S = S exp(cum_last) + k~^T v_new.
    Mat v_new(chunk, std::vector<double>(d.dv));
    for (int64_t i = 0; i < chunk; ++i) {
      for (int64_t j = 0; j < d.dv; ++j) {
        double ws = 0;
        for (int64_t a = 0; a < d.dk; ++a) ws += w[i][a] * s[a * d.dv + j];
        v_new[i][j] = u[i][j] - ws;
      }
    }
    for (int64_t i = 0; i < chunk && c0 + i < n; ++i) {
      for (int64_t j = 0; j < d.dv; ++j) {
        double o = 0;
        for (int64_t a = 0; a < d.dk; ++a) o += qc[i][a] * std::exp(cum[i]) * s[a * d.dv + j];
        for (int64_t m = 0; m <= i; ++m) {
          o += dot(qc[i], kc[m]) * std::exp(cum[i] - cum[m]) * v_new[m][j];
        }
        out[((c0 + i) * d.hv + h) * d.dv + j] = o;
      }
    }
    const double last = cum[chunk - 1];
    for (int64_t a = 0; a < d.dk; ++a) {
      for (int64_t j = 0; j < d.dv; ++j) {
        double upd = 0;
        for (int64_t m = 0; m < chunk; ++m) upd += kc[m][a] * std::exp(last - cum[m]) * v_new[m][j];
        s[a * d.dv + j] = s[a * d.dv + j] * std::exp(last) + upd;
      }
    }
  }
}

// Random inputs of the rule as the model produces them: q/k/v column slices of one wide
// tensor, g and beta from the gating op.
struct RuleInputs {
  Tensor wide, q, k, v, g, beta;
};

RuleInputs make_rule_inputs(const RuleDims& d, int64_t tokens, uint32_t seed) {
  RuleInputs in;
  const int64_t kd = d.hk * d.dk, vd = d.hv * d.dv;
  in.wide = random_f32({tokens, 2 * kd + vd + 3}, seed, -1.5, 1.5);
  in.q = in.wide.slice(1, 0, kd);
  in.k = in.wide.slice(1, kd, 2 * kd);
  in.v = in.wide.slice(1, 2 * kd, 2 * kd + vd);
  Tensor ab = random_f32({tokens, 2 * d.hv}, seed + 1, -3, 3);
  Tensor a_log = random_f32({d.hv}, seed + 2, -2, 1), dt = random_f32({d.hv}, seed + 3);
  in.g = Tensor::empty({tokens, d.hv}, DType::kF32);
  in.beta = Tensor::empty({tokens, d.hv}, DType::kF32);
  EXPECT_TRUE(
      cpu::gdn_gating(ab.slice(1, 0, d.hv), ab.slice(1, d.hv, 2 * d.hv), a_log, dt, in.g, in.beta)
          .is_ok());
  return in;
}

TEST(GdnRule, MatchesRecurrentReferenceOverVarlenBatchWithState) {
  for (RuleDims d : {RuleDims{2, 6, 16, 8}, RuleDims{3, 3, 7, 12}, RuleDims{1, 4, 32, 32}}) {
    Batch b = make_batch({7, 1, 30, 0}, {2, 4, 0, 1});
    RuleInputs in = make_rule_inputs(d, b.tokens(), 31);
    Tensor state = random_f32({5, d.hv, d.dk, d.dv}, 32, -0.3, 0.3);
    std::vector<double> ref_state = values(state);
    std::vector<double> ref_out(static_cast<size_t>(b.tokens() * d.hv * d.dv));
    std::vector<double> q = values(in.q), k = values(in.k), v = values(in.v), g = values(in.g),
                        beta = values(in.beta);
    for (size_t r = 0; r + 1 < b.loc.size(); ++r) {
      for (int64_t h = 0; h < d.hv; ++h) {
        recurrent_head(d, h, b.loc[r], b.loc[r + 1], q, k, v, g, beta,
                       ref_state.data() + (b.slots[r] * d.hv + h) * d.dk * d.dv, ref_out);
      }
    }
    Tensor out = Tensor::empty({b.tokens(), d.hv * d.dv}, DType::kF32);
    ASSERT_TRUE(cpu::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, b.view(),
                                      cpu::GatedDeltaRuleParams{}, state, out)
                    .is_ok());
    EXPECT_LT(rel_l2(out, ref_out), 1e-5) << d.hk << " " << d.hv << " " << d.dk << " " << d.dv;
    EXPECT_LT(rel_l2(state, ref_state), 1e-5);
  }
}

TEST(GdnRule, MatchesTransformersChunkedForm) {
  const RuleDims d{2, 4, 16, 8};
  const int64_t n = 100;
  RuleInputs in = make_rule_inputs(d, n, 41);
  std::vector<double> q = values(in.q), k = values(in.k), v = values(in.v), g = values(in.g),
                      beta = values(in.beta);
  for (bool from_zero : {true, false}) {
    Tensor init = from_zero ? Tensor::zeros({1, d.hv, d.dk, d.dv}, DType::kF32)
                            : random_f32({1, d.hv, d.dk, d.dv}, 42, -0.3, 0.3);
    // The double recurrence and the double chunked form agree (our reading of the chunked
    // algorithm is the same function).
    std::vector<double> rec_state = values(init), rec_out(static_cast<size_t>(n * d.hv * d.dv));
    for (int64_t h = 0; h < d.hv; ++h) {
      recurrent_head(d, h, 0, n, q, k, v, g, beta, rec_state.data() + h * d.dk * d.dv, rec_out);
    }
    for (int64_t chunk : {64, 16}) {
      std::vector<double> ch_state = values(init), ch_out(rec_out.size());
      for (int64_t h = 0; h < d.hv; ++h) {
        chunked_head(d, h, n, chunk, q, k, v, g, beta, ch_state.data() + h * d.dk * d.dv, ch_out);
      }
      EXPECT_LT(rel(ch_out, rec_out), 1e-10) << "chunk " << chunk;
      EXPECT_LT(rel(ch_state, rec_state), 1e-10) << "chunk " << chunk;
      // And the f32 op is within 1e-5 of the chunked output.
      Tensor state = init.clone();
      Tensor out = Tensor::empty({n, d.hv * d.dv}, DType::kF32);
      Batch b = make_batch({static_cast<int32_t>(n)}, {0});
      ASSERT_TRUE(cpu::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, b.view(),
                                        cpu::GatedDeltaRuleParams{}, state, out)
                      .is_ok());
      EXPECT_LT(rel_l2(out, ch_out), 1e-5) << "chunk " << chunk;
      EXPECT_LT(rel_l2(state, ch_state), 1e-5) << "chunk " << chunk;
    }
  }
}

TEST(GdnRule, ChunksThroughStateMatchWholeSequence) {
  const RuleDims d{2, 4, 8, 8};
  const int64_t n = 23;
  RuleInputs in = make_rule_inputs(d, n, 51);
  Tensor whole_state = Tensor::zeros({3, d.hv, d.dk, d.dv}, DType::kF32);
  Tensor whole = Tensor::empty({n, d.hv * d.dv}, DType::kF32);
  Batch all = make_batch({static_cast<int32_t>(n)}, {2});
  ASSERT_TRUE(cpu::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, all.view(),
                                    cpu::GatedDeltaRuleParams{}, whole_state, whole)
                  .is_ok());
  for (int64_t chunk : {1, 3, 7}) {
    Tensor state = Tensor::zeros({3, d.hv, d.dk, d.dv}, DType::kF32);
    Tensor out = Tensor::empty({n, d.hv * d.dv}, DType::kF32);
    for (int64_t t = 0; t < n; t += chunk) {
      const int64_t m = std::min(chunk, n - t);
      Tensor o = out.slice(0, t, t + m);
      Batch b = make_batch({static_cast<int32_t>(m)}, {2});
      ASSERT_TRUE(cpu::gated_delta_rule(in.q.slice(0, t, t + m), in.k.slice(0, t, t + m),
                                        in.v.slice(0, t, t + m), in.g.slice(0, t, t + m),
                                        in.beta.slice(0, t, t + m), b.view(),
                                        cpu::GatedDeltaRuleParams{}, state, o)
                      .is_ok());
    }
    EXPECT_LT(rel_l2(out, values(whole)), 1e-6) << "chunk " << chunk;
    EXPECT_LT(rel_l2(state, values(whole_state)), 1e-6) << "chunk " << chunk;
  }
}

TEST(GdnRule, RejectsBadShapes) {
  const RuleDims d{2, 3, 8, 4};  // 3 value heads over 2 key heads
  RuleInputs in = make_rule_inputs(d, 4, 61);
  Tensor state = Tensor::zeros({2, d.hv, d.dk, d.dv}, DType::kF32);
  Tensor out = Tensor::empty({4, d.hv * d.dv}, DType::kF32);
  Batch b = make_batch({4}, {0});
  expect_error(cpu::gated_delta_rule(in.q, in.k, in.v, in.g, in.beta, b.view(),
                                     cpu::GatedDeltaRuleParams{}, state, out),
               ErrorCode::kInvalidArgument, "not a multiple");
  const RuleDims ok{2, 4, 8, 4};
  RuleInputs in2 = make_rule_inputs(ok, 4, 62);
  Tensor state2 = Tensor::zeros({2, ok.hv, ok.dk, ok.dv}, DType::kF32);
  Tensor bad_out = Tensor::empty({4, ok.hv * ok.dv + 1}, DType::kF32);
  expect_error(cpu::gated_delta_rule(in2.q, in2.k, in2.v, in2.g, in2.beta, b.view(),
                                     cpu::GatedDeltaRuleParams{}, state2, bad_out),
               ErrorCode::kInvalidArgument, "gated_delta_rule: out");
}

// ---------------------------------------------------------------- gated RMSNorm

TEST(GdnGatedRmsNorm, MatchesReferenceAndAliases) {
  const int64_t tokens = 6, heads = 3, dim = 16;
  const double eps = 1e-6;
  for (DType dtype : kWeightDTypes) {
    Tensor xz = random_f32({tokens, 2 * heads * dim + 1}, 71, -2, 2);
    Tensor x = xz.slice(1, 0, heads * dim), z = xz.slice(1, heads * dim, 2 * heads * dim);
    Tensor w = cast_to(random_f32({dim}, 72, 0.5, 1.5), dtype);
    std::vector<double> xv = values(x), zv = values(z), wv = values_of(w), ref;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const double* xs = &xv[(t * heads + h) * dim];
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += xs[i] * xs[i];
        const double inv = 1.0 / std::sqrt(ss / dim + eps);
        for (int64_t i = 0; i < dim; ++i) {
          ref.push_back(xs[i] * inv * wv[i] * silu(zv[(t * heads + h) * dim + i]));
        }
      }
    }
    Tensor out = Tensor::empty({tokens, heads * dim}, DType::kF32);
    ASSERT_TRUE(cpu::gated_rms_norm(x, z, w, static_cast<float>(eps), out).is_ok());
    EXPECT_LT(rel_l2(out, ref), 1e-6);
    Tensor x_copy = x.clone();
    ASSERT_TRUE(cpu::gated_rms_norm(x_copy, z, w, static_cast<float>(eps), x_copy).is_ok());
    EXPECT_LT(rel_l2(x_copy, ref), 1e-6);
  }
  Tensor x = random_f32({2, 10}, 1), w = random_f32({4}, 2);
  Tensor out = Tensor::empty({2, 10}, DType::kF32);
  expect_error(cpu::gated_rms_norm(x, x, w, 1e-6f, out), ErrorCode::kInvalidArgument,
               "not a multiple of the head size");
}

}  // namespace
}  // namespace test_gdn
}  // namespace vllm
