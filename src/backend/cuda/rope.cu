// Rotary embedding (rope.cuh) in llama.cpp's three levels: kernel, launcher, op entry.
//
// One warp per (token, head); a block holds kWarps heads of one token (grid: x = token,
// y = head group, so the head count, not the token count, meets gridDim.y's limit). The block
// first stages what all its heads share in shared memory as f32: the position's cos | sin
// row (cos = 1, sin = 0 for a position outside the cache, so its row passes through
// unrotated) and, when the fused q/k RMSNorm is on, the q and k norm weights (decoded from
// F32/BF16/F16 at run time, with the 1 + w offset applied, so weights cost no template
// instantiations). Then each warp:
//   1. loads its head into its shared-memory row as f32 (16-byte loads when the head's rows
//      allow it, element-wise otherwise) and sums the squares,
//   2. reduces the sum with warp shuffles (norm only),
//   3. writes each output element d (lane-strided, so shared-memory reads are
//      conflict-free) from the staged values: x[d] normalised, then rotated with its partner
//      (NeoX: d +- rot_dim / 2; GPT-J: d ^ 1).
// Step 3 reads only shared memory, so rotating in place needs no ordering between lanes.
// Pass-through dims (d >= rot_dim) are stored only when the norm changed them.
//
// Numerics follow cpu::rms_norm then cpu::rotary_embedding: inv_rms = 1 / sqrt(mean(x^2) +
// eps), y = (x * inv_rms) * w, then x1 * cos - x2 * sin and x2 * cos + x1 * sin, all in f32;
// unlike the unfused ops, the normalised value is not rounded to the activation dtype before
// the rotation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::from_float;
using detail::kWarpSize;
using detail::Pack;
using detail::Rows;
using detail::to_float;

// Heads per block: 128 threads. Few enough that decode (one token, ~20 heads) still spreads
// over several SMs; shared memory stays small (kWarps * head_size floats).
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
// Largest head_size: shared memory of (rot_dim + 2 D + kWarps D) floats = 28 KiB at 1024,
// inside the 48 KiB a block gets without opting in.
constexpr int64_t kMaxHeadSize = 1024;

enum class WeightType : int { kNone, kF32, kBF16, kF16 };

struct RopeArgs {
  const void* positions;
  bool positions64;
  const float* cos_sin;  // [max_position, rot_dim]
  int64_t max_position;
  int rot_dim;
  int head_size;
  bool is_neox;
  void* query;  // row t at query + t * q_stride elements; Hq heads of head_size
  int64_t q_stride;
  int q_heads;
  void* key;  // may be null (k_heads = 0)
  int64_t k_stride;
  int k_heads;
  const void* q_weight;
  const void* k_weight;
  WeightType q_weight_type;
  WeightType k_weight_type;
  float eps;
  bool unit_offset;
};

// Offsets in floats into dynamic shared memory, each a multiple of 4 so float4 stores line up.
__host__ __device__ constexpr int round4(int n) {
  return (n + 3) / 4 * 4;
}

struct SmemLayout {
  int cos_sin;   // rot_dim
  int q_weight;  // head_size
  int k_weight;  // head_size
  int heads;     // kWarps * head_size
  int total;
};

__host__ __device__ constexpr SmemLayout smem_layout(int rot_dim, int head_size) {
  const int d = round4(head_size);
  const int cs = round4(rot_dim);
  return SmemLayout{0, cs, cs + d, cs + 2 * d, cs + 2 * d + kWarps * d};
}

__device__ __forceinline__ float load_weight(const void* w, WeightType type, int i) {
  switch (type) {
    case WeightType::kF32:
      return static_cast<const float*>(w)[i];
    case WeightType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(w)[i]);
    case WeightType::kF16:
      return __half2float(static_cast<const __half*>(w)[i]);
    default:
      return 1.0f;
  }
}

// ---- Kernel ---------------------------------------------------------------------------

