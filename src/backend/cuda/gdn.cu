// The element-wise Gated DeltaNet ops on the GPU (gdn.cuh): the gating values and the gated
// RMSNorm of the output. The conv is in gdn_conv.cu, the delta rule in gdn_rule.cu and
// gdn_chunk.cuh, the GdnBatch check the three share in gdn_batch.cu.
//
// gdn_gating: one thread per (token, value head); f32 arithmetic in the CPU op's order.
// gated_rms_norm: one warp per (token, head) group of D values: lane l takes elements l,
// l + 32, ...; the sum of squares is a warp reduction in f32, and the scaling pass re-reads
// the same elements by the same lane (out may alias x: each element is read before the lane
// that read it overwrites it).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn.cuh"
#include "backend/cuda/gdn_batch.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

namespace {

using detail::from_float;
using detail::load_param;
using detail::ParamVec;
using detail::silu;
using detail::to_float;

constexpr int kThreads = 256;

// torch.nn.functional.softplus with beta 1 and threshold 20.
__device__ __forceinline__ float softplus(float v) {
  return v > 20.0f ? v : log1pf(expf(v));
}

// ---- gdn_gating ------------------------------------------------------------------------

template <typename T>
struct GatingParams {
  const T* a;
  const T* b;
  float* g;
  float* beta;
  ParamVec A_log;    // [heads]
  ParamVec dt_bias;  // [heads]
  int64_t a_stride, b_stride, g_stride, beta_stride;
  int64_t total;  // tokens * heads
  int heads;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) gdn_gating_kernel(GatingParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.total;
       i += stride) {
    const int64_t t = i / p.heads;
    const int h = static_cast<int>(i % p.heads);
    const float neg_a = -expf(load_param(p.A_log, h));
    const float a = to_float(p.a[t * p.a_stride + h]);
    p.g[t * p.g_stride + h] = neg_a * softplus(a + load_param(p.dt_bias, h));
    const float b = to_float(p.b[t * p.b_stride + h]);
    p.beta[t * p.beta_stride + h] = 1.0f / (1.0f + expf(-b));
  }
}

// ---- gated_rms_norm --------------------------------------------------------------------

template <typename T>
struct GatedNormParams {
  const T* x;
  const T* z;
  T* out;
  ParamVec weight;  // [dim]
  int64_t x_stride, z_stride, out_stride;
  int64_t groups;  // tokens * heads
  int heads;
  int dim;
  float eps;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) gated_rms_norm_kernel(GatedNormParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * (kThreads / detail::kWarpSize) +
                        threadIdx.x / detail::kWarpSize;
  if (group >= p.groups) return;  // whole warps leave; the kernel has no block barrier
  const int64_t t = group / p.heads;
  const int64_t col = (group % p.heads) * p.dim;
  const T* x = p.x + t * p.x_stride + col;
  const T* z = p.z + t * p.z_stride + col;
  T* out = p.out + t * p.out_stride + col;
  float sum_sq = 0.0f;
  for (int i = lane; i < p.dim; i += detail::kWarpSize) {
    const float v = to_float(x[i]);
    sum_sq += v * v;
  }
  sum_sq = detail::warp_sum(sum_sq);
  const float variance = sum_sq / static_cast<float>(p.dim);
  const float inv_rms = 1.0f / sqrtf(variance + p.eps);
  for (int i = lane; i < p.dim; i += detail::kWarpSize) {
    const float v = to_float(x[i]);
    out[i] = from_float<T>((load_param(p.weight, i) * (v * inv_rms)) * silu(to_float(z[i])));
  }
}

Status check_2d(std::string_view op, std::string_view arg, const Tensor& t) {
  if (t.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} {} must be 2-D [tokens, ...]", op, arg,
                      t.to_string());
  }
  return Status::ok();
}

int grid_for(int64_t threads_needed) {
  // Grid-stride kernels: enough blocks for every SM several times over, within the limit.
  return static_cast<int>(std::min<int64_t>(detail::ceil_div(threads_needed, kThreads), 65536));
}

}  // namespace

