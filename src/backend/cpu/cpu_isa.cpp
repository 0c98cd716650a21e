// Runtime CPU feature detection for the SIMD kernels (cpu_isa.h).
#include "backend/cpu/cpu_isa.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/logging.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace vllm::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// XCR0: which register states the OS saves on context switches.
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

// CPUID feature bits, and the OS's support for the wider registers (XCR0), as the
// instruction set manuals prescribe.
CpuIsa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return CpuIsa::kPortable;
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave) return CpuIsa::kPortable;
  const uint64_t xcr0 = xgetbv0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask and ZMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return CpuIsa::kPortable;
  const bool avx2 = os_avx && fma && f16c && ((b >> 5) & 1);
  const bool avx512 = avx2 && os_avx512 && ((b >> 16) & 1) /* F */ && ((b >> 17) & 1) /* DQ */ &&
                      ((b >> 30) & 1) /* BW */ && ((b >> 31) & 1) /* VL */;
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
