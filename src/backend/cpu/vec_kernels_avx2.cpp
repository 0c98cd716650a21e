// AVX2 + FMA inner loops of paged attention and the gated delta rule (vec_kernels.h), and the
// sampler's sum of exponentials (sum_exp.h): 8-wide f32 vectors with FMA; the last dims that
// do not fill a vector run as scalar code.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/sum_exp.h"
#include "backend/cpu/vec_kernels.h"

#define VLLM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace vllm::cpu::detail {
namespace {

VLLM_AVX2 inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

VLLM_AVX2 inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}

VLLM_AVX2 inline void axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace

VLLM_AVX2 void attention_row_avx2(const AttentionRow& a) {
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
  for (int64_t i = 0; i < d; ++i) a.out[i] = 0.0f;
  for (int64_t j = 0; j < a.ctx; ++j) axpy(a.scores[j], key(j) + bs * a.kv_row, a.out, d);
  const float inv = 1.0f / denom;
  for (int64_t i = 0; i < d; ++i) a.out[i] *= inv;
}

VLLM_AVX2 void delta_rule_step_avx2(const DeltaRuleStep& s) {
  const int64_t dk = s.dk, dv = s.dv, vec = dv / 8 * 8;
  float* delta = s.scratch;
  // delta = (v - decay * S^T k) * beta (one read pass).
  for (int64_t j = 0; j < vec; j += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; ++i) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(s.state + i * dv + j), _mm256_set1_ps(s.k[i]), acc);
    }
    const __m256 pred = _mm256_mul_ps(acc, _mm256_set1_ps(s.decay));
    _mm256_storeu_ps(delta + j, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s.v + j), pred),
                                              _mm256_set1_ps(s.beta)));
  }
  for (int64_t j = vec; j < dv; ++j) {
    float acc = 0.0f;
    for (int64_t i = 0; i < dk; ++i) acc = std::fma(s.state[i * dv + j], s.k[i], acc);
    delta[j] = (s.v[j] - acc * s.decay) * s.beta;
  }
  // S = decay * S + k delta^T and out = S^T q (one read-write pass).
  for (int64_t j = 0; j < vec; j += 8) {
    const __m256 dl = _mm256_loadu_ps(delta + j), decay = _mm256_set1_ps(s.decay);
    __m256 o = _mm256_setzero_ps();
    for (int64_t i = 0; i < dk; ++i) {
      float* row = s.state + i * dv + j;
      const __m256 updated =
          _mm256_fmadd_ps(_mm256_set1_ps(s.k[i]), dl, _mm256_mul_ps(_mm256_loadu_ps(row), decay));
      _mm256_storeu_ps(row, updated);
      o = _mm256_fmadd_ps(updated, _mm256_set1_ps(s.q[i]), o);
    }
    _mm256_storeu_ps(s.out + j, o);
  }
  for (int64_t j = vec; j < dv; ++j) {
    float o = 0.0f;
    for (int64_t i = 0; i < dk; ++i) {
      float& cell = s.state[i * dv + j];
      cell = std::fma(s.k[i], delta[j], cell * s.decay);
      o = std::fma(cell, s.q[i], o);
    }
    s.out[j] = o;
  }
}

namespace {

// exp(t) for t clamped to [-87, 88] (NaN stays NaN), as exp_ps of the AVX-512 file: Taylor
// polynomial of degree 7 on |r| <= ln2 / 2, times 2^n built in the exponent bits (n >= -126
// after the clamp, so 2^n is a normal float).
VLLM_AVX2 inline __m256 exp_ps(__m256 t) {
  t = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), t));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), t);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

}  // namespace

VLLM_AVX2 double sum_exp_avx2(const float* x, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    const __m256 e1 = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), mv));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  const __m256d s = _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  for (; i < n; ++i) sum += std::exp(x[i] - m);
  return sum;
}

}  // namespace vllm::cpu::detail
