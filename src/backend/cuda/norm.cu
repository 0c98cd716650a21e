// RMSNorm kernels in llama.cpp's three levels: the kernel, its launcher (block shape and
// which variant), and the op entries that check tensors and return Status.
//
// One block per row. The sum of squares is reduced in f32 with warp shuffles and one
// shared-memory step across warps. When the row and weight pointers allow it, each thread
// moves 16 bytes of activations per access; rows of up to kCacheVecs vectors per thread keep
// their values in registers between the reduction and the scaling pass, so memory sees each
// input once. Longer rows read the row a second time (mostly from cache) for the scaling
// pass; odd H and unaligned slices take an element-wise path that does the same.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;
constexpr int kCacheVecs = 4;  // vectors per thread that the cached path holds in registers
// The cached path's largest block (rows up to 16384 bf16 / 8192 f32 elements); longer rows
// take the uncached path. Its kernels use up to ~58 registers, within the 128 that
// __launch_bounds__(512) allows.
constexpr int kMaxCachedThreads = 512;

// ---- Element conversions --------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// N elements loaded or stored as one access (16 bytes of activations; the matching weight
// elements may be 8, 16 or 32 bytes, which the compiler splits into 16-byte accesses).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// ---- Kernel ---------------------------------------------------------------------------

// R: the residual's element type (the fused op): T, or float to keep the residual stream
// in f32 under BF16 activations.
template <typename T, typename W, typename R = T>
struct NormParams {
  const T* x;       // [rows, hidden], row stride x_stride
  T* out;           // [rows, hidden], row stride out_stride (the fused op: out == x)
  R* residual;      // fused op only: [rows, hidden], row stride residual_stride
  const W* weight;  // [hidden]
  int64_t x_stride;
  int64_t out_stride;
  int64_t residual_stride;
  int hidden;
  float eps;
  bool unit_offset;
};

// Sum of `v` over the block; every thread gets the total. blockDim.x is a multiple of 32.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kMaxThreads / kWarpSize];
  __shared__ float total;
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int num_warps = blockDim.x / kWarpSize;
    v = lane < num_warps ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
      v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// kVec: elements per access (1 = element-wise). kCache: vectors per thread kept in
// registers (0 = read the row again for the scaling pass). kFused: residual += x first, and
// normalise the sum (as stored in the residual's type R).
// __launch_bounds__ keeps every launch the launcher makes within the register file.
template <typename T, typename W, typename R, int kVec, int kCache, bool kFused>
__global__ void __launch_bounds__(kCache > 0 ? kMaxCachedThreads : kMaxThreads)
    rms_norm_kernel(NormParams<T, W, R> p) {
  pdl_wait();
  pdl_launch_next();
  using TPack = Pack<T, kVec>;
  using WPack = Pack<W, kVec>;
  // The value normalised: x itself, or the residual sum in the residual's type.
  using V = std::conditional_t<kFused, R, T>;
  using VPack = Pack<V, kVec>;
  using RPack = Pack<R, kVec>;
  const int64_t row = blockIdx.x;
  const auto* x = reinterpret_cast<const TPack*>(p.x + row * p.x_stride);
  auto* out = reinterpret_cast<TPack*>(p.out + row * p.out_stride);
  RPack* residual = nullptr;
  if constexpr (kFused) residual = reinterpret_cast<RPack*>(p.residual + row * p.residual_stride);
  const auto* weight = reinterpret_cast<const WPack*>(p.weight);
  const int num_vecs = p.hidden / kVec;

  // The value to normalise at vector i; the fused op also stores it into residual.
  auto load = [&](int i) {
    const TPack xv = x[i];
    VPack v;
    if constexpr (kFused) {
      const RPack r = residual[i];
#pragma unroll
      for (int k = 0; k < kVec; ++k) v.v[k] = from_float<R>(to_float(xv.v[k]) + to_float(r.v[k]));
      residual[i] = v;
    } else {
      v = xv;
    }
    return v;
  };
  auto sum_squares = [](const VPack& v) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float f = to_float(v.v[k]);
      s += f * f;
    }
    return s;
  };
  auto scale = [&](const VPack& v, const WPack& w, float inv_rms) {
    TPack o;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float factor = to_float(w.v[k]);
      if (p.unit_offset) factor += 1.0f;
      o.v[k] = from_float<T>(to_float(v.v[k]) * inv_rms * factor);
    }
    return o;
  };

  float sum_sq = 0.0f;
  if constexpr (kCache > 0) {
    // Measured on an H200: loading the weights and residuals here as well (all loads before
    // the first store) costs registers and so occupancy: 46 us instead of 38 at [4096, 8192].
    VPack cache[kCache];
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < num_vecs) {
        cache[j] = load(i);
        sum_sq += sum_squares(cache[j]);
      }
    }
    const float inv_rms = 1.0f / sqrtf(block_sum(sum_sq) / p.hidden + p.eps);
