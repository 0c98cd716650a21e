// vllm::cuda::reshape_and_cache (backend/cuda/cache.cu) built for the CPU: its launchers run
// the kernels in the emulator (emulator.h) over host memory. Only for the
// vllm_cuda_emulation_tests binary, which links no CUDA code (the shared helpers of common.cu
// come from attention_emulated.cpp).
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the source below uses
#include "backend/cuda/cache.cu"
// clang-format on
