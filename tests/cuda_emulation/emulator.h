// Runs CUDA kernel source on the CPU, so CI (which has no GPU) checks a kernel's indexing,
// masking, barriers and work split against the CPU reference ops.
//
// Every CUDA thread of a block is an OS thread; blocks run one after another. __syncthreads
// is a barrier of the block's threads, a warp shuffle a barrier of the warp's 32 lanes, so a
// barrier that not every thread reaches (a divergent return, a shuffle under a divergent
// branch) aborts with a message instead of passing. Dynamic shared memory starts every block
// filled with 0xff bytes (NaN as F32 and as BF16), so a read of shared memory no thread
// wrote shows in the output. cp.async copies land at once (common.cuh's non-sm_80 path).
//
// Include this before any CUDA kernel source: it defines the CUDA builtins the kernels use
// (threadIdx, blockIdx, blockDim, gridDim, __syncthreads, __syncthreads_or, __syncwarp,
// __shfl_xor_sync, __int_as_float, __uint_as_float, __ldg, __ldcg, min, max) and
// VLLM_CUDA_EMULATION, which routes mma.cuh's tensor-core product to an emulation from the PTX
// ISA's fragment tables (emulated_mma_m16n8k16_bf16, f32 sums of exact bf16 products). What it does
// not model: the memory model between blocks (blocks are sequential), warp-synchronous code without
// shuffles or __syncwarp, static __shared__ arrays (they are per thread here: kernels keep shared
// data in dynamic shared memory), timing.
#pragma once

// Device code's hooks into the emulator (mma.cuh's tensor-core product).
#define VLLM_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector_functions.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

namespace vllm::emu {

struct ThreadState {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1};
  dim3 grid_dim{1, 1, 1};
};

// The calling emulated thread's coordinates.
ThreadState& state();

void syncthreads();
int syncthreads_or(int predicate);
// A barrier of the calling warp's 32 lanes (__syncwarp with the full mask).
void syncwarp();
float shfl_xor(float value, int lane_mask);
// The calling warp's 32 lanes each contribute `words` and receive all lanes' words
// ([lane][word], words <= 16). Every lane of the warp must call it.
void warp_exchange(const uint32_t* words, int count, uint32_t (*all)[16]);

// Runs kernel() as grid x threads CUDA threads (1-D blocks, threads a multiple of 32) with
// `shared` as the dynamic shared memory (its first shared_bytes bytes poisoned per block).
void launch(dim3 grid, unsigned threads, unsigned char* shared, size_t shared_bytes,
            const std::function<void()>& kernel);

}  // namespace vllm::emu

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#define threadIdx (::vllm::emu::state().thread_idx)
#define blockIdx (::vllm::emu::state().block_idx)
#define blockDim (::vllm::emu::state().block_dim)
#define gridDim (::vllm::emu::state().grid_dim)

inline void __syncthreads() {
  vllm::emu::syncthreads();
}
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) {
  vllm::emu::syncwarp();
}
inline int __syncthreads_or(int predicate) {
  return vllm::emu::syncthreads_or(predicate);
}
inline float __shfl_xor_sync(unsigned /*mask*/, float value, int lane_mask) {
  return vllm::emu::shfl_xor(value, lane_mask);
}
inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, sizeof f);
  return f;
}
inline float __uint_as_float(unsigned v) {
  float f;
  std::memcpy(&f, &v, sizeof f);
  return f;
}
// A load through the read-only cache, or through L2 only, is a plain load here.
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
