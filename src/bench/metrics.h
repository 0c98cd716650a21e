// What one benchmark request measured, and vLLM's serving metrics over all of them.
//
// RequestOutput is vLLM's RequestFuncOutput: times in seconds on a steady clock, ttft from
// sending to the first chunk that carries a choice, itl the gaps between such chunks, latency
// from sending to the last one. calculate_metrics() is vLLM's calculate_metrics(): TPOT is
// (latency - ttft) / (output_tokens - 1) and only requests with more than one output token
// have one; ITL pools every gap of every request; failed requests count only in `failed`.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace vllm::bench {

struct RequestOutput {
  bool success = false;
  std::string error;
  std::string generated_text;
  int64_t prompt_len = 0;
  // The server's usage.completion_tokens; nullopt when the stream carried no usage.
  std::optional<int64_t> usage_output_tokens;
  int64_t num_chunks = 0;  // chunks that carried a choice (text may be empty)
  double start_time = 0.0;  // seconds since the benchmark started
  double ttft = 0.0;
  double latency = 0.0;
  std::vector<double> itl;
};

// mean / median / std and the chosen percentiles of one metric, in milliseconds.
struct MetricSummary {
  double mean = 0.0;
  double median = 0.0;
  double std = 0.0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
};

MetricSummary summarize_ms(std::span<const double> seconds, std::span<const double> percentiles);

struct BenchmarkMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0.0;
  double output_throughput = 0.0;
  double total_token_throughput = 0.0;
  MetricSummary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  // Busiest one-second bucket of output chunks, and the most requests in flight in a second.
  double max_output_tokens_per_s = 0.0;
  int64_t max_concurrent_requests = 0;
};

// output_lens[i]: request i's output token count (0 for a failed request); see
// resolve_output_lens in serve_benchmark.h for where it comes from.
BenchmarkMetrics calculate_metrics(std::span<const RequestOutput> outputs,
                                   std::span<const int64_t> output_lens, double duration_s,
                                   std::span<const double> percentiles);

}  // namespace vllm::bench
