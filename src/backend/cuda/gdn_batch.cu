// Host side of gdn_batch.cuh: the GdnBatch check and the overlap tests of row views that the
// Gated DeltaNet ops (and the fused-norm GEMM) use to refuse outputs that overlap inputs.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/gdn_batch.cuh"

namespace vllm::cuda {
namespace detail {

Expected<GdnBatchView> check_gdn_batch(std::string_view op, const GdnBatch& batch,
                                       const Tensor& like, int64_t num_tokens, int64_t num_slots) {
  VLLM_RETURN_IF_ERROR(
      check_cuda_tensor(op, "query_start_loc", batch.query_start_loc, {DType::kI32}));
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(op, "state_indices", batch.state_indices, {DType::kI32}));
  VLLM_RETURN_IF_ERROR(check_same_device(op, "query_start_loc", batch.query_start_loc, like));
  VLLM_RETURN_IF_ERROR(check_same_device(op, "state_indices", batch.state_indices, like));
  if (batch.state_indices.ndim() != 1 || !batch.state_indices.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: state_indices {} must be a contiguous [num_requests]", op,
                      batch.state_indices.to_string());
  }
  const int64_t requests = batch.state_indices.size(0);
  if (batch.query_start_loc.ndim() != 1 || !batch.query_start_loc.is_contiguous() ||
      batch.query_start_loc.size(0) != requests + 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: query_start_loc {} must be a contiguous [num_requests + 1 = {}]", op,
                      batch.query_start_loc.to_string(), requests + 1);
  }
  if (batch.max_query_len < 0) {
    return make_error(ErrorCode::kInvalidArgument, "{}: max_query_len {} is negative", op,
                      batch.max_query_len);
  }
  // Row indices (and one chunk of rows past them) must fit the kernels' int arithmetic.
  if (num_tokens > INT_MAX / 2 || num_slots > INT_MAX || requests > INT_MAX / 2) {
    return make_error(ErrorCode::kUnsupported,
                      "{}: {} tokens, {} requests or {} state slots exceed the int32 range", op,
                      num_tokens, requests, num_slots);
  }
  GdnBatchView view;
  view.query_start_loc = static_cast<const int32_t*>(batch.query_start_loc.data_ptr());
  view.state_indices = static_cast<const int32_t*>(batch.state_indices.data_ptr());
  view.num_requests = static_cast<int>(requests);
  view.num_tokens = static_cast<int>(num_tokens);
  view.num_slots = static_cast<int>(num_slots);
  return view;
}

namespace {

// floor(x / y) for y > 0.
int64_t floor_div(int64_t x, int64_t y) {
  return x >= 0 ? x / y : -((-x + y - 1) / y);
}

}  // namespace

bool rows_overlap(const Rows& a, size_t a_size, const Rows& b, size_t b_size) {
  if (a.rows == 0 || a.cols == 0 || b.rows == 0 || b.cols == 0) return false;
  const auto a_lo = static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.data));
  const auto b_lo = static_cast<int64_t>(reinterpret_cast<uintptr_t>(b.data));
  const int64_t a_width = a.cols * static_cast<int64_t>(a_size);
  const int64_t b_width = b.cols * static_cast<int64_t>(b_size);
  const int64_t a_stride = a.row_stride * static_cast<int64_t>(a_size);
  const int64_t b_stride = b.row_stride * static_cast<int64_t>(b_size);
  if (a_lo + (a.rows - 1) * a_stride + a_width <= b_lo ||
      b_lo + (b.rows - 1) * b_stride + b_width <= a_lo) {
    return false;  // disjoint address ranges
  }
  if (a.rows == 1 && b.rows == 1) return true;
  // The stride of a view of one row does not matter: take the other's.
  const int64_t stride = a.rows > 1 ? a_stride : b_stride;
  if (b.rows > 1 && b_stride != stride) return true;  // conservative
  // Row i of a, [a_lo + i S, + a_width), meets row j of b, [b_lo + j S, + b_width), iff
  // -b_width < d + k S < a_width with d = b_lo - a_lo and k = j - i in [1 - a.rows, b.rows - 1].
  const int64_t d = b_lo - a_lo;
  const int64_t k_lo = floor_div(-b_width - d, stride) + 1;
  const int64_t k_hi = -floor_div(d - a_width, stride) - 1;
  return std::max(k_lo, 1 - a.rows) <= std::min(k_hi, b.rows - 1);
}

bool same_rows(const Rows& a, const Rows& b) {
  return a.data == b.data && a.rows == b.rows && a.cols == b.cols &&
         (a.rows <= 1 || a.row_stride == b.row_stride);
}

Status check_no_overlap(std::string_view op, std::string_view out_arg, const Rows& out,
                        size_t out_size, std::string_view in_arg, const Rows& in, size_t in_size,
                        bool allow_same) {
  if (allow_same && out_size == in_size && same_rows(out, in)) return Status::ok();
  if (!rows_overlap(out, out_size, in, in_size)) return Status::ok();
  return make_error(ErrorCode::kInvalidArgument, "{}: {} overlaps {} in memory{}", op, out_arg,
                    in_arg, allow_same ? " (it may only be that tensor itself)" : "");
}

}  // namespace detail

}  // namespace vllm::cuda