#pragma unroll
    for (int j = 0; j < kCache; ++j) {
      const int i = threadIdx.x + j * blockDim.x;
      if (i < num_vecs) {
        const WPack w = weight[i];  // a copy: one vector load (a reference loads per element)
        out[i] = scale(cache[j], w, inv_rms);
      }
    }
  } else {
    for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) sum_sq += sum_squares(load(i));
    const float inv_rms = 1.0f / sqrtf(block_sum(sum_sq) / p.hidden + p.eps);
    // Each thread re-reads only what it loaded (and, fused, stored) itself: no barrier needed,
    // and out may alias x.
    for (int i = threadIdx.x; i < num_vecs; i += blockDim.x) {
      VPack v;
      if constexpr (kFused) {
        v = residual[i];
      } else {
        v = x[i];
      }
      const WPack w = weight[i];
      out[i] = scale(v, w, inv_rms);
    }
  }
}

// ---- Launcher -------------------------------------------------------------------------

int round_up_to_warp(int n) {
  return (n + kWarpSize - 1) / kWarpSize * kWarpSize;
}

bool aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

template <typename T, typename W, typename R, bool kFused>
Status launch_rms_norm(const NormParams<T, W, R>& p, int64_t rows, int num_sms,
                       cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  bool vectorised = p.hidden % kVec == 0 && aligned(p.x, 16) && aligned(p.out, 16) &&
                    p.x_stride % kVec == 0 && p.out_stride % kVec == 0 &&
                    aligned(p.weight, sizeof(W) * kVec);
  if (kFused) {
    vectorised =
        vectorised && aligned(p.residual, sizeof(R) * kVec) && p.residual_stride % kVec == 0;
  }
  const dim3 grid(static_cast<unsigned>(rows));

  if (vectorised) {
    const int num_vecs = p.hidden / kVec;
    // Many rows (more than two per SM): the fewest threads that hold the row in kCacheVecs
    // vectors each, so each thread has several 16-byte loads in flight (H200, [4096, 2048]
    // bf16: 64 threads 15 us, 256 threads 19 us). Few rows (decode): at least 256 threads per
    // row for latency (H200, [32, 8192] bf16: 256 threads 5.3 us, 1024 threads 6.6 us).
    int threads = round_up_to_warp((num_vecs + kCacheVecs - 1) / kCacheVecs);
    if (rows < 2 * static_cast<int64_t>(num_sms)) {
      threads = std::max(threads, round_up_to_warp(std::min(num_vecs, 256)));
    }
    if (threads <= kMaxCachedThreads) {
      launch_pdl(rms_norm_kernel<T, W, R, kVec, kCacheVecs, kFused>, grid, threads, 0, stream, p);
    } else {
      launch_pdl(rms_norm_kernel<T, W, R, kVec, 0, kFused>, grid, kMaxThreads, 0, stream, p);
    }
  } else {
    const int threads = std::min(kMaxThreads, round_up_to_warp(p.hidden));
    launch_pdl(rms_norm_kernel<T, W, R, 1, 0, kFused>, grid, threads, 0, stream, p);
  }
  return check_launch(kFused ? "fused_add_rms_norm_kernel" : "rms_norm_kernel");
}

