// Internal to the CUDA backend's .cu files: element conversions, packed 16-byte accesses,
// warp and block reductions, and the host-side argument checks the op entries share.
// Never included by code outside src/backend/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string_view>
#include <utility>

#include "backend/cuda/runtime.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace vllm::cuda::detail {

constexpr int kWarpSize = 32;
// gridDim.y and gridDim.z are at most 65535; kernels that put rows there loop past it.
constexpr int kMaxGridY = 65535;

// ---- Device helpers ----------------------------------------------------------------------

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
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// N elements moved as one access (16 bytes for N * sizeof(T) == 16).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// N elements at p: one 16-byte load when N * sizeof(T) == 16 (p then 16-byte aligned), else
// element by element. load_pack reads through the coherent path, as every kernel must read
// what an earlier kernel wrote: under programmatic dependent launch (pdl_wait below) the
// earlier kernel may still be running when this one starts, so that data is not read-only
// for this kernel's lifetime, which the non-coherent path requires (and ptxas may hoist such
// loads above pdl_wait). load_weight_pack reads through the read-only cache, for data no
// kernel writes (weights).
template <typename T, int N, bool kReadOnly = false>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  Pack<T, N> r;
  if constexpr (sizeof(T) * N == 16) {
    const int4 v =
        kReadOnly ? __ldg(reinterpret_cast<const int4*>(p)) : *reinterpret_cast<const int4*>(p);
    memcpy(&r, &v, sizeof(r));
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) r.v[i] = p[i];
  }
  return r;
}
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_weight_pack(const T* p) {
  return load_pack<T, N, true>(p);
}

// 16 bytes of weights (16-byte aligned), read once: not kept in L1 (the batched GEMVs).
__device__ __forceinline__ uint4 load_weight16(const void* p) {
  uint4 v;
#if defined(__CUDA_ARCH__)
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
#else
  memcpy(&v, p, sizeof v);
#endif
  return v;
}

// acc + a . b, in f32, element by element.
template <typename T, int N>
__device__ __forceinline__ float dot_pack(const Pack<T, N>& a, const Pack<T, N>& b, float acc) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc = fmaf(to_float(a.v[i]), to_float(b.v[i]), acc);
  return acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the block; every thread gets the total. blockDim.x is a multiple of 32 and at
// most 1024. `scratch` holds 32 floats of shared memory; the call ends with a barrier, so
// the same scratch may be reused by the next reduction.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x / kWarpSize;
  v = lane < num_warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = blockDim.x / kWarpSize;
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// ---- Programmatic dependent launch --------------------------------------------------------
// A kernel queued with launch_pdl() may be scheduled while the kernel before it in the stream
// is still running (sm_90: its blocks take the SMs the earlier kernel leaves free once every
// earlier block has called pdl_launch_next()), so launch latency and the new kernel's first
// loads overlap the earlier kernel's tail. The contract, for every kernel launched that way:
// each thread calls pdl_wait() before it reads anything an earlier kernel wrote or writes
// anything an earlier kernel reads, and before it returns (so the kernel never completes
// before the ones it follows, and the next kernel's pdl_wait() covers them all). Before
// pdl_wait() a kernel may only read what no kernel writes (weights), with one exception that
// its caller must vouch for: data written by a kernel two or more launches back. Every kernel
// calls pdl_launch_next() only after its own pdl_wait(), so when a kernel starts, all but the
// one just before it have finished; such data is read through L2 (ld.global.cg), never from a
// line an earlier kernel left in L1 (the per-pair MoE kernels' shared-expert slot). Without
// the launch attribute (VLLM_CUDA_PDL=0, other GPUs) both calls return at once.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next kernel in the stream be scheduled (it still waits for this one in its own
// pdl_wait()).
__device__ __forceinline__ void pdl_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- 16-byte accesses and asynchronous copies into shared memory -------------------------

// The 16 bytes at `p` (16-byte aligned) as floats: 4 F32 or 8 BF16 values.
__device__ __forceinline__ void load16_as_float(const float* p, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
__device__ __forceinline__ void load16_as_float(const __nv_bfloat16* p, float* out) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // element 2i is the low half of word i
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// Copies 16 bytes from global `src` to shared `dst` (both 16-byte aligned) without staging
// them in registers (sm_80+; a plain copy on older GPUs). src_bytes 0: reads nothing and
// zero-fills dst (src must still be a valid address value). Completes at cp_async_wait_all.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto dst_addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_addr), "l"(src),
               "r"(src_bytes)
               : "memory");
