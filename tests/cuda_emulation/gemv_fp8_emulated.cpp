// The W8A16 kernels (backend/cuda/gemv_fp8.cu) built for the CPU: their launches run the
// kernels in the emulator (emulator.h) over host memory. Only for the
// vllm_cuda_emulation_tests binary, which links no CUDA code.
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the source below uses
#include "backend/cuda/gemv_fp8.cu"
// clang-format on
