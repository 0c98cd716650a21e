// The small-M (decode) linear kernel for AVX-512 CPUs: out[m, n] = sum_k x[m, k] * w[n, k]
// for M <= kDirectMaxM, reading each weight row once for all M activation rows.
//
// A tile is R weight rows x 16 columns: the weights are widened to f32 in registers (BF16:
// a 16-bit shift; F16: vcvtph2ps; both exact) and fused-multiply-added into M x R
// accumulators, with R chosen so the accumulators, the R weight vectors and one x vector fit
// in the 32 zmm registers. The last K % 16 columns use masked loads. Sums differ from the
// portable kernel only by f32 rounding (other order, FMA).
//
// BF16 weights take 32 columns per load instead: a 64-byte load read as 16 u32 lanes holds
// column 2i in the low and 2i + 1 in the high half of lane i, so `lane << 16` is the f32 of
// the even columns and `lane & 0xFFFF0000` that of the odd ones -- one load, a shift and an
// AND per 32 weights rather than two widening loads and two shifts. The activations are
// reordered to match once per call (x_pairs: each 32-column block as its 16 even columns,
// then its 16 odd ones), so the inner loop does no shuffles.
//
// Each tile reads its R rows side by side, a pattern the hardware prefetchers follow poorly
// when rows are short (the demo model's 512-byte rows), so every load is paired with a
// software prefetch of the same line two tiles on (measured best of one, two and four).
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/linear_kernels.h"

// GCC 12 reports its own AVX-512 intrinsics (their self-initialised "undefined" vectors) as
// uninitialised; nothing here reads an uninitialised value.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define VLLM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace vllm::cpu::detail {
namespace {

enum WeightKind { kF32W, kBF16W, kF16W };

template <int kKind>
VLLM_AVX512 inline __m512 load_w(const void* row, int64_t k) {
  if constexpr (kKind == kF32W) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + k);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k));
    if constexpr (kKind == kBF16W) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

template <int kKind>
VLLM_AVX512 inline __m512 load_w_masked(const void* row, int64_t k, __mmask16 mask) {
  if constexpr (kKind == kF32W) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(row) + k);
    if constexpr (kKind == kBF16W) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
}

VLLM_AVX512 inline float load_scalar(const void* p, DType dtype, int64_t i) {
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

// Rows [n0, n0 + rows) (rows <= R) of the output for all M rows of x.
template <int kKind, int M, int R>
VLLM_AVX512 void tile(const LinearArgs& a, int64_t n0, int64_t rows) {
  const int64_t K = a.K;
  const size_t elem = kKind == kF32W ? 4 : 2;
  const char* w[R];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    const int64_t n = n0 + (j < rows ? j : rows - 1);  // past the end: repeat the last row
    w[j] = static_cast<const char*>(a.w) + static_cast<size_t>(n * K) * elem;
  }
  __m512 acc[M][R];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) acc[m][j] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  const size_t ahead = static_cast<size_t>(2 * R * K) * elem;  // two tiles on
  for (; k + 16 <= K; k += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      _mm_prefetch(w[j] + ahead + static_cast<size_t>(k) * elem, _MM_HINT_T0);
      wv[j] = load_w<kKind>(w[j], k);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_loadu_ps(a.x + m * a.ldx + k);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[m][j] = _mm512_fmadd_ps(xv, wv[j], acc[m][j]);
    }
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) wv[j] = load_w_masked<kKind>(w[j], k, mask);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, a.x + m * a.ldx + k);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[m][j] = _mm512_fmadd_ps(xv, wv[j], acc[m][j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    float* o = a.out + m * a.ldo + n0;
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      if (j >= rows) break;
      float sum = _mm512_reduce_add_ps(acc[m][j]);
      if (a.bias != nullptr) sum += load_scalar(a.bias, a.bias_dtype, n0 + j);
      o[j] = sum;
    }
  }
}