Status gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                  Tensor& g, Tensor& beta, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::gdn_gating";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "a", a, {DType::kF32, DType::kBF16}));
  VLLM_RETURN_IF_ERROR(check_2d(kOp, "a", a));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "b", b));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "b", b, a));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "b", b, a));
  const int64_t tokens = a.size(0), heads = a.size(1);
  for (auto [name, t] :
       {std::pair<std::string_view, const Tensor*>{"A_log", &A_log}, {"dt_bias", &dt_bias}}) {
    VLLM_RETURN_IF_ERROR(detail::check_param(kOp, name, *t));
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, name, *t, a));
    if (t->ndim() != 1 || t->size(0) != heads) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} {} must be [value heads = {}]", kOp,
                        name, t->to_string(), heads);
    }
  }
  for (auto [name, t] :
       {std::pair<std::string_view, const Tensor*>{"b", &b}, {"g", &g}, {"beta", &beta}}) {
    if (name != "b") {
      VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, name, *t, {DType::kF32}));
      VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, name, *t, a));
    }
    if (t->shape() != a.shape()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} {} must have a's shape {}", kOp, name,
                        t->to_string(), shape_to_string(a.shape()));
    }
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows a_rows, detail::as_rows(kOp, "a", a));
  VLLM_ASSIGN_OR_RETURN(detail::Rows b_rows, detail::as_rows(kOp, "b", b));
  VLLM_ASSIGN_OR_RETURN(detail::Rows g_rows, detail::as_rows(kOp, "g", g));
  VLLM_ASSIGN_OR_RETURN(detail::Rows beta_rows, detail::as_rows(kOp, "beta", beta));
  // Outputs share no memory with the inputs or each other (a thread writes g, then reads b).
  const size_t act_size = a.element_size();
  for (auto [name, rows] :
       {std::pair<std::string_view, const detail::Rows*>{"g", &g_rows}, {"beta", &beta_rows}}) {
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, name, *rows, sizeof(float), "a", a_rows, act_size));
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, name, *rows, sizeof(float), "b", b_rows, act_size));
  }
  VLLM_RETURN_IF_ERROR(
      detail::check_no_overlap(kOp, "g", g_rows, sizeof(float), "beta", beta_rows, sizeof(float)));
  if (tokens == 0 || heads == 0) return Status::ok();
  if (heads > INT_MAX) {
    return make_error(ErrorCode::kUnsupported, "{}: {} heads are too many", kOp, heads);
  }

  DeviceGuard guard(a.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    GatingParams<T> p{};
    p.a = static_cast<const T*>(a_rows.data);
    p.b = static_cast<const T*>(b_rows.data);
    p.g = static_cast<float*>(g_rows.data);
    p.beta = static_cast<float*>(beta_rows.data);
    p.A_log = detail::as_param(A_log);
    p.dt_bias = detail::as_param(dt_bias);
    p.a_stride = a_rows.row_stride;
    p.b_stride = b_rows.row_stride;
    p.g_stride = g_rows.row_stride;
    p.beta_stride = beta_rows.row_stride;
    p.total = tokens * heads;
    p.heads = static_cast<int>(heads);
    launch_pdl(gdn_gating_kernel<T>, grid_for(p.total), kThreads, 0, stream, p);
    return check_launch("gdn_gating_kernel");
  };
  if (a.dtype() == DType::kF32) return run(float{});
  return run(__nv_bfloat16{});
}

Status gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                      Tensor& out, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::gated_rms_norm";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "x", x, {DType::kF32, DType::kBF16}));
  VLLM_RETURN_IF_ERROR(check_2d(kOp, "x", x));
  for (auto [name, t] : {std::pair<std::string_view, const Tensor*>{"z", &z}, {"out", &out}}) {
    VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, name, *t));
    VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, name, *t, x));
    VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, name, *t, x));
    if (t->shape() != x.shape()) {
      return make_error(ErrorCode::kInvalidArgument, "{}: {} {} must have x's shape {}", kOp, name,
                        t->to_string(), shape_to_string(x.shape()));
    }
  }
  VLLM_RETURN_IF_ERROR(detail::check_param(kOp, "weight", weight));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "weight", weight, x));
  if (weight.ndim() != 1 || weight.size(0) == 0 || x.size(1) % weight.size(0) != 0) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: x has {} columns, not a multiple of the head size given by weight {}",
                      kOp, x.size(1), weight.to_string());
  }
  VLLM_ASSIGN_OR_RETURN(detail::Rows x_rows, detail::as_rows(kOp, "x", x));
  VLLM_ASSIGN_OR_RETURN(detail::Rows z_rows, detail::as_rows(kOp, "z", z));
  VLLM_ASSIGN_OR_RETURN(detail::Rows out_rows, detail::as_rows(kOp, "out", out));
  const size_t size = x.element_size();
  VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "out", out_rows, size, "x", x_rows, size,
                                                /*allow_same=*/true));
  VLLM_RETURN_IF_ERROR(detail::check_no_overlap(kOp, "out", out_rows, size, "z", z_rows, size));
  const int64_t dim = weight.size(0), heads = x.size(1) / dim, groups = x.size(0) * heads;
  if (groups == 0) return Status::ok();
  constexpr int kWarpsPerBlock = kThreads / detail::kWarpSize;
  const int64_t blocks = detail::ceil_div(groups, kWarpsPerBlock);
  if (blocks > INT_MAX || dim > INT_MAX || heads > INT_MAX) {
    return make_error(ErrorCode::kUnsupported, "{}: {} rows of {} heads exceed the grid limit", kOp,
                      x.size(0), heads);
  }

  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    GatedNormParams<T> p{};
    p.x = static_cast<const T*>(x_rows.data);
    p.z = static_cast<const T*>(z_rows.data);
    p.out = static_cast<T*>(out_rows.data);
    p.weight = detail::as_param(weight);
    p.x_stride = x_rows.row_stride;
    p.z_stride = z_rows.row_stride;
    p.out_stride = out_rows.row_stride;
    p.groups = groups;
    p.heads = static_cast<int>(heads);
    p.dim = static_cast<int>(dim);
    p.eps = eps;
    launch_pdl(gated_rms_norm_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream, p);
    return check_launch("gated_rms_norm_kernel");
  };
  if (x.dtype() == DType::kF32) return run(float{});
  return run(__nv_bfloat16{});
}

}  // namespace vllm::cuda
