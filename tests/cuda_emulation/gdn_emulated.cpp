// The gated delta rule's CUDA kernels (backend/cuda/gdn_rule.cu: the token-by-token kernel
// and the chunked tensor-core kernel of gdn_chunk.cuh) and the GdnBatch checks
// (gdn_batch.cu) built for the CPU: their launches run the kernels in the emulator
// (emulator.h) over host memory, the chunked kernel's products through the emulated mma. Only
// for the vllm_cuda_emulation_tests binary, which links no CUDA code.
// clang-format off
#include "emulator.h"  // first: the CUDA builtins the sources below use
#include "backend/cuda/gdn_batch.cu"
#include "backend/cuda/gdn_rule.cu"
// clang-format on
