// The batched GEMV's kernels and launchers (backend/cuda/gemv.cu) built for the CPU: its
// launches run the kernels in the emulator (emulator.h) over host memory, its tensor-core
// products through the emulated mma. Only for the vllm_cuda_emulation_tests binary, which
// links no CUDA code.
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the source below uses
#include "backend/cuda/gemv.cu"
// clang-format on

namespace vllm::cuda {

// The emulated GPU's SM count, which launch_gemv's choice of block shape reads: small, so that
// test-sized products reach both block shapes.
int multiprocessor_count(int) {
  return 2;
}

}  // namespace vllm::cuda
