// Helpers shared by the CPU ops (not part of the op API): argument checks that produce the
// kInvalidArgument messages users see, a row view of 2-D-like tensors, and decoding of
// F32/BF16/F16 weights into f32.
//
// Row views: an op that works row by row accepts any tensor whose dims after the first are
// contiguous, with any stride between rows (e.g. q/k/v column slices of a fused qkv output).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tensor/linear_weight.h"
#include "tensor/tensor.h"

namespace vllm::cpu::detail {

// A matrix of `rows` x `cols` elements; row r starts `r * row_stride` elements after data.
struct Rows {
  char* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // in elements
  DType dtype = DType::kF32;

  template <typename T>
  T* row(int64_t r) const {
    return reinterpret_cast<T*>(data) + r * row_stride;
  }
};

// "rms_norm: x" -> used as the prefix of every message.
std::string arg_name(std::string_view op, std::string_view arg);

// Defined and on the CPU.
Status check_cpu(std::string_view op, std::string_view arg, const Tensor& t);
// dtype is one of `allowed`.
Status check_dtype(std::string_view op, std::string_view arg, const Tensor& t,
                   std::initializer_list<DType> allowed);
// Exactly this shape; `why` (may be empty) explains where the expectation comes from.
Status check_shape(std::string_view op, std::string_view arg, const Tensor& t,
                   const Shape& expected, std::string_view why = {});
// A rank of exactly `ndim`.
Status check_ndim(std::string_view op, std::string_view arg, const Tensor& t, int ndim);
// Fully contiguous (weights, ids, caches).
Status check_contiguous(std::string_view op, std::string_view arg, const Tensor& t);
// check_cpu + check_dtype + (when ndim >= 0) check_ndim.
Status check_tensor(std::string_view op, std::string_view arg, const Tensor& t,
                    std::initializer_list<DType> allowed, int ndim);
// CPU, a float weight dtype (F32/BF16/F16) and contiguous.
Status check_weight(std::string_view op, std::string_view arg, const Tensor& t);
// A linear layer's weight the CPU kernels read: a float weight as check_weight, or a
// well-formed block-scaled FP8 one (vllm::check_linear_weight) with both tensors contiguous
// on the CPU.
Status check_linear_weight(std::string_view op, std::string_view arg, const LinearWeight& w);

// A row view of a tensor with ndim >= 1 (1-D: a single row) whose dims after the first are
// contiguous. Errors name the argument.
Expected<Rows> as_rows(std::string_view op, std::string_view arg, const Tensor& t);

// dst[i] = src[i] decoded from F32/BF16/F16 (dtype is one of those; checked by caller; FP8
// weights need their scales: linear_kernels.h).
void decode_to_f32(const void* src, DType dtype, int64_t count, float* dst);
// One element of a F32/BF16/F16 array.
float load_f32(const void* src, DType dtype, int64_t index);
// dst[i] = src[i] stored as F32/BF16/F16 (rounded to nearest, ties to even): how the GDN ops
// write back state kept in a 16-bit dtype.
void encode_from_f32(const float* src, int64_t count, DType dtype, void* dst);

// Rows of work per parallel_for chunk so that each chunk costs at least ~`min_work` element
// operations (small tensors run on the caller).
int64_t grain_for(int64_t work_per_row, int64_t min_work = 16384);

}  // namespace vllm::cpu::detail
