#include "tensor/dtype.h"

#include <array>
#include <utility>

namespace vllm {
namespace {

constexpr std::array<std::pair<DType, std::string_view>, 12> kNames = {{
    {DType::kF32, "F32"},
    {DType::kF16, "F16"},
    {DType::kBF16, "BF16"},
    {DType::kF8E4M3, "F8_E4M3"},
    {DType::kF8E5M2, "F8_E5M2"},
    {DType::kF64, "F64"},
    {DType::kI64, "I64"},
    {DType::kI32, "I32"},
    {DType::kI16, "I16"},
    {DType::kI8, "I8"},
    {DType::kU8, "U8"},
    {DType::kBool, "BOOL"},
}};

}  // namespace

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
    case DType::kI16:
      return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

bool dtype_is_float(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF64:
      return true;
    default:
      return false;
  }
}

std::string_view dtype_name(DType dtype) {
  for (const auto& [value, name] : kNames) {
    if (value == dtype) return name;
  }
  return "?";
}

Expected<DType> dtype_from_name(std::string_view name) {
  for (const auto& [value, known] : kNames) {
    if (known == name) return value;
  }
  return make_error(ErrorCode::kUnsupported,
                    "unknown dtype '{}' (supported: F32 F16 BF16 F8_E4M3 F8_E5M2 F64 I64 I32 "
                    "I16 I8 U8 BOOL)",
                    name);
}

}  // namespace vllm
