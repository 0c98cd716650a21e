// vllm::cuda::paged_attention built for the CPU: the op entry (attention.cu) and the kernel
// sources (attention_tiled.cuh, attention_decode_mma.cuh, attention_mma.cuh,
// attention_combine.cuh, attention_generic.cu)
// compiled by the host compiler, with the launchers running the kernels in the emulator
// (emulator.h) over host memory that the test labels as CUDA tensors (the launchers choose the
// kernels as attention_tiled_launch.cuh does; the generic one's launcher has its own emulation
// path). Only for the vllm_cuda_emulation_tests binary, which links no CUDA code.
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the sources below use
#include "backend/cuda/attention.cu"
#include "backend/cuda/attention_combine.cuh"
#include "backend/cuda/attention_decode_mma.cuh"
#include "backend/cuda/attention_generic.cu"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_tiled.cuh"
#include "backend/cuda/common.cu"
// clang-format on

#include <type_traits>

namespace vllm::cuda {

// No device to select: the emulated kernels read host memory.
DeviceGuard::DeviceGuard(Device) {}
DeviceGuard::~DeviceGuard() = default;

// Nor a Hopper one: the op keeps BF16 prefill on the mma.sync kernel, which the emulator runs
// (wgmma has no emulation).
bool runs_sm90a(int) {
  return false;
}

namespace detail {

// The kernels' `extern __shared__ smem[]` (the largest tile uses ~110 KB).
alignas(16) unsigned char smem[227 * 1024];

template <typename T, int D, typename C>
Status launch_attention_small(const AttentionArgs& args, int num_requests, cudaStream_t) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (args.decode_tensor_cores) {  // as attention_tiled_launch.cuh chooses
      emu::launch(small_grid(args, num_requests), kAttnThreads, smem,
                  DecodeMmaTile<D, C>::kSmemBytes, [&] { mma_decode_kernel<D, C>(args); });
      return Status::ok();
    }
  }
  emu::launch(small_grid(args, num_requests), kAttnThreads, smem,
              AttnTile<T, D, true, C>::kSmemBytes,
              [&] { tiled_attention_kernel<T, D, true, C>(args); });
  return Status::ok();
}

template <typename T, int D, typename C>
Status launch_attention_large(const AttentionArgs& args, int num_requests, cudaStream_t) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (args.tensor_cores) {  // as attention_tiled_launch.cuh chooses
      emu::launch(mma_grid<D>(args, num_requests), kAttnThreads, smem, MmaTile<D, C>::kSmemBytes,
                  [&] { mma_prefill_kernel<D, C>(args); });
      return Status::ok();
    }
  }
  emu::launch(large_grid<T, D>(args, num_requests), kAttnThreads, smem,
              AttnTile<T, D, false, C>::kSmemBytes,
              [&] { tiled_attention_kernel<T, D, false, C>(args); });
  return Status::ok();
}

template <typename T, int D>
Status launch_attention_combine(const AttentionArgs& args, int num_requests, cudaStream_t) {
  emu::launch(combine_grid(args, num_requests), kCombineThreads, smem, kCombineSmemBytes,
              [&] { combine_splits_kernel<T, D>(args); });
  return Status::ok();
}

}  // namespace detail
}  // namespace vllm::cuda
