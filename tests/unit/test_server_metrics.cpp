// The Prometheus text of /metrics: vLLM's names, labels, histogram buckets.
#include <gtest/gtest.h>

#include <string>

#include "server/metrics.h"

namespace vllm::server {
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

}  // namespace
}  // namespace vllm::server
