#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace vllm::server {
namespace {

// Prometheus' Python client writes floats with repr(): "1.0", "0.25", "+Inf".
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

void header(std::string* out, std::string_view name, std::string_view help, std::string_view type) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> buckets;
  for (double scale = 1;; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale > static_cast<double>(max_value)) return buckets;
      buckets.push_back(m * scale);
    }
  }
}

Histogram::Histogram(std::vector<double> buckets)
    : buckets_(std::move(buckets)), counts_(buckets_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t i = static_cast<size_t>(std::lower_bound(buckets_.begin(), buckets_.end(), value) -
                                       buckets_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string_view name, std::string_view labels, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= buckets_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < buckets_.size() ? number(buckets_[i]) : "+Inf";
    fmt::format_to(std::back_inserter(*out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le,
                   number(static_cast<double>(cumulative)));
  }
  fmt::format_to(std::back_inserter(*out), "{}_count{{{}}} {}\n", name, labels,
                 number(static_cast<double>(count_)));
  fmt::format_to(std::back_inserter(*out), "{}_sum{{{}}} {}\n", name, labels, number(sum_));
}

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len)
    : labels_(fmt::format("model_name=\"{}\",engine=\"0\"", escape_label_value(model_name))),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      prompt_len_(buckets_1_2_5(max_model_len)),
      generation_len_(buckets_1_2_5(max_model_len)) {
  for (const char* reason : {"stop", "length", "abort"}) success_[reason] = 0;
}

void ServerMetrics::record_first_token(double ttft, int64_t num_prompt_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(ttft);
  prompt_tokens_ += num_prompt_tokens;
}

void ServerMetrics::record_tokens(int64_t num_tokens, double interval) {
  std::lock_guard<std::mutex> lock(mutex_);
  generation_tokens_ += num_tokens;
  if (interval >= 0.0) itl_.observe(interval);
}

void ServerMetrics::record_finished(const FinishedRequestStats& stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++success_[stats.finish_reason];
  e2e_.observe(stats.e2e_seconds);
  prompt_len_.observe(static_cast<double>(stats.num_prompt_tokens));
  generation_len_.observe(static_cast<double>(stats.num_generation_tokens));
  if (stats.num_generation_tokens > 1 && stats.first_token_seconds >= 0.0) {
    tpot_.observe((stats.last_token_seconds - stats.first_token_seconds) /
                  static_cast<double>(stats.num_generation_tokens - 1));
  }
}

std::string ServerMetrics::render(const engine::EngineStats& stats) const {
  std::string out;
  auto sample = [&](std::string_view name, double value) {
    fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels_, number(value));
  };
  header(&out, "vllm:num_requests_running", "Number of requests in model execution batches.",
         "gauge");
  sample("vllm:num_requests_running", static_cast<double>(stats.num_running));
  header(&out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "gauge");
  sample("vllm:num_requests_waiting", static_cast<double>(stats.num_waiting));
  header(&out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge");
  sample("vllm:kv_cache_usage_perc", stats.kv_cache_usage);
  header(&out, "vllm:prefix_cache_queries_total",
         "Prefix cache queries, in terms of number of queried tokens.", "counter");
  sample("vllm:prefix_cache_queries_total", static_cast<double>(stats.prefix_cache_queries));
  header(&out, "vllm:prefix_cache_hits_total",
         "Prefix cache hits, in terms of number of cached tokens.", "counter");
  sample("vllm:prefix_cache_hits_total", static_cast<double>(stats.prefix_cache_hits));
  header(&out, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
         "counter");
  sample("vllm:num_preemptions_total", static_cast<double>(stats.num_preemptions));

  std::lock_guard<std::mutex> lock(mutex_);
  header(&out, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", "counter");
  sample("vllm:prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(&out, "vllm:generation_tokens_total", "Number of generation tokens processed.", "counter");
  sample("vllm:generation_tokens_total", static_cast<double>(generation_tokens_));
  header(&out, "vllm:request_success_total", "Count of successfully processed requests.",
         "counter");
  for (const auto& [reason, count] : success_) {
    fmt::format_to(std::back_inserter(out),
                   "vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_,
                   escape_label_value(reason), number(static_cast<double>(count)));
  }
  auto histogram = [&](std::string_view name, std::string_view help, const Histogram& h) {
    header(&out, name, help, "histogram");
    h.render(name, labels_, &out);
  };
  histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_len_);
  histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
            generation_len_);
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            ttft_);
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            itl_);
  histogram("vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", tpot_);
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            e2e_);
  return out;
}

}  // namespace vllm::server
