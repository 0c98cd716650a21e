// Summary statistics exactly as vLLM's benchmarks compute them with numpy: np.mean,
// np.median, np.std (population, ddof=0) and np.percentile with its default "linear"
// interpolation. An empty sample gives 0 for all of them, as vLLM's `np.mean(x or 0)` does,
// so a run where every request failed still prints a table.
#pragma once

#include <span>

namespace vllm::bench {

double mean(std::span<const double> values);
double median(std::span<const double> values);
// Population standard deviation (numpy's default ddof=0).
double stdev(std::span<const double> values);
// p in [0, 100]. Linear interpolation between the closest ranks: rank = p/100 * (n - 1).
double percentile(std::span<const double> values, double p);

}  // namespace vllm::bench
