// Which SIMD instruction set the CPU ops use, chosen at run time: one binary runs on any
// x86-64 (or other) CPU and uses AVX2+FMA or AVX-512 where the CPU has them.
//
// Every op keeps its portable kernel (plain C++ built for the baseline target): that one is
// the reference the SIMD kernels are tested against, and what other CPUs run. The active ISA
// is the best one the CPU supports, lowered by VLLM_CPU_ISA=portable|avx2|avx512 (a value
// above what the CPU has is lowered to what it has, with a warning). Tests switch it with
// set_active_isa() to run every kernel the machine can run.
#pragma once

#include <string_view>

namespace vllm::cpu {

enum class CpuIsa : int {
  kPortable = 0,  // baseline C++ (SSE2 on x86-64)
  kAvx2 = 1,      // AVX2 + FMA + F16C
  kAvx512 = 2,    // AVX-512 F/BW/VL/DQ + FMA + F16C
};

std::string_view isa_name(CpuIsa isa);

// The best ISA this CPU supports.
CpuIsa detected_isa();

// The ISA the ops use now (detected_isa(), lowered by VLLM_CPU_ISA).
CpuIsa active_isa();

// Makes the ops use `isa`, lowered to detected_isa(); returns the ISA now active. For tests
// and benchmarks: not safe while ops run on other threads.
CpuIsa set_active_isa(CpuIsa isa);

}  // namespace vllm::cpu
