// vLLM's benchmark arithmetic with hand-computed values: numpy's mean / median / std /
// percentile (linear interpolation), TPOT = (e2e - TTFT) / (output tokens - 1) leaving out
// one-token outputs, pooled ITL gaps, throughputs, the peak figures, the printed table and
// the result JSON keys.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/report.h"
#include "bench/serve_benchmark.h"
#include "bench/stats.h"

namespace vllm::bench {
namespace test_bench_metrics {
namespace {

constexpr double kEps = 1e-9;

TEST(BenchStats, MatchesNumpyDefaults) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(mean(v), 2.5);
  EXPECT_DOUBLE_EQ(median(v), 2.5);  // mean of the two middle values
  EXPECT_NEAR(stdev(v), std::sqrt(1.25), kEps);  // population: ddof = 0
  EXPECT_NEAR(percentile(v, 99), 3.97, kEps);    // rank 0.99 * 3 = 2.97 -> 3 + 0.97 * (4 - 3)
  EXPECT_NEAR(percentile(v, 25), 1.75, kEps);    // rank 0.75
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);

  const std::vector<double> odd = {3, 1, 2};
  EXPECT_DOUBLE_EQ(median(odd), 2.0);
  EXPECT_NEAR(percentile(odd, 90), 2.8, kEps);  // rank 1.8 -> 2 + 0.8 * (3 - 2)

  const std::vector<double> one = {5};
  EXPECT_DOUBLE_EQ(mean(one), 5);
  EXPECT_DOUBLE_EQ(stdev(one), 0);
  EXPECT_DOUBLE_EQ(percentile(one, 99), 5);
}

TEST(BenchStats, EmptyIsZeroLikeVllm) {
  const std::vector<double> none;
  EXPECT_EQ(mean(none), 0.0);
  EXPECT_EQ(median(none), 0.0);
  EXPECT_EQ(stdev(none), 0.0);
  EXPECT_EQ(percentile(none, 99), 0.0);
}

RequestOutput ok(int64_t prompt_len, double start, double ttft, double latency, std::vector<double> itl) {
  RequestOutput o;
  o.success = true;
  o.prompt_len = prompt_len;
  o.start_time = start;
  o.ttft = ttft;
  o.latency = latency;
  o.itl = std::move(itl);
  o.num_chunks = static_cast<int64_t>(o.itl.size()) + 1;
  return o;
}

// A: 4 tokens, TPOT (1.0 - 0.1) / 3 = 0.3. B: 1 token, no TPOT. C: failed. D: 3 tokens,
// TPOT (1.1 - 0.3) / 2 = 0.4. Duration 2 s.
struct Fixture {
  std::vector<RequestOutput> outputs;
  std::vector<int64_t> output_lens = {4, 1, 0, 3};
  Fixture() {
    outputs.push_back(ok(10, 0.0, 0.1, 1.0, {0.3, 0.3, 0.3}));
    outputs.push_back(ok(20, 0.0, 0.2, 0.2, {}));
    RequestOutput failed;
    failed.prompt_len = 30;
    failed.error = "HTTP 500";
    outputs.push_back(failed);
    outputs.push_back(ok(40, 0.0, 0.3, 1.1, {0.3, 0.5}));
  }
};

TEST(BenchMetrics, HandComputed) {
  Fixture f;
  const std::vector<double> ps = {50, 99};
  const BenchmarkMetrics m = calculate_metrics(f.outputs, f.output_lens, 2.0, ps);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 70);  // the failed request's prompt does not count
  EXPECT_EQ(m.total_output, 8);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 4.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 39.0);

  // TTFT {0.1, 0.2, 0.3} s.
  EXPECT_NEAR(m.ttft_ms.mean, 200, kEps);
  EXPECT_NEAR(m.ttft_ms.median, 200, kEps);
  EXPECT_NEAR(m.ttft_ms.std, 1000 * std::sqrt(0.02 / 3), kEps);
  ASSERT_EQ(m.ttft_ms.percentiles.size(), 2u);
  EXPECT_EQ(m.ttft_ms.percentiles[1].first, 99);
  EXPECT_NEAR(m.ttft_ms.percentiles[1].second, 298, kEps);  // rank 1.98 -> 0.2 + 0.98 * 0.1

  // TPOT {0.3, 0.4} s: B (one token) is left out.
  EXPECT_NEAR(m.tpot_ms.mean, 350, kEps);
  EXPECT_NEAR(m.tpot_ms.median, 350, kEps);
  EXPECT_NEAR(m.tpot_ms.std, 50, kEps);
  EXPECT_NEAR(m.tpot_ms.percentiles[1].second, 399, kEps);  // rank 0.99

  // ITL: every gap of every request, {0.3, 0.3, 0.3, 0.3, 0.5}.
  EXPECT_NEAR(m.itl_ms.mean, 340, kEps);
  EXPECT_NEAR(m.itl_ms.median, 300, kEps);
  EXPECT_NEAR(m.itl_ms.std, 80, kEps);  // sqrt((4 * 0.04^2 + 0.16^2) / 5)
  EXPECT_NEAR(m.itl_ms.percentiles[0].second, 300, kEps);
  EXPECT_NEAR(m.itl_ms.percentiles[1].second, 492, kEps);  // rank 3.96 -> 0.3 + 0.96 * 0.2

  // E2EL {1.0, 0.2, 1.1} s.
  EXPECT_NEAR(m.e2el_ms.mean, 2300.0 / 3, kEps);
  EXPECT_NEAR(m.e2el_ms.median, 1000, kEps);
  EXPECT_NEAR(m.e2el_ms.percentiles[1].second, 1098, kEps);  // rank 1.98 -> 1.0 + 0.98 * 0.1
}

