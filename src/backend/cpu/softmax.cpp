// Row softmax and top-k, the building blocks of MoE routing and sampling.
//
// softmax subtracts the row max and sums in double; like torch, a row that is all -inf gives
// NaN. top_k orders by value descending with ties to the lower index and NaN above every
// number (torch.topk's order), selecting with a partial sort of the row's indices.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/common.h"
#include "backend/cpu/ops.h"
#include "base/thread_pool.h"

namespace vllm::cpu {

using detail::Rows;

Status softmax(const Tensor& x, Tensor& out) {
  constexpr std::string_view kOp = "softmax";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "out", out, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "out", out, x.shape(), "(the shape of x)"));
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(Rows out_rows, detail::as_rows(kOp, "out", out));
  const int64_t n = x_rows.cols;
  if (x_rows.rows == 0 || n == 0) return Status::ok();
  parallel_for(0, x_rows.rows, detail::grain_for(n * 4), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x_rows.row<float>(r);
      float* o = out_rows.row<float>(r);
      float max_value = -std::numeric_limits<float>::infinity();
      bool has_nan = false;
      for (int64_t i = 0; i < n; ++i) {
        has_nan |= std::isnan(xr[i]);
        max_value = std::max(max_value, xr[i]);
      }
      if (has_nan) max_value = std::numeric_limits<float>::quiet_NaN();  // NaN spreads, as torch
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        float e = std::exp(xr[i] - max_value);
        o[i] = e;  // o may be x: each x[i] is read before it is overwritten
        sum += e;
      }
      const float inv_sum = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) o[i] *= inv_sum;
    }
  });
  return Status::ok();
}

Status top_k(const Tensor& x, int64_t k, Tensor& values, Tensor& indices) {
  constexpr std::string_view kOp = "top_k";
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "x", x, {DType::kF32}, 2));
  const int64_t rows = x.size(0);
  const int64_t n = x.size(1);
  if (k < 1 || k > n) {
    return make_error(ErrorCode::kInvalidArgument,
                      "top_k: k is {}, expected 1 <= k <= {} (the last dim of x {})", k, n,
                      shape_to_string(x.shape()));
  }
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "values", values, {DType::kF32}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "values", values, {rows, k}, "([x.size(0), k])"));
  VLLM_RETURN_IF_ERROR(detail::check_tensor(kOp, "indices", indices, {DType::kI64}, 2));
  VLLM_RETURN_IF_ERROR(detail::check_shape(kOp, "indices", indices, {rows, k}, "([x.size(0), k])"));
  VLLM_ASSIGN_OR_RETURN(Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(Rows val_rows, detail::as_rows(kOp, "values", values));
  VLLM_ASSIGN_OR_RETURN(Rows idx_rows, detail::as_rows(kOp, "indices", indices));
  if (rows == 0) return Status::ok();

  parallel_for(0, rows, detail::grain_for(n * 8), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x_rows.row<float>(r);
      // a ranks before b: NaN first, then larger values, then the lower index.
      auto before = [xr](int64_t a, int64_t b) {
        float va = xr[a], vb = xr[b];
        bool na = std::isnan(va), nb = std::isnan(vb);
        if (na != nb) return na;
        if (!na && va != vb) return va > vb;
        return a < b;
      };
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      float* v = val_rows.row<float>(r);
      int64_t* idx = idx_rows.row<int64_t>(r);
      for (int64_t j = 0; j < k; ++j) {
        idx[j] = order[static_cast<size_t>(j)];
        v[j] = xr[idx[j]];
      }
    }
  });
  return Status::ok();
}

}  // namespace vllm::cpu
