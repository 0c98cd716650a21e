// The per-pair and gather-GEMV MoE expert kernels (backend/cuda/moe_pair.cu, moe_gemv.cu) built
// for the CPU: the FP8 kernels' and the gather GEMV's launches run them in the emulator
// (emulator.h) over host memory. Only for the vllm_cuda_emulation_tests binary, which links no
// CUDA code. The BF16 per-pair kernels keep their outputs in static shared memory, which the
// emulator does not share between a block's threads: their launches stop the test.
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the source below uses

#include <cstdio>
#include <cstdlib>

#include "base/status.h"

#undef __maxnreg__  // a register cap means nothing here
#define __maxnreg__(...)

namespace vllm::cuda {
Status check_launch(const char* kernel_name) {
  return make_error(ErrorCode::kInternal, "{}: not launched in the emulator", kernel_name);
}
namespace detail {
template <typename... Params, typename... Args>
void launch_pdl(void (*)(Params...), dim3, dim3, size_t, cudaStream_t, Args&&...) {
  std::fprintf(stderr, "emulated MoE: a kernel without an emulated launch was launched\n");
  std::abort();
}
}  // namespace detail
}  // namespace vllm::cuda

#include "backend/cuda/moe_pair.cu"
#include "backend/cuda/moe_gemv.cu"
// clang-format on