TEST(BenchMetrics, TpotSkipsOneTokenOutputs) {
  std::vector<RequestOutput> outputs = {ok(5, 0, 0.5, 0.5, {}), ok(5, 0, 0.5, 0.5, {})};
  const std::vector<int64_t> lens = {1, 1};
  const std::vector<double> ps = {99};
  const BenchmarkMetrics m = calculate_metrics(outputs, lens, 1.0, ps);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.tpot_ms.mean, 0.0);  // no request had a TPOT: vLLM reports 0
  EXPECT_EQ(m.itl_ms.percentiles[0].second, 0.0);
  EXPECT_NEAR(m.ttft_ms.mean, 500, kEps);
}

TEST(BenchMetrics, PeakFigures) {
  // Chunks at 0.25, 0.75, 1.25 (request 1) and 0.75, 1.0 (request 2): 3 in second 0, 2 in
  // second 1; both requests are active in seconds 0 and 1.
  std::vector<RequestOutput> outputs = {ok(1, 0.0, 0.25, 1.25, {0.5, 0.5}), ok(1, 0.5, 0.25, 0.5, {0.25})};
  const std::vector<int64_t> lens = {3, 2};
  const BenchmarkMetrics m = calculate_metrics(outputs, lens, 1.25, std::vector<double>{99});
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 3.0);
  EXPECT_EQ(m.max_concurrent_requests, 2);
}

TEST(BenchMetrics, OutputLensPreferUsageThenChunks) {
  std::vector<RequestOutput> outputs(3);
  outputs[0].success = true;
  outputs[0].usage_output_tokens = 7;
  outputs[0].num_chunks = 3;  // e.g. several tokens per chunk
  outputs[1].success = true;
  outputs[1].num_chunks = 5;  // no usage in the stream
  outputs[2].num_chunks = 2;  // failed
  EXPECT_EQ(resolve_output_lens(outputs, nullptr), (std::vector<int64_t>{7, 5, 0}));
}

