// Element types of tensors, with the names safetensors files use for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace vllm {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,  // float8_e4m3fn: no infinities, 0x7f/0xff are NaN, max 448
  kF8E5M2,  // float8_e5m2: IEEE-like, max 57344
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
};

size_t dtype_size(DType dtype);
bool dtype_is_float(DType dtype);
// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; an unknown one is kUnsupported naming it.
Expected<DType> dtype_from_name(std::string_view name);

// Compile-time mapping for typed access; 16- and 8-bit floats are stored as raw bits.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::kI16;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

}  // namespace vllm
