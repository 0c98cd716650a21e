// Runtime CPU feature detection for the SIMD kernels (cpu_isa.h).
#include "backend/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/logging.h"

namespace vllm::cpu {
namespace {

CpuIsa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  if (avx512) return CpuIsa::kAvx512;
  if (avx2) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kPortable;
}

CpuIsa initial() {
  const CpuIsa best = detected_isa();
  const char* env = std::getenv("VLLM_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string want(env);
  CpuIsa asked;
  if (want == "portable") {
    asked = CpuIsa::kPortable;
  } else if (want == "avx2") {
    asked = CpuIsa::kAvx2;
  } else if (want == "avx512") {
    asked = CpuIsa::kAvx512;
  } else {
    VLLM_LOG_WARNING("VLLM_CPU_ISA='{}' is not portable, avx2 or avx512; using {}", want,
                     isa_name(best));
    return best;
  }
  if (static_cast<int>(asked) > static_cast<int>(best)) {
    VLLM_LOG_WARNING("VLLM_CPU_ISA={}: this CPU supports up to {}; using {}", want, isa_name(best),
                     isa_name(best));
    return best;
  }
  return asked;
}

std::atomic<int>& active() {
  static std::atomic<int> isa{static_cast<int>(initial())};
  return isa;
}

}  // namespace

std::string_view isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "portable";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

CpuIsa detected_isa() {
  static const CpuIsa isa = detect();
  return isa;
}

CpuIsa active_isa() {
  return static_cast<CpuIsa>(active().load(std::memory_order_relaxed));
}

CpuIsa set_active_isa(CpuIsa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa())) isa = detected_isa();
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

}  // namespace vllm::cpu
