// The small-M (decode) GEMM kernel: at M <= 8 a GEMM is a weight-streaming problem, so each
// tile of 4 weight rows x 512 columns is decoded once (BF16/F16/FP8 -> f32) and dotted with all
// M activation rows while it sits in L1. 8-wide vector accumulators (GCC/Clang vector
// extensions) keep it portable: this is the reference the SIMD variants are tested against.
#include <algorithm>
#include <array>
#include <cstring>

#include "backend/cpu/common.h"
#include "backend/cpu/linear_kernels.h"
#include "base/float_convert.h"

namespace vllm::cpu::detail {
namespace {

typedef float v8f __attribute__((vector_size(32)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));

constexpr int64_t kTileN = 4;
constexpr int64_t kTileK = 512;

// Decodes columns [k0, k0 + len) of weight row `n` into dst (f32).
inline void decode_tile_row(const LinearArgs& a, int64_t n, int64_t k0, int64_t len, float* dst) {
  const size_t offset = static_cast<size_t>(n * a.K + k0);
  if (a.w_dtype == DType::kBF16) {
    const uint16_t* src = static_cast<const uint16_t*>(a.w) + offset;
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      v8u16 bits;
      std::memcpy(&bits, src + i, sizeof(bits));
      v8u32 wide = __builtin_convertvector(bits, v8u32) << 16;
      std::memcpy(dst + i, &wide, sizeof(wide));
    }
    for (; i < len; ++i) dst[i] = bf16_to_f32(src[i]);
  } else if (a.w_dtype == DType::kF8E4M3) {
    decode_fp8_row(a, n, k0, len, dst);
  } else {  // F16
    const uint16_t* src = static_cast<const uint16_t*>(a.w) + offset;
    for (int64_t i = 0; i < len; ++i) dst[i] = f16_to_f32(src[i]);
  }
}

inline float hsum(const v8f& v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

void direct_rows(const LinearArgs& a, int64_t n_begin, int64_t n_end) {
  alignas(32) float tile[kTileN][kTileK];
  const bool f32 = a.w_dtype == DType::kF32;
  const int64_t M = a.M, K = a.K;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kTileN) {
    const int64_t rows = std::min(kTileN, n_end - n0);
    v8f acc[kDirectMaxM][kTileN];
    float tail[kDirectMaxM][kTileN];
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t j = 0; j < kTileN; ++j) {
        acc[m][j] = v8f{};
        tail[m][j] = 0.0f;
      }
    }
    for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
      const int64_t len = std::min(kTileK, K - k0);
      // Rows past the end repeat the last real row; their sums are discarded.
      const float* wr[kTileN];
      for (int64_t j = 0; j < kTileN; ++j) {
        int64_t n = n0 + std::min(j, rows - 1);
        if (f32) {
          wr[j] = static_cast<const float*>(a.w) + n * K + k0;
        } else {
          if (j < rows) decode_tile_row(a, n, k0, len, tile[j]);
          wr[j] = tile[std::min(j, rows - 1)];
        }
      }
      const int64_t vec_len = len / 8 * 8;
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = a.x + m * a.ldx + k0;
        v8f s0 = acc[m][0], s1 = acc[m][1], s2 = acc[m][2], s3 = acc[m][3];
        for (int64_t k = 0; k < vec_len; k += 8) {
          v8f xv, w0, w1, w2, w3;
          std::memcpy(&xv, xr + k, sizeof(xv));
          std::memcpy(&w0, wr[0] + k, sizeof(w0));
          std::memcpy(&w1, wr[1] + k, sizeof(w1));
          std::memcpy(&w2, wr[2] + k, sizeof(w2));
          std::memcpy(&w3, wr[3] + k, sizeof(w3));
          s0 += xv * w0;
          s1 += xv * w1;
          s2 += xv * w2;
          s3 += xv * w3;
        }
        acc[m][0] = s0, acc[m][1] = s1, acc[m][2] = s2, acc[m][3] = s3;
        for (int64_t k = vec_len; k < len; ++k) {
          for (int64_t j = 0; j < kTileN; ++j) tail[m][j] += xr[k] * wr[j][k];
        }
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      float* o = a.out + m * a.ldo + n0;
      for (int64_t j = 0; j < rows; ++j) {
        float sum = hsum(acc[m][j]) + tail[m][j];
        if (a.bias != nullptr) sum += load_f32(a.bias, a.bias_dtype, n0 + j);
        o[j] = sum;
      }
    }
  }
}

}  // namespace

void decode_fp8_row(const LinearArgs& a, int64_t n, int64_t k0, int64_t len, float* dst) {
  // fp8e4m3_to_f32 of every code, here so that the loop below inlines the lookup.
  static const std::array<float, 256> kValues = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c)
      t[static_cast<size_t>(c)] = fp8e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  const uint8_t* src = static_cast<const uint8_t*>(a.w) + static_cast<size_t>(n * a.K + k0);
  const float* scales = a.w_scale + (n / a.block_n) * a.scale_cols;
  // One scale per run of block_k columns.
  for (int64_t i = 0; i < len;) {
    const int64_t block = (k0 + i) / a.block_k;
    const int64_t stop = std::min(len, (block + 1) * a.block_k - k0);
    const float scale = scales[block];
    for (; i < stop; ++i) dst[i] = kValues[src[i]] * scale;
  }
}

void linear_direct(const LinearArgs& args, int64_t n_begin, int64_t n_end) {
  direct_rows(args, n_begin, n_end);
}

}  // namespace vllm::cpu::detail
