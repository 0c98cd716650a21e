// The W8A16 kernels (backend/cuda/gemv_fp8.cu) built for the CPU: their launches run the
// kernels in the emulator (emulator.h) over host memory. Only for the
// vllm_cuda_emulation_tests binary, which links no CUDA code.
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the source below uses
#include "backend/cuda/gemv_fp8.cu"
// clang-format on

namespace vllm::cuda::emulated {

// fp8.cuh's bit-move widening of the four e4m3 codes of w, for the tests: plain[] as
// e4m3x4_to_bf16x4_exact gives it, kept[] after e4m3x4_keep_nan (BF16 words, two codes each).
void widen_e4m3x4(uint32_t w, uint32_t plain[2], uint32_t kept[2]) {
  const uint2 p = detail::e4m3x4_to_bf16x4_exact(w);
  const uint2 k = detail::e4m3x4_keep_nan(w, p);
  plain[0] = p.x;
  plain[1] = p.y;
  kept[0] = k.x;
  kept[1] = k.y;
}

}  // namespace vllm::cuda::emulated
