// sum_exp (sum_exp.h): the portable reference and the dispatch by cpu_isa.h.
#include "backend/cpu/sum_exp.h"

#include <cmath>

#include "backend/cpu/cpu_isa.h"

namespace vllm::cpu {
namespace detail {

double sum_exp_portable(const float* x, int64_t n, float m) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - m);
  return sum;
}

}  // namespace detail

double sum_exp(const float* x, int64_t n, float m) {
  switch (active_isa()) {
    case CpuIsa::kAvx512:
      return detail::sum_exp_avx512(x, n, m);
    case CpuIsa::kAvx2:
      return detail::sum_exp_avx2(x, n, m);
    default:
      return detail::sum_exp_portable(x, n, m);
  }
}

}  // namespace vllm::cpu
