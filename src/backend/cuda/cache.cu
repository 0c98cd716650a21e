// reshape_and_cache (cache.cuh): this step's key and value rows into their paged-cache slots.
//
// One block per token: it reads the token's slot once and copies the key row into
// kv_cache[block, 0, offset] and the value row into kv_cache[block, 1, offset]. The copy
// moves bytes, not values (cache and rows share a dtype), so the kernel is instantiated per
// access width only: 16-byte units when every row start and the row width allow it, else
// one element (2 or 4 bytes) at a time. An F8_E4M3 cache takes another kernel, per element
// e4m3(x / scale) with the layer's k_scale or v_scale (kv_fp8.cuh; vLLM's scaled_convert).
// A negative slot is vLLM's padding and is skipped; a slot past the cache cannot be reported
// from the device and is skipped as well (the engine's block tables never produce one).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cache.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
#if !defined(VLLM_CUDA_EMULATION)
using detail::launch_pdl;
#endif
using detail::pdl_launch_next;
using detail::pdl_wait;

using detail::Rows;

constexpr int kMaxThreads = 256;

// ---- Kernel ---------------------------------------------------------------------------

// U: the copy unit. Strides and row_units are in units; the cache is
// [num_blocks, 2, block_size, row_units].
template <typename U>
__global__ void reshape_and_cache_kernel(const U* key, int64_t key_stride, const U* value,
                                         int64_t value_stride, U* cache, const int64_t* slots,
                                         int64_t num_slots, int64_t block_size, int64_t row_units) {
  pdl_wait();
  pdl_launch_next();
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t block = slot / block_size;
  const int64_t offset = slot - block * block_size;
  U* k_dst = cache + (block * 2 * block_size + offset) * row_units;
  U* v_dst = k_dst + block_size * row_units;
  const U* k_src = key + token * key_stride;
  const U* v_src = value + token * value_stride;
  for (int64_t i = threadIdx.x; i < row_units; i += blockDim.x) {
    const U k = k_src[i];
    const U v = v_src[i];
    k_dst[i] = k;
    v_dst[i] = v;
  }
}

// The FP8 cache: T the key/value dtype; row elements per slot, one per thread-step.
template <typename T>
__global__ void reshape_and_cache_fp8_kernel(const T* key, int64_t key_stride, const T* value,
                                             int64_t value_stride, detail::KvFp8* cache,
                                             const int64_t* slots, int64_t num_slots,
                                             int64_t block_size, int64_t row, float k_scale,
                                             float v_scale) {
  pdl_wait();
  pdl_launch_next();
  const int64_t token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0 || slot >= num_slots) return;
  const int64_t block = slot / block_size;
  const int64_t offset = slot - block * block_size;
  detail::KvFp8* k_dst = cache + (block * 2 * block_size + offset) * row;
  detail::KvFp8* v_dst = k_dst + block_size * row;
  const T* k_src = key + token * key_stride;
  const T* v_src = value + token * value_stride;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    k_dst[i] = detail::kv_fp8_quantize(detail::to_float(k_src[i]), k_scale);
    v_dst[i] = detail::kv_fp8_quantize(detail::to_float(v_src[i]), v_scale);
  }
}

// ---- Launcher -------------------------------------------------------------------------

template <typename T>
Status launch_fp8(const Rows& key, const Rows& value, void* cache, const int64_t* slots,
                  int64_t num_slots, int64_t block_size, const KvCacheScales& scales,
                  cudaStream_t stream) {
  const int threads = static_cast<int>(std::min<int64_t>(
      kMaxThreads, detail::ceil_div(key.cols, detail::kWarpSize) * detail::kWarpSize));
#if defined(VLLM_CUDA_EMULATION)
  (void)stream;
  emu::launch(
      dim3(static_cast<unsigned>(key.rows)), static_cast<unsigned>(threads), nullptr, 0, [&] {
        reshape_and_cache_fp8_kernel<T>(static_cast<const T*>(key.data), key.row_stride,
                                        static_cast<const T*>(value.data), value.row_stride,
                                        static_cast<detail::KvFp8*>(cache), slots, num_slots,
                                        block_size, key.cols, scales.k_scale, scales.v_scale);
      });
  return Status::ok();
#else
  launch_pdl(reshape_and_cache_fp8_kernel<T>, static_cast<unsigned>(key.rows), threads, 0, stream,
             static_cast<const T*>(key.data), key.row_stride, static_cast<const T*>(value.data),
             value.row_stride, static_cast<detail::KvFp8*>(cache), slots, num_slots, block_size,
             key.cols, scales.k_scale, scales.v_scale);
  return check_launch("reshape_and_cache_fp8_kernel");
#endif
}

template <typename U>
Status launch(const Rows& key, const Rows& value, void* cache, const int64_t* slots,
              int64_t num_slots, int64_t block_size, size_t element_size, cudaStream_t stream) {
  const int64_t scale = static_cast<int64_t>(sizeof(U) / element_size);  // elements per unit
  const int64_t row_units = key.cols / scale;
  const int threads = static_cast<int>(std::min<int64_t>(
      kMaxThreads, detail::ceil_div(row_units, detail::kWarpSize) * detail::kWarpSize));
#if defined(VLLM_CUDA_EMULATION)  // tests/cuda_emulation: run in the CPU emulator, at once
  (void)stream;
  emu::launch(dim3(static_cast<unsigned>(key.rows)), static_cast<unsigned>(threads), nullptr, 0,
              [&] {
                reshape_and_cache_kernel<U>(static_cast<const U*>(key.data), key.row_stride / scale,
                                            static_cast<const U*>(value.data),
                                            value.row_stride / scale, static_cast<U*>(cache), slots,
                                            num_slots, block_size, row_units);
              });
  return Status::ok();
#else
  launch_pdl(reshape_and_cache_kernel<U>, static_cast<unsigned>(key.rows), threads, 0, stream,
             static_cast<const U*>(key.data), key.row_stride / scale,
             static_cast<const U*>(value.data), value.row_stride / scale, static_cast<U*>(cache),
             slots, num_slots, block_size, row_units);
  return check_launch("reshape_and_cache_kernel");
#endif
}

