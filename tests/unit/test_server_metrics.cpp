// The Prometheus text of /metrics: vLLM's names, labels, histogram buckets.
#include <gtest/gtest.h>

#include <string>

#include "server/metrics.h"

namespace vllm::server {
namespace test_server_metrics {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(ServerMetrics, Buckets125) {
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(buckets_1_2_5(1), (std::vector<double>{1}));
}

TEST(ServerMetrics, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le is inclusive
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render("x", "a=\"b\"", &out);
  EXPECT_EQ(out,
            "x_bucket{a=\"b\",le=\"0.1\"} 2.0\n"
            "x_bucket{a=\"b\",le=\"1.0\"} 3.0\n"
            "x_bucket{a=\"b\",le=\"+Inf\"} 4.0\n"
            "x_count{a=\"b\"} 4.0\n"
            "x_sum{a=\"b\"} 7.65\n");
}

TEST(ServerMetrics, RendersVllmNames) {
  ServerMetrics m("my \"model\"", 100);
  m.record_first_token(0.03, 5);
  m.record_tokens(1, -1.0);
  m.record_tokens(2, 0.02);
  FinishedRequestStats done;
  done.finish_reason = "length";
  done.e2e_seconds = 0.4;
  done.num_prompt_tokens = 5;
  done.num_generation_tokens = 3;
  done.first_token_seconds = 0.03;
  done.last_token_seconds = 0.07;
  m.record_finished(done);
  engine::EngineStats stats;
  stats.num_running = 2;
  stats.num_waiting = 1;
  stats.kv_cache_usage = 0.25;
  stats.prefix_cache_queries = 64;
  stats.prefix_cache_hits = 16;
  const std::string text = m.render(stats);
  const std::string labels = "model_name=\"my \\\"model\\\"\",engine=\"0\"";
  EXPECT_TRUE(has_line(text, "# TYPE vllm:num_requests_running gauge")) << text;
  EXPECT_TRUE(has_line(text, "vllm:num_requests_running{" + labels + "} 2.0")) << text;
  EXPECT_TRUE(has_line(text, "vllm:num_requests_waiting{" + labels + "} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:kv_cache_usage_perc{" + labels + "} 0.25"));
  EXPECT_TRUE(has_line(text, "vllm:prefix_cache_queries_total{" + labels + "} 64.0"));
  EXPECT_TRUE(has_line(text, "vllm:prefix_cache_hits_total{" + labels + "} 16.0"));
  EXPECT_TRUE(has_line(text, "vllm:prompt_tokens_total{" + labels + "} 5.0"));
  EXPECT_TRUE(has_line(text, "vllm:generation_tokens_total{" + labels + "} 3.0"));
  EXPECT_TRUE(
      has_line(text, "vllm:request_success_total{" + labels + ",finished_reason=\"length\"} 1.0"));
  EXPECT_TRUE(
      has_line(text, "vllm:request_success_total{" + labels + ",finished_reason=\"stop\"} 0.0"));
  EXPECT_TRUE(
      has_line(text, "vllm:request_success_total{" + labels + ",finished_reason=\"abort\"} 0.0"));
  EXPECT_TRUE(has_line(text, "# TYPE vllm:time_to_first_token_seconds histogram"));
  EXPECT_TRUE(
      has_line(text, "vllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"0.04\"} 1.0"));
  EXPECT_TRUE(
      has_line(text, "vllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"0.02\"} 0.0"));
  EXPECT_TRUE(has_line(text, "vllm:inter_token_latency_seconds_count{" + labels + "} 1.0"));
  // (0.07 - 0.03) / 2 tokens after the first.
  EXPECT_TRUE(has_line(
      text, "vllm:request_time_per_output_token_seconds_bucket{" + labels + ",le=\"0.025\"} 1.0"));
  EXPECT_TRUE(
      has_line(text, "vllm:e2e_request_latency_seconds_bucket{" + labels + ",le=\"0.5\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_prompt_tokens_bucket{" + labels + ",le=\"5.0\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_generation_tokens_sum{" + labels + "} 3.0"));
}

// The phase timings, per-step tokens and request parameters vLLM reports, with its buckets.
TEST(ServerMetrics, PhaseTimesIterationTokensAndParams) {
  ServerMetrics m("m", 100);
  FinishedRequestStats done;
  done.finish_reason = "stop";
  done.e2e_seconds = 2.0;
  done.num_prompt_tokens = 7;
  done.num_generation_tokens = 4;
  done.queued_seconds = 0.2;
  done.prefill_seconds = 0.6;
  done.decode_seconds = 1.1;
  done.inference_seconds = 1.7;
  done.max_tokens_param = 16;
  m.record_finished(done);
  FinishedRequestStats aborted;  // never scheduled: no phase times
  aborted.finish_reason = "abort";
  m.record_finished(aborted);
  m.record_iteration(9);
  m.record_iteration(1);
  m.record_parent_finished(2, 4);
  engine::EngineStats stats;
  stats.num_state_slots = 4;
  stats.num_free_state_slots = 3;
  const std::string text = m.render(stats);
  const std::string l = "model_name=\"m\",engine=\"0\"";
  EXPECT_TRUE(has_line(text, "# TYPE vllm:request_queue_time_seconds histogram")) << text;
  EXPECT_TRUE(has_line(text, "vllm:request_queue_time_seconds_bucket{" + l + ",le=\"0.3\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_queue_time_seconds_count{" + l + "} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_prefill_time_seconds_bucket{" + l + ",le=\"0.5\"} 0.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_prefill_time_seconds_bucket{" + l + ",le=\"0.8\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_decode_time_seconds_sum{" + l + "} 1.1"));
  EXPECT_TRUE(
      has_line(text, "vllm:request_inference_time_seconds_bucket{" + l + ",le=\"2.0\"} 1.0"));
  EXPECT_TRUE(
      has_line(text, "vllm:request_inference_time_seconds_bucket{" + l + ",le=\"7680.0\"} 1.0"));
  EXPECT_TRUE(has_line(text, "# TYPE vllm:iteration_tokens_total histogram"));
  EXPECT_TRUE(has_line(text, "vllm:iteration_tokens_total_bucket{" + l + ",le=\"1.0\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:iteration_tokens_total_bucket{" + l + ",le=\"16.0\"} 2.0"));
  EXPECT_TRUE(has_line(text, "vllm:iteration_tokens_total_bucket{" + l + ",le=\"16384.0\"} 2.0"));
  EXPECT_TRUE(has_line(text, "vllm:iteration_tokens_total_sum{" + l + "} 10.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_params_n_bucket{" + l + ",le=\"2.0\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_params_n_bucket{" + l + ",le=\"20.0\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_params_max_tokens_bucket{" + l + ",le=\"20.0\"} 1.0"));
  EXPECT_TRUE(has_line(text, "vllm:request_max_num_generation_tokens_sum{" + l + "} 4.0"));
  EXPECT_TRUE(has_line(text, "vllm:state_slot_usage_perc{" + l + "} 0.25"));
}

}  // namespace
}  // namespace test_server_metrics
}  // namespace vllm::server