// The BF16 tile on paired columns (see the top of the file); the last K % 32 columns go
// through the 16-wide path on the original x.
template <int M, int R>
VLLM_AVX512 void tile_bf16_pairs(const LinearArgs& a, int64_t n0, int64_t rows) {
  const int64_t K = a.K, K32 = K / 32 * 32;
  const uint16_t* w[R];
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    const int64_t n = n0 + (j < rows ? j : rows - 1);  // past the end: repeat the last row
    w[j] = static_cast<const uint16_t*>(a.w) + n * K;
  }
  __m512 acc[M][R];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) acc[m][j] = _mm512_setzero_ps();
  }
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const int64_t ahead = 2 * R * K;  // the same line two tiles on
  for (int64_t k = 0; k < K32; k += 32) {
    __m512 even[R], odd[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(w[j] + ahead + k), _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(w[j] + k);
      even[j] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd[j] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const float* xp = a.x_pairs + m * K32 + k;
      const __m512 xe = _mm512_loadu_ps(xp), xo = _mm512_loadu_ps(xp + 16);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) {
        acc[m][j] = _mm512_fmadd_ps(xe, even[j], acc[m][j]);
        acc[m][j] = _mm512_fmadd_ps(xo, odd[j], acc[m][j]);
      }
    }
  }
  for (int64_t k = K32; k < K; k += 16) {
    const __mmask16 mask =
        K - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (K - k)) - 1);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) wv[j] = load_w_masked<kBF16W>(w[j], k, mask);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, a.x + m * a.ldx + k);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[m][j] = _mm512_fmadd_ps(xv, wv[j], acc[m][j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    float* o = a.out + m * a.ldo + n0;
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) {
      if (j >= rows) break;
      float sum = _mm512_reduce_add_ps(acc[m][j]);
      if (a.bias != nullptr) sum += load_scalar(a.bias, a.bias_dtype, n0 + j);
      o[j] = sum;
    }
  }
}

// One activation row (decode of one sequence) against BF16 weights on paired columns, for
// rows of kStreamRowsMinK columns and more (models too large for any cache). One core keeps
// only as many weight lines in flight as its out-of-order window reaches, and a single
// row-after-row stream left that window short of the memory latency (15-17 GB/s where a
// plain AVX-512 read of the same bytes streams 40+). So the rows [n_begin, n_end) are cut
// into four contiguous quarters read side by side: each step loads the same 64 columns of
// four rows, one from each quarter, with x loaded once for the four. Each quarter is one
// sequential stream across its rows, which the hardware prefetchers follow, and every load
// is paired with a software prefetch of the same stream kStreamAhead bytes on (measured
// best of 512-2048). Four adjacent rows instead of quarters start four fresh 2 KiB streams
// every four rows and measured barely faster than one row at a time. Per row the sums are
// those of one row at a time (four accumulators over the even and odd columns of two
// 32-column blocks); the four rows' horizontal sums are folded together.
//
// Rows of up to 8 * 32 columns keep x in registers for the whole call instead
// (rows_bf16_pairs_m1_short, at least the tile's speed with the weights cached), and read
// their rows in the same four quarters, without software prefetch: from DRAM 1.5x as fast
// as one row after another, from the last-level cache 1.15x (software prefetch on top of
// it cost 15-30%). The rest take the tile.
constexpr int64_t kStreamRowsMinK = 1024;
constexpr int64_t kStreamAhead = 1024;  // bytes, per stream