// ---- Op entry -------------------------------------------------------------------------

// key/value: [T, Hk * D] (row stride allowed) or contiguous [T, Hk, D].
// Their dtype is the cache's, or any float one for an FP8 cache.
Expected<Rows> kv_rows(std::string_view op, std::string_view arg, const Tensor& t,
                       const Tensor& cache, int64_t row) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, t, cache));
  if (cache.dtype() == DType::kF8E4M3) {
    VLLM_RETURN_IF_ERROR(
        detail::check_cuda_tensor(op, arg, t, {DType::kF32, DType::kBF16, DType::kF16}));
  } else {
    VLLM_RETURN_IF_ERROR(detail::check_same_dtype(op, arg, t, cache));
  }
  const bool shape_ok = (t.ndim() == 2 && t.size(1) == row) ||
                        (t.ndim() == 3 && t.size(1) == cache.size(3) && t.size(2) == cache.size(4));
  if (!shape_ok) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: {} is {}, expected [T, {}] or [T, {}, {}] to match kv_cache {}", op, arg,
                      t.to_string(), row, cache.size(3), cache.size(4), cache.to_string());
  }
  return detail::as_rows(op, arg, t);
}

}  // namespace

Status reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& kv_cache,
                         const Tensor& slot_mapping, cudaStream_t stream,
                         const KvCacheScales& scales) {
  constexpr std::string_view kOp = "cuda::reshape_and_cache";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(
      kOp, "kv_cache", kv_cache, {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "kv_cache", kv_cache));
  if (kv_cache.ndim() != 5 || kv_cache.size(1) != 2) {
    return make_error(
        ErrorCode::kInvalidArgument,
        "{}: kv_cache is {}, expected [num_blocks, 2, block_size, kv_heads, head_dim]", kOp,
        kv_cache.to_string());
  }
  const int64_t block_size = kv_cache.size(2);
  const int64_t row = kv_cache.size(3) * kv_cache.size(4);
  VLLM_ASSIGN_OR_RETURN(Rows k, kv_rows(kOp, "key", key, kv_cache, row));
  VLLM_ASSIGN_OR_RETURN(Rows v, kv_rows(kOp, "value", value, kv_cache, row));
  VLLM_RETURN_IF_ERROR(detail::check_same_device(kOp, "slot_mapping", slot_mapping, kv_cache));
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "slot_mapping", slot_mapping, {DType::kI64}));
  VLLM_RETURN_IF_ERROR(detail::check_contiguous(kOp, "slot_mapping", slot_mapping));
  const int64_t tokens = key.size(0);
  if (value.size(0) != tokens || slot_mapping.ndim() != 1 || slot_mapping.size(0) != tokens) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: key {}, value {} and slot_mapping {} disagree on the token count", kOp,
                      key.to_string(), value.to_string(), slot_mapping.to_string());
  }
  const bool fp8 = kv_cache.dtype() == DType::kF8E4M3;
  if (fp8 && key.dtype() != value.dtype()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: key {} and value {} differ in dtype", kOp,
                      key.to_string(), value.to_string());
  }
  if (fp8) VLLM_RETURN_IF_ERROR(check_kv_cache_scales(scales));
  if (tokens == 0 || row == 0 || block_size == 0) return Status::ok();
  if (tokens > 0x7fffffff) {
    return make_error(ErrorCode::kUnsupported, "{}: {} tokens exceed the grid", kOp, tokens);
  }
  const int64_t num_slots = kv_cache.size(0) * block_size;
  const size_t elem = kv_cache.element_size();
  DeviceGuard guard(kv_cache.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  const auto* slots = static_cast<const int64_t*>(slot_mapping.data_ptr());
  if (fp8) {
    void* cache = kv_cache.data_ptr();
    switch (key.dtype()) {
      case DType::kF32:
        return launch_fp8<float>(k, v, cache, slots, num_slots, block_size, scales, stream);
      case DType::kBF16:
        return launch_fp8<__nv_bfloat16>(k, v, cache, slots, num_slots, block_size, scales, stream);
      default:
        return launch_fp8<__half>(k, v, cache, slots, num_slots, block_size, scales, stream);
    }
  }
  // Cache rows are row * elem bytes apart from a cudaMalloc'd (256-byte aligned) base.
  const bool wide = (static_cast<size_t>(row) * elem) % 16 == 0 &&
                    detail::is_aligned(kv_cache.data_ptr(), 16) &&
                    detail::rows_aligned(k, elem, 16) && detail::rows_aligned(v, elem, 16);
  if (wide)
    return launch<uint4>(k, v, kv_cache.data_ptr(), slots, num_slots, block_size, elem, stream);
  if (elem == 4) {
    return launch<uint32_t>(k, v, kv_cache.data_ptr(), slots, num_slots, block_size, elem, stream);
  }
  return launch<uint16_t>(k, v, kv_cache.data_ptr(), slots, num_slots, block_size, elem, stream);
}

}  // namespace vllm::cuda