// ---- Op entries -----------------------------------------------------------------------

// Rows and the element distance between them for an activation tensor [..., H].
struct RowLayout {
  int64_t rows = 0;
  int64_t stride = 0;
};

Expected<RowLayout> row_layout(const Tensor& t, const char* op, const char* name) {
  if (t.ndim() == 0 || t.stride(-1) != 1) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda::{}: {} {} must be [..., H] with unit stride along H", op, name,
                      t.to_string());
  }
  const int64_t hidden = t.size(-1);
  if (t.ndim() == 2) {
    if (t.size(0) > 1 && t.stride(0) < hidden) {
      return make_error(ErrorCode::kInvalidArgument,
                        "cuda::{}: {} {} has row stride {}, less than H: its rows overlap", op,
                        name, t.to_string(), t.stride(0));
    }
    return RowLayout{t.size(0), t.size(0) > 1 ? t.stride(0) : hidden};
  }
  if (!t.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda::{}: {} {} must be contiguous (only 2-D tensors may have a row "
                      "stride)",
                      op, name, t.to_string());
  }
  return RowLayout{hidden == 0 ? 0 : t.numel() / hidden, hidden};
}

Status check_cuda_tensor(const Tensor& t, const Tensor& x, const char* op, const char* name) {
  if (!t.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::{}: {} is undefined", op, name);
  }
  if (!t.device().is_cuda()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::{}: {} {} is not a CUDA tensor", op, name,
                      t.to_string());
  }
  if (t.device() != x.device()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::{}: {} {} is not on {} with x", op, name,
                      t.to_string(), x.device().to_string());
  }
  return Status::ok();
}

// Everything both ops check: devices, dtypes, shapes. `other` is out or residual.
Status check_norm_args(const Tensor& x, const Tensor& weight, const Tensor& other, const char* op,
                       const char* other_name) {
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(x, x, op, "x"));
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(weight, x, op, "weight"));
  VLLM_RETURN_IF_ERROR(check_cuda_tensor(other, x, op, other_name));
  if (x.dtype() != DType::kF32 && x.dtype() != DType::kBF16) {
    return make_error(ErrorCode::kUnsupported, "cuda::{}: x {} must be F32 or BF16", op,
                      x.to_string());
  }
  const bool f32_residual = std::string_view(other_name) == "residual" &&
                            x.dtype() == DType::kBF16 && other.dtype() == DType::kF32;
  if (other.dtype() != x.dtype() && !f32_residual) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::{}: {} {} must have x's dtype {}{}", op,
                      other_name, other.to_string(), dtype_name(x.dtype()),
                      std::string_view(other_name) == "residual" ? " (or F32)" : "");
  }
  if (weight.dtype() != DType::kF32 && weight.dtype() != DType::kBF16 &&
      weight.dtype() != DType::kF16) {
    return make_error(ErrorCode::kUnsupported, "cuda::{}: weight {} must be F32, BF16 or F16", op,
                      weight.to_string());
  }
  if (x.ndim() == 0) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::{}: x {} has no hidden dimension", op,
                      x.to_string());
  }
  if (x.size(-1) > (int64_t{1} << 30)) {
    return make_error(ErrorCode::kUnsupported, "cuda::{}: hidden size {} is too large", op,
                      x.size(-1));
  }
  if (weight.ndim() != 1 || weight.size(0) != x.size(-1) || !weight.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument,
                      "cuda::{}: weight {} must be a contiguous [{}] to match x {}", op,
                      weight.to_string(), x.size(-1), x.to_string());
  }
  if (other.shape() != x.shape()) {
    return make_error(ErrorCode::kInvalidArgument, "cuda::{}: {} {} must have x's shape {}", op,
                      other_name, other.to_string(), shape_to_string(x.shape()));
  }
  return Status::ok();
}