// Rows n + j * stride (j < kRows) of the weights dotted with the paired x, as 16 partial sums
// each; with kRows > 1 every load also prefetches its line kStreamAhead bytes on.
template <int kRows>
VLLM_AVX512 inline void rows_bf16_pairs(const LinearArgs& a, int64_t n, int64_t stride,
                                        __m512* sums) {
  const int64_t K = a.K, K32 = K / 32 * 32;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const float* xp = a.x_pairs;
  const uint16_t* w[kRows];
  __m512 acc[kRows][4];
#pragma GCC unroll 4
  for (int j = 0; j < kRows; ++j) {
    w[j] = static_cast<const uint16_t*>(a.w) + (n + j * stride) * K;
    for (int i = 0; i < 4; ++i) acc[j][i] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 64 <= K32; k += 64) {
    const __m512 x0 = _mm512_loadu_ps(xp + k), x1 = _mm512_loadu_ps(xp + k + 16);
    const __m512 x2 = _mm512_loadu_ps(xp + k + 32), x3 = _mm512_loadu_ps(xp + k + 48);
#pragma GCC unroll 4
    for (int j = 0; j < kRows; ++j) {
      if constexpr (kRows > 1) {
        const char* ahead = reinterpret_cast<const char*>(w[j] + k) + kStreamAhead;
        _mm_prefetch(ahead, _MM_HINT_T0);
        _mm_prefetch(ahead + 64, _MM_HINT_T0);
      }
      const __m512i v0 = _mm512_loadu_si512(w[j] + k), v1 = _mm512_loadu_si512(w[j] + k + 32);
      acc[j][0] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), acc[j][0]);
      acc[j][1] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(v0, high)), acc[j][1]);
      acc[j][2] = _mm512_fmadd_ps(x2, _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)), acc[j][2]);
      acc[j][3] = _mm512_fmadd_ps(x3, _mm512_castsi512_ps(_mm512_and_si512(v1, high)), acc[j][3]);
    }
  }
  if (k < K32) {
    const __m512 x0 = _mm512_loadu_ps(xp + k), x1 = _mm512_loadu_ps(xp + k + 16);
#pragma GCC unroll 4
    for (int j = 0; j < kRows; ++j) {
      const __m512i v0 = _mm512_loadu_si512(w[j] + k);
      acc[j][0] = _mm512_fmadd_ps(x0, _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), acc[j][0]);
      acc[j][1] = _mm512_fmadd_ps(x1, _mm512_castsi512_ps(_mm512_and_si512(v0, high)), acc[j][1]);
    }
  }
  for (k = K32; k < K; k += 16) {
    const __mmask16 mask =
        K - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (K - k)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(mask, a.x + k);
#pragma GCC unroll 4
    for (int j = 0; j < kRows; ++j) {
      acc[j][2] = _mm512_fmadd_ps(xv, load_w_masked<kBF16W>(w[j], k, mask), acc[j][2]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < kRows; ++j) {
    sums[j] =
        _mm512_add_ps(_mm512_add_ps(acc[j][0], acc[j][1]), _mm512_add_ps(acc[j][2], acc[j][3]));
  }
}

// The four horizontal sums of v0..v3 at once (lanes 0..3): 128-bit blocks folded pairwise
// across the vectors, then the four lanes of each block.
VLLM_AVX512 inline __m128 reduce4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  const __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
  // Block j now holds four partial sums of v_j.
  const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(t01, t23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 p = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512 q = _mm512_add_ps(p, _mm512_permute_ps(p, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(first, q));
}

// Rows of KB * 32 columns (KB <= 8) with the paired x held in 2 * KB registers for the
// whole call, so each row costs only its own weight loads.
template <int KB>
VLLM_AVX512 void rows_bf16_pairs_m1_short(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int64_t K = KB * 32;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 xe[KB], xo[KB];
#pragma GCC unroll 8
  for (int b = 0; b < KB; ++b) {
    xe[b] = _mm512_loadu_ps(a.x_pairs + b * 32);
    xo[b] = _mm512_loadu_ps(a.x_pairs + b * 32 + 16);
  }
  auto row = [&](int64_t n) VLLM_AVX512 {
    const uint16_t* w = static_cast<const uint16_t*>(a.w) + n * K;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int b = 0; b < KB; ++b) {
      const __m512i v = _mm512_loadu_si512(w + b * 32);
      acc0 = _mm512_fmadd_ps(xe[b], _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), acc0);
      acc1 = _mm512_fmadd_ps(xo[b], _mm512_castsi512_ps(_mm512_and_si512(v, high)), acc1);
    }
    return _mm512_add_ps(acc0, acc1);
  };
  const int64_t quarter = (n_end - n_begin) / 4;
  for (int64_t n = n_begin; n < n_begin + quarter; ++n) {
    alignas(16) float sums[4];
    _mm_store_ps(sums,
                 reduce4(row(n), row(n + quarter), row(n + 2 * quarter), row(n + 3 * quarter)));
    for (int j = 0; j < 4; ++j) {
      const int64_t r = n + j * quarter;
      if (a.bias != nullptr) sums[j] += load_scalar(a.bias, a.bias_dtype, r);
      a.out[r] = sums[j];
    }
  }
  for (int64_t n = n_begin + 4 * quarter; n < n_end; ++n) {
    float sum = _mm512_reduce_add_ps(row(n));
    if (a.bias != nullptr) sum += load_scalar(a.bias, a.bias_dtype, n);
    a.out[n] = sum;
  }
}

