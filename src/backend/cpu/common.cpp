// Argument checks and weight decoding shared by the CPU ops (see common.h).
#include "backend/cpu/common.h"

#include <algorithm>
#include <cstring>

#include "base/float_convert.h"

namespace vllm::cpu::detail {

std::string arg_name(std::string_view op, std::string_view arg) {
  return fmt::format("{}: {}", op, arg);
}

Status check_cpu(std::string_view op, std::string_view arg, const Tensor& t) {
  if (!t.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{} is undefined", arg_name(op, arg));
  }
  if (!t.device().is_cpu()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} is on {}, but this is the CPU op: expected a CPU tensor",
                      arg_name(op, arg), t.device().to_string());
  }
  return Status::ok();
}

Status check_dtype(std::string_view op, std::string_view arg, const Tensor& t,
                   std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (t.dtype() == d) return Status::ok();
  }
  std::string names;
  for (DType d : allowed) {
    if (!names.empty()) names += " or ";
    names += dtype_name(d);
  }
  return make_error(ErrorCode::kInvalidArgument, "{} has dtype {}, expected {}", arg_name(op, arg),
                    dtype_name(t.dtype()), names);
}

Status check_shape(std::string_view op, std::string_view arg, const Tensor& t,
                   const Shape& expected, std::string_view why) {
  if (t.shape() == expected) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "{} has shape {}, expected {}{}{}",
                    arg_name(op, arg), shape_to_string(t.shape()), shape_to_string(expected),
                    why.empty() ? "" : " ", why);
}

Status check_ndim(std::string_view op, std::string_view arg, const Tensor& t, int ndim) {
  if (t.ndim() == ndim) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "{} has shape {} ({}-D), expected a {}-D tensor",
                    arg_name(op, arg), shape_to_string(t.shape()), t.ndim(), ndim);
}

Status check_contiguous(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.is_contiguous()) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument,
                    "{} with shape {} and strides {} is not contiguous; pass a contiguous copy",
                    arg_name(op, arg), shape_to_string(t.shape()), shape_to_string(t.strides()));
}

Status check_tensor(std::string_view op, std::string_view arg, const Tensor& t,
                    std::initializer_list<DType> allowed, int ndim) {
  VLLM_RETURN_IF_ERROR(check_cpu(op, arg, t));
  VLLM_RETURN_IF_ERROR(check_dtype(op, arg, t, allowed));
  if (ndim >= 0) VLLM_RETURN_IF_ERROR(check_ndim(op, arg, t, ndim));
  return Status::ok();
}

Status check_weight(std::string_view op, std::string_view arg, const Tensor& t) {
  VLLM_RETURN_IF_ERROR(check_cpu(op, arg, t));
  VLLM_RETURN_IF_ERROR(check_dtype(op, arg, t, {DType::kF32, DType::kBF16, DType::kF16}));
  return check_contiguous(op, arg, t);
}

Status check_linear_weight(std::string_view op, std::string_view arg, const LinearWeight& w) {
  if (!w.is_fp8()) return check_weight(op, arg, w.weight);
  VLLM_RETURN_IF_ERROR(check_cpu(op, arg, w.weight));
  VLLM_RETURN_IF_ERROR(vllm::check_linear_weight(arg_name(op, arg), w));
  VLLM_RETURN_IF_ERROR(check_contiguous(op, arg, w.weight));
  return check_contiguous(op, fmt::format("{} scales", arg), w.scale_inv);
}

Expected<Rows> as_rows(std::string_view op, std::string_view arg, const Tensor& t) {
  VLLM_RETURN_IF_ERROR(check_cpu(op, arg, t));
  if (t.ndim() < 1) {
    return make_error(ErrorCode::kInvalidArgument, "{} is a scalar, expected at least 1-D",
                      arg_name(op, arg));
  }
  // Dims after the first must be laid out contiguously (size-1 dims may have any stride).
  int64_t expected = 1;
  for (int d = t.ndim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{} with shape {} and strides {}: each row (dims after the first) must "
                        "be contiguous",
                        arg_name(op, arg), shape_to_string(t.shape()),
                        shape_to_string(t.strides()));
    }
    expected *= t.size(d);
  }
  Rows rows;
  rows.rows = t.ndim() == 1 ? 1 : t.size(0);
  rows.cols = t.ndim() == 1 ? t.size(0) : expected;
  rows.row_stride = t.ndim() == 1 ? rows.cols : t.stride(0);
  rows.dtype = t.dtype();
  rows.data = t.numel() == 0 ? nullptr : static_cast<char*>(t.data_ptr());
  return rows;
}

void decode_to_f32(const void* src, DType dtype, int64_t count, float* dst) {
  if (count <= 0) return;
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* bits = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(bits[i]);
      return;
    }
    case DType::kF16: {
      const auto* bits = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = f16_to_f32(bits[i]);
      return;
    }
    default:
      VLLM_CHECK_MSG(false, "decode_to_f32 of {}", dtype_name(dtype));
  }
}

float load_f32(const void* src, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(src)[index];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(src)[index]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(src)[index]);
    default:
      VLLM_CHECK_MSG(false, "load_f32 of {}", dtype_name(dtype));
  }
  return 0.0f;
}

void encode_from_f32(const float* src, int64_t count, DType dtype, void* dst) {
  if (count <= 0) return;
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case DType::kBF16: {
      auto* bits = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) bits[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* bits = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < count; ++i) bits[i] = f32_to_f16(src[i]);
      return;
    }
    default:
      VLLM_CHECK_MSG(false, "encode_from_f32 to {}", dtype_name(dtype));
  }
}

int64_t grain_for(int64_t work_per_row, int64_t min_work) {
  return std::max<int64_t>(1, min_work / std::max<int64_t>(work_per_row, 1));
}

}  // namespace vllm::cpu::detail
