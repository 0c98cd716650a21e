// AVX-512 inner loops of paged attention and the gated delta rule (vec_kernels.h), and the
// sampler's sum of exponentials (sum_exp.h): 16-wide f32 vectors with FMA, masked loads for
// the last partial vector.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/sum_exp.h"
#include "backend/cpu/vec_kernels.h"

// GCC 12 reports its own AVX-512 intrinsics (their self-initialised "undefined" vectors) as
// uninitialised; nothing here reads an uninitialised value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define VLLM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace vllm::cpu::detail {
namespace {

VLLM_AVX512 inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

VLLM_AVX512 inline float dot(const float* a, const float* b, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// y[i] += a * x[i]
VLLM_AVX512 inline void axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 yv = _mm512_maskz_loadu_ps(m, y + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), yv));
  }
}

}  // namespace

VLLM_AVX512 void attention_row_avx512(const AttentionRow& a) {
  const int64_t bs = a.block_size, d = a.head_dim;
  auto key = [&](int64_t j) {
    return a.cache + (a.table[j / bs] * 2 * bs + j % bs) * a.kv_row + a.kv_offset;
  };
  float max_score = -INFINITY;
  for (int64_t j = 0; j < a.ctx; ++j) {
    const float s = dot(a.q, key(j), d) * a.scale;
    a.scores[j] = s;
    max_score = s > max_score ? s : max_score;
  }
  float denom = 0.0f;
  for (int64_t j = 0; j < a.ctx; ++j) {
    const float p = std::exp(a.scores[j] - max_score);
    a.scores[j] = p;
    denom += p;
  }
  for (int64_t i = 0; i < d; i += 16)
    _mm512_mask_storeu_ps(a.out + i, tail_mask(d - i), _mm512_setzero_ps());
  for (int64_t j = 0; j < a.ctx; ++j) axpy(a.scores[j], key(j) + bs * a.kv_row, a.out, d);
  const __m512 inv = _mm512_set1_ps(1.0f / denom);
  for (int64_t i = 0; i < d; i += 16) {
    const __mmask16 m = tail_mask(d - i);
    _mm512_mask_storeu_ps(a.out + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a.out + i), inv));
  }
}

VLLM_AVX512 void delta_rule_step_avx512(const DeltaRuleStep& s) {
  const int64_t dk = s.dk, dv = s.dv;
  float* mem = s.scratch;
  // mem = decay * S^T k (one read pass), delta = (v - mem) * beta, kept in mem.
  for (int64_t j = 0; j < dv; j += 16) {
    const __mmask16 m = tail_mask(dv - j);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < dk; ++i) {
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, s.state + i * dv + j), _mm512_set1_ps(s.k[i]),
                            acc);
    }
    const __m512 pred = _mm512_mul_ps(acc, _mm512_set1_ps(s.decay));
    const __m512 delta = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s.v + j), pred),
                                       _mm512_set1_ps(s.beta));
    _mm512_mask_storeu_ps(mem + j, m, delta);
  }
  // S = decay * S + k delta^T and out = S^T q (one read-write pass).
  for (int64_t j = 0; j < dv; j += 16) {
    const __mmask16 m = tail_mask(dv - j);
    const __m512 delta = _mm512_maskz_loadu_ps(m, mem + j);
    const __m512 decay = _mm512_set1_ps(s.decay);
    __m512 o = _mm512_setzero_ps();
    for (int64_t i = 0; i < dk; ++i) {
      float* row = s.state + i * dv + j;
      const __m512 updated = _mm512_fmadd_ps(_mm512_set1_ps(s.k[i]), delta,
                                             _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row), decay));
      _mm512_mask_storeu_ps(row, m, updated);
      o = _mm512_fmadd_ps(updated, _mm512_set1_ps(s.q[i]), o);
    }
    _mm512_mask_storeu_ps(s.out + j, m, o);
  }
}

namespace {

// exp(t) for t clamped to [-87, 88] (NaN stays NaN): t = n ln2 + r with |r| <= ln2 / 2
// (ln2 in two parts, so r is exact to f32), exp(r) by its Taylor polynomial of degree 7
// (truncation below 6e-9 relative), times 2^n by scalef.
VLLM_AVX512 inline __m512 exp_ps(__m512 t) {
  t = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), t));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// The 16 f32 lanes of e added to two f64 accumulators.
VLLM_AVX512 inline void add_wide(__m512 e, __m512d& lo, __m512d& hi) {
  lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
  hi = _mm512_add_pd(
      hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
}

}  // namespace

VLLM_AVX512 void silu_avx512(const float* x, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_mask_storeu_ps(out + i, mask, _mm512_div_ps(v, _mm512_add_ps(one, e)));
  }
}

VLLM_AVX512 double sum_exp_avx512(const float* x, int64_t n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  __m512d a2 = _mm512_setzero_pd(), a3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    add_wide(exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv)), a0, a1);
    add_wide(exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), mv)), a2, a3);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = tail_mask(n - i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + i), mv));
    add_wide(_mm512_maskz_mov_ps(mask, e), a0, a1);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

}  // namespace vllm::cpu::detail