TEST(BenchReport, TableHasVllmLayout) {
  Fixture f;
  const std::vector<double> ps = {99};
  const BenchmarkMetrics m = calculate_metrics(f.outputs, f.output_lens, 2.0, ps);
  ReportConfig config;
  config.max_concurrency = 4;
  config.request_rate = INFINITY;
  config.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  const std::string table = format_result_table(m, 2.0, config);
  EXPECT_EQ(table.rfind("============ Serving Benchmark Result ============\n", 0), 0u) << table;
  EXPECT_NE(table.find("Successful requests:                     3         \n"), std::string::npos) << table;
  EXPECT_NE(table.find("Failed requests:                         1         \n"), std::string::npos);
  EXPECT_NE(table.find("Maximum request concurrency:             4         \n"), std::string::npos);
  EXPECT_NE(table.find("Benchmark duration (s):                  2.00      \n"), std::string::npos);
  EXPECT_NE(table.find("Total input tokens:                      70        \n"), std::string::npos);
  EXPECT_NE(table.find("Total generated tokens:                  8         \n"), std::string::npos);
  EXPECT_NE(table.find("Request throughput (req/s):              1.50      \n"), std::string::npos);
  EXPECT_NE(table.find("Output token throughput (tok/s):         4.00      \n"), std::string::npos);
  EXPECT_NE(table.find("Total Token throughput (tok/s):          39.00     \n"), std::string::npos);
  EXPECT_NE(table.find("---------------Time to First Token----------------\n"), std::string::npos);
  EXPECT_NE(table.find("Mean TTFT (ms):                          200.00    \n"), std::string::npos);
  EXPECT_NE(table.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos);
  EXPECT_NE(table.find("P99 TPOT (ms):                           399.00    \n"), std::string::npos);
  EXPECT_NE(table.find("---------------Inter-token Latency----------------\n"), std::string::npos);
  EXPECT_NE(table.find("Median ITL (ms):                         300.00    \n"), std::string::npos);
  EXPECT_NE(table.find("----------------End-to-end Latency----------------\n"), std::string::npos);
  EXPECT_NE(table.find("P99 E2EL (ms):                           1098.00   \n"), std::string::npos);
  EXPECT_EQ(table.find("Request rate configured"), std::string::npos);  // inf is not printed
  EXPECT_NE(table.find(std::string(50, '=') + "\n", 10), std::string::npos);
}

TEST(BenchReport, JsonHasVllmKeys) {
  Fixture f;
  const std::vector<double> ps = {50, 99.9};
  const BenchmarkMetrics m = calculate_metrics(f.outputs, f.output_lens, 2.0, ps);
  ReportConfig config;
  config.request_rate = INFINITY;
  config.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  const nlohmann::json j = benchmark_result_json(m, 2.0, f.outputs, f.output_lens, config);
  for (const char* key : {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                          "request_throughput", "request_goodput", "output_throughput",
                          "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls",
                          "errors", "max_output_tokens_per_s", "max_concurrent_requests"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* metric : {"ttft", "tpot", "itl", "e2el"}) {
    for (const char* stat : {"mean", "median", "std", "p50", "p99.9"}) {
      EXPECT_TRUE(j.contains(std::string(stat) + "_" + metric + "_ms")) << stat << "_" << metric;
    }
  }
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["output_lens"], nlohmann::json({4, 1, 0, 3}));
  EXPECT_EQ(j["input_lens"], nlohmann::json({10, 20, 30, 40}));
  EXPECT_EQ(j["errors"][2], "HTTP 500");
  EXPECT_EQ(j["itls"][0].size(), 3u);
  EXPECT_NEAR(j["mean_tpot_ms"].get<double>(), 350, kEps);
  EXPECT_FALSE(j.contains("generated_texts"));  // only with --save-detailed
  EXPECT_EQ(percentile_label(99.0), "99");
  EXPECT_EQ(percentile_label(99.9), "99.9");
}

}  // namespace
}  // namespace test_bench_metrics
}  // namespace vllm::bench
