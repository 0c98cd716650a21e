// reshape_and_cache (cache.cuh): this step's key and value rows into their paged-cache slots.
//
// One block per token: it reads the token's slot once and copies the key row into
// kv_cache[block, 0, offset] and the value row into kv_cache[block, 1, offset]. The copy
// moves bytes, not values (cache and rows share a dtype), so the kernel is instantiated per
// access width only: 16-byte units when every row start and the row width allow it, else
// one element (2 or 4 bytes) at a time. A negative slot is vLLM's padding and is skipped; a
// slot past the cache cannot be reported from the device and is skipped as well (the
// engine's block tables never produce one).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cache.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/runtime.h"

namespace vllm::cuda {
namespace {
using detail::launch_pdl;
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

// ---- Launcher -------------------------------------------------------------------------

template <typename U>
Status launch(const Rows& key, const Rows& value, void* cache, const int64_t* slots,
              int64_t num_slots, int64_t block_size, size_t element_size, cudaStream_t stream) {
  const int64_t scale = static_cast<int64_t>(sizeof(U) / element_size);  // elements per unit
  const int64_t row_units = key.cols / scale;
  const int threads = static_cast<int>(std::min<int64_t>(
      kMaxThreads, detail::ceil_div(row_units, detail::kWarpSize) * detail::kWarpSize));
  launch_pdl(reshape_and_cache_kernel<U>, static_cast<unsigned>(key.rows), threads, 0, stream,
             static_cast<const U*>(key.data), key.row_stride / scale,
             static_cast<const U*>(value.data), value.row_stride / scale, static_cast<U*>(cache),
             slots, num_slots, block_size, row_units);
  return check_launch("reshape_and_cache_kernel");
}

// ---- Op entry -------------------------------------------------------------------------

// key/value: [T, Hk * D] (row stride allowed) or contiguous [T, Hk, D].
Expected<Rows> kv_rows(std::string_view op, std::string_view arg, const Tensor& t,
                       const Tensor& cache, int64_t row) {
  VLLM_RETURN_IF_ERROR(detail::check_same_device(op, arg, t, cache));
  VLLM_RETURN_IF_ERROR(detail::check_same_dtype(op, arg, t, cache));
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
                         const Tensor& slot_mapping, cudaStream_t stream) {
  constexpr std::string_view kOp = "cuda::reshape_and_cache";
  VLLM_RETURN_IF_ERROR(detail::check_cuda_tensor(kOp, "kv_cache", kv_cache,
                                                 {DType::kF32, DType::kBF16, DType::kF16}));
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
  if (tokens == 0 || row == 0 || block_size == 0) return Status::ok();
  if (tokens > 0x7fffffff) {
    return make_error(ErrorCode::kUnsupported, "{}: {} tokens exceed the grid", kOp, tokens);
  }
  const int64_t num_slots = kv_cache.size(0) * block_size;
  const size_t elem = kv_cache.element_size();
  DeviceGuard guard(kv_cache.device());
  VLLM_RETURN_IF_ERROR(guard.status());
  const auto* slots = static_cast<const int64_t*>(slot_mapping.data_ptr());
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
