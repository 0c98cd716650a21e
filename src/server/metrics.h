// Prometheus metrics for GET /metrics, under vLLM's names and labels (vllm/v1/metrics/
// loggers.py), so dashboards built for vLLM read ours unchanged:
//   gauges      vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc
//   counters    vllm:prompt_tokens_total, vllm:generation_tokens_total,
//               vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total,
//               vllm:num_preemptions_total, vllm:request_success_total{finished_reason}
//   histograms  vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
//               vllm:request_time_per_output_token_seconds, vllm:e2e_request_latency_seconds,
//               vllm:request_queue_time_seconds, vllm:request_prefill_time_seconds,
//               vllm:request_decode_time_seconds, vllm:request_inference_time_seconds,
//               vllm:request_prompt_tokens, vllm:request_generation_tokens,
//               vllm:iteration_tokens_total, vllm:request_params_n,
//               vllm:request_params_max_tokens, vllm:request_max_num_generation_tokens
// (current vLLM replaced vllm:time_per_output_token_seconds by the first two token-timing
// ones), with vLLM's buckets. Every series carries model_name="<served name>" and
// engine="0". The gauges and prefix-cache counters come from the engine's stats at scrape
// time; the rest is recorded by the server as outputs arrive, and per engine step
// (iteration tokens). Thread-safe.
//
// Ours, not vLLM's: vllm:state_slot_usage_perc, the fraction of Gated DeltaNet state slots
// in use (hybrid models only; vLLM counts that state inside kv_cache_usage_perc).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_core.h"

namespace vllm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> buckets);
  void observe(double value);
  // "<name>_bucket{...,le="..."} n" lines (cumulative, then +Inf), _count and _sum.
  void render(std::string_view name, std::string_view labels, std::string* out) const;

 private:
  std::vector<double> buckets_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// vLLM's build_1_2_5_buckets(max_value): 1, 2, 5, 10, 20, 50, ... up to max_value.
std::vector<double> buckets_1_2_5(int64_t max_value);

// One finished request (an engine request: each of n samples counts).
struct FinishedRequestStats {
  std::string finish_reason;  // "stop", "length", "abort"
  double e2e_seconds = 0.0;
  int64_t num_prompt_tokens = 0;
  int64_t num_generation_tokens = 0;
  double first_token_seconds = -1.0;  // since arrival; < 0 when no token came
  double last_token_seconds = -1.0;
  // vLLM's phase intervals from the engine's events; < 0 when unknown (e.g. aborted before
  // it was scheduled, or before its first token).
  double queued_seconds = -1.0;
  double prefill_seconds = -1.0;
  double decode_seconds = -1.0;
  double inference_seconds = -1.0;
  std::optional<int32_t> max_tokens_param;  // the request's max_tokens
};

class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int64_t max_model_len);

  // A request's first token arrived `ttft` seconds after the request did.
  void record_first_token(double ttft, int64_t num_prompt_tokens);
  // New output tokens; `interval` seconds since the request's previous tokens.
  void record_tokens(int64_t num_tokens, double interval);
  void record_finished(const FinishedRequestStats& stats);
  // A prompt's request finished with all its n samples; `max_generation_tokens` is the
  // most tokens any of them produced.
  void record_parent_finished(int n, int64_t max_generation_tokens);
  // One engine step's tokens (prompt tokens of requests that got their first token, plus
  // output tokens).
  void record_iteration(int64_t num_tokens);

  // The whole /metrics page.
  std::string render(const engine::EngineStats& stats) const;

 private:
  const std::string labels_;  // model_name="...",engine="0"
  mutable std::mutex mutex_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  std::map<std::string, int64_t> success_;  // finished_reason -> count
  Histogram ttft_;
  Histogram itl_;
  Histogram tpot_;
  Histogram e2e_;
  Histogram prompt_len_;
  Histogram generation_len_;
  Histogram queue_time_;
  Histogram prefill_time_;
  Histogram decode_time_;
  Histogram inference_time_;
  Histogram iteration_tokens_;
  Histogram params_n_;
  Histogram params_max_tokens_;
  Histogram max_generation_tokens_;
};

// A Prometheus label value with \, " and newline escaped.
std::string escape_label_value(std::string_view value);

}  // namespace vllm::server
