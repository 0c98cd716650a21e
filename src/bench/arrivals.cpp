// vLLM's request arrival schedule; see arrivals.h.
#include "bench/arrivals.h"

#include <cmath>
#include <random>

namespace vllm::bench {

Expected<std::vector<double>> request_send_times(int64_t num_requests, double request_rate,
                                                 double burstiness, uint64_t seed) {
  if (!(burstiness > 0.0)) {
    return make_error(ErrorCode::kInvalidArgument, "--burstiness {}: must be positive", burstiness);
  }
  if (!(request_rate > 0.0)) {
    return make_error(ErrorCode::kInvalidArgument, "--request-rate {}: must be positive (or inf)",
                      request_rate);
  }
  std::vector<double> times(static_cast<size_t>(std::max<int64_t>(num_requests, 0)), 0.0);
  if (std::isinf(request_rate) || times.empty()) return times;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gamma(
      std::isinf(burstiness) ? 1.0 : burstiness,
      std::isinf(burstiness) ? 1.0 : 1.0 / (request_rate * burstiness));
  double t = 0.0;
  for (double& v : times) {
    t += std::isinf(burstiness) ? 1.0 / request_rate : gamma(rng);
    v = t;
  }
  if (times.back() > 0.0) {
    const double scale = static_cast<double>(num_requests) / request_rate / times.back();
    for (double& v : times) v *= scale;
  }
  return times;
}

}  // namespace vllm::bench
