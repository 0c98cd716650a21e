// When each benchmark request is sent: vLLM's get_request() schedule.
//
// request_rate inf sends everything at t = 0. Otherwise the gaps between requests are drawn
// from a gamma distribution with shape = burstiness and scale = 1 / (rate * burstiness)
// (burstiness 1 is a Poisson process; < 1 burstier, > 1 more even; inf a fixed gap), then the
// cumulative times are rescaled so the last one lands at num_requests / rate exactly, which
// vLLM does so throughput does not drift 1-2% with the seed.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace vllm::bench {

// Seconds from the start at which request i is sent; non-decreasing.
Expected<std::vector<double>> request_send_times(int64_t num_requests, double request_rate,
                                                 double burstiness, uint64_t seed);

}  // namespace vllm::bench
