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
const std::vector<double> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                    512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kRequestNBuckets = {1, 2, 5, 10, 20};
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
      generation_len_(buckets_1_2_5(max_model_len)),
      queue_time_(kRequestLatencyBuckets),
      prefill_time_(kRequestLatencyBuckets),
      decode_time_(kRequestLatencyBuckets),
      inference_time_(kRequestLatencyBuckets),
      iteration_tokens_(kIterationTokenBuckets),
      params_n_(kRequestNBuckets),
      params_max_tokens_(buckets_1_2_5(max_model_len)),
      max_generation_tokens_(buckets_1_2_5(max_model_len)) {
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
  if (stats.queued_seconds >= 0.0) queue_time_.observe(stats.queued_seconds);
  if (stats.prefill_seconds >= 0.0) prefill_time_.observe(stats.prefill_seconds);
  if (stats.decode_seconds >= 0.0) decode_time_.observe(stats.decode_seconds);
  if (stats.inference_seconds >= 0.0) inference_time_.observe(stats.inference_seconds);
  if (stats.max_tokens_param && *stats.max_tokens_param > 0) {
    params_max_tokens_.observe(static_cast<double>(*stats.max_tokens_param));
  }
}

void ServerMetrics::record_parent_finished(int n, int64_t max_generation_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  params_n_.observe(static_cast<double>(n));
  max_generation_tokens_.observe(static_cast<double>(max_generation_tokens));
}

void ServerMetrics::record_iteration(int64_t num_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  iteration_tokens_.observe(static_cast<double>(num_tokens));
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
  if (stats.num_state_slots > 0) {
    header(&out, "vllm:state_slot_usage_perc",
           "Gated DeltaNet state-slot usage. 1 means 100 percent usage.", "gauge");
    sample("vllm:state_slot_usage_perc",
           1.0 - static_cast<double>(stats.num_free_state_slots) / stats.num_state_slots);
  }
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
  histogram("vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", queue_time_);
  histogram("vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.", inference_time_);
  histogram("vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.", prefill_time_);
  histogram("vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.", decode_time_);
  histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            iteration_tokens_);
  histogram("vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", max_generation_tokens_);
  histogram("vllm:request_params_n", "Histogram of the n request parameter.", params_n_);
  histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            params_max_tokens_);
  return out;
}

}  // namespace vllm::server
