// vLLM's result table and JSON; see report.h.
#include "bench/report.h"

#include <fmt/format.h>

#include <cmath>

namespace vllm::bench {
namespace {

// Python's "{:<40} {:<10}" / "{:<40} {:<10.2f}" rows.
void row(std::string& out, std::string_view label, int64_t value) {
  out += fmt::format("{:<40} {:<10}\n", label, value);
}
void row(std::string& out, std::string_view label, double value) {
  out += fmt::format("{:<40} {:<10.2f}\n", label, value);
}

struct MetricInfo {
  const char* key;     // "ttft"
  const char* name;    // "TTFT"
  const char* header;  // "Time to First Token"
  const MetricSummary BenchmarkMetrics::*summary;
};

constexpr MetricInfo kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &BenchmarkMetrics::ttft_ms},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &BenchmarkMetrics::tpot_ms},
    {"itl", "ITL", "Inter-token Latency", &BenchmarkMetrics::itl_ms},
    {"e2el", "E2EL", "End-to-end Latency", &BenchmarkMetrics::e2el_ms},
};

bool selected(const ReportConfig& config, std::string_view key) {
  for (const std::string& m : config.percentile_metrics) {
    if (m == key) return true;
  }
  return false;
}

}  // namespace

std::string percentile_label(double p) {
  if (p == std::floor(p)) return fmt::format("{}", static_cast<int64_t>(p));
  return fmt::format("{}", p);
}

std::string format_result_table(const BenchmarkMetrics& m, double duration_s,
                                const ReportConfig& config) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  row(out, "Successful requests:", m.completed);
  row(out, "Failed requests:", m.failed);
  if (config.max_concurrency) row(out, "Maximum request concurrency:", *config.max_concurrency);
  if (!std::isinf(config.request_rate)) row(out, "Request rate configured (RPS):", config.request_rate);
  row(out, "Benchmark duration (s):", duration_s);
  row(out, "Total input tokens:", m.total_input);
  row(out, "Total generated tokens:", m.total_output);
  row(out, "Request throughput (req/s):", m.request_throughput);
  row(out, "Output token throughput (tok/s):", m.output_throughput);
  row(out, "Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  row(out, "Peak concurrent requests:", static_cast<double>(m.max_concurrent_requests));
  row(out, "Total Token throughput (tok/s):", m.total_token_throughput);
  for (const MetricInfo& info : kMetrics) {
    if (!selected(config, info.key)) continue;
    const MetricSummary& s = m.*info.summary;
    out += fmt::format("{:-^50}\n", info.header);
    row(out, fmt::format("Mean {} (ms):", info.name), s.mean);
    row(out, fmt::format("Median {} (ms):", info.name), s.median);
    for (const auto& [p, value] : s.percentiles) {
      row(out, fmt::format("P{} {} (ms):", percentile_label(p), info.name), value);
    }
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::json benchmark_result_json(const BenchmarkMetrics& m, double duration_s,
                                     std::span<const RequestOutput> outputs,
                                     std::span<const int64_t> output_lens,
                                     const ReportConfig& config) {
  nlohmann::json j;
  j["duration"] = duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = nullptr;  // no --goodput SLOs yet
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  nlohmann::json input_lens = nlohmann::json::array(), ttfts = nlohmann::json::array(),
                 itls = nlohmann::json::array(), errors = nlohmann::json::array(),
                 texts = nlohmann::json::array();
  for (const RequestOutput& o : outputs) {
    input_lens.push_back(o.prompt_len);
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    errors.push_back(o.error);
    texts.push_back(o.generated_text);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::vector<int64_t>(output_lens.begin(), output_lens.end());
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  if (config.save_detailed) j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  for (const MetricInfo& info : kMetrics) {
    if (!selected(config, info.key)) continue;
    const MetricSummary& s = m.*info.summary;
    j[fmt::format("mean_{}_ms", info.key)] = s.mean;
    j[fmt::format("median_{}_ms", info.key)] = s.median;
    j[fmt::format("std_{}_ms", info.key)] = s.std;
    for (const auto& [p, value] : s.percentiles) {
      j[fmt::format("p{}_{}_ms", percentile_label(p), info.key)] = value;
    }
  }
  return j;
}

}  // namespace vllm::bench