VLLM_AVX512 void rows_bf16_pairs_m1(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.K % 32 == 0 && a.K <= 8 * 32) {
    switch (a.K / 32) {
      case 1:
        return rows_bf16_pairs_m1_short<1>(a, n_begin, n_end);
      case 2:
        return rows_bf16_pairs_m1_short<2>(a, n_begin, n_end);
      case 3:
        return rows_bf16_pairs_m1_short<3>(a, n_begin, n_end);
      case 4:
        return rows_bf16_pairs_m1_short<4>(a, n_begin, n_end);
      case 5:
        return rows_bf16_pairs_m1_short<5>(a, n_begin, n_end);
      case 6:
        return rows_bf16_pairs_m1_short<6>(a, n_begin, n_end);
      case 7:
        return rows_bf16_pairs_m1_short<7>(a, n_begin, n_end);
      default:
        return rows_bf16_pairs_m1_short<8>(a, n_begin, n_end);
    }
  }
  // Quarters of `quarter` rows each; the last (n_end - n_begin) % 4 rows one at a time.
  const int64_t quarter = (n_end - n_begin) / 4;
  for (int64_t n = n_begin; n < n_begin + quarter; ++n) {
    __m512 v[4];
    rows_bf16_pairs<4>(a, n, quarter, v);
    alignas(16) float sums[4];
    _mm_store_ps(sums, reduce4(v[0], v[1], v[2], v[3]));
    for (int j = 0; j < 4; ++j) {
      const int64_t row = n + j * quarter;
      if (a.bias != nullptr) sums[j] += load_scalar(a.bias, a.bias_dtype, row);
      a.out[row] = sums[j];
    }
  }
  for (int64_t n = n_begin + 4 * quarter; n < n_end; ++n) {
    __m512 v;
    rows_bf16_pairs<1>(a, n, 0, &v);
    float sum = _mm512_reduce_add_ps(v);
    if (a.bias != nullptr) sum += load_scalar(a.bias, a.bias_dtype, n);
    a.out[n] = sum;
  }
}

// Accumulators M x R <= 16 (plus R weights and one x in the 32 registers).
template <int M>
constexpr int rows_per_tile() {
  return M == 1 ? 8 : M <= 4 ? 4 : 2;
}

template <int kKind, int M>
VLLM_AVX512 void run_rows(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int R = rows_per_tile<M>();
  const bool pairs = kKind == kBF16W && a.x_pairs != nullptr;
  if (pairs && M == 1 && (a.K >= kStreamRowsMinK || (a.K % 32 == 0 && a.K <= 8 * 32)))
    return rows_bf16_pairs_m1(a, n_begin, n_end);
  for (int64_t n0 = n_begin; n0 < n_end; n0 += R) {
    const int64_t rows = n_end - n0 < R ? n_end - n0 : R;
    if (pairs) {
      tile_bf16_pairs<M, R>(a, n0, rows);
    } else {
      tile<kKind, M, R>(a, n0, rows);
    }
  }
}

template <int kKind>
VLLM_AVX512 void run_kind(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
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

VLLM_AVX512 void linear_direct_avx512(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  switch (a.w_dtype) {
    case DType::kBF16:
      return run_kind<kBF16W>(a, n_begin, n_end);
    case DType::kF16:
      return run_kind<kF16W>(a, n_begin, n_end);
    default:
      return run_kind<kF32W>(a, n_begin, n_end);
  }
}

VLLM_AVX512 void pair_columns_avx512(const LinearArgs& a, float* dst) {
  const int64_t K32 = a.K / 32 * 32;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t m = 0; m < a.M; ++m) {
    const float* x = a.x + m * a.ldx;
    float* d = dst + m * K32;
    for (int64_t k = 0; k < K32; k += 32) {
      const __m512 lo = _mm512_loadu_ps(x + k), hi = _mm512_loadu_ps(x + k + 16);
      _mm512_storeu_ps(d + k, _mm512_permutex2var_ps(lo, even, hi));
      _mm512_storeu_ps(d + k + 16, _mm512_permutex2var_ps(lo, odd, hi));
    }
  }
}

VLLM_AVX512 void decode_to_f32_avx512(const uint16_t* src, DType dtype, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 v = dtype == DType::kBF16 ? load_w<kBF16W>(src, i) : load_w<kF16W>(src, i);
    _mm512_storeu_ps(dst + i, v);
  }
  if (i < count) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (count - i)) - 1);
    __m512 v = dtype == DType::kBF16 ? load_w_masked<kBF16W>(src, i, mask)
                                     : load_w_masked<kF16W>(src, i, mask);
    _mm512_mask_storeu_ps(dst + i, mask, v);
  }
}

}  // namespace vllm::cpu::detail