#else
  *reinterpret_cast<uint4*>(dst) =
      src_bytes == 16 ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}

// Ends the group of cp_async_16 calls issued so far by this thread.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until this thread's copies have landed; other threads see them after a barrier.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight (the
// older ones have landed); other threads see them after a barrier.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_pending() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// SiLU(v) = v * sigmoid(v), as v / (1 + e^-v) in f32 (expf, not the fast intrinsic): the form
// every kernel with a SiLU uses, so their results agree with each other and the CPU's.
__device__ __forceinline__ float silu(float v) {
  return v / (1.0f + expf(-v));
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A small parameter vector (conv taps, per-head constants, norm weights) whose dtype is
// known only at run time: F32, BF16 or F16. Kernels read such vectors a few times per
// thread, so one switch per load costs less than a template instantiation per dtype.
struct ParamVec {
  const void* data = nullptr;  // nullptr: every element reads as 0 (an absent bias)
  DType dtype = DType::kF32;
};

__device__ __forceinline__ float load_param(const ParamVec& p, int64_t i) {
  if (p.data == nullptr) return 0.0f;
  switch (p.dtype) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p.data)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p.data)[i]);
    default:
      return static_cast<const float*>(p.data)[i];
  }
}

// ---- Host-side checks (messages name the op and the argument) --------------------------

// Defined, on a CUDA device.
Status check_cuda_tensor(std::string_view op, std::string_view arg, const Tensor& t);
// check_cuda_tensor + dtype in `allowed`.
Status check_cuda_tensor(std::string_view op, std::string_view arg, const Tensor& t,
                         std::initializer_list<DType> allowed);
// Same dtype as `like` (activations of one op share their dtype).
Status check_same_dtype(std::string_view op, std::string_view arg, const Tensor& t,
                        const Tensor& like);
// Fully contiguous.
Status check_contiguous(std::string_view op, std::string_view arg, const Tensor& t);
// check_cuda_tensor + on the same device as `like` (the op's first operand).
Status check_same_device(std::string_view op, std::string_view arg, const Tensor& t,
                         const Tensor& like);

// A matrix view of a 1-D or 2-D-like tensor whose dims after the first are contiguous:
// row r starts at data + r * row_stride elements (a column slice of a wider tensor is fine).
struct Rows {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements
};
Expected<Rows> as_rows(std::string_view op, std::string_view arg, const Tensor& t);

bool is_aligned(const void* ptr, size_t bytes);
// Every row of `r` (elements of `element_size` bytes) starts on a `bytes` boundary.
bool rows_aligned(const Rows& r, size_t element_size, size_t bytes);

// check_cuda_tensor + dtype F32/BF16/F16 + contiguous: a ParamVec's tensor.
Status check_param(std::string_view op, std::string_view arg, const Tensor& t);
inline ParamVec as_param(const Tensor& t) {
  return t.defined() ? ParamVec{t.data_ptr(), t.dtype()} : ParamVec{};
}

// ---- Launches ----------------------------------------------------------------------------

#if defined(__CUDACC__) && !defined(VLLM_CUDA_EMULATION)
// launch_pdl(kernel, grid, block, smem, stream, args...) with programmatic dependent launch allowed
// (see pdl_wait: the kernel must follow that contract). Launch errors are left for
// check_launch(), as with <<<>>>.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Lets kKernel take `bytes` of dynamic shared memory: above 48 KiB a kernel must opt in, once
// per device (the first call's `bytes` stands). `call` names the opt-in in the error.
template <auto kKernel>
Status opt_in_shared_memory(size_t bytes, const char* call) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static Status result[kMaxDevices];
  int device = 0;
  VLLM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) {
    return make_error(ErrorCode::kUnsupported, "{}: device {} out of range", call, device);
  }
  std::call_once(once[device], [&] {
    (void)(result[device] = cuda_status(
               cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               call));
  });
  return result[device];
}
#endif

}  // namespace vllm::cuda::detail