// T: activation type. kVec: elements per load in pass 1 (1 = element-wise).
template <typename T, int kVec>
__global__ void rotary_embedding_kernel(RopeArgs a) {
  pdl_wait();
  pdl_launch_next();
  extern __shared__ float4 smem_raw[];  // float4: 16-byte aligned base
  float* smem = reinterpret_cast<float*>(smem_raw);
  const SmemLayout layout = smem_layout(a.rot_dim, a.head_size);
  float* cos_sin = smem + layout.cos_sin;
  float* q_weight = smem + layout.q_weight;
  float* k_weight = smem + layout.k_weight;

  const int64_t token = blockIdx.x;
  const int64_t pos = a.positions64
                          ? static_cast<const int64_t*>(a.positions)[token]
                          : static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[token]);
  const bool valid = pos >= 0 && pos < a.max_position;
  const int half = a.rot_dim / 2;
  for (int i = threadIdx.x; i < a.rot_dim; i += blockDim.x) {
    cos_sin[i] = valid ? a.cos_sin[pos * a.rot_dim + i] : (i < half ? 1.0f : 0.0f);
  }
  const bool q_norm = a.q_weight_type != WeightType::kNone;
  const bool k_norm = a.k_weight_type != WeightType::kNone;
  const float offset = a.unit_offset ? 1.0f : 0.0f;
  for (int i = threadIdx.x; i < a.head_size; i += blockDim.x) {
    if (q_norm) q_weight[i] = load_weight(a.q_weight, a.q_weight_type, i) + offset;
    if (k_norm) k_weight[i] = load_weight(a.k_weight, a.k_weight_type, i) + offset;
  }
  __syncthreads();  // the only block-wide barrier: warps below work independently

  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int head = blockIdx.y * kWarps + warp;
  if (head >= a.q_heads + a.k_heads) return;
  const bool is_key = head >= a.q_heads;
  const int h = is_key ? head - a.q_heads : head;
  T* x = static_cast<T*>(is_key ? a.key : a.query) + token * (is_key ? a.k_stride : a.q_stride) +
         static_cast<int64_t>(h) * a.head_size;
  const bool norm = is_key ? k_norm : q_norm;
  const float* weight = is_key ? k_weight : q_weight;
  float* buf = smem + layout.heads + warp * round4(a.head_size);

  // Step 1: the head -> buf (f32), and its sum of squares.
  float sum_sq = 0.0f;
  for (int v = lane; v < a.head_size / kVec; v += kWarpSize) {
    const Pack<T, kVec> p = reinterpret_cast<const Pack<T, kVec>*>(x)[v];
    float f[kVec];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      f[k] = to_float(p.v[k]);
      sum_sq += f[k] * f[k];
    }
    if constexpr (kVec % 4 == 0) {
#pragma unroll
      for (int k = 0; k < kVec; k += 4) {
        reinterpret_cast<float4*>(buf + v * kVec)[k / 4] =
            make_float4(f[k], f[k + 1], f[k + 2], f[k + 3]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) buf[v * kVec + k] = f[k];
    }
  }
  float inv_rms = 1.0f;
  if (norm) inv_rms = 1.0f / sqrtf(detail::warp_sum(sum_sq) / a.head_size + a.eps);
  __syncwarp();

  // Step 3: every output element from buf (lane-strided: conflict-free shared reads).
  auto value = [&](int d) { return norm ? (buf[d] * inv_rms) * weight[d] : buf[d]; };
  const float* cos_row = cos_sin;
  const float* sin_row = cos_sin + half;
  for (int d = lane; d < a.head_size; d += kWarpSize) {
    float out;
    if (d < a.rot_dim) {
      const float xd = value(d);
      if (a.is_neox) {
        if (d < half) {
          out = xd * cos_row[d] - value(d + half) * sin_row[d];
        } else {
          out = xd * cos_row[d - half] + value(d - half) * sin_row[d - half];
        }
      } else {
        const int i = d / 2;
        if ((d & 1) == 0) {
          out = xd * cos_row[i] - value(d + 1) * sin_row[i];
        } else {
          out = xd * cos_row[i] + value(d - 1) * sin_row[i];
        }
      }
    } else {
      if (!norm) continue;  // unchanged
      out = value(d);
    }
    x[d] = from_float<T>(out);
  }
}

// ---- Launcher -------------------------------------------------------------------------

template <typename T>
Status launch_rope(const RopeArgs& a, int64_t tokens, bool vectorised, cudaStream_t stream) {
  const int heads = a.q_heads + a.k_heads;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((heads + kWarps - 1) / kWarps));
  const size_t smem =
      static_cast<size_t>(smem_layout(a.rot_dim, a.head_size).total) * sizeof(float);
  constexpr int kVec = 16 / sizeof(T);
  if (vectorised) {
    launch_pdl(rotary_embedding_kernel<T, kVec>, grid, kThreads, smem, stream, a);
  } else {
    launch_pdl(rotary_embedding_kernel<T, 1>, grid, kThreads, smem, stream, a);
  }
  return check_launch("rotary_embedding_kernel");
}

// ---- Op entry -------------------------------------------------------------------------

// query/key as rows of whole heads: [T, H * D] (row stride allowed) or contiguous [T, H, D].
Expected<Rows> head_rows(std::string_view op, std::string_view arg, const Tensor& t,
                         const Tensor& like, int64_t tokens, int64_t head_size, int* heads) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, t, like));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(op, arg, t, {DType::kF32, DType::kBF16}));
  if ((t.ndim() != 2 && t.ndim() != 3) || t.size(0) != tokens ||
      (t.ndim() == 3 && t.size(2) != head_size) || (t.ndim() == 2 && t.size(1) % head_size != 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: {} is {}, expected [{} tokens, num_heads * {}] (one row per position)",
                      op, arg, t.to_string(), tokens, head_size);
  }
  VLLM_ASSIGN_OR_RETURN(Rows rows, detail::as_rows(op, arg, t));
  if (rows.cols / head_size > 0x7fffffff / 2) {
    return make_error(ErrorCode::kUnsupported, "{}: {} has too many heads", op, arg);
  }
  *heads = static_cast<int>(rows.cols / head_size);
  return rows;
}