template <typename T, typename R, bool kFused>
Status dispatch_weight(const Tensor& x, const Tensor& weight, Tensor& out, Tensor* residual,
                       const RowLayout& x_rows, const RowLayout& out_rows,
                       const RowLayout& residual_rows, float eps, bool unit_offset, int num_sms,
                       cudaStream_t stream) {
  auto run = [&](auto weight_tag) {
    using W = decltype(weight_tag);
    NormParams<T, W, R> p{};
    p.x = static_cast<const T*>(x.data_ptr());
    p.out = static_cast<T*>(out.data_ptr());
    p.residual = residual != nullptr ? static_cast<R*>(residual->data_ptr()) : nullptr;
    p.weight = static_cast<const W*>(weight.data_ptr());
    p.x_stride = x_rows.stride;
    p.out_stride = out_rows.stride;
    p.residual_stride = residual_rows.stride;
    p.hidden = static_cast<int>(x.size(-1));
    p.eps = eps;
    p.unit_offset = unit_offset;
    return launch_rms_norm<T, W, R, kFused>(p, x_rows.rows, num_sms, stream);
  };
  switch (weight.dtype()) {
    case DType::kF32:
      return run(float{});
    case DType::kBF16:
      return run(__nv_bfloat16{});
    case DType::kF16:
      return run(__half{});
    default:
      return make_error(ErrorCode::kInternal, "unchecked weight dtype");
  }
}

template <bool kFused>
Status dispatch(const Tensor& x, const Tensor& weight, Tensor& out, Tensor* residual,
                const char* op, float eps, bool unit_offset, cudaStream_t stream) {
  VLLM_ASSIGN_OR_RETURN(RowLayout x_rows, row_layout(x, op, "x"));
  VLLM_ASSIGN_OR_RETURN(RowLayout out_rows, row_layout(out, op, "out"));
  RowLayout residual_rows;
  if (residual != nullptr) {
    VLLM_ASSIGN_OR_RETURN(residual_rows, row_layout(*residual, op, "residual"));
  }
  if (x_rows.rows == 0 || x.size(-1) == 0) return Status::ok();  // as the CPU ops
  if (x_rows.rows > 0x7fffffff) {
    return make_error(ErrorCode::kUnsupported, "cuda::{}: {} rows exceed the grid limit", op,
                      x_rows.rows);
  }
  DeviceGuard guard(x.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  const int num_sms = multiprocessor_count(x.device().index);
  if (x.dtype() == DType::kF32) {
    return dispatch_weight<float, float, kFused>(x, weight, out, residual, x_rows, out_rows,
                                                 residual_rows, eps, unit_offset, num_sms, stream);
  }
  if (kFused && residual->dtype() == DType::kF32) {
    return dispatch_weight<__nv_bfloat16, float, kFused>(x, weight, out, residual, x_rows, out_rows,
                                                         residual_rows, eps, unit_offset, num_sms,
                                                         stream);
  }
  return dispatch_weight<__nv_bfloat16, __nv_bfloat16, kFused>(
      x, weight, out, residual, x_rows, out_rows, residual_rows, eps, unit_offset, num_sms, stream);
}

}  // namespace

Status rms_norm(const Tensor& x, const Tensor& weight, float eps, bool unit_offset, Tensor& out,
                cudaStream_t stream) {
  VLLM_RETURN_IF_ERROR(check_norm_args(x, weight, out, "rms_norm", "out"));
  return dispatch<false>(x, weight, out, nullptr, "rms_norm", eps, unit_offset, stream);
}

Status fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float eps,
                          bool unit_offset, cudaStream_t stream) {
  VLLM_RETURN_IF_ERROR(check_norm_args(x, weight, residual, "fused_add_rms_norm", "residual"));
  return dispatch<true>(x, weight, x, &residual, "fused_add_rms_norm", eps, unit_offset, stream);
}

}  // namespace vllm::cuda
