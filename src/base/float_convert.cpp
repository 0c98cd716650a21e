// f32 <-> f16 / bf16 / fp8 conversions, bit-exact with PyTorch's scalar casts.
//
// Encoding rounds in integer arithmetic (no dependence on the FP rounding mode or on
// flush-to-zero flags): one generic routine rounds a finite f32 magnitude to an IEEE-like
// format with E exponent and M mantissa bits, ties to even, letting a value that rounds
// past the largest finite code carry into the next code; each format then applies its own
// rule for NaN and for that overflow code (see float_convert.h). fp8 decoding is a
// 256-entry table built at compile time.
#include "base/float_convert.h"

#include <array>
#include <bit>

namespace vllm {
namespace {

constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32Inf = 0x7F800000u;

// Rounds |x| (f32 bits without sign, finite) to the nearest code of a format with
// kExpBits exponent bits (bias 2^(kExpBits-1) - 1) and kMantBits mantissa bits, ties to
// even. The result can exceed the format's largest finite code; callers clamp.
template <int kExpBits, int kMantBits>
constexpr uint32_t round_magnitude(uint32_t x) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr int kDrop = 23 - kMantBits;                             // mantissa bits dropped
  constexpr uint32_t kMinNormal = uint32_t(127 - kBias + 1) << 23;  // 2^(1 - bias)
  if (x >= kMinNormal) {
    // Add just under half an output ulp, plus one if the kept part is odd: a carry out of
    // the mantissa bumps the exponent, which is what rounding up past 1.11..1 means.
    uint32_t rounded = x + ((1u << (kDrop - 1)) - 1) + ((x >> kDrop) & 1u);
    return (rounded >> kDrop) - (uint32_t(127 - kBias) << kMantBits);
  }
  // Subnormal output: |x| = m * 2^(e - 150); the output unit is 2^(1 - bias - M), so the
  // code is m shifted right by 150 + (1 - bias - M) - e, rounded to nearest even.
  int e = static_cast<int>(x >> 23);
  int shift = 150 + (1 - kBias - kMantBits) - e;
  if (shift > 24) return 0;  // below half the smallest subnormal (f32 subnormals too)
  uint32_t m = (x & 0x7FFFFFu) | 0x800000u;
  uint32_t code = m >> shift;
  uint32_t rest = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  code += (rest > half || (rest == half && (code & 1u))) ? 1u : 0u;
  return code;  // may be the smallest normal code, which is correct
}

// Exact decode of an IEEE-like format with Inf/NaN at the top exponent (f16, e5m2).
// NaN payloads are kept and the quiet bit is set, as x86 and PyTorch do.
template <int kExpBits, int kMantBits>
constexpr uint32_t decode_ieee_bits(uint32_t code) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1;
  constexpr uint32_t kExpMax = (1u << kExpBits) - 1;
  constexpr int kWidth = 1 + kExpBits + kMantBits;
  uint32_t sign = ((code >> (kWidth - 1)) & 1u) << 31;
  uint32_t exp = (code >> kMantBits) & kExpMax;
  uint32_t mant = code & ((1u << kMantBits) - 1);
  if (exp == kExpMax) {
    return sign | kF32Inf | (mant << (23 - kMantBits)) | (mant != 0 ? 0x400000u : 0u);
  }
  if (exp == 0) {
    if (mant == 0) return sign;
    // Normalise: shift the leading one of mant up to the implicit-bit position.
    int lead = 31 - std::countl_zero(mant);  // position of leading one
    int shift = kMantBits - lead;            // >= 1
    uint32_t frac = (mant << shift) & ((1u << kMantBits) - 1);
    uint32_t f32_exp = uint32_t(127 - kBias + 1 - shift);
    return sign | (f32_exp << 23) | (frac << (23 - kMantBits));
  }
  return sign | ((exp + 127 - kBias) << 23) | (mant << (23 - kMantBits));
}

// e4m3fn: bias 7, no Inf; S.1111.111 is NaN (decoded as PyTorch does: 0x7FF00000 | sign).
constexpr uint32_t decode_e4m3fn_bits(uint32_t code) {
  if ((code & 0x7Fu) == 0x7Fu) return ((code & 0x80u) << 24) | 0x7FF00000u;
  uint32_t exp = (code >> 3) & 0xFu;
  if (exp == 0xFu) {  // finite in e4m3fn: reuse the generic path with a non-max exponent
    uint32_t sign = (code & 0x80u) << 24;
    return sign | ((exp + 120u) << 23) | ((code & 7u) << 20);
  }
  return decode_ieee_bits<4, 3>(code);
}

template <typename Fn>
constexpr std::array<float, 256> make_table(Fn decode) {
  std::array<float, 256> table{};
  for (uint32_t code = 0; code < 256; ++code) table[code] = std::bit_cast<float>(decode(code));
  return table;
}

constexpr std::array<float, 256> kE4M3Table = make_table(decode_e4m3fn_bits);
constexpr std::array<float, 256> kE5M2Table = make_table(decode_ieee_bits<5, 2>);

}  // namespace

uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & kF32AbsMask) > kF32Inf) return 0x7FC0;  // any NaN, sign dropped
  // Round to nearest even on the low 16 bits; overflow carries into +-Inf naturally.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

float f16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(decode_ieee_bits<5, 10>(bits));
}

uint16_t f32_to_f16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) return static_cast<uint16_t>(sign | 0x7E00u);
  uint32_t code = round_magnitude<5, 10>(abs);
  if (code > 0x7C00u) code = 0x7C00u;  // Inf, or past 65504 + half an ulp: Inf
  return static_cast<uint16_t>(sign | code);
}

float fp8e4m3_to_f32(uint8_t bits) {
  return kE4M3Table[bits];
}

uint8_t f32_to_fp8e4m3(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (bits >> 24) & 0x80u;
  uint32_t abs = bits & kF32AbsMask;
  // |x| >= 480 (the value the 0x7F code would have), Inf and NaN: NaN. Values in
  // (464, 480) round up into 0x7F below and so become NaN too; 464 ties down to 448.
  if (abs >= 0x43F00000u) return static_cast<uint8_t>(sign | 0x7Fu);
  return static_cast<uint8_t>(sign | round_magnitude<4, 3>(abs));
}

uint8_t f32_to_fp8e4m3_satfinite(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) return 0x7Fu;  // NaN, sign dropped
  if (abs > 0x43E00000u) return static_cast<uint8_t>(((bits >> 24) & 0x80u) | 0x7Eu);  // > 448
  return f32_to_fp8e4m3(value);
}

float fp8e5m2_to_f32(uint8_t bits) {
  return kE5M2Table[bits];
}

uint8_t f32_to_fp8e5m2(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  uint32_t sign = (bits >> 24) & 0x80u;
  uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32Inf) return static_cast<uint8_t>(sign | 0x7Fu);
  uint32_t code = round_magnitude<5, 2>(abs);
  if (code > 0x7Cu) code = 0x7Cu;  // Inf, or past 57344 + half an ulp: Inf
  return static_cast<uint8_t>(sign | code);
}

}  // namespace vllm