Expected<WeightType> norm_weight(std::string_view op, std::string_view arg, const Tensor& w,
                                 const Tensor& like, int64_t head_size) {
  if (!w.defined()) return WeightType::kNone;
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, w, like));
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(op, arg, w, {DType::kF32, DType::kBF16, DType::kF16}));
  if (w.ndim() != 1 || w.size(0) != head_size || !w.is_contiguous()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} is {}, expected a contiguous [{}]", op,
                      arg, w.to_string(), head_size);
  }
  switch (w.dtype()) {
    case DType::kF32:
      return WeightType::kF32;
    case DType::kBF16:
      return WeightType::kBF16;
    default:
      return WeightType::kF16;
  }
}

}  // namespace

Status rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key,
                        const Tensor& cos_sin_cache, const RopeParams& params,
                        cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::rotary_embedding";
  const int64_t head_size = params.head_size;
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "query", query));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "positions", positions, query));
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "positions", positions, {DType::kI64, DType::kI32}));
  if (positions.ndim() != 1) {
    return make_error(ErrorCode::kInvalidArgument, "{}: positions is {}, expected [T]", kOp,
                      positions.to_string());
  }
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "positions", positions));
  if (head_size <= 0 || head_size > kMaxHeadSize) {
    return make_error(head_size <= 0 ? ErrorCode::kInvalidArgument : ErrorCode::kUnsupported,
                      "{}: head_size is {}, expected 1 to {}", kOp, head_size, kMaxHeadSize);
  }
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "cos_sin_cache", cos_sin_cache, query));
  VLLM_RETURN_IF_ERROR(
      detail::check_cuda_tensor(kOp, "cos_sin_cache", cos_sin_cache, {DType::kF32}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "cos_sin_cache", cos_sin_cache));
  if (cos_sin_cache.ndim() != 2) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: cos_sin_cache is {}, expected [max_position, rot_dim]", kOp,
                      cos_sin_cache.to_string());
  }
  const int64_t rot_dim = cos_sin_cache.size(1);
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_size) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: cos_sin_cache is {}: its rot_dim {} must be even, positive and at most "
                      "head_size {}",
                      kOp, cos_sin_cache.to_string(), rot_dim, head_size);
  }
  const int64_t tokens = positions.size(0);
  int q_heads = 0, k_heads = 0;
  VLLM_ASSIGN_OR_RETURN(Rows q, head_rows(kOp, "query", query, query, tokens, head_size, &q_heads));
  Rows k;
  if (key.defined()) {
    VLLM_ASSIGN_OR_RETURN(k, head_rows(kOp, "key", key, query, tokens, head_size, &k_heads));
    VLLM_RETURN_IF_ERROR(detail::check_same_dtype(kOp, "key", key, query));
  } else if (params.k_norm_weight.defined()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: k_norm_weight is given without a key", kOp);
  }
  VLLM_ASSIGN_OR_RETURN(WeightType q_weight_type,
                        norm_weight(kOp, "q_norm_weight", params.q_norm_weight, query, head_size));
  VLLM_ASSIGN_OR_RETURN(WeightType k_weight_type,
                        norm_weight(kOp, "k_norm_weight", params.k_norm_weight, query, head_size));
  if (tokens == 0 || q_heads + k_heads == 0) return Status::ok();
  if (tokens > 0x7fffffff || (q_heads + k_heads + kWarps - 1) / kWarps > detail::kMaxGridY) {
    return make_error(ErrorCode::kUnsupported, "{}: {} tokens x {} heads exceed the grid", kOp,
                      tokens, q_heads + k_heads);
  }

  RopeArgs a{};
  a.positions = positions.data_ptr();
  a.positions64 = positions.dtype() == DType::kI64;
  a.cos_sin = static_cast<const float*>(cos_sin_cache.data_ptr());
  a.max_position = cos_sin_cache.size(0);
  a.rot_dim = static_cast<int>(rot_dim);
  a.head_size = static_cast<int>(head_size);
  a.is_neox = params.is_neox;
  a.query = q.data;
  a.q_stride = q.row_stride;
  a.q_heads = q_heads;
  a.key = k_heads > 0 ? k.data : nullptr;
  a.k_stride = k.row_stride;
  a.k_heads = k_heads;
  a.q_weight = q_weight_type != WeightType::kNone ? params.q_norm_weight.data_ptr() : nullptr;
  a.k_weight = k_weight_type != WeightType::kNone ? params.k_norm_weight.data_ptr() : nullptr;
  a.q_weight_type = q_weight_type;
  a.k_weight_type = k_weight_type;
  a.eps = params.norm_eps;
  a.unit_offset = params.norm_unit_offset;

  DeviceGuard guard(query.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  const size_t elem = query.element_size();
  const bool vectorised = head_size % static_cast<int64_t>(16 / elem) == 0 &&
                          detail::rows_aligned(q, elem, 16) &&
                          (k_heads == 0 || detail::rows_aligned(k, elem, 16));
  if (query.dtype() == DType::kF32) return launch_rope<float>(a, tokens, vectorised, stream);
  return launch_rope<__nv_bfloat16>(a, tokens, vectorised, stream);
}

}  // namespace vllm::cuda
