// The small-M (decode) linear kernel for AVX2 + FMA CPUs; the same scheme as
// linear_avx512.cpp with 8-wide vectors and 16 registers: M x R accumulators <= 8. The last
// K % 8 columns are copied into zero-padded 8-element buffers first. Sums differ from the
// portable kernel only by f32 rounding (other order, FMA).
//
// One activation row against BF16 rows of kQuarterMinK columns and more (decode) is bound by
// how many weight lines one core keeps in flight. Four adjacent rows per tile start four
// short streams every tile, which the hardware prefetchers pick up late (10-12 GB/s on one
// Zen 4 core with the weights in DRAM). So there the rows are cut into four contiguous
// quarters and each tile takes one row of each: four long sequential streams, about 2.5x as
// fast. Each row's sums are the same as in the adjacent tile (the same bits); software
// prefetch on top of it measured no better (and worse 512 bytes ahead), so there is none.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/linear_kernels.h"

#define VLLM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace vllm::cpu::detail {
namespace {

enum WeightKind { kF32W, kBF16W, kF16W };

template <int kKind>
VLLM_AVX2 inline __m256 load_w(const void* row, int64_t k) {
  if constexpr (kKind == kF32W) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + k);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k));
    if constexpr (kKind == kBF16W) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
}

VLLM_AVX2 inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

VLLM_AVX2 inline float load_scalar(const void* p, DType dtype, int64_t i) {
  if (dtype == DType::kF32) return static_cast<const float*>(p)[i];
  const uint16_t bits = static_cast<const uint16_t*>(p)[i];
  if (dtype == DType::kBF16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float f;
    __builtin_memcpy(&f, &wide, sizeof(f));
    return f;
  }
  return _cvtsh_ss(bits);
}

// Output rows n0 + j * stride for j < rows (rows <= R), for all M rows of x.
template <int kKind, int M, int R>
VLLM_AVX2 void tile(const LinearArgs& a, int64_t n0, int64_t rows, int64_t stride) {
  const int64_t K = a.K;
  const size_t elem = kKind == kF32W ? 4 : 2;
  const char* w[R];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    const int64_t n = n0 + (j < rows ? j : rows - 1) * stride;  // past the end: the last row again
    w[j] = static_cast<const char*>(a.w) + static_cast<size_t>(n * K) * elem;
  }
  __m256 acc[M][R];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) acc[m][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 wv[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) wv[j] = load_w<kKind>(w[j], k);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m256 xv = _mm256_loadu_ps(a.x + m * a.ldx + k);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[m][j] = _mm256_fmadd_ps(xv, wv[j], acc[m][j]);
    }
  }
  if (k < K) {
    const int64_t left = K - k;
    alignas(32) uint8_t wbuf[R][32] = {};
    __m256 wv[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      __builtin_memcpy(wbuf[j], w[j] + static_cast<size_t>(k) * elem,
                       static_cast<size_t>(left) * elem);
      wv[j] = load_w<kKind>(wbuf[j], 0);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      alignas(32) float xbuf[8] = {};
      __builtin_memcpy(xbuf, a.x + m * a.ldx + k, static_cast<size_t>(left) * sizeof(float));
      const __m256 xv = _mm256_load_ps(xbuf);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[m][j] = _mm256_fmadd_ps(xv, wv[j], acc[m][j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    float* o = a.out + m * a.ldo + n0;
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      if (j >= rows) break;
      float sum = hsum(acc[m][j]);
      if (a.bias != nullptr) sum += load_scalar(a.bias, a.bias_dtype, n0 + j * stride);
      o[j * stride] = sum;
    }
  }
}

// At M = 1, BF16 rows of at least this many columns are read in quarters (see the top of
// the file); measured on rows of 256, 1024 and 3072 columns.
constexpr int64_t kQuarterMinK = 256;

// Accumulators M x R <= 8 (plus R weights and one x in the 16 registers).
template <int M>
constexpr int rows_per_tile() {
  return M <= 2 ? 4 : M <= 4 ? 2 : 1;
}

template <int kKind, int M>
VLLM_AVX2 void run_rows(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int R = rows_per_tile<M>();
  int64_t n = n_begin;
  if (kKind == kBF16W && M == 1 && a.K >= kQuarterMinK) {
    // Four contiguous quarters read side by side, one row of each per tile (see the top of
    // the file); the rows left over go through the adjacent tiles below.
    static_assert(rows_per_tile<1>() == 4);
    const int64_t quarter = (n_end - n_begin) / 4;
    for (; n < n_begin + quarter; ++n) tile<kKind, M, R>(a, n, R, quarter);
    n = n_begin + 4 * quarter;
  }
  for (; n < n_end; n += R) {
    const int64_t rows = n_end - n < R ? n_end - n : R;
    tile<kKind, M, R>(a, n, rows, 1);
  }
}

template <int kKind>
VLLM_AVX2 void run_kind(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.M) {
    case 1:
      return run_rows<kKind, 1>(a, n_begin, n_end);
    case 2:
      return run_rows<kKind, 2>(a, n_begin, n_end);
    case 3:
      return run_rows<kKind, 3>(a, n_begin, n_end);
    case 4:
      return run_rows<kKind, 4>(a, n_begin, n_end);
    case 5:
      return run_rows<kKind, 5>(a, n_begin, n_end);
    case 6:
      return run_rows<kKind, 6>(a, n_begin, n_end);
    case 7:
      return run_rows<kKind, 7>(a, n_begin, n_end);
    default:
      return run_rows<kKind, 8>(a, n_begin, n_end);
  }
}

}  // namespace

VLLM_AVX2 void linear_direct_avx2(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kBF16:
      return run_kind<kBF16W>(a, n_begin, n_end);
    case DType::kF16:
      return run_kind<kF16W>(a, n_begin, n_end);
    default:
      return run_kind<kF32W>(a, n_begin, n_end);
  }
}

VLLM_AVX2 void decode_to_f32_avx2(const uint16_t* src, DType dtype, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 v = dtype == DType::kBF16 ? load_w<kBF16W>(src, i) : load_w<kF16W>(src, i);
    _mm256_storeu_ps(dst + i, v);
  }
  for (; i < count; ++i) dst[i] = load_scalar(src, dtype, i);
}

}  // namespace vllm::cpu::detail
