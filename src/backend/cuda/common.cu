// Host-side argument checks shared by the CUDA op entries (see common.cuh).
#include "backend/cuda/common.cuh"

#include <fmt/format.h>

namespace vllm::cuda::detail {

Status check_cuda_tensor(std::string_view op, std::string_view arg, const Tensor& t) {
  if (!t.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is undefined", op, arg);
  }
  if (!t.device().is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected a CUDA tensor", op, arg,
                      t.to_string());
  }
  return Status::ok();
}

Status check_cuda_tensor(std::string_view op, std::string_view arg, const Tensor& t,
                         std::initializer_list<DType> allowed) {
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(op, arg, t));
  for (DType d : allowed) {
    if (t.dtype() == d) return Status::ok();
  }
  std::string names;
  for (DType d : allowed) {
    if (!names.empty()) names += "/";
    names += dtype_name(d);
  }
  return make_error(ErrorCode::kInvalidArgument, "{}: {} has dtype {}, expected {}", op, arg,
                    dtype_name(t.dtype()), names);
}

Status check_same_dtype(std::string_view op, std::string_view arg, const Tensor& t,
                        const Tensor& like) {
  if (t.dtype() != like.dtype()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} has dtype {}, expected {} like the input",
                      op, arg, dtype_name(t.dtype()), dtype_name(like.dtype()));
  }
  return Status::ok();
}

Status check_contiguous(std::string_view op, std::string_view arg, const Tensor& t) {
  if (!t.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} ({}) must be contiguous", op, arg,
                      t.to_string());
  }
  return Status::ok();
}

Status check_same_device(std::string_view op, std::string_view arg, const Tensor& t,
                         const Tensor& like) {
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(op, arg, t));
  if (t.device() != like.device()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, not on {} with the input", op,
                      arg, t.to_string(), like.device().to_string());
  }
  return Status::ok();
}

Expected<Rows> as_rows(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.ndim() < 1) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is a scalar", op, arg);
  }
  Rows r;
  r.data = t.data_ptr();
  if (t.ndim() == 1) {
    if (t.stride(0) != 1) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} ({}) must be contiguous", op, arg,
                        t.to_string());
    }
    r.rows = 1;
    r.cols = t.size(0);
    r.row_stride = r.cols;
    return r;
  }
  // Dims after the first must be contiguous among themselves.
  int64_t expected = 1;
  for (int d = t.ndim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}: {} ({}) must be contiguous after its first dimension", op, arg,
                        t.to_string());
    }
    expected *= t.size(d);
  }
  r.rows = t.size(0);
  r.cols = expected;
  r.row_stride = t.size(0) > 1 ? t.stride(0) : expected;
  if (r.row_stride < r.cols) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} ({}) has overlapping rows", op, arg,
                      t.to_string());
  }
  return r;
}

bool is_aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

bool rows_aligned(const Rows& r, size_t element_size, size_t bytes) {
  if (!is_aligned(r.data, bytes)) return false;
  return r.rows <= 1 || (static_cast<size_t>(r.row_stride) * element_size) % bytes == 0;
}

Status check_param(std::string_view op, std::string_view arg, const Tensor& t) {
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(op, arg, t, {DType::kF32, DType::kBF16, DType::kF16}));
  return check_contiguous(op, arg, t);
}

}  // namespace vllm::cuda::detail
