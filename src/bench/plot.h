// The sweep picture: TTFT, TPOT and output throughput against max concurrency, three panels
// side by side, drawn with cairo into a PNG. Each panel has a title, axis labels, ticks and a
// legend; latency panels show the mean and the chosen high percentile (p99 by default), the
// throughput panel output and total tokens per second. Concurrency goes on a log2 axis when
// the levels span 8x or more (1, 4, 16, 64 are then evenly spaced).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/metrics.h"

namespace vllm::bench {

struct SweepPoint {
  int64_t max_concurrency = 0;
  BenchmarkMetrics metrics;
};

struct PlotOptions {
  std::string title;  // the line above the panels, e.g. the model and the workload
  int width = 1500;
  int height = 520;
};

// False when the build had no cairo: write_sweep_plot then returns kUnsupported.
bool sweep_plot_available();

Status write_sweep_plot(const std::filesystem::path& png, const std::vector<SweepPoint>& points,
                        const PlotOptions& options);

// Round tick values covering [lo, hi]: about `target` of them, steps of 1, 2, 2.5 or 5 x 10^k.
std::vector<double> nice_ticks(double lo, double hi, int target = 5);

}  // namespace vllm::bench
