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
#include "backend/cuda/gdn_gating.cuh"
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

// ---- gdn_gating ------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreads) gdn_gating_kernel(detail::GatingParams<T> p) {
  pdl_wait();
  pdl_launch_next();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.total;
       i += stride) {
    detail::gdn_gate(p, i);
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

// Heads of up to this many elements a lane (256 at a warp's 32 lanes: Qwen's 128) are held in
// registers.
constexpr int kGatedNormMaxPerLane = 8;

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
  if (p.dim <= kGatedNormMaxPerLane * detail::kWarpSize) {
    // The head in registers: every load of x, z and the weight in flight at once (one round
    // trip, where the loops below take one per element of a lane), the sums in the same order.
    float xv[kGatedNormMaxPerLane], zv[kGatedNormMaxPerLane], wv[kGatedNormMaxPerLane];
#pragma unroll
    for (int j = 0; j < kGatedNormMaxPerLane; ++j) {
      const int i = lane + j * detail::kWarpSize;
      if (i < p.dim) {
        xv[j] = to_float(x[i]);
        zv[j] = to_float(z[i]);
        wv[j] = load_param(p.weight, i);
      }
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kGatedNormMaxPerLane; ++j) {
      if (lane + j * detail::kWarpSize < p.dim) sum_sq += xv[j] * xv[j];
    }
    sum_sq = detail::warp_sum(sum_sq);
    const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(p.dim) + p.eps);
#pragma unroll
    for (int j = 0; j < kGatedNormMaxPerLane; ++j) {
      const int i = lane + j * detail::kWarpSize;
      if (i < p.dim) out[i] = from_float<T>((wv[j] * (xv[j] * inv_rms)) * silu(zv[j]));
    }
    return;
  }
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

namespace detail {

Expected<GatingOperands> check_gating(std::string_view kOp, const Tensor& a, const Tensor& b,
                                      const Tensor& A_log, const Tensor& dt_bias, Tensor& g,
                                      Tensor& beta) {
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
  GatingOperands o;
  VLLM_ASSIGN_OR_RETURN(o.a, detail::as_rows(kOp, "a", a));
  VLLM_ASSIGN_OR_RETURN(o.b, detail::as_rows(kOp, "b", b));
  VLLM_ASSIGN_OR_RETURN(o.g, detail::as_rows(kOp, "g", g));
  VLLM_ASSIGN_OR_RETURN(o.beta, detail::as_rows(kOp, "beta", beta));
  // Outputs share no memory with the inputs or each other (a thread writes g, then reads b).
  const size_t act_size = a.element_size();
  for (auto [name, rows] :
       {std::pair<std::string_view, const detail::Rows*>{"g", &o.g}, {"beta", &o.beta}}) {
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, name, *rows, sizeof(float), "a", o.a, act_size));
    VLLM_RETURN_IF_ERROR(
        detail::check_no_overlap(kOp, name, *rows, sizeof(float), "b", o.b, act_size));
  }
  VLLM_RETURN_IF_ERROR(
      detail::check_no_overlap(kOp, "g", o.g, sizeof(float), "beta", o.beta, sizeof(float)));
  if (heads > INT_MAX) {
    return make_error(ErrorCode::kUnsupported, "{}: {} heads are too many", kOp, heads);
  }
  o.A_log = detail::as_param(A_log);
  o.dt_bias = detail::as_param(dt_bias);
  o.tokens = tokens;
  o.heads = heads;
  return o;
}

}  // namespace detail

Status gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                  Tensor& g, Tensor& beta, cudaStream_t stream) {
  VLLM_ASSIGN_OR_RETURN(detail::GatingOperands o,
                        detail::check_gating("cuda::gdn_gating", a, b, A_log, dt_bias, g, beta));
  if (o.tokens == 0 || o.heads == 0) return Status::ok();
  DeviceGuard guard(a.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    const detail::GatingParams<T> p = detail::gating_params<T>(o);
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
