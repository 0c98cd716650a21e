// Internal to the Gated DeltaNet .cu files: how kernels read and write state slots kept in
// F32, BF16 or F16 (vLLM's --mamba-cache-dtype and --mamba-ssm-cache-dtype; gdn.cuh).
//
// The arithmetic stays f32 whatever the storage: a kernel loads a request's state into f32
// registers once, before its rows, and rounds it (to nearest, ties to even) once when it
// stores it back after them -- the CPU ops' contract (cpu/gdn.h), so the two agree on where
// a 16-bit state is rounded. The storage type is a value of the launch, the same for every
// thread: one kernel serves every dtype, and the branch sits only on the state's one load
// and one store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace vllm::cuda::detail {

enum class StateType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// An op's state tensor dtype (F32, BF16 or F16: checked by the op) as kernels see it.
inline StateType state_type(DType dtype) {
  return dtype == DType::kBF16  ? StateType::kBF16
         : dtype == DType::kF16 ? StateType::kF16
                                : StateType::kF32;
}

// Element i of a state array in its storage type, as f32. kL2: through L2 only
// (ld.global.cg), for a load before pdl_wait (docs/design.md).
template <bool kL2 = false>
__device__ __forceinline__ float load_state(const void* base, int64_t i, StateType type) {
  if constexpr (kL2) {
    if (type == StateType::kF32) return __ldcg(static_cast<const float*>(base) + i);
    const unsigned short bits = __ldcg(static_cast<const unsigned short*>(base) + i);
    if (type == StateType::kBF16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  }
  switch (type) {
    case StateType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case StateType::kF16:
      return __half2float(static_cast<const __half*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// Element i of a state array set to v rounded to its storage type.
__device__ __forceinline__ void store_state(void* base, int64_t i, float v, StateType type) {
  switch (type) {
    case StateType::kBF16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
      return;
    case StateType::kF16:
      static_cast<__half*>(base)[i] = __float2half_rn(v);
      return;
    default:
      static_cast<float*>(base)[i] = v;
  }
}

}  // namespace vllm::cuda::detail
