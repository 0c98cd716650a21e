// vLLM's `bench serve` report: the printed result table (same rows, wording and column
// widths, so output can be compared side by side with vLLM's) and the result JSON (same key
// names, so vLLM's tooling reads ours).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench/metrics.h"

namespace vllm::bench {

struct ReportConfig {
  std::optional<int64_t> max_concurrency;
  double request_rate = 0.0;  // inf: all at once
  // Which of ttft, tpot, itl, e2el get mean / median / std / percentile rows and keys.
  std::vector<std::string> percentile_metrics;
  bool save_detailed = false;  // also write generated_texts
};

// "P99", "P99.9": vLLM's percentile label (an integral p without ".0").
std::string percentile_label(double p);

std::string format_result_table(const BenchmarkMetrics& metrics, double duration_s,
                                const ReportConfig& config);

// The benchmark part of vLLM's result JSON: duration, completed, failed, token totals,
// throughputs, per-request input_lens / output_lens / ttfts / itls / errors, peak figures and
// mean_/median_/std_/pNN_ + <metric>_ms for the chosen metrics.
nlohmann::json benchmark_result_json(const BenchmarkMetrics& metrics, double duration_s,
                                     std::span<const RequestOutput> outputs,
                                     std::span<const int64_t> output_lens,
                                     const ReportConfig& config);

}  // namespace vllm::bench
